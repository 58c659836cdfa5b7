//! Process plumbing shared by the applications: temporary directories,
//! process groups, CPU pinning, the guard that kills a server group if we
//! die, start-up readiness checks and clients with a wall-clock limit.

use super::error::{tail, AppError};
use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a server may take to listen: a guard against one that never
/// does, not a speed limit (a loaded machine can take many seconds).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Grace period between SIGTERM and SIGKILL when stopping a server.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Bytes of each log kept in error messages.
pub(crate) const LOG_TAIL: usize = 2048;

/// A directory `/tmp/ferry-<app>-<pid>-<seq>-<random>`, removed on drop.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn new(app: &str) -> Result<TempDir, AppError> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tag: String = app.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let path = PathBuf::from(format!(
            "/tmp/ferry-{tag}-{}-{}-{:08x}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        ));
        // create_dir (not _all) fails if the name exists: never share a dir.
        std::fs::create_dir(&path).map_err(|source| AppError::Io {
            app: app.to_string(),
            what: "temporary directory",
            path: path.clone(),
            source,
        })?;
        Ok(TempDir { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `contents` to `name` in the directory.
    pub(crate) fn write(&self, app: &str, name: &str, contents: &[u8]) -> Result<PathBuf, AppError> {
        let path = self.join(name);
        std::fs::write(&path, contents).map_err(|source| AppError::Io {
            app: app.to_string(),
            what: "file",
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove app directory");
        }
    }
}

/// Renders a command line for error messages.
pub(crate) fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        s.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == ';') {
            s.push('\'');
            s.push_str(&a.replace('\'', "'\\''"));
            s.push('\'');
        } else {
            s.push_str(&a);
        }
    }
    s
}

/// Checks that `cpu` is one this process may run on (so pinning a child
/// to it cannot fail after fork).
pub(crate) fn check_cpu(app: &str, cpu: Option<usize>) -> Result<(), AppError> {
    let Some(cpu) = cpu else { return Ok(()) };
    let bad = |message: String| AppError::InvalidOptions { app: app.to_string(), message };
    let allowed = ferry_sys::CpuSet::allowed().map_err(|e| bad(format!("sched_getaffinity: {e}")))?.cpus();
    if !allowed.contains(&cpu) {
        return Err(bad(format!("cpu {cpu} is not available (allowed: {allowed:?})")));
    }
    Ok(())
}

/// Makes the child the leader of a new process group, optionally pins it
/// to `cpu` and optionally kills it when the spawning thread exits.
/// `cpu` must have passed [`check_cpu`].
pub(crate) fn configure(cmd: &mut Command, cpu: Option<usize>, die_with_parent: bool) {
    let set = cpu.map(|c| ferry_sys::CpuSet::of([c]));
    // SAFETY: setpgid, prctl and sched_setaffinity are async-signal-safe
    // system calls; the closure allocates nothing and touches no locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if die_with_parent && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(set) = &set {
                set.apply_to(0)?;
            }
            Ok(())
        });
    }
}

/// `Some(description)` if child `pid` has exited, without reaping it (so
/// its pid, and the process group id, cannot be reused yet).
pub(crate) fn exited_nowait(pid: u32) -> Option<String> {
    // SAFETY: zeroed siginfo_t is valid; waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: valid pointer to `info`.
    if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } != 0 {
        return Some(format!("cannot wait for it: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: waitid with WEXITED fills the SIGCHLD fields of the union.
    let (spid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if spid == 0 {
        return None;
    }
    Some(match info.si_code {
        libc::CLD_EXITED => format!("exited with status {status}"),
        libc::CLD_KILLED | libc::CLD_DUMPED => format!("killed by signal {status}"),
        c => format!("stopped (si_code {c}, status {status})"),
    })
}

/// True while some non-zombie process is in process group `pgid`.
/// (Orphaned zombies may never be reaped if PID 1 does not reap, so
/// `kill(-pgid, 0)` is not the right test.)
pub(crate) fn group_alive(pgid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat_fields(&s).map(|f| (f.state, f.pgrp)))
        .any(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
}

/// The fields of `/proc/<pid>/stat` the apps use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StatFields {
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub utime: u64,
    pub stime: u64,
    pub starttime: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in
/// parentheses and may contain spaces and parentheses, so the fields are
/// counted from the last `)`.
pub(crate) fn parse_stat_fields(s: &str) -> Option<StatFields> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(StatFields {
        state: f.first()?.chars().next()?,
        ppid: u32::try_from(num(4)?).ok()?,
        pgrp: u32::try_from(num(5)?).ok()?,
        utime: num(14)?,
        stime: num(15)?,
        starttime: num(22)?,
    })
}

/// Children of `pid` (by scanning `/proc` for their parent pid).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut v: Vec<u32> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| parse_stat_fields(&s))
                .is_some_and(|f| f.ppid == pid && f.state != 'Z')
        })
        .collect();
    v.sort_unstable();
    v
}

