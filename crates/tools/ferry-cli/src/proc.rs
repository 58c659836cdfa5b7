//! Running Ferry subcommands as processes inside testbed namespaces and
//! collecting the JSON report each prints on stdout when it ends.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

/// A `ferry` subcommand running in a network namespace.
pub struct NsProcess {
    child: Child,
    what: String,
}

/// Starts `ferry ARGS... --json` in namespace `ns`, pinned to `cpu` if given.
pub fn spawn(ns: &str, args: &[String], cpu: Option<usize>) -> Result<NsProcess> {
    let exe = crate::chainctl::ferry_bin().context("locating the ferry binary")?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn_exe(&exe, ns, &args, cpu)
}

/// As [`spawn`], with an explicit `ferry` binary (for callers that are not
/// `ferry` themselves, such as tests driving the library).
pub fn spawn_exe(exe: &std::path::Path, ns: &str, args: &[&str], cpu: Option<usize>) -> Result<NsProcess> {
    // `--json` goes right after the subcommand words ("nf run", "sink"), before
    // any trailing free arguments such as an NF list.
    let words = args.iter().take(2).take_while(|a| !a.starts_with('-')).count();
    let mut full: Vec<&str> = args.to_vec();
    full.insert(words, "--json");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).arg(exe).args(&full).stdout(Stdio::piped()).stdin(Stdio::null());
    if let Some(cpu) = cpu {
        let set = ferry_sys::CpuSet::of([cpu]);
        // SAFETY: sched_setaffinity is async-signal-safe; the mask is
        // inherited across exec, so the whole subcommand stays on `cpu`.
        unsafe {
            cmd.pre_exec(move || {
                let _ = set.apply_to(0);
                Ok(())
            });
        }
    }
    let what = format!("ferry {} (netns {ns})", args.join(" "));
    let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    Ok(NsProcess { child, what })
}

impl NsProcess {
    /// Waits for the process to end by itself (up to `timeout`) and parses
    /// its report.
    pub fn wait(mut self, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(_status) = self.child.try_wait()? {
                return self.report();
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(anyhow!("{} did not finish within {:?}", self.what, timeout));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asks the process to stop (SIGINT), then waits for its report.
    /// Waits up to `grace` for the process to end by itself, then stops it
    /// as `stop` does.
    pub fn finish(mut self, grace: Duration) -> Result<Value> {
        let deadline = Instant::now() + grace;
        while self.child.try_wait()?.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop()
    }

    /// The ferry process's pid (`ip netns exec` execs in place).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. SIGHUP) without waiting.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stop(self) -> Result<Value> {
        // `ip netns exec` execs the command, so the pid is ferry's own.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        self.wait(Duration::from_secs(10))
    }

    fn report(mut self) -> Result<Value> {
        let status = self.child.wait()?;
        let mut out = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            s.read_to_string(&mut out)?;
        }
        if !status.success() {
            return Err(anyhow!("{} failed ({status})", self.what));
        }
        serde_json::from_str(out.trim()).with_context(|| format!("report of {}: {out:?}", self.what))
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        // A process whose report nobody collected (an error path) must not
        // outlive the testbed it runs in.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads a number at a JSON pointer ("/window_rx"), 0 if absent.
pub fn num(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Waits until device `dev` in namespace `ns` carries an XDP program (the
/// process started on it is attached), plus a short grace period for its
/// sockets to be registered.
pub fn wait_for_xdp(ns: &str, dev: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let out = Command::new("ip").args(["-n", ns, "link", "show", "dev", dev]).output()?;
        if String::from_utf8_lossy(&out.stdout).contains("prog/xdp") {
            std::thread::sleep(Duration::from_millis(100));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(anyhow!("no XDP program on {dev} (netns {ns}) after {timeout:?}: its process did not start"))
}

/// Makes `dev`'s NAPI run in a kernel thread pinned to `cpu` (needs XDP
/// attached, which gives veth its NAPI), or, with None, back in softirq
/// context on whichever CPU raised it.
pub fn set_napi_thread(ns: &str, dev: &str, cpu: Option<usize>) -> Result<()> {
    let value = if cpu.is_some() { 1 } else { 0 };
    let ok = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", &format!("echo {value} > /sys/class/net/{dev}/threaded")])
        .status()?
        .success();
    if !ok {
        return Err(anyhow!("could not set threaded NAPI of {dev} (netns {ns}) to {value}"));
    }
    let Some(cpu) = cpu else { return Ok(()) };
    // The kthread is named napi/<dev>-<id>; names are not unique across
    // namespaces, so pin every match (the benchmark owns the machine).
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end().starts_with(&format!("napi/{dev}-")) {
            if let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() {
                let _ = ferry_sys::CpuSet::of([cpu]).apply_to(pid);
            }
        }
    }
    Ok(())
}
