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

/// `ferry chain reload` re-reads the firewall's rule file: once both
/// threads have read "default deny", no frame passes; the counters go on
/// from where they were; a file that does not parse is refused and
/// changes nothing.
#[test]
fn reload_applies_a_new_rule_file_and_refuses_a_bad_one() {
    if !privileged("firewall_reload") {
        return;
    }
    let dir = TempDir::new("fw-reload");
    let rules = dir.path("fw.rules");
    std::fs::write(&rules, "default allow\n").unwrap();
    // A source that makes frames until the chain is removed, so every step
    // below has frames to judge however long the machine takes for it.
    let yaml = chain(&rules, "bitvector").replace(&format!("\"count={SENT}\""), "\"count=0\"");
    let (rc, _) = start(&dir, &yaml);
    let at = |what: &str, f: &dyn Fn(&ferry_chain::proto::Status) -> bool| {
        wait_for(what, || rc.status().ok().filter(|s| f(s)))
    };
    let before = at("frames through the firewall", &|s| c(s, "snk", "sunk") > 1000);
    std::fs::write(&rules, "default deny\n").unwrap();
    let outcome = chainctl::reload(&rc.admin, "fw").unwrap();
    assert_eq!(outcome.iter().map(|r| (r.nf.as_str(), r.outcome.as_str())).collect::<Vec<_>>(), [("fw", "applied")]);
    let reloaded = at("both threads on the new rules", &|s| c(s, "fw", "reloads") == 2);
    assert!(c(&reloaded, "fw", "rx") >= c(&before, "fw", "rx"), "the counters went on");
    let denied = c(&reloaded, "fw", "drop_denied");
    let settled = at("frames denied", &|s| c(s, "fw", "drop_denied") > denied + 100);
    let passed = c(&settled, "fw", "pass");
    let later = at("more frames denied", &|s| c(s, "fw", "drop_denied") > denied + 2000);
    assert_eq!(c(&later, "fw", "pass"), passed, "no frame passes \"default deny\"");
    // A file that does not parse: refused, the rules stay.
    std::fs::write(&rules, "allow color red\ndefault allow\n").unwrap();
    let outcome = chainctl::reload(&rc.admin, "fw").unwrap();
    assert_eq!(outcome[0].outcome, "failed", "{outcome:?}");
    let after = at("the refusal counted", &|s| c(s, "fw", "reload_errors") == 2);
    let denied = c(&after, "fw", "drop_denied");
    let last = at("frames still denied", &|s| c(s, "fw", "drop_denied") > denied + 1000);
    assert_eq!(c(&last, "fw", "pass"), passed, "the refused file changed nothing");
    // Across both reloads, each frame the firewall took got one verdict:
    // its counters were carried over, none restarted.
    let end = at("the verdicts partitioning what the firewall took", &|s| {
        c(s, "fw", "rx") == c(s, "fw", "pass") + c(s, "fw", "drop_denied") && c(s, "snk", "sunk") == passed
    });
    assert_eq!(c(&end, "fw", "pass"), passed);
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}
