//! Starting NF processes as their configured user, with no capabilities.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::plan::NfPlan;
use ferry_chain::proto;

use crate::users::Creds;

/// The NF host binary, `ferry-host`, that runs built-in NFs: `FERRY_HOST`,
/// else the one next to this ferryd.
pub fn host_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FERRY_HOST") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    let p = me.with_file_name("ferry-host");
    if p.exists() {
        Ok(p)
    } else {
        Err(anyhow!("cannot find the NF host ferry-host next to {} (set FERRY_HOST)", me.display()))
    }
}

/// Starts NF `nf` so that it connects back to `socket`. The child runs as
/// `creds`: std drops supplementary groups and, since the uid changes
/// from root to non-root, the kernel clears every capability; no_new_privs
/// stops it from regaining any. It dies with ferryd, unless `outlive`
/// names a log file: then it outlives ferryd (`--persist`), and its stdout
/// and stderr go to that file rather than to ferryd's, which may be gone.
pub fn spawn_nf(
    chain: &str,
    nf: &NfPlan,
    creds: &Creds,
    socket: &Path,
    host: &Path,
    outlive: Option<&Path>,
) -> Result<Child> {
    let (uid, gid) = (creds.uid, creds.gid);
    let mut cmd = match (&nf.kind, &nf.exec) {
        (Some(kind), _) => {
            let mut c = Command::new(host);
            c.args(["serve", "--kind", kind]);
            for a in &nf.args {
                c.arg("--arg").arg(a);
            }
            c
        }
        (None, Some(argv)) => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
        (None, None) => bail!("NF {} has nothing to run", nf.name),
    };
    cmd.env(proto::ENV_SOCKET, socket).env(proto::ENV_CHAIN, chain).env(proto::ENV_NF, &nf.name).current_dir("/");
    if uid != 0 {
        cmd.uid(uid).gid(gid);
    }
    if let Some(file) = outlive {
        // One old log kept: an NF restarted again and again, or chatty,
        // does not fill /run.
        if std::fs::metadata(file).is_ok_and(|m| m.len() > MAX_LOG) {
            let _ = std::fs::rename(file, file.with_extension("log.old"));
        }
        let log = crate::persist::open_private(file, true).with_context(|| format!("NF {}'s log", nf.name))?;
        cmd.stdin(std::process::Stdio::null()).stdout(log.try_clone()?).stderr(log);
    }
    let die_with_ferryd = outlive.is_none();
    let cpus = cpu_set(&nf.cpus);
    // SAFETY: only async-signal-safe calls (prctl, setsid, sched_setaffinity on a
    // set built before the fork) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || (die_with_ferryd && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            // Outliving ferryd includes its terminal's Ctrl-C: a session
            // of its own.
            if !die_with_ferryd && libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(set) = &cpus {
                set.apply_to(0)?;
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| anyhow!("starting NF {}: {e}", nf.name))
}

/// Size past which an outliving NF's log is set aside when it starts.
const MAX_LOG: u64 = 8 << 20;

/// The affinity mask of `cpus:` (None: any CPU).
fn cpu_set(cpus: &[u32]) -> Option<ferry_sys::CpuSet> {
    // The chain parser keeps numbers below CPU_SETSIZE (spec::MAX_CPU).
    (!cpus.is_empty()).then(|| ferry_sys::CpuSet::of(cpus.iter().map(|c| *c as usize)))
}

/// CPUs named in `cpus:` that this machine does not have online.
pub fn offline_cpus(cpus: &[u32]) -> Vec<u32> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    cpus.iter().copied().filter(|&c| !in_cpu_list(&online, c)).collect()
}

/// Whether CPU `c` is in a kernel CPU list such as "0-3,8,10-11".
fn in_cpu_list(list: &str, c: u32) -> bool {
    list.trim().split(',').any(|r| match r.split_once('-') {
        Some((a, b)) => a.parse::<u32>().is_ok_and(|a| a <= c) && b.parse::<u32>().is_ok_and(|b| c <= b),
        None => r.parse::<u32>() == Ok(c),
    })
}

/// True if process `pid` is dumpable: then every process of its uid can
/// open its fds and memory through /proc. The kernel shows it in /proc:
/// the per-process entries of a non-dumpable process (all but the
/// world-readable `/proc/PID` directory itself) belong to root, those of a
/// dumpable one to its own uid.
pub fn is_dumpable(pid: u32) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let path = format!("/proc/{pid}/fd");
    let owner = std::fs::metadata(&path).with_context(|| format!("reading {path}"))?.uid();
    Ok(owner != 0)
}

/// Waits until child `pid` has exited, without reaping it: until it is
/// reaped its pid names it and nothing else, which is what lets ferryd
/// know an NF by its pid.
pub fn wait_exited(pid: u32) -> std::io::Result<()> {
    loop {
        // SAFETY: waitid into a zeroed siginfo_t we own.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A pidfd for `pid`: unlike the pid, it cannot come to name another
/// process once this one is reaped.
pub fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether the pidfd's process has exited (a zombie included), waiting up
/// to `timeout_ms` (0: not at all) for it to.
pub fn pidfd_exited(fd: &OwnedFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) == 1 && pfd.revents & libc::POLLIN != 0 }
}

/// Sends `sig` to the pidfd's process (nothing if it is gone).
pub fn pidfd_signal(fd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: pidfd_send_signal with a valid pidfd, no siginfo, no flags.
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0) };
}

/// Peer credentials of a Unix socket: (pid, uid, gid).
pub fn peer_cred(sock: &std::os::unix::net::UnixStream) -> Result<(u32, u32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a live ucred of the right size.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        bail!("SO_PEERCRED: {}", std::io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid, cred.gid))
}

/// The fields of /proc/PID/stat after the command (which may hold spaces
/// and parentheses): the first is the state, the 3rd field of the line.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_string).collect())
}

/// CPU time (user + system) of process `pid` so far, from /proc.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    // utime is the 14th field of the line, stime the 15th.
    let rest = stat_fields(pid)?;
    let ticks: u64 = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    // SAFETY: plain getter.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        let table =
            [("0-1\n", 0, true), ("0-1", 1, true), ("0-1", 2, false), ("0,2-3,8", 8, true), ("0,2-3,8", 1, false)];
        for (list, c, want) in table {
            assert_eq!(in_cpu_list(list, c), want, "{list:?} {c}");
        }
        assert!(!in_cpu_list("", 0));
    }
    use std::os::unix::process::CommandExt;

    /// A plain process of an unprivileged user is dumpable; the same
    /// process once it made itself non-dumpable is not. (Needs root to
    /// start a process as another user; skipped without it.)
    #[test]
    fn a_dumpable_process_is_told_from_a_non_dumpable_one() {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but this test needs root");
            eprintln!("SKIP: needs root");
            return;
        }
        let (uid, gid) = crate::users::lookup_user("nobody").expect("user nobody");
        // `sh` is dumpable after exec; then it reads a line and exits.
        let mut child = Command::new("sh")
            .args(["-c", "read line"])
            .uid(uid)
            .gid(gid)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh as nobody");
        let dumpable = is_dumpable(child.id());
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(dumpable.unwrap(), "a fresh process of nobody is dumpable");
        // This test process runs as root: /proc shows root whether or not
        // it is dumpable, which is why ferryd skips the check for root.
        assert!(!is_dumpable(std::process::id()).unwrap());
    }
}
