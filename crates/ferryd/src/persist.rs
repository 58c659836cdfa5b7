//! What a persistent ferryd (`--persist`) leaves for the next one: a state
//! file per chain under `<socket>.state/`, root's alone, rewritten before
//! any NF learns something the next ferryd must know (before a Welcome
//! goes out). The memory and eventfds themselves are not in it: they live
//! on in the NF processes, and the next ferryd takes its own copies from
//! them (`pidfd_getfd`), knowing each by an identity the kernel gives and
//! no NF can choose: a memfd by its inode, an eventfd by its id.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::plan::ChainPlan;
use serde::{Deserialize, Serialize};

use crate::spawn;

/// Bumped when [`ChainState`] or the shared region's layout changes: a
/// ferryd adopts only state of its own version (a region another build
/// laid out would be misread), and removes the rest's chains.
pub const STATE_VERSION: u32 = 1;

/// The directory of the state files: `<socket>.state`.
pub fn state_dir(socket: &Path) -> PathBuf {
    let mut dir = socket.as_os_str().to_owned();
    dir.push(".state");
    PathBuf::from(dir)
}

/// Everything the next ferryd needs to adopt a running chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChainState {
    pub version: u32,
    pub id: u32,
    pub nf_ids: Vec<u32>,
    pub file: PathBuf,
    pub placement: String,
    pub plan: ChainPlan,
    /// Per NF: (uid, gid, shown).
    pub creds: Vec<(u32, u32, String)>,
    /// The allocated uids among them, leased again on adoption.
    pub leases: Vec<u32>,
    /// Per domain: what its memory and eventfds are.
    pub domains: Vec<DomainIds>,
    /// Per port: the pin directory of its redirect program, if it has one.
    pub pins: Vec<Option<PathBuf>>,
    pub nfs: Vec<NfRecord>,
}

/// A domain's shared objects, as the kernel names them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainIds {
    /// (st_dev, st_ino) of the UMEM memfd and of the region memfd.
    pub umem: (u64, u64),
    pub region: (u64, u64),
    /// Per ring: the eventfd-id of its data and of its room eventfd.
    pub data: Vec<u64>,
    pub room: Vec<u64>,
}

/// One NF as the state knows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NfRecord {
    /// The admitted process: its pid and start time (clock ticks after
    /// boot), which together name one process for the life of the boot.
    pub process: Option<(u32, u64)>,
    pub generation: u64,
    pub restarts: u32,
    pub counters: Vec<String>,
}

impl ChainState {
    fn path(socket: &Path, chain: &str) -> PathBuf {
        state_dir(socket).join(format!("{chain}.json"))
    }

    /// Writes the state atomically (a new file renamed over the old one).
    pub fn save(&self, socket: &Path) -> Result<()> {
        let dir = state_dir(socket);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let path = Self::path(socket, &self.plan.name);
        let tmp = path.with_extension("json.new");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(&serde_json::to_vec_pretty(self)?)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))?;
        Ok(())
    }

    /// Every state file in `<socket>.state/`, each parsed or with the
    /// error that names it.
    pub fn load_all(socket: &Path) -> Vec<(PathBuf, Result<ChainState>)> {
        let Ok(dir) = std::fs::read_dir(state_dir(socket)) else { return Vec::new() };
        let mut files: Vec<PathBuf> =
            dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let state = std::fs::read(&p)
                    .map_err(anyhow::Error::from)
                    .and_then(|b| serde_json::from_slice::<ChainState>(&b).map_err(anyhow::Error::from))
                    .with_context(|| format!("state file {}", p.display()));
                (p, state)
            })
            .collect()
    }

    pub fn remove(socket: &Path, chain: &str) {
        let _ = std::fs::remove_file(Self::path(socket, chain));
        let _ = std::fs::remove_dir(state_dir(socket));
    }
}

/// Start time of process `pid` in clock ticks after boot (field 22 of
/// /proc/PID/stat).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command (which may hold spaces and parentheses), the start
    // time is the 20th field.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// A pidfd of the process recorded as `(pid, start)`, if it still runs.
/// The pidfd is opened first and checked after reading the start time, so
/// it names that very process: not one that took its pid meanwhile.
pub fn find_process((pid, start): (u32, u64)) -> Option<Arc<OwnedFd>> {
    let fd = spawn::pidfd_open(pid).ok()?;
    (start_time(pid) == Some(start) && !spawn::pidfd_exited(&fd, 0)).then(|| Arc::new(fd))
}

/// (st_dev, st_ino) of an open file.
pub fn file_id(fd: BorrowedFd<'_>) -> Result<(u64, u64)> {
    // SAFETY: fstat into a zeroed struct we own.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            bail!("fstat: {}", std::io::Error::last_os_error());
        }
        st
    };
    Ok((st.st_dev, st.st_ino))
}

/// The kernel's id of an eventfd (its `eventfd-id` in fdinfo), unique
/// among the eventfds that exist.
pub fn eventfd_id(pid: u32, fd: RawFd) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    info.lines().find_map(|l| l.strip_prefix("eventfd-id:"))?.trim().parse().ok()
}

/// The identities of a domain's objects as this process holds them.
pub fn domain_ids(
    umem: BorrowedFd<'_>,
    region: BorrowedFd<'_>,
    data: &[impl AsFd],
    room: &[impl AsFd],
) -> Result<DomainIds> {
    let me = std::process::id();
    let id = |fd: BorrowedFd<'_>| {
        eventfd_id(me, fd.as_raw_fd()).ok_or_else(|| {
            anyhow!("not supported: needs a kernel that shows eventfd-id in fdinfo (fd {})", fd.as_raw_fd())
        })
    };
    Ok(DomainIds {
        umem: file_id(umem)?,
        region: file_id(region)?,
        data: data.iter().map(|e| id(e.as_fd())).collect::<Result<_>>()?,
        room: room.iter().map(|e| id(e.as_fd())).collect::<Result<_>>()?,
    })
}

