//! On-disk bookkeeping under [`STATE_DIR`]:
//!
//! * `by-ns/<real-ns>.pid` — one marker per namespace we create, written
//!   *before* the namespace exists, naming the creating process (pid and
//!   start time, so pid reuse is detected). [`sweep_stale`] uses it to tell
//!   leaked namespaces from ones in use.
//! * `<spec-name>.json` — for detached testbeds only (`ferry testbed up`
//!   exits right away), the real names so a later `down` can find them.

use crate::error::TestbedError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where state files and namespace markers live (tmpfs, gone at reboot
/// together with the namespaces themselves).
pub const STATE_DIR: &str = "/run/ferry/testbeds";
/// Where `ip netns` keeps its bind mounts, one file per named namespace.
pub(crate) const NETNS_DIR: &str = "/run/netns";

pub(crate) fn marker_dir() -> PathBuf {
    Path::new(STATE_DIR).join("by-ns")
}

pub(crate) fn state_file(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

pub(crate) fn ns_exists(real: &str) -> bool {
    Path::new(NETNS_DIR).join(real).exists()
}

/// Real names look like `fy1a2b3c-client`; only those are ever swept.
pub(crate) fn is_ours(real: &str) -> bool {
    let b = real.as_bytes();
    b.len() > 9 && real.starts_with("fy") && b[2..8].iter().all(u8::is_ascii_hexdigit) && b[8] == b'-'
}

/// What a marker says about the namespace's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    pub pid: u32,
    pub start_time: u64,
    /// Name of the detached testbed's state file, if detached.
    pub detached: Option<String>,
}

impl Marker {
    /// A marker naming the current process.
    pub fn current(detached: Option<String>) -> Marker {
        let pid = std::process::id();
        Marker { pid, start_time: start_time(pid).unwrap_or(0), detached }
    }

    fn render(&self) -> String {
        match &self.detached {
            Some(n) => format!("{} {} detached {n}\n", self.pid, self.start_time),
            None => format!("{} {}\n", self.pid, self.start_time),
        }
    }

    fn parse(s: &str) -> Option<Marker> {
        let mut it = s.split_whitespace();
        let pid = it.next()?.parse().ok()?;
        let start_time = it.next()?.parse().ok()?;
        let detached = match it.next() {
            Some("detached") => Some(it.next()?.to_string()),
            Some(_) => return None,
            None => None,
        };
        Some(Marker { pid, start_time, detached })
    }

    /// True while the process that wrote the marker is still running.
    fn owner_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }
}

/// Process start time in clock ticks since boot (field 22 of /proc/PID/stat).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

pub(crate) fn write_marker(real: &str, marker: &Marker) -> Result<(), TestbedError> {
    let dir = marker_dir();
    std::fs::create_dir_all(&dir).map_err(|e| TestbedError::io(&dir, e))?;
    let path = dir.join(format!("{real}.pid"));
    std::fs::write(&path, marker.render()).map_err(|e| TestbedError::io(&path, e))
}

pub(crate) fn read_marker(real: &str) -> Option<Marker> {
    let text = std::fs::read_to_string(marker_dir().join(format!("{real}.pid"))).ok()?;
    Marker::parse(&text)
}

pub(crate) fn remove_marker(real: &str) {
    let _ = std::fs::remove_file(marker_dir().join(format!("{real}.pid")));
}

/// The JSON state of a detached testbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateFile {
    pub name: String,
    pub instance: String,
    pub origin: String,
    /// Logical name → real name.
    pub namespaces: BTreeMap<String, String>,
}

pub(crate) fn read_state(name: &str) -> Result<Option<StateFile>, TestbedError> {
    let path = state_file(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TestbedError::io(&path, e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| TestbedError::State { path, message: e.to_string() })
}

/// Creates the state file exclusively (`O_EXCL`), so two concurrent
/// `up_detached` of the same spec cannot both succeed.
pub(crate) fn create_state(state: &StateFile) -> Result<bool, TestbedError> {
    use std::io::Write;
    let path = state_file(&state.name);
    std::fs::create_dir_all(STATE_DIR).map_err(|e| TestbedError::io(STATE_DIR, e))?;
    let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(TestbedError::io(&path, e)),
    };
    let json = serde_json::to_string_pretty(state).expect("state serializes");
    f.write_all(json.as_bytes()).and_then(|_| f.write_all(b"\n")).map_err(|e| TestbedError::io(&path, e))?;
    Ok(true)
}

pub(crate) fn remove_state(name: &str) {
    let _ = std::fs::remove_file(state_file(name));
}

/// Deletes one namespace (if it exists) and its marker. Losing a race with
/// another deleter (reaper, sweep) counts as success.
pub(crate) fn delete_ns(real: &str) -> Result<(), TestbedError> {
    if ns_exists(real) {
        if let Err(e) = crate::cmd::ip(&["netns", "del", real]) {
            if ns_exists(real) {
                return Err(e);
            }
        }
    }
    remove_marker(real);
    Ok(())
}

/// Deletes leaked testbed namespaces: those named `fy??????-*` whose marker
/// is missing, or whose creating process is dead and which do not belong to a
/// detached testbed that still has its state file. Also removes markers left
/// without a namespace. Returns the namespaces deleted.
///
/// Meant for `make test` to call before and after the test suite; it never
/// touches a testbed whose owner is alive.
pub fn sweep_stale() -> Result<Vec<String>, TestbedError> {
    let mut deleted = Vec::new();
    let mut first_err = None;
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(rd) => rd.filter_map(|e| e.ok()).collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(TestbedError::io(NETNS_DIR, e)),
    };
    for entry in entries {
        let real = entry.file_name().to_string_lossy().into_owned();
        if !is_ours(&real) || !is_stale(&real) {
            continue;
        }
        tracing::info!(namespace = %real, "deleting stale testbed namespace");
        match delete_ns(&real) {
            Ok(()) => deleted.push(real),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    // Markers whose namespace is gone and whose owner is dead.
    if let Ok(rd) = std::fs::read_dir(marker_dir()) {
        for entry in rd.filter_map(|e| e.ok()) {
            let file = entry.file_name().to_string_lossy().into_owned();
            if let Some(real) = file.strip_suffix(".pid") {
                if !ns_exists(real) && is_stale(real) {
                    remove_marker(real);
                }
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(deleted),
    }
}

fn is_stale(real: &str) -> bool {
    let Some(marker) = read_marker(real) else {
        // Markers are written before namespaces, so a missing one means the
        // owner crashed in between or the marker directory was wiped.
        return true;
    };
    if marker.owner_alive() {
        return false;
    }
    match &marker.detached {
        Some(name) => !matches!(
            read_state(name),
            Ok(Some(s)) if s.namespaces.values().any(|r| r == real)
        ),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trip() {
        let m = Marker::current(None);
        assert_eq!(Marker::parse(&m.render()), Some(m.clone()));
        assert!(m.owner_alive());
        let d = Marker::current(Some("two-hosts".into()));
        assert_eq!(Marker::parse(&d.render()), Some(d));
        assert_eq!(Marker::parse("garbage"), None);
    }

    #[test]
    fn dead_owner_detected() {
        let m = Marker { pid: std::process::id(), start_time: 1, detached: None };
        assert!(!m.owner_alive(), "start time mismatch means pid reuse");
    }

    #[test]
    fn ours_pattern() {
        assert!(is_ours("fy0a1b2c-client"));
        assert!(!is_ours("fy0a1b2c-"));
        assert!(!is_ours("fyzzzzzz-client"));
        assert!(!is_ours("client"));
        assert!(!is_ours("fy0a1b2cd-client"));
    }
}
