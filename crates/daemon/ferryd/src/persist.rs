//! What a persistent ferryd (`--persist`) leaves for the next one: a state
//! file per chain under `<admin>.state/` (next to the admin socket, and
//! root's alone), rewritten before any NF learns something the next
//! ferryd must know (before a Welcome goes out). The memory and eventfds themselves are not in it: they live
//! on in the NF processes, and the next ferryd takes its own copies from
//! them (`pidfd_getfd`), knowing each by an identity the kernel gives and
//! no NF can choose: a memfd by its inode, an eventfd by its id.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::plan::ChainPlan;
use serde::{Deserialize, Serialize};

use crate::spawn;

/// Bumped when [`ChainState`], the shared region's layout, a pinned
/// map's layout or what a running NF answers to changes (the verdict
/// counters, version 2; the copy links' name in the plan, version 3; a
/// rule-reading NF reloads on SIGHUP, where an older one would end,
/// version 4): a ferryd adopts only state of its own version (a region
/// another build laid out would be misread), and removes the rest's
/// chains.
pub const STATE_VERSION: u32 = 4;

/// The directory of the state files and persistent NFs' logs, next to
/// ferryd's admin socket (root's): `<admin>.state`.
pub fn state_dir(admin: &Path) -> PathBuf {
    let mut dir = admin.as_os_str().to_owned();
    dir.push(".state");
    PathBuf::from(dir)
}

/// `dir`, made if missing (mode 0700), and checked: a real directory, of
/// ferryd's user, that nobody else may write or read. Everything in it
/// is believed (uids, commands to run), so nothing else may put it there.
pub fn secure_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    ferry_sys::fs::create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("{}", dir.display()))?;
    // SAFETY: plain getter.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        bail!("{}: not a directory of uid {me} that only it may use (mode 0700): refusing to trust it", dir.display());
    }
    Ok(())
}

/// Opens `path` for appending or writing, never through a symlink.
pub fn open_private(path: &Path, append: bool) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(true);
    }
    o.create(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path).with_context(|| format!("{}", path.display()))
}

/// Everything the next ferryd needs to adopt a running chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChainState {
    pub version: u32,
    pub id: u32,
    pub nf_ids: Vec<u32>,
    pub file: PathBuf,
    /// The values its file's placeholders were filled with.
    #[serde(default)]
    pub set: Vec<(String, String)>,
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
    /// Per NF: its key, if ferryd does not start it (kept here, not read
    /// back from the file its user owns).
    pub keys: Vec<Option<String>>,
}