/// Inodes of TCP sockets in LISTEN state on `addr` (or the wildcard
/// address with its port) in a `/proc/<pid>/net/tcp` table.
pub(crate) fn listening_inodes(table: &str, addr: SocketAddrV4) -> Vec<u64> {
    // The table prints the address as the hex of its in-memory u32, i.e.
    // the network-order bytes read as a little-endian number.
    let want_ip = u32::from_le_bytes(addr.ip().octets());
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (ip, port) = f.get(1)?.split_once(':')?;
            let ip = u32::from_str_radix(ip, 16).ok()?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let listen = *f.get(3)? == "0A";
            let inode = f.get(9)?.parse::<u64>().ok()?;
            (listen && port == addr.port() && (ip == want_ip || ip == 0)).then_some(inode)
        })
        .collect()
}

/// True if process `pid` itself holds a TCP socket listening on `addr`
/// (the table is read through the process, so it is the process's
/// namespace; the fd check makes sure it is not some other process's
/// listener on the same port).
pub(crate) fn listens(pid: u32, addr: SocketAddrV4) -> bool {
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else { return false };
    let inodes = listening_inodes(&table, addr);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(Result::ok).filter_map(|e| std::fs::read_link(e.path()).ok()).any(|target| {
        let t = target.to_string_lossy();
        t.strip_prefix("socket:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|i| i.parse::<u64>().ok())
            .is_some_and(|i| inodes.contains(&i))
    })
}

/// The tails of the given log files, each under a `== name ==` header.
pub(crate) fn logs_tail(files: &[PathBuf]) -> String {
    let mut out = String::new();
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let text = match std::fs::read(path) {
            Ok(b) if b.is_empty() => "(empty)".to_string(),
            Ok(b) => tail(&b, LOG_TAIL),
            Err(e) => format!("(cannot read: {e})"),
        };
        out.push_str(&format!("  == {name} ==\n{text}\n"));
    }
    out.trim_end().to_string()
}

/// A shell in its own session that SIGKILLs process group `pgid` and
/// removes the server's directory when its stdin reaches EOF without a
/// `done` line. We hold the only write end, so it fires when this process
/// dies for any reason.
struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
}

const GUARD_SCRIPT: &str = r#"IFS= read -r line
[ "$line" = done ] && exit 0
kill -9 -"$1" 2>/dev/null
sleep 0.2
rm -rf -- "$2"
exit 0"#;

impl Guard {
    fn spawn(pgid: u32, dir: &Path) -> std::io::Result<Guard> {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(GUARD_SCRIPT)
            .arg("ferry-app-guard")
            .arg(pgid.to_string())
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe. Its own session keeps the
        // guard out of signals sent to our process group.
        unsafe {
            c.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = c.spawn()?;
        let stdin = child.stdin.take();
        Ok(Guard { child, stdin })
    }

    /// Tells the guard to exit without killing, and reaps it.
    fn dismiss(mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"done\n");
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A long-running server: leader of its own process group, guarded,
/// stdout/stderr into files of its directory. Stopped on drop.
pub(crate) struct ServerProc {
    command: String,
    child: Option<Child>,
    guard: Option<Guard>,
}

impl std::fmt::Debug for ServerProc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProc").field("command", &self.command).field("pid", &self.pid()).finish()
    }
}

