//! `ferry evnf run FILE`: the hybrid NFs of one file, in this process's
//! network namespace, until SIGINT/SIGTERM (or a duration). SIGHUP reads
//! the file again and applies rule, weight and timeout changes with map
//! updates only.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::util::{install_stop_handler, RunLimit};

static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

/// Runs the file's NFs; returns the final report.
pub fn run(file: &Path, status: Option<&Path>, duration: Option<Duration>) -> Result<serde_json::Value> {
    let spec = ferry_evnf::parse(file)?;
    install_stop_handler();
    // SAFETY: the handler only stores to an atomic.
    unsafe { libc::signal(libc::SIGHUP, on_hangup as *const () as libc::sighandler_t) };
    let mut runner =
        ferry_evnf::Runner::start(spec).with_context(|| format!("starting the NFs of {}", file.display()))?;
    eprintln!("ferry evnf: {} running; SIGHUP reloads it, Ctrl-C stops", file.display());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let limit = RunLimit::new(duration);
            while !limit.done() && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let result = runner.run(&stop, &RELOAD, status);
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    result?;
    Ok(runner.report())
}
