//! The uids NFs run as. Each trust domain runs as its own uid, so the OS
//! keeps domains apart even where Ferry's own checks would not: a process
//! of one domain cannot signal, trace or open the /proc entries of
//! another's NFs. A domain that names no user gets a uid ferryd allocates
//! from a range no account uses, as systemd's DynamicUser does; the uid
//! is leased with a lock file, so concurrent ferryds never hand one uid to
//! two domains, and a killed ferryd's leases end with it.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ferry_chain::plan::ChainPlan;
pub use ferry_sys::lookup_user;

/// Where leases live: root's alone.
pub const LEASE_DIR: &str = "/run/ferry/uids";

/// Allocated uids: systemd leaves 0x70000000–0x7FFEFFFF unused (above
/// container ranges, below its foreign-uid range); Ferry takes 65536 of it.
pub const DEFAULT_RANGE: UidRange = UidRange { first: 0x7F00_0000, count: 0x1_0000 };

#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("no such user {name:?} (NF {nf:?})")]
    NoSuchUser { name: String, nf: String },
    #[error("uid range {first}+{count}: every uid is in use by an account, a process or another ferryd")]
    RangeExhausted { first: u32, count: u32 },
    #[error("uid lease {path}: {source}")]
    Lease { path: PathBuf, source: std::io::Error },
    #[error("uid {uid}: leased to another ferryd")]
    Taken { uid: u32 },
    #[error("bad uid range {given:?}: expected FIRST-LAST, FIRST > 0 and FIRST <= LAST < 2^31")]
    BadRange { given: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub count: u32,
}

impl std::str::FromStr for UidRange {
    type Err = UserError;

    /// `FIRST-LAST`, inclusive.
    fn from_str(s: &str) -> Result<UidRange, UserError> {
        let bad = || UserError::BadRange { given: s.to_string() };
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let (first, last): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        if first == 0 || last < first || last >= 1 << 31 {
            return Err(bad());
        }
        Ok(UidRange { first, count: last - first + 1 })
    }
}

/// What an NF runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// The user's name, or `uid N (allocated)`.
    pub shown: String,
}

/// A uid leased to this ferryd until it exits (the lock file's lock).
pub struct Lease {
    pub uid: u32,
    _lock: File,
}

/// The credentials of every NF of `plan`, and the leases of the uids
/// allocated for domains that name no user.
pub fn resolve(plan: &ChainPlan, range: UidRange) -> Result<(Vec<Creds>, Vec<Lease>), UserError> {
    // One uid per group (a tenant, else a domain), leased when a group's
    // first NF without a named user needs it.
    let mut leases: std::collections::BTreeMap<&str, Lease> = std::collections::BTreeMap::new();
    let mut creds = Vec::new();
    for nf in &plan.nfs {
        creds.push(match &nf.user {
            Some(name) => {
                let (uid, gid) = lookup_user(name)
                    .ok_or_else(|| UserError::NoSuchUser { name: name.clone(), nf: nf.name.clone() })?;
                Creds { uid, gid, shown: name.clone() }
            }
            None => {
                let group = plan.domains[nf.domain].uid_group.as_str();
                if !leases.contains_key(group) {
                    leases.insert(group, lease(range, Path::new(LEASE_DIR))?);
                }
                let uid = leases[group].uid;
                Creds { uid, gid: uid, shown: format!("uid {uid} (allocated to {group})") }
            }
        });
    }
    Ok((creds, leases.into_values().collect()))
}

/// The first uid of `range` that no account or group names, no process
/// runs as, and no other ferryd holds; leased through a lock file in `dir`.
pub fn lease(range: UidRange, dir: &Path) -> Result<Lease, UserError> {
    let lease_err = |path: &Path, source| UserError::Lease { path: path.to_path_buf(), source };
    ferry_sys::fs::create_private_dir(dir).map_err(|e| lease_err(dir, e))?;
    let running = process_uids();
    for uid in range.first..range.first + range.count {
        // SAFETY: getpwuid/getgrgid return NULL or static storage, only
        // compared with NULL here.
        let named = unsafe { !libc::getpwuid(uid).is_null() || !libc::getgrgid(uid).is_null() };
        if named || running.contains(&uid) {
            continue;
        }
        let path = dir.join(uid.to_string());
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| lease_err(&path, e))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Lease { uid, _lock: file });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(lease_err(&path, e));
        }
    }
    Err(UserError::RangeExhausted { first: range.first, count: range.count })
}

/// Leases `uid` again, for a chain a persistent ferryd adopts: its NFs
/// run as that uid already, so it cannot be allocated afresh.
pub fn lease_again(uid: u32, dir: &Path) -> Result<Lease, UserError> {
    let path = dir.join(uid.to_string());
    let lease_err = |e| UserError::Lease { path: path.clone(), source: e };
    ferry_sys::fs::create_private_dir(dir).map_err(&lease_err)?;
    let file =
        OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path).map_err(&lease_err)?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.kind() == std::io::ErrorKind::WouldBlock { UserError::Taken { uid } } else { lease_err(e) });
    }
    Ok(Lease { uid, _lock: file })
}

/// The real uids of every process now running.
fn process_uids() -> HashSet<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return HashSet::new() };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|s| s.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_bad_ones_are_named() {
        assert_eq!("100-199".parse::<UidRange>().unwrap(), UidRange { first: 100, count: 100 });
        for bad in ["", "5", "0-9", "9-5", "a-b", "1-4294967295"] {
            let e = bad.parse::<UidRange>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    /// Two leases of one range get different uids while both are held;
    /// once one is dropped its uid is free again.
    #[test]
    fn leases_exclude_each_other_until_dropped() {
        let dir = std::env::temp_dir().join(format!("ferry-uid-leases-{}", std::process::id()));
        let range = DEFAULT_RANGE;
        let a = lease(range, &dir).expect("first lease");
        let b = lease(range, &dir).expect("second lease");
        assert_ne!(a.uid, b.uid);
        let uid = a.uid;
        drop(a);
        let c = lease(range, &dir).expect("third lease");
        assert_eq!(c.uid, uid, "the dropped lease's uid comes back");
        drop((b, c));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_range_with_only_used_uids_is_exhausted() {
        // uid 0 is root's: named by an account.
        let e = lease(UidRange { first: 0, count: 1 }, &std::env::temp_dir()).err().expect("exhausted");
        assert!(matches!(e, UserError::RangeExhausted { .. }), "{e}");
    }
}
