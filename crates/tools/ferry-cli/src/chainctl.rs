//! Running a chain: start ferryd on a chain file, talk to it, stop it.
//! `ferry chain …`, the demo, the benchmarks and the tests all go through
//! these functions.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::proto::{self, AuditReport, ChainSummary, FlowStatus, Msg, NfReload, Status};

/// A ferryd process started with one chain; shut down (and killed if need
/// be) on drop.
pub struct RunningChain {
    pub child: Child,
    /// ferryd's NF socket.
    pub socket: PathBuf,
    /// ferryd's admin socket.
    pub admin: PathBuf,
    /// The chain's name.
    pub name: String,
}

/// A Ferry binary: `$env` if set, else `name` next to this executable or
/// in its parent directory (test binaries live in target/*/deps).
pub fn sibling_bin(name: &str, env: &str) -> Result<PathBuf> {
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

/// The `ferry` binary, for the tools that start `ferry` subcommands (the
/// benchmarks run in `ferry-bench`).
pub fn ferry_bin() -> Result<PathBuf> {
    sibling_bin("ferry", "FERRY_CLI")
}

/// The NF host binary, `ferry-host`, for ferryd to host built-in NFs with.
pub fn host_bin() -> Result<PathBuf> {
    sibling_bin("ferry-host", "FERRY_HOST")
}

/// Starts ferryd on `chain`, serving `socket`, and waits until every NF
/// has connected.
pub fn start(chain: &Path, socket: &Path, quiet: bool) -> Result<RunningChain> {
    start_placing(chain, socket, quiet, Placing::AsConfigured)
}

/// As [`start`], placing the chain as `placing` says.
pub fn start_placing(chain: &Path, socket: &Path, quiet: bool, placing: Placing<'_>) -> Result<RunningChain> {
    start_with(chain, socket, quiet, placing, &UpOptions::default())
}

/// As [`start_placing`], with what `up` says (`ferry chain up`).
pub fn start_with(
    chain: &Path,
    socket: &Path,
    quiet: bool,
    placing: Placing<'_>,
    up: &UpOptions,
) -> Result<RunningChain> {
    let mut rc = launch_with(chain, socket, quiet, placing, up)?;
    // Only a guard against a chain that never comes up: a loaded machine
    // can take many seconds to start a dozen NF processes.
    rc.wait_connected(Duration::from_secs(60))?;
    Ok(rc)
}

/// How the ferryd a benchmark or test starts places its chain.
#[derive(Debug, Clone, Copy)]
pub enum Placing<'a> {
    /// As ferryd would anyway (FERRY_COST_MODEL, if set, applies:
    /// `ferry_place::cost::COST_MODEL_ENV`).
    AsConfigured,
    /// By the rules alone, whatever the environment says.
    ByRules,
    /// By this cost model.
    ByCost(&'a Path),
}

/// Starts ferryd on `chain`, serving `socket`, and returns once it serves
/// (before its NFs connect: NFs it does not start are the caller's).
pub fn launch(chain: &Path, socket: &Path, quiet: bool, placing: Placing<'_>) -> Result<RunningChain> {
    launch_with(chain, socket, quiet, placing, &UpOptions::default())
}

/// What `ferry chain up` passes on to the ferryd it starts.
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// Values for the chain file's placeholders.
    pub set: Vec<(String, String)>,
    /// Where ferryd serves metrics (None: a free port of 127.0.0.1, as
    /// several ferryds of tests and benchmarks may run at once).
    pub metrics: Option<String>,
}

