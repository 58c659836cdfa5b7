//! Helpers of the tests that run chains under ferryd.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferry_chain::proto::Status;
use ferry_cli::chainctl::{self, counter, RunningChain};

use super::TempDir;

/// Writes `yaml` as the chain file and starts ferryd on it.
pub fn start(dir: &TempDir, yaml: &str) -> (RunningChain, PathBuf) {
    let chain = dir.path("chain.yaml");
    std::fs::write(&chain, yaml).unwrap();
    let socket = dir.path("ferryd.sock");
    let rc = chainctl::start(&chain, &socket, false).unwrap_or_else(|e| panic!("chain up: {e:#}"));
    (rc, chain)
}

/// NF `nf`'s counter `name`.
pub fn c(s: &Status, nf: &str, name: &str) -> u64 {
    counter(s, nf, name)
}

pub fn pid_of(s: &Status, nf: &str) -> u32 {
    s.nfs.iter().find(|n| n.name == nf).and_then(|n| n.pid).unwrap_or_else(|| panic!("no pid for {nf}"))
}

/// Every frame of every domain is in exactly one place.
pub fn assert_conserved(rc: &RunningChain) {
    for r in rc.audit().expect("audit") {
        assert!(r.conserved(), "frame conservation violated: {r:?}");
    }
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
