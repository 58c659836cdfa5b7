//! An IPS's alerts per rule, when the NF runs as a process: a
//! [`UserTable`] from (thread, gid, sid) to the alerts that thread raised
//! for the rule, which ferryd sums over threads for its metrics.

use crate::user_table::{Layout, UserTable};

/// Its name in a welcome's map fds.
pub const MAP_NAME: &str = "ferry_nf_alerts";

/// One thread's alerts of one rule.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlertKey {
    /// The NF thread's index.
    pub thread: u32,
    pub gid: u32,
    pub sid: u32,
}

// SAFETY: three u32s, no padding.
unsafe impl aya::Pod for AlertKey {}

pub struct Alerts;

impl Layout for Alerts {
    const NAME: &'static str = MAP_NAME;
    type Key = AlertKey;
    type Value = u64;
}

pub type AlertTable = UserTable<Alerts>;