/// A domain's objects taken from a process that holds them.
pub struct Harvest {
    pub umem: OwnedFd,
    pub region: OwnedFd,
    pub data: Vec<OwnedFd>,
    pub room: Vec<OwnedFd>,
}

/// Takes copies of the domain objects `ids` from the process of `pidfd`
/// (`pid`): each of its fds is checked against the identities, so a
/// process can hand over nothing but the objects the state names.
pub fn harvest(pid: u32, pidfd: &OwnedFd, ids: &DomainIds) -> Result<Harvest> {
    let (mut umem, mut region) = (None, None);
    let mut data: Vec<Option<OwnedFd>> = ids.data.iter().map(|_| None).collect();
    let mut room: Vec<Option<OwnedFd>> = ids.room.iter().map(|_| None).collect();
    let dir = format!("/proc/{pid}/fd");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        let target = target.to_string_lossy();
        if target.starts_with("anon_inode:[eventfd]") {
            let Some(id) = eventfd_id(pid, fd) else { continue };
            let slot = match (ids.data.iter().position(|&d| d == id), ids.room.iter().position(|&r| r == id)) {
                (Some(i), _) => &mut data[i],
                (_, Some(i)) => &mut room[i],
                _ => continue,
            };
            if slot.is_none() {
                let got = getfd(pidfd, fd)?;
                // Checked again on our copy: the fd may have changed since.
                if eventfd_id(std::process::id(), got.as_raw_fd()) == Some(id) {
                    *slot = Some(got);
                }
            }
        } else if target.starts_with("/memfd:") {
            let got = getfd(pidfd, fd)?;
            let id = file_id(got.as_fd())?;
            if id == ids.umem && umem.is_none() {
                umem = Some(got);
            } else if id == ids.region && region.is_none() {
                region = Some(got);
            }
        }
    }
    let all = |v: Vec<Option<OwnedFd>>, what: &str| -> Result<Vec<OwnedFd>> {
        v.into_iter()
            .enumerate()
            .map(|(i, fd)| fd.ok_or_else(|| anyhow!("pid {pid} holds no {what} eventfd of ring {i}")))
            .collect()
    };
    Ok(Harvest {
        umem: umem.ok_or_else(|| anyhow!("pid {pid} holds no UMEM of the domain"))?,
        region: region.ok_or_else(|| anyhow!("pid {pid} holds no region of the domain"))?,
        data: all(data, "data")?,
        room: all(room, "room")?,
    })
}

/// A copy of fd `fd` of the pidfd's process.
fn getfd(pidfd: &OwnedFd, fd: RawFd) -> Result<OwnedFd> {
    // SAFETY: pidfd_getfd with a valid pidfd, a number and no flags;
    // returns a new fd we own, or -1.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        bail!("pidfd_getfd: {} (needs CAP_SYS_PTRACE)", std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_ring::EventFd;

    /// Our own objects are found in our own fd table by their identities,
    /// and an eventfd that is not the domain's is not taken.
    #[test]
    fn a_domain_is_harvested_by_identity() {
        let memfd = |name: &str| {
            let c = std::ffi::CString::new(name).unwrap();
            // SAFETY: memfd_create with a NUL-terminated name.
            let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
            assert!(fd >= 0);
            // SAFETY: a fresh fd.
            unsafe { OwnedFd::from_raw_fd(fd) }
        };
        let (umem, region, other) = (memfd("ferry-test-umem"), memfd("ferry-test-region"), memfd("other"));
        let data = [EventFd::new().unwrap(), EventFd::new().unwrap()];
        let room = [EventFd::new_semaphore().unwrap(), EventFd::new_semaphore().unwrap()];
        let stranger = EventFd::new().unwrap();
        let ids = domain_ids(umem.as_fd(), region.as_fd(), &data, &room).expect("ids");
        assert_ne!(ids.umem, ids.region);
        let me = std::process::id();
        let pidfd = match spawn::pidfd_open(me) {
            Ok(fd) => fd,
            Err(e) => panic!("pidfd_open: {e}"),
        };
        let h = match harvest(me, &pidfd, &ids) {
            Ok(h) => h,
            // Without CAP_SYS_PTRACE (not root) the syscall is refused.
            Err(e) if unsafe { libc::geteuid() } != 0 => {
                assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but this test needs root: {e}");
                return;
            }
            Err(e) => panic!("{e:#}"),
        };
        assert_eq!(file_id(h.umem.as_fd()).unwrap(), ids.umem);
        assert_eq!(file_id(h.region.as_fd()).unwrap(), ids.region);
        for (got, want) in h.data.iter().chain(&h.room).zip(ids.data.iter().chain(&ids.room)) {
            assert_eq!(eventfd_id(me, got.as_raw_fd()), Some(*want));
        }
        let sid = eventfd_id(me, stranger.as_fd().as_raw_fd()).unwrap();
        assert!(!ids.data.contains(&sid) && !ids.room.contains(&sid));
        drop(other);
    }

    #[test]
    fn a_process_is_found_by_pid_and_start_time_only() {
        let me = std::process::id();
        let start = start_time(me).expect("our start time");
        assert!(find_process((me, start)).is_some());
        assert!(find_process((me, start + 1)).is_none(), "another start time is another process");
    }
}
