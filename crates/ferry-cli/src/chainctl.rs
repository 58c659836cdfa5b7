//! Running a chain: start ferryd on a chain file, talk to it, stop it.
//! `ferry chain …`, the demo, the benchmarks and the tests all go through
//! these functions.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::proto::{self, AuditReport, Msg, Status};

/// A ferryd process serving one chain; shut down (and killed if need be)
/// on drop.
pub struct RunningChain {
    pub child: Child,
    pub socket: PathBuf,
}

/// A Ferry binary: `$env` if set, else `name` next to this executable or
/// in its parent directory (test binaries live in target/*/deps).
fn sibling_bin(name: &str, env: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    for dir in me.ancestors().skip(1).take(2) {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(anyhow!("cannot find {name} next to {} (build it, or set {env})", me.display()))
}

/// The ferryd binary.
pub fn ferryd_bin() -> Result<PathBuf> {
    sibling_bin("ferryd", "FERRYD_BIN")
}

/// The `ferry` binary, for ferryd to host built-in NFs with.
pub fn ferry_bin() -> Result<PathBuf> {
    sibling_bin("ferry", "FERRY_BIN")
}

/// Starts ferryd on `chain`, serving `socket`, and waits until every NF
/// has connected.
pub fn start(chain: &Path, socket: &Path, quiet: bool) -> Result<RunningChain> {
    let mut rc = launch(chain, socket, quiet)?;
    // Only a guard against a chain that never comes up: a loaded machine
    // can take many seconds to start a dozen NF processes.
    rc.wait_connected(Duration::from_secs(60))?;
    Ok(rc)
}

/// Starts ferryd on `chain`, serving `socket`, and returns once it serves
/// (before its NFs connect: NFs it does not start are the caller's).
pub fn launch(chain: &Path, socket: &Path, quiet: bool) -> Result<RunningChain> {
    let mut cmd = Command::new(ferryd_bin()?);
    cmd.arg(chain).arg("--socket").arg(socket).env("FERRY_BIN", ferry_bin()?);
    if quiet {
        cmd.stderr(Stdio::null());
    }
    let child = cmd.spawn().context("starting ferryd")?;
    let mut rc = RunningChain { child, socket: socket.to_path_buf() };
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(socket).is_err() {
        if let Some(st) = rc.child.try_wait()? {
            bail!("ferryd exited ({st}) before it served {}", socket.display());
        }
        if Instant::now() > deadline {
            bail!("ferryd did not serve {} within 60 s", socket.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(rc)
}

impl RunningChain {
    pub fn status(&self) -> Result<Status> {
        status(&self.socket)
    }

    /// Waits until every NF is connected.
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait()? {
                bail!("ferryd exited ({st}) before the chain was up");
            }
            if let Ok(s) = status(&self.socket) {
                if s.nfs.iter().all(|n| n.connected) {
                    return Ok(s);
                }
            }
            if Instant::now() > deadline {
                bail!("the chain's NFs did not all connect within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn audit(&self) -> Result<Vec<AuditReport>> {
        audit(&self.socket)
    }

    /// Asks ferryd to stop the NFs and exit, and waits for it.
    pub fn shutdown(mut self) -> Result<()> {
        let r = shutdown(&self.socket);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        r
    }
}

impl Drop for RunningChain {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = shutdown(&self.socket);
            std::thread::sleep(Duration::from_millis(100));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn status(socket: &Path) -> Result<Status> {
    match proto::request(socket, &Msg::Status)? {
        Msg::StatusReply(s) => Ok(*s),
        Msg::Error { message } => bail!("ferryd: {message}"),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Pauses every domain and checks frame conservation.
pub fn audit(socket: &Path) -> Result<Vec<AuditReport>> {
    match proto::request(socket, &Msg::Audit)? {
        Msg::AuditReply { domains } => Ok(domains),
        Msg::Error { message } => bail!("ferryd: {message}"),
        other => bail!("unexpected reply {other:?}"),
    }
}

pub fn shutdown(socket: &Path) -> Result<()> {
    match proto::request(socket, &Msg::Shutdown)? {
        Msg::Ok => Ok(()),
        Msg::Error { message } => bail!("ferryd: {message}"),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// A counter of thread `t` of NF `nf` in a status.
pub fn counter(s: &Status, nf: &str, name: &str) -> u64 {
    s.nfs
        .iter()
        .filter(|n| n.name == nf)
        .flat_map(|n| n.threads.iter())
        .flat_map(|t| t.iter())
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v)
        .sum()
}

/// The per-NF table `ferry chain status` prints: nonzero counters only.
pub fn status_table(s: &Status) -> String {
    let mut out = format!("chain {}\n", s.chain);
    for n in &s.nfs {
        let pid = n.pid.map_or("-".to_string(), |p| p.to_string());
        let uid = n.uid.map_or("-".to_string(), |u| u.to_string());
        out += &format!(
            "  {:<10} domain {:<8} uid {:<10} pid {:<8} {} restarts {}\n",
            n.name,
            n.domain,
            uid,
            pid,
            if n.connected { "up  " } else { "DOWN" },
            n.restarts
        );
        for (i, t) in n.threads.iter().enumerate() {
            let parts: Vec<String> = t.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
            out += &format!("    thread {i}: {}\n", parts.join(" "));
        }
    }
    for d in &s.domains {
        out += &format!(
            "  domain {}: {} frames, {} in the shared pool, {} reclaimed from dead NFs, {} audits ({} lost, {} \
             duplicated)\n",
            d.name, d.frames_total, d.in_pool, d.reclaimed, d.audits, d.lost, d.duplicated
        );
    }
    out
}
