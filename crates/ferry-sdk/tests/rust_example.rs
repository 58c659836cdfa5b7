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
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let st = rc.status().unwrap();
        if counter(&st, "snk", "sunk") > 10_000 {
            break;
        }
        assert!(Instant::now() < deadline, "no traffic through the example: {}", chainctl::status_table(&st));
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = rc.status().unwrap();
    assert!(counter(&st, "filter", "udp") > 0);
    assert_eq!(counter(&st, "filter", "other"), 0, "the source makes only UDP");
    assert_eq!(counter(&st, "filter", "to_nf") + counter(&st, "filter", "drop_nf"), counter(&st, "filter", "udp"));
    for a in rc.audit().unwrap() {
        assert!(a.conserved(), "{a:?}");
    }
    rc.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
