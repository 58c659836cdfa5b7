//! The IPS in a ferryd chain, on real frames: the in-memory source's UDP
//! frames carry Ferry's stamp, whose magic (`Fy`, 0x46 0x79) is the
//! signature.

mod common;

use common::chain::*;
use common::*;
use ferry_cli::chainctl;

fn chain(rules: &std::path::Path) -> String {
    format!(
        r#"
name: ips
domains: [ {{ name: main, frames: 2048, ring_size: 512 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=50000", "flows=8"] }}
  - {{ name: ips, domain: main, kind: ips, args: ["{}"] }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: ips }}
  - {{ from: ips, to: snk }}
"#,
        rules.display()
    )
}

/// With an alert rule on the stamp every frame goes on to the sink,
/// counted `pass_alerted`; with a drop rule none reaches it, every one
/// counted `drop_rule`. A rule with a content the frames lack changes
/// nothing.
#[test]
fn ips_alerts_and_drops_on_payload_signatures() {
    if !privileged("ips") {
        return;
    }
    for (action, verdict) in [("alert", "pass_alerted"), ("drop", "drop_rule")] {
        let dir = TempDir::new("ips");
        // The NF runs as an allocated uid: the rule file must be readable.
        let rules = dir.path("ips.rules");
        std::fs::write(
            &rules,
            format!(
                "# Ferry's stamp magic, then a signature no frame carries\n\
                 {action} udp any any -> any 9 (msg:\"ferry stamp\"; content:\"|46 79|\"; sid:1;)\n\
                 drop udp any any -> any any (msg:\"absent\"; content:\"/bin/sh\"; sid:2;)\n"
            ),
        )
        .unwrap();
        let (rc, _) = start(&dir, &chain(&rules));
        // The NF publishes its counters one by one after each burst, and
        // the framework's as it goes: wait for a status in which they
        // agree (they always come to; a frame with another verdict would
        // keep them apart for good, and the wait would fail).
        let st = wait_for(&format!("5000 frames, every one {verdict}"), || {
            let st = rc.status().ok()?;
            let rx = c(&st, "ips", "rx");
            let agreed = if action == "alert" {
                c(&st, "ips", "to_nf") == rx && c(&st, "snk", "sunk") > 0
            } else {
                c(&st, "ips", "drop_nf") == rx && c(&st, "snk", "sunk") == 0
            };
            (rx >= 5000 && c(&st, "ips", verdict) == rx && agreed).then_some(st)
        });
        eprintln!("{}", chainctl::status_table(&st));
        assert_conserved(&rc);
        rc.shutdown().unwrap();
    }
}