impl ServerProc {
    /// Spawns `cmd` (stdin null, stdout/stderr to `stdout.log` and
    /// `stderr.log` in `dir`), guarded: if we die, the guard kills the
    /// group and removes `dir`.
    pub(crate) fn spawn(
        app: &str,
        mut cmd: Command,
        cpu: Option<usize>,
        dir: &TempDir,
    ) -> Result<ServerProc, AppError> {
        check_cpu(app, cpu)?;
        let command = render(&cmd);
        let (stdout_log, stderr_log) = (dir.join("stdout.log"), dir.join("stderr.log"));
        let io_err =
            |path: &Path, source| AppError::Io { app: app.to_string(), what: "log file", path: path.into(), source };
        let out = File::create(&stdout_log).map_err(|e| io_err(&stdout_log, e))?;
        let err = File::create(&stderr_log).map_err(|e| io_err(&stderr_log, e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        configure(&mut cmd, cpu, false);
        let child =
            cmd.spawn().map_err(|source| AppError::Spawn { app: app.to_string(), command: command.clone(), source })?;
        let mut proc = ServerProc { command: command.clone(), child: Some(child), guard: None };
        match Guard::spawn(proc.pid(), dir.path()) {
            Ok(g) => proc.guard = Some(g),
            // `proc` is stopped by its drop.
            Err(source) => {
                return Err(AppError::Spawn { app: app.to_string(), command: "sh -c <guard script>".into(), source })
            }
        }
        Ok(proc)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub(crate) fn command(&self) -> &str {
        &self.command
    }

    /// Polls until `ready()` holds, failing with the logs' tails if the
    /// process exits first or [`START_TIMEOUT`] passes.
    pub(crate) fn wait_ready(
        &self,
        app: &str,
        what: &str,
        logs: &[PathBuf],
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), AppError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let fail = |reason: String| AppError::StartFailed {
            app: app.to_string(),
            command: self.command.clone(),
            reason,
            log_tail: logs_tail(logs),
        };
        loop {
            if let Some(status) = exited_nowait(self.pid()) {
                return Err(fail(status));
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(fail(format!("not {what} after {START_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Some(g) = self.guard.take() {
            g.dismiss();
        }
        let pid = child.id();
        let pg = -(pid as libc::pid_t);
        // SAFETY: plain kill(2); the leader is unreaped, so the group id
        // is still ours.
        unsafe { libc::kill(pg, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while exited_nowait(pid).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Members that outlived the leader (nginx workers) or ignored
        // SIGTERM. The leader is still unreaped here.
        // SAFETY: as above.
        unsafe { libc::kill(pg, libc::SIGKILL) };
        let _ = child.wait();
        // SIGKILL is asynchronous: wait until the members are gone, so the
        // port is free when we return.
        let deadline = Instant::now() + STOP_GRACE;
        while group_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a finished client printed.
#[derive(Debug)]
pub(crate) struct Captured {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Captured {
    /// `Err(Failed)` unless the program exited 0.
    pub(crate) fn check(self, app: &str) -> Result<Captured, AppError> {
        if self.status.success() {
            return Ok(self);
        }
        let mut stderr = tail(&self.stderr, LOG_TAIL);
        if stderr.is_empty() {
            stderr = tail(&self.stdout, LOG_TAIL);
        }
        Err(AppError::Failed { app: app.to_string(), command: self.command, status: self.status.to_string(), stderr })
    }

    pub(crate) fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// A client program with captured output and a wall-clock limit; killed
/// (its whole group) if dropped before [`ClientProc::wait`].
pub(crate) struct ClientProc {
    app: String,
    command: String,
    child: Option<Child>,
    readers: Vec<JoinHandle<Vec<u8>>>,
    writer: Option<JoinHandle<()>>,
    limit: Duration,
    started: Instant,
}

impl std::fmt::Debug for ClientProc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientProc").field("command", &self.command).field("limit", &self.limit).finish()
    }
}

fn reader<R: Read + Send + 'static>(mut r: R) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

impl ClientProc {
    /// Spawns `cmd` in its own process group (killed if the spawning thread
    /// exits), feeding `stdin` if given.
    pub(crate) fn spawn(
        app: &str,
        mut cmd: Command,
        cpu: Option<usize>,
        stdin: Option<Vec<u8>>,
        limit: Duration,
    ) -> Result<ClientProc, AppError> {
        check_cpu(app, cpu)?;
        let command = render(&cmd);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        configure(&mut cmd, cpu, true);
        let mut child =
            cmd.spawn().map_err(|source| AppError::Spawn { app: app.to_string(), command: command.clone(), source })?;
        let readers = vec![
            reader(child.stdout.take().expect("piped stdout")),
            reader(child.stderr.take().expect("piped stderr")),
        ];
        let writer = match (stdin, child.stdin.take()) {
            (Some(data), Some(mut pipe)) => Some(std::thread::spawn(move || {
                // A program that exits early closes the pipe: EPIPE is fine.
                let _ = pipe.write_all(&data);
            })),
            _ => None,
        };
        Ok(ClientProc {
            app: app.to_string(),
            command,
            child: Some(child),
            readers,
            writer,
            limit,
            started: Instant::now(),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Kills the group and reaps the leader (idempotent).
    fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: plain kill(2) on our unreaped child's group.
        unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
        child.wait().ok()
    }

    fn collect(&mut self) -> (Vec<u8>, Vec<u8>) {
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        let mut r = std::mem::take(&mut self.readers).into_iter().map(|h| h.join().unwrap_or_default());
        (r.next().unwrap_or_default(), r.next().unwrap_or_default())
    }

    /// Waits for the program to exit (or kills it at the limit).
    pub(crate) fn wait(mut self) -> Result<Captured, AppError> {
        let pid = self.pid();
        let deadline = self.started + self.limit;
        let mut nap = Duration::from_millis(1);
        while exited_nowait(pid).is_none() {
            if Instant::now() >= deadline {
                self.kill();
                let (_, stderr) = self.collect();
                return Err(AppError::Timeout {
                    app: self.app.clone(),
                    command: self.command.clone(),
                    limit: self.limit,
                    stderr: tail(&stderr, LOG_TAIL),
                });
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(20));
        }
        // Leader exited; kill stragglers of its group before reaping.
        let status = self.kill().ok_or_else(|| AppError::Spawn {
            app: self.app.clone(),
            command: self.command.clone(),
            source: std::io::Error::other("lost the child"),
        })?;
        let (stdout, stderr) = self.collect();
        Ok(Captured { command: self.command.clone(), status, stdout, stderr })
    }
}

impl Drop for ClientProc {
    fn drop(&mut self) {
        self.kill();
        self.collect();
    }
}

/// Runs a client to completion: spawn + wait.
pub(crate) fn run_client(
    app: &str,
    cmd: Command,
    cpu: Option<usize>,
    stdin: Option<Vec<u8>>,
    limit: Duration,
) -> Result<Captured, AppError> {
    ClientProc::spawn(app, cmd, cpu, stdin, limit)?.wait()
}

/// Rounds a duration up to whole seconds, at least 1 (wrk and iperf3 take
/// integral seconds).
pub(crate) fn whole_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let s = "1234 (nginx: a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 2 0 987654 \
                 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let f = parse_stat_fields(s).unwrap();
        assert_eq!(f, StatFields { state: 'S', ppid: 1, pgrp: 1234, utime: 17, stime: 5, starttime: 987654 });
        assert!(parse_stat_fields("garbage").is_none());
    }

    #[test]
    fn listening_inodes_match_address_or_wildcard() {
        let table =
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0B020A0A:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 00000000:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0\n\
   2: 0B020A0A:0050 0201010A:C350 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0\n";
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 10, 2, 11), 80);
        assert_eq!(listening_inodes(table, a), vec![111]);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 10, 2, 11), 5201);
        assert_eq!(listening_inodes(table, b), vec![222]);
        let c = SocketAddrV4::new(Ipv4Addr::new(10, 10, 3, 12), 80);
        assert!(listening_inodes(table, c).is_empty());
    }

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(whole_secs(Duration::from_millis(0)), 1);
        assert_eq!(whole_secs(Duration::from_millis(1500)), 2);
        assert_eq!(whole_secs(Duration::from_secs(5)), 5);
    }

    #[test]
    fn render_quotes_what_needs_it() {
        let mut c = Command::new("nginx");
        c.args(["-g", "daemon off;", "-c", "/tmp/x"]);
        assert_eq!(render(&c), "nginx -g 'daemon off;' -c /tmp/x");
    }

    #[test]
    fn client_times_out_and_is_killed() {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 30"]);
        let t = Instant::now();
        let e = run_client("sleeper", c, None, None, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, AppError::Timeout { .. }), "{e}");
        // Had it not been killed, the sleeper would have run its 30 s.
        assert!(t.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn client_captures_output_and_stdin() {
        let c = Command::new("cat");
        let out = run_client("cat", c, None, Some(b"hello".to_vec()), Duration::from_secs(5)).unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, b"hello");
        let mut c = Command::new("sh");
        c.args(["-c", "echo oops >&2; exit 3"]);
        let e = run_client("sh", c, None, None, Duration::from_secs(5)).unwrap().check("sh").unwrap_err();
        assert!(e.to_string().contains("oops"), "{e}");
    }

    #[test]
    fn bad_cpu_is_refused_before_spawning() {
        let e = check_cpu("x", Some(100_000)).unwrap_err();
        assert!(matches!(e, AppError::InvalidOptions { .. }), "{e}");
        // SAFETY: no preconditions.
        let here = unsafe { libc::sched_getcpu() };
        check_cpu("x", Some(usize::try_from(here).unwrap())).unwrap();
    }
}
