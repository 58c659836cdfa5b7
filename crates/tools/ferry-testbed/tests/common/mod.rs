//! Helpers shared by the integration tests (which need root and `ip`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// True if testbeds can be created here. Otherwise prints a skip notice,
/// or panics under `CI=true` so a misconfigured CI cannot pass silently.
pub fn privileged() -> bool {
    match ferry_testbed::preflight() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but testbed tests cannot run (need root and iproute2): {e}")
        }
        Err(e) => {
            eprintln!("SKIP: testbed integration test needs root and `ip`: {e}");
            false
        }
    }
}

pub fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/testbeds").join(file)
}

pub fn ns_exists(real: &str) -> bool {
    Path::new("/run/netns").join(real).exists()
}

/// How long a wait for an event may take before the test fails: only a
/// guard against a hang, far above what a loaded machine needs.
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `ping -c 1 -W 5` through a Command built by `Testbed::exec`; retried a
/// couple of times so a loaded 2-CPU machine does not make it flaky.
pub fn ping(mut make: impl FnMut() -> std::process::Command) -> bool {
    (0..3).any(|_| make().stdout(Stdio::null()).stderr(Stdio::null()).status().map(|s| s.success()).unwrap_or(false))
}
