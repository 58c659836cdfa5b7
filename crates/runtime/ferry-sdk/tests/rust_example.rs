//! Builds nothing itself: `cargo test` has built `examples/udp_filter`; this
//! runs it as an NF in a ferryd chain (in-memory source and sink) and checks
//! its counters against the chain's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferry_cli::chainctl::{self, counter};

fn example_binary() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile_dir = me.parent().and_then(|p| p.parent()).expect("target/<profile>");
    profile_dir.join("examples").join("udp_filter")
}

#[test]
fn rust_example_nf_runs_in_a_chain() {
    if unsafe { libc::geteuid() } != 0 {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI=true but this test needs root");
        eprintln!("SKIP: needs root");
        return;
    }
    let bin = example_binary();
    assert!(bin.is_file(), "{} missing: run through `cargo test` (which builds examples)", bin.display());
    let dir = std::env::temp_dir().join(format!("ferry-sdk-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chain = dir.join("chain.yaml");
    let yaml = format!(
        r#"
name: rust-example
domains: [ {{ name: main, frames: 2048 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=100000"] }}
  - {{ name: filter, domain: main, exec: ["{}"] }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: filter }}
  - {{ from: filter, to: snk }}
"#,
        bin.display()
    );
    std::fs::write(&chain, yaml).unwrap();
    let rc = chainctl::start(&chain, &dir.join("ferryd.sock"), false).expect("chain up");
    // `udp` is published after each burst and `to_nf`/`drop_nf` as packets
    // go, so they agree only between bursts: wait for such a moment once
    // plenty has flowed (an NF that loses or double-counts packets never
    // shows one, and the wait fails; the deadline only ends a hung test).
    let deadline = Instant::now() + Duration::from_secs(60);
    let agree = |st: &ferry_chain::proto::Status| {
        counter(st, "filter", "to_nf") + counter(st, "filter", "drop_nf") == counter(st, "filter", "udp")
    };
    let st = loop {
        let st = rc.status().unwrap();
        if counter(&st, "snk", "sunk") > 10_000 && agree(&st) {
            break st;
        }
        assert!(Instant::now() < deadline, "no traffic through the example: {}", chainctl::status_table(&st));
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(counter(&st, "filter", "udp") > 0);
    assert_eq!(counter(&st, "filter", "other"), 0, "the source makes only UDP");
    for a in rc.audit().unwrap() {
        assert!(a.conserved(), "{a:?}");
    }
    rc.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
