//! The IPS in a ferryd chain, on real frames: the in-memory source's UDP
//! frames carry Ferry's stamp, whose magic (`Fy`, 0x46 0x79) is the
//! signature. Its alerts reach the EVE file ferryd opened for it, its
//! status and ferryd's metrics.

mod common;

use common::chain::*;
use common::*;
use ferry_cli::chainctl;

/// Frames the source sends.
const SENT: u64 = 5000;

fn chain(rules: &std::path::Path, eve: &std::path::Path) -> String {
    format!(
        r#"
name: ips
domains: [ {{ name: main, frames: 2048, ring_size: 512 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=50000", "flows=8", "count={SENT}"] }}
  - {{ name: ips, domain: main, kind: ips, args: ["{}", "eve={}"] }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: ips }}
  - {{ from: ips, to: snk }}
"#,
        rules.display(),
        eve.display()
    )
}

/// With an alert rule on the stamp every frame goes on to the sink,
/// counted `pass_alerted`; with a drop rule none reaches it, every one
/// counted `drop_rule`. A rule with a content the frames lack changes
/// nothing. Either way each frame raises one alert of sid 1: one EVE
/// line each, with its 5-tuple, and the rule's count in the status and
/// in the metrics.
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
                 {action} udp any any -> any 9 (msg:\"ferry stamp\"; content:\"|46 79|\"; classtype:misc-activity; sid:1; rev:3;)\n\
                 drop udp any any -> any any (msg:\"absent\"; content:\"/bin/sh\"; sid:2;)\n"
            ),
        )
        .unwrap();
        let eve = dir.path("eve.json");
        let (rc, _) = start(&dir, &chain(&rules, &eve));
        // Counters, per-rule counts and the file each catch up with the
        // frames in their own time: wait for all to agree.
        let st = wait_for(&format!("{SENT} frames, every one {verdict}, each alerted once"), || {
            let st = rc.status().ok()?;
            let ips = st.nfs.iter().find(|n| n.name == "ips")?;
            let alerted = ips.alerts.iter().map(|a| (a.gid, a.sid, a.alerts)).collect::<Vec<_>>();
            let lines = std::fs::read_to_string(&eve).ok()?.lines().count() as u64;
            let sunk = if action == "alert" { SENT } else { 0 };
            (c(&st, "ips", "rx") == SENT
                && c(&st, "ips", verdict) == SENT
                && c(&st, "snk", "sunk") == sunk
                && alerted == [(1, 1, SENT)]
                && lines == SENT)
                .then_some(st)
        });
        eprintln!("{}", chainctl::status_table(&st));
        let blocked = if action == "alert" { "allowed" } else { "blocked" };
        for line in std::fs::read_to_string(&eve).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["event_type"], "alert", "{line}");
            assert_eq!((v["proto"].as_str(), v["dest_port"].as_u64()), (Some("UDP"), Some(9)), "{line}");
            assert!(v["src_ip"].as_str().is_some_and(|a| a.parse::<std::net::IpAddr>().is_ok()), "{line}");
            let a = &v["alert"];
            assert_eq!((a["signature_id"].as_u64(), a["gid"].as_u64(), a["rev"].as_u64()), (Some(1), Some(1), Some(3)));
            assert_eq!((a["signature"].as_str(), a["category"].as_str()), (Some("ferry stamp"), Some("misc-activity")));
            assert_eq!(a["action"], blocked, "{line}");
            assert_eq!((v["ferry"]["chain"].as_str(), v["ferry"]["nf"].as_str()), (Some("ips"), Some("ips")));
        }
        let addr = chainctl::metrics_addr(&rc.admin).unwrap().expect("ferryd serves metrics");
        let (_, body) = http_get(&addr, "/metrics");
        let sample = format!("ferry_ips_alerts_total{{chain=\"ips\",nf=\"ips\",gid=\"1\",sid=\"1\"}} {SENT}");
        assert!(body.lines().any(|l| l == sample), "no {sample:?} in the metrics");
        assert_conserved(&rc);
        rc.shutdown().unwrap();
    }
}
