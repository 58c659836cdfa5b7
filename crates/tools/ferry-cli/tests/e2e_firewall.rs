//! The stateless firewall in a ferryd chain, on two threads, with each
//! lookup: a counted run from the in-memory source, whose 8 flows cycle
//! frame by frame, so the denied share is exact.

mod common;

use common::chain::*;
use common::*;
use ferry_cli::chainctl;

const SENT: u64 = 8000;

fn chain(rules: &std::path::Path, lookup: &str) -> String {
    format!(
        r#"
name: fw
domains: [ {{ name: main, frames: 4096, ring_size: 512 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=50000", "flows=8", "count={SENT}"] }}
  - {{ name: fw, domain: main, kind: firewall, threads: 2, args: ["{}", "{lookup}"] }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: fw }}
  - {{ from: fw, to: snk }}
"#,
        rules.display()
    )
}

/// Flows use source ports 1024..=1031: the rules deny 3 of the 8, so the
/// sink gets exactly 5/8 of the frames, whichever lookup runs.
#[test]
fn firewall_denies_exactly_its_rules_share_with_either_lookup() {
    if !privileged("firewall") {
        return;
    }
    for lookup in ["linear", "bitvector"] {
        let dir = TempDir::new("fw");
        let rules = dir.path("fw.rules");
        std::fs::write(
            &rules,
            "deny proto udp sport 1024-1025\n\
             allow dst 10.0.2.0/24\n\
             deny src 10.0.0.1 sport 1031\n\
             allow proto udp dport 9\n\
             default deny\n",
        )
        .unwrap();
        let (rc, _) = start(&dir, &chain(&rules, lookup));
        let st = wait_for(&format!("{lookup}: all {SENT} frames through the firewall and at the sink"), || {
            let s = rc.status().ok()?;
            (c(&s, "fw", "rx") == SENT && c(&s, "snk", "sunk") == c(&s, "fw", "pass")).then_some(s)
        });
        eprintln!("{}", chainctl::status_table(&st));
        assert_eq!(c(&st, "fw", "drop_denied"), SENT * 3 / 8, "{lookup}");
        assert_eq!(c(&st, "snk", "sunk"), SENT * 5 / 8, "{lookup}");
        assert_eq!(st.nfs.iter().find(|n| n.name == "fw").unwrap().threads.len(), 2);
        assert_conserved(&rc);
        rc.shutdown().unwrap();
    }
}