/// As [`launch`], with what `up` says.
pub fn launch_with(
    chain: &Path,
    socket: &Path,
    quiet: bool,
    placing: Placing<'_>,
    up: &UpOptions,
) -> Result<RunningChain> {
    let (text, origin) = ferry_chain::spec::read_filled(chain, &up.set)?;
    let name = ferry_catalog::parse_chain_str(&text, &origin)?.name();
    let admin = proto::admin_socket(socket);
    let mut cmd = Command::new(ferryd_bin()?);
    let metrics = up.metrics.as_deref().unwrap_or("127.0.0.1:0");
    cmd.arg(chain).arg("--socket").arg(socket).args(["--metrics", metrics]).env("FERRY_HOST", host_bin()?);
    for (k, v) in &up.set {
        cmd.arg("--set").arg(format!("{k}={v}"));
    }
    match placing {
        Placing::AsConfigured => {}
        Placing::ByRules => {
            cmd.env_remove(ferry_place::cost::COST_MODEL_ENV);
        }
        Placing::ByCost(model) => {
            cmd.arg("--cost-model").arg(model);
        }
    }
    if quiet {
        cmd.stderr(Stdio::null());
    }
    let child = cmd.spawn().context("starting ferryd")?;
    let mut rc = RunningChain { child, socket: socket.to_path_buf(), admin, name };
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(&rc.admin, &rc.name).is_err() {
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
        status(&self.admin, &self.name)
    }

    /// Waits until every NF is connected.
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait()? {
                bail!("ferryd exited ({st}) before the chain was up");
            }
            if let Ok(s) = status(&self.admin, &self.name) {
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
        audit(&self.admin, &self.name)
    }

    /// Asks ferryd to stop the NFs and exit, and waits for it.
    pub fn shutdown(mut self) -> Result<()> {
        let r = shutdown(&self.admin);
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
            let _ = shutdown(&self.admin);
            std::thread::sleep(Duration::from_millis(100));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One request on ferryd's admin socket `admin`; an error reply is an error.
fn admin_request(admin: &Path, msg: &Msg) -> Result<Msg> {
    if !admin.exists() {
        bail!(
            "no ferryd at {}: start one (`ferry chain up FILE`, or `ferryd`), or name its admin socket with --admin",
            admin.display()
        );
    }
    match proto::request(admin, msg).with_context(|| format!("ferryd's admin socket {}", admin.display()))? {
        Msg::Error { message } => bail!("ferryd: {message}"),
        reply => Ok(reply),
    }
}

/// Chain `chain`'s status (empty name: the only chain).
pub fn status(admin: &Path, chain: &str) -> Result<Status> {
    match admin_request(admin, &Msg::Status { chain: chain.to_string() })? {
        Msg::StatusReply(s) => Ok(*s),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Pauses chain `chain`'s domains and checks frame conservation.
pub fn audit(admin: &Path, chain: &str) -> Result<Vec<AuditReport>> {
    match admin_request(admin, &Msg::Audit { chain: chain.to_string() })? {
        Msg::AuditReply { domains } => Ok(domains),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Deploys chain file `file` on the running ferryd.
pub fn deploy(admin: &Path, file: &Path) -> Result<ChainSummary> {
    deploy_filled(admin, file, &[])
}

/// As [`deploy`], the file's placeholders filled with `set`'s values.
pub fn deploy_filled(admin: &Path, file: &Path, set: &[(String, String)]) -> Result<ChainSummary> {
    request_deploy(admin, file, set, false)
}

/// Asks the ferryd at `admin` whether it would deploy `file` (filled
/// with `set`), deploying nothing: a summary with id 0 if it would.
pub fn check_deploy(admin: &Path, file: &Path, set: &[(String, String)]) -> Result<ChainSummary> {
    request_deploy(admin, file, set, true)
}

fn request_deploy(admin: &Path, file: &Path, set: &[(String, String)], dry_run: bool) -> Result<ChainSummary> {
    let file = std::fs::canonicalize(file).with_context(|| format!("{}", file.display()))?;
    let (file, set) = (file.display().to_string(), set.to_vec());
    let request = if dry_run { Msg::CheckDeploy { file, set } } else { Msg::Deploy { file, set } };
    match admin_request(admin, &request)? {
        Msg::Deployed(s) => Ok(*s),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Removes chain `chain`, stopping its NFs.
pub fn remove(admin: &Path, chain: &str) -> Result<()> {
    match admin_request(admin, &Msg::Remove { chain: chain.to_string() })? {
        Msg::Ok => Ok(()),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Has chain `chain`'s NFs read their configuration and rule files again;
/// what became of it, per NF.
pub fn reload(admin: &Path, chain: &str) -> Result<Vec<NfReload>> {
    match admin_request(admin, &Msg::Reload { chain: chain.to_string() })? {
        Msg::Reloaded { nfs } => Ok(nfs),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// A capture ferryd has started: the point it resolved, where it copies
/// from, and the pipe the pcapng comes through.
pub struct CaptureHandle {
    pub point: String,
    pub sites: Vec<String>,
    pub pcapng: std::fs::File,
    stream: std::os::unix::net::UnixStream,
}

/// Asks the ferryd at `admin` (root's admin socket) to capture at a point
/// of a running chain; read the pcapng from the handle.
pub fn capture_start(admin: &Path, req: &proto::CaptureRequest) -> Result<CaptureHandle> {
    let stream = std::os::unix::net::UnixStream::connect(admin)
        .with_context(|| format!("ferryd's admin socket {}", admin.display()))?;
    proto::send(&stream, &Msg::Capture(Box::new(req.clone())), &[])?;
    match proto::recv(&stream)? {
        (Msg::CaptureStarted { point, sites }, mut fds) if fds.len() == 1 => {
            let pcapng = std::fs::File::from(fds.remove(0));
            Ok(CaptureHandle { point, sites, pcapng, stream })
        }
        (Msg::Error { message }, _) => bail!("ferryd: {message}"),
        (other, _) => bail!("unexpected reply {other:?}"),
    }
}

/// Ends a capture from another thread than the one reading it.
pub struct CaptureStop(std::os::unix::net::UnixStream);

impl CaptureStop {
    /// Asks ferryd to end the capture: it writes every copy taken so far,
    /// then closes the pipe.
    pub fn stop(&self) -> Result<()> {
        proto::send(&self.0, &Msg::Ok, &[])?;
        Ok(())
    }
}

impl CaptureHandle {
    /// What ends the capture early, for another thread.
    pub fn stopper(&self) -> Result<CaptureStop> {
        Ok(CaptureStop(self.stream.try_clone()?))
    }

    /// Copies the pcapng to `out` until ferryd ends the capture; what it
    /// took and lost.
    pub fn copy_to(mut self, out: &mut dyn std::io::Write) -> Result<proto::CaptureStats> {
        std::io::copy(&mut self.pcapng, out).context("copying the capture")?;
        out.flush()?;
        self.finish()
    }

    /// Waits for ferryd's account of the capture (after the pipe closed).
    pub fn finish(self) -> Result<proto::CaptureStats> {
        drop(self.pcapng);
        match proto::recv(&self.stream)? {
            (Msg::CaptureDone(stats), _) => Ok(stats),
            (Msg::Error { message }, _) => bail!("ferryd: {message}"),
            (other, _) => bail!("unexpected reply {other:?}"),
        }
    }
}

/// The name of the one chain the ferryd at `admin` runs; an error that
/// says to name one if it runs several, or none.
pub fn only_chain(admin: &Path) -> Result<String> {
    match list(admin)?.as_slice() {
        [one] => Ok(one.name.clone()),
        [] => bail!("ferryd at {} runs no chain", admin.display()),
        many => {
            let names: Vec<&str> = many.iter().map(|c| c.name.as_str()).collect();
            bail!("{} chains are deployed ({}): name one", many.len(), names.join(", "))
        }
    }
}

/// The chains ferryd runs.
pub fn list(admin: &Path) -> Result<Vec<ChainSummary>> {
    match admin_request(admin, &Msg::List)? {
        Msg::ListReply { chains } => Ok(chains),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Where ferryd serves its metrics (`host:port`), if it does.
pub fn metrics_addr(admin: &Path) -> Result<Option<String>> {
    match admin_request(admin, &Msg::Info)? {
        Msg::InfoReply { metrics, .. } => Ok(metrics),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// Stops every chain and ferryd.
pub fn shutdown(admin: &Path) -> Result<()> {
    match admin_request(admin, &Msg::Shutdown)? {
        Msg::Ok => Ok(()),
        other => bail!("unexpected reply {other:?}"),
    }
}

/// What `ferry chain list` prints.
pub fn list_table(chains: &Vec<ChainSummary>) -> String {
    let mut out = format!("{:<5} {:<16} {:>4} {:>9} {:>7}  file\n", "id", "chain", "nfs", "connected", "domains");
    for c in chains {
        out += &format!("{:<5} {:<16} {:>4} {:>9} {:>7}  {}\n", c.id, c.name, c.nfs, c.connected, c.domains, c.file);
    }
    out
}

/// A counter of thread `t` of NF `nf` in a status.
/// Port `port`'s XDP verdict `name` (`redirect`, `no_socket`...): 0 when
/// the port has no program or no such verdict.
pub fn port_verdict(s: &Status, port: &str, name: &str) -> u64 {
    let verdicts = s.ports.iter().filter(|p| p.name == port).flat_map(|p| p.verdicts.iter());
    verdicts.filter(|v| v.0 == name).map(|v| v.1).sum()
}

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

/// Flows of a flow monitor the table shows (the busiest first).
const FLOWS_SHOWN: usize = 10;

/// A flow monitor's busiest flows, for the status table.
fn flows_table(flows: &[FlowStatus], total: u64) -> String {
    let mut out = String::new();
    for f in flows.iter().take(FLOWS_SHOWN) {
        out += &format!(
            "    flow {}:{} -> {}:{} proto {}: {} packets, {} bytes\n",
            f.src, f.sport, f.dst, f.dport, f.proto, f.packets, f.bytes
        );
    }
    if total > FLOWS_SHOWN as u64 {
        let more = total - FLOWS_SHOWN as u64;
        out += &format!("    ... {more} more flows (--json has the busiest {})\n", flows.len());
    }
    out
}

/// The per-NF table `ferry chain show` prints: nonzero counters only.
/// One thread's non-zero counters; a fused NF's members' own counters
/// (`MEMBER.COUNTER`) on a line per member.
fn thread_lines(i: usize, counters: &[(String, u64)]) -> String {
    let nonzero = counters.iter().filter(|(_, v)| *v != 0);
    let own: Vec<String> = nonzero.clone().filter(|(k, _)| !k.contains('.')).map(|(k, v)| format!("{k}={v}")).collect();
    let mut out = format!("    thread {i}: {}\n", own.join(" "));
    let mut members: Vec<&str> = Vec::new();
    for (k, _) in counters {
        if let Some((m, _)) = k.split_once('.') {
            if !members.contains(&m) {
                members.push(m);
            }
        }
    }
    for m in members {
        let mine = nonzero.clone().filter_map(|(k, v)| Some((k.split_once('.').filter(|(p, _)| *p == m)?.1, v)));
        let parts: Vec<String> = mine.map(|(k, v)| format!("{k}={v}")).collect();
        out += &format!("      {m}: {}\n", parts.join(" "));
    }
    out
}

pub fn status_table(s: &Status) -> String {
    let mut out = format!("chain {} (id {})\n", s.chain, s.id);
    for n in &s.nfs {
        let pid = n.pid.map_or("-".to_string(), |p| p.to_string());
        let uid = n.uid.map_or("-".to_string(), |u| u.to_string());
        let idle_polls = n.poll.idle_polls.map_or(String::new(), |p| format!(" idle_polls {p}"));
        out += &format!(
            "  {:<10} id {:<4} domain {:<8} uid {:<10} pid {:<8} {} restarts {}{}\n",
            n.name,
            n.id,
            n.domain,
            uid,
            pid,
            if n.connected { "up  " } else { "DOWN" },
            n.restarts,
            idle_polls
        );
        for (i, t) in n.threads.iter().enumerate() {
            out += &thread_lines(i, t);
        }
        out += &flows_table(&n.flows, n.flows_total);
        out += &alerts_table(&n.alerts);
    }
    for n in &s.offloaded {
        let parts: Vec<String> = n.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out += &format!("  {:<10} id {:<4} in XDP on port {}: {}\n", n.name, n.id, n.port, parts.join(" "));
        out += &flows_table(&n.flows, n.flows_total);
    }
    if !s.nsh.is_empty() {
        let parts: Vec<String> = s.nsh.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
        out += &format!("  NSH forwarder (this host's, every chain's): {}\n", parts.join(" "));
    }
    for p in s.ports.iter().filter(|p| p.verdicts.iter().any(|v| v.1 != 0)) {
        // no_socket: frames that reached a queue with no socket of the port.
        let parts: Vec<String> = p.verdicts.iter().filter(|v| v.1 != 0).map(|(k, v, _)| format!("{k}={v}")).collect();
        out += &format!("  port {} XDP verdicts: {}\n", p.name, parts.join(" "));
    }
    for (port, c) in s.ports.iter().filter_map(|p| Some((&p.name, p.classified.as_ref()?))) {
        out += &format!("  port {port} classifies: {} frames no rule took\n", c.unmatched);
        for (rule, entry, frames) in &c.rules {
            out += &format!("    {rule:<40} -> {entry:<12} {frames} frames\n");
        }
    }
    if s.listeners.iter().any(|(_, v)| *v != 0) {
        let parts: Vec<String> = s.listeners.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
        out += &format!("  ferryd listeners: {}\n", parts.join(" "));
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

/// An IPS's alerts per rule, the most alerted first (at most 20).
fn alerts_table(alerts: &[ferry_chain::proto::RuleAlerts]) -> String {
    if alerts.is_empty() {
        return String::new();
    }
    let mut top = alerts.to_vec();
    top.sort_by(|a, b| b.alerts.cmp(&a.alerts).then((a.gid, a.sid).cmp(&(b.gid, b.sid))));
    let total: u64 = alerts.iter().map(|a| a.alerts).sum();
    let mut out = format!("    alerts: {total} from {} rules (gid:sid alerts)\n", alerts.len());
    for a in top.iter().take(20) {
        out += &format!("      {}:{:<10} {}\n", a.gid, a.sid, a.alerts);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::thread_lines;

    #[test]
    fn a_fused_nfs_members_get_a_line_each() {
        let counters: Vec<(String, u64)> = [("rx_ring", 7), ("drop_nf", 0), ("a.rx", 7), ("a.drop", 0), ("b.rx", 5)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        assert_eq!(thread_lines(0, &counters), "    thread 0: rx_ring=7\n      a: rx=7\n      b: rx=5\n");
    }
}