/// A domain's shared objects, as the kernel names them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainIds {
    /// (mnt_id, ino) of the UMEM memfd and of the region memfd, as fdinfo
    /// shows them (the memfds' internal mount, and their inodes).
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
    fn path(dir: &Path, chain: &str) -> PathBuf {
        dir.join(format!("{chain}.json"))
    }

    /// Writes the state into `dir` atomically (a new file renamed over the
    /// old one).
    pub fn save(&self, dir: &Path) -> Result<()> {
        secure_dir(dir)?;
        let path = Self::path(dir, &self.plan.name);
        let tmp = path.with_extension("json.new");
        let mut f = open_private(&tmp, false)?;
        f.write_all(&serde_json::to_vec_pretty(self)?)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))?;
        Ok(())
    }

    /// A state file's contents, checked as adoption relies on them: this
    /// ferryd's version, a plan whose every index names something in it,
    /// and one entry per NF (record, id, uid, key), port (pin) and domain
    /// (identities) of the plan.
    pub fn from_bytes(bytes: &[u8]) -> Result<ChainState> {
        let state: ChainState = serde_json::from_slice(bytes)?;
        if state.version != STATE_VERSION {
            bail!("state version {} (this ferryd reads {STATE_VERSION})", state.version);
        }
        state.plan.check_indices().map_err(|e| anyhow!("its plan: {e}"))?;
        let (nfs, ports, domains) = (state.plan.nfs.len(), state.plan.ports.len(), state.plan.domains.len());
        let lists = [
            ("nfs", state.nfs.len(), nfs, "NFs"),
            ("nf_ids", state.nf_ids.len(), nfs, "NFs"),
            ("creds", state.creds.len(), nfs, "NFs"),
            ("keys", state.keys.len(), nfs, "NFs"),
            ("pins", state.pins.len(), ports, "ports"),
            ("domains", state.domains.len(), domains, "domains"),
        ];
        if let Some((field, len, want, what)) = lists.into_iter().find(|l| l.1 != l.2) {
            bail!("{field}: {len} entries for the plan's {want} {what}");
        }
        Ok(state)
    }

    /// Every state file in `dir`, each parsed or with the error that names
    /// it; none from a directory others could have written.
    pub fn load_all(dir: &Path) -> Result<Vec<(PathBuf, Result<ChainState>)>> {
        if !dir.exists() {
            return Ok(Vec::new());
        }
        secure_dir(dir)?;
        let Ok(dir) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
        let mut files: Vec<PathBuf> =
            dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
        files.sort();
        Ok(files
            .into_iter()
            .map(|p| {
                let state = std::fs::read(&p)
                    .map_err(anyhow::Error::from)
                    .and_then(|b| ChainState::from_bytes(&b))
                    .with_context(|| format!("state file {}", p.display()));
                (p, state)
            })
            .collect())
    }

    /// Removes chain `chain`'s state file, and its NFs' logs.
    pub fn remove(dir: &Path, chain: &str) {
        let _ = std::fs::remove_file(Self::path(dir, chain));
        if let Ok(files) = std::fs::read_dir(dir) {
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.starts_with(&format!("{chain}.")) && (name.ends_with(".log") || name.ends_with(".log.old")) {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
}

/// A kept part and its chain's name.
pub type NamedPart = (String, PartRecord);

/// A part of a chain over hosts this ferryd deployed: what it was given,
/// kept so that it deploys the part again when it starts after a crash
/// (the other hosts' forwarders find this host again).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartRecord {
    pub text: String,
    pub origin: String,
    pub macs: Vec<(String, String)>,
}

impl PartRecord {
    fn path(dir: &Path, chain: &str) -> PathBuf {
        dir.join("parts").join(format!("{chain}.json"))
    }

    /// Writes the record atomically (a new file renamed over the old one).
    pub fn save(&self, dir: &Path, chain: &str) -> Result<()> {
        secure_dir(dir)?;
        secure_dir(&dir.join("parts"))?;
        let path = Self::path(dir, chain);
        let tmp = path.with_extension("json.new");
        let mut f = open_private(&tmp, false)?;
        f.write_all(&serde_json::to_vec(self)?)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))?;
        Ok(())
    }

    /// Every part in `dir` (none from a directory others could write); a
    /// file that does not parse is moved aside (`.json.bad`), named in the
    /// error list, and the others still come back.
    pub fn load_all(dir: &Path) -> Result<(Vec<NamedPart>, Vec<String>)> {
        let parts = dir.join("parts");
        if !parts.exists() {
            return Ok((Vec::new(), Vec::new()));
        }
        secure_dir(dir)?;
        secure_dir(&parts)?;
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for e in std::fs::read_dir(&parts)?.flatten() {
            let p = e.path();
            if p.extension().map_or(true, |x| x != "json") {
                continue;
            }
            let Some(chain) = p.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
            let record = std::fs::read(&p).map_err(anyhow::Error::from).and_then(|b| Ok(serde_json::from_slice(&b)?));
            match record {
                Ok(r) => out.push((chain, r)),
                Err(e) => {
                    bad.push(format!("{}: {e:#}; moved aside", p.display()));
                    let _ = std::fs::rename(&p, p.with_extension("json.bad"));
                }
            }
        }
        Ok((out, bad))
    }

    pub fn remove(dir: &Path, chain: &str) {
        let _ = std::fs::remove_file(Self::path(dir, chain));
    }
}

/// Start time of process `pid` in clock ticks after boot (field 22 of
/// /proc/PID/stat).
pub fn start_time(pid: u32) -> Option<u64> {
    // The start time is the 22nd field of the line.
    spawn::stat_fields(pid)?.get(19)?.parse().ok()
}

/// A pidfd of the process recorded as `(pid, start)`, if it still runs.
/// The pidfd is opened first and checked after reading the start time, so
/// it names that very process: not one that took its pid meanwhile.
pub fn find_process((pid, start): (u32, u64)) -> Option<Arc<OwnedFd>> {
    let fd = spawn::pidfd_open(pid).ok()?;
    (start_time(pid) == Some(start) && !spawn::pidfd_exited(&fd, 0)).then(|| Arc::new(fd))
}

/// Field `key` of fd `fd`'s fdinfo in process `pid`, as a number.
fn fdinfo(pid: u32, fd: RawFd, key: &str) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    info.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?.trim().parse().ok()
}

/// (mnt_id, ino) of fd `fd` of process `pid`, from fdinfo: read without
/// touching the file, which a hostile process could make hang (FUSE).
pub fn file_id(pid: u32, fd: RawFd) -> Option<(u64, u64)> {
    Some((fdinfo(pid, fd, "mnt_id")?, fdinfo(pid, fd, "ino")?))
}

