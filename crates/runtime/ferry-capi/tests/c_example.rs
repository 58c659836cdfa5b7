//! End to end, through the C header: compiles `examples/c-nf/l2fwd.c` and
//! `tests/c/api_checks.c` with `cc` against `libferry.so`, runs them as
//! unprivileged NFs in a ferryd chain between an in-memory source and sink
//! (no network), and checks their counters and the domain's frame
//! conservation.
//!
//! Needs root (ferryd starts NFs as unprivileged uids) and a C compiler (`CC`, else
//! `cc`); without them the test is skipped, or fails under `CI=true`.
//! Runs `cargo build -p ferry-capi` first (a no-op when fresh) so that the
//! C NFs link the current `libferry.so`, and builds `ferryd` and `ferry` if
//! they are missing from the target directory.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{build_setup, compile, workspace};
use ferry_chain::proto::Status;
use ferry_cli::chainctl;

/// A directory any user can read and search, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let p = std::env::temp_dir().join(format!("ferry-capi-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Counter `name` of each thread of NF `nf`.
fn per_thread(s: &Status, nf: &str, name: &str) -> Vec<u64> {
    let n = s.nfs.iter().find(|n| n.name == nf).unwrap_or_else(|| panic!("no NF {nf} in status"));
    n.threads
        .iter()
        .map(|t| {
            t.iter().find(|(k, _)| k == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("{nf}: no counter {name}"))
        })
        .collect()
}

const TEST: &str = "c_example::c_nfs_in_a_chain";

#[test]
fn c_nfs_in_a_chain() {
    let Some((cc, libdir)) = build_setup(TEST) else { return };
    let dir = TempDir::new("chain");
    let l2fwd = dir.0.join("l2fwd");
    let checks = dir.0.join("api_checks");
    compile(&cc, &workspace().join("examples/c-nf/l2fwd.c"), &l2fwd, &libdir);
    compile(&cc, &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api_checks.c"), &checks, &libdir);

    let chain = dir.0.join("chain.yaml");
    let yaml = format!(
        r#"name: capi-test
domains: [ {{ name: main, frames: 4096 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=200000"] }}
  - {{ name: cnf, domain: main, exec: ["{}"], threads: 2 }}
  - {{ name: snk, domain: main, kind: sink }}
  - {{ name: chk, domain: main, exec: ["{}"], args: ["mode=check"] }}
links:
  - {{ from: src, to: cnf }}
  - {{ from: cnf, to: snk }}
"#,
        l2fwd.display(),
        checks.display()
    );
    std::fs::write(&chain, yaml).unwrap();
    let socket = dir.0.join("ferryd.sock");
    let quiet = std::env::var_os("FERRY_TEST_VERBOSE").is_none();
    let rc = chainctl::start(&chain, &socket, quiet).expect("ferryd starts and every NF connects");

    // Counters are read while packets flow, and `swapped` is published after
    // each burst: wait for a moment between bursts, once the sink has had
    // plenty. A C NF that does not swap every packet never shows one, and
    // the wait fails (the deadline only ends a hung test).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (s, swapped, rx) = loop {
        let s = rc.status().expect("status");
        let (swapped, rx) = (per_thread(&s, "cnf", "swapped"), per_thread(&s, "cnf", "rx_ring"));
        let sunk = chainctl::counter(&s, "snk", "sunk");
        // The checks NF runs its checks once, at its own pace.
        let checked = chainctl::counter(&s, "chk", "checks_run") == 19;
        if (swapped == rx && sunk > 10_000 && checked) || Instant::now() > deadline {
            break (s, swapped, rx);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let sunk = chainctl::counter(&s, "snk", "sunk");
    assert!(sunk > 10_000, "the sink got {sunk} packets through the C NF:\n{}", chainctl::status_table(&s));
    assert_eq!(swapped, rx, "per thread, the C NF swapped every packet it received:\n{}", chainctl::status_table(&s));
    // Both C threads run; which of them get packets is up to the flow hash
    // over the source's flows (all of them land on one thread today).
    assert_eq!(rx.len(), 2, "two C threads");
    for nf in ["cnf", "chk"] {
        let n = s.nfs.iter().find(|n| n.name == nf).unwrap();
        assert!(n.connected && n.restarts == 0, "{nf} runs without restarts:\n{}", chainctl::status_table(&s));
    }

    // The checks NF's verdicts through the C API.
    let run = chainctl::counter(&s, "chk", "checks_run");
    let failed = chainctl::counter(&s, "chk", "checks_failed");
    assert_eq!(run, 19, "api_checks.c ran all its checks");
    let bits: Vec<u32> = (0..64).filter(|b| failed & (1 << b) != 0).collect();
    assert!(bits.is_empty(), "api_checks.c: checks {bits:?} failed (numbered in the source)");
    let c = |name| chainctl::counter(&s, "chk", name);
    assert_eq!((c("alloc"), c("drop_nf"), c("drop_bad_hop")), (3, 2, 1), "each frame got exactly one verdict");

    let reports = rc.audit().expect("audit");
    assert!(!reports.is_empty());
    for r in &reports {
        assert!(r.conserved(), "domain {} conserves its frames: {r:?}", r.domain);
    }
    rc.shutdown().expect("shutdown");
}