/// The kernel's id of an eventfd (its `eventfd-id` in fdinfo), unique
/// among the eventfds that exist.
pub fn eventfd_id(pid: u32, fd: RawFd) -> Option<u64> {
    fdinfo(pid, fd, "eventfd-id")
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
    let file = |fd: BorrowedFd<'_>| {
        file_id(me, fd.as_raw_fd()).ok_or_else(|| anyhow!("no mnt_id and ino in fdinfo (fd {})", fd.as_raw_fd()))
    };
    Ok(DomainIds {
        umem: file(umem)?,
        region: file(region)?,
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
            // Known before the fd is taken: only the domain's own memfds
            // are ever touched.
            let Some(id) = file_id(pid, fd).filter(|&id| id == ids.umem || id == ids.region) else { continue };
            let slot = if id == ids.umem { &mut umem } else { &mut region };
            if slot.is_none() {
                let got = getfd(pidfd, fd)?;
                // Checked again on our copy: the fd may have changed since.
                if file_id(std::process::id(), got.as_raw_fd()) == Some(id) {
                    *slot = Some(got);
                }
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

    /// A state file a ferryd wrote (the demo chain's), as JSON to edit.
    fn demo_state() -> serde_json::Value {
        serde_json::from_str(include_str!("../../../../fuzz/corpus/state-file/seed-demo")).unwrap()
    }

    fn refusal(state: &serde_json::Value) -> String {
        let e = ChainState::from_bytes(&serde_json::to_vec(state).unwrap()).expect_err("refused");
        format!("{e:#}")
    }

    /// A state file is adopted only if every list matches its plan and
    /// every index in the plan names something (otherwise adoption would
    /// index past the end).
    #[test]
    fn a_state_file_whose_lists_or_indices_do_not_match_its_plan_is_refused() {
        let state = demo_state();
        ChainState::from_bytes(&serde_json::to_vec(&state).unwrap()).expect("the demo's state");
        for list in ["nfs", "nf_ids", "creds", "keys", "pins", "domains"] {
            let mut s = state.clone();
            s[list].as_array_mut().unwrap().pop();
            assert!(refusal(&s).starts_with(&format!("{list}: ")), "{list}: {}", refusal(&s));
        }
        let mut s = state.clone();
        s["plan"]["nfs"][0]["domain"] = 7.into();
        assert!(refusal(&s).contains("its domain: index 7"), "{}", refusal(&s));
        let mut s = state.clone();
        s["plan"]["nfs"][0]["threads"][0]["ring"] = 999.into();
        assert!(refusal(&s).contains("ring 999"), "{}", refusal(&s));
        let mut s = state;
        s["version"] = (STATE_VERSION - 1).into();
        assert!(refusal(&s).contains("state version"), "{}", refusal(&s));
    }

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
        assert_eq!(file_id(me, h.umem.as_raw_fd()), Some(ids.umem));
        assert_eq!(file_id(me, h.region.as_raw_fd()), Some(ids.region));
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

    /// A scratch state directory of root's (mode 0700), removed on drop.
    struct StateDir(PathBuf);

    impl StateDir {
        fn new(tag: &str) -> StateDir {
            let dir = std::env::temp_dir().join(format!("ferryd-state-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            StateDir(dir)
        }
    }

    impl Drop for StateDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn part(text: &str) -> PartRecord {
        PartRecord { text: text.into(), origin: "c.yaml".into(), macs: vec![("b".into(), "02:00:00:00:00:02".into())] }
    }

    #[test]
    fn a_saved_part_comes_back_and_a_corrupt_one_is_named_and_set_aside() {
        let dir = StateDir::new("parts");
        part("name: c1").save(&dir.0, "c1").unwrap();
        part("name: c2").save(&dir.0, "c2").unwrap();
        std::fs::write(dir.0.join("parts/c2.json"), b"{ not json").unwrap();
        let (mut parts, bad) = PartRecord::load_all(&dir.0).unwrap();
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(parts.len(), 1);
        assert_eq!((parts[0].0.as_str(), parts[0].1.text.as_str()), ("c1", "name: c1"));
        assert_eq!(parts[0].1.macs, part("").macs);
        assert!(bad.len() == 1 && bad[0].contains("parts/c2.json") && bad[0].ends_with("moved aside"), "{bad:?}");
        assert!(dir.0.join("parts/c2.json.bad").exists(), "the corrupt file is kept, aside");
        PartRecord::remove(&dir.0, "c1");
        assert!(PartRecord::load_all(&dir.0).unwrap().0.is_empty());
    }

    #[test]
    fn state_files_are_roots_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = StateDir::new("modes");
        part("x").save(&dir.0, "c").unwrap();
        for p in [dir.0.clone(), dir.0.join("parts")] {
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o700, "{}", p.display());
        }
        let file = std::fs::metadata(dir.0.join("parts/c.json")).unwrap();
        assert_eq!(file.permissions().mode() & 0o777, 0o600);
        // A directory others could write is refused, not read.
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(PartRecord::load_all(&dir.0).is_err());
    }
}
