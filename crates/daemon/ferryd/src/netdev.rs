//! The devices ferryd makes and reads (loop devices, kernel hops, the
//! ports' devices), in a port's network namespace, over rtnetlink
//! ([`ferry_sys::link`]) and procfs.

use std::io;

use anyhow::{anyhow, Context, Result};
use ferry_sys::link::{self, Link};

/// Runs device operation `f` in network namespace `ns` (`None`: ferryd's
/// own); a netlink socket acts in the namespace it was opened in.
pub fn in_ns<T: Send>(ns: Option<&str>, f: impl FnOnce() -> io::Result<T> + Send) -> Result<T> {
    let what = ns.unwrap_or("(root)");
    ferry_sys::in_netns(ns, f).with_context(|| format!("entering namespace {what}"))?.map_err(anyhow::Error::from)
}

/// Device `dev` as namespace `ns` sees it.
pub fn link_in(ns: Option<&str>, dev: &str) -> Result<Link> {
    in_ns(ns, || link::link(dev))?.ok_or_else(|| anyhow!("no device {dev:?} in namespace {}", ns.unwrap_or("(root)")))
}

/// The ifindex of device `dev` as namespace `ns` sees it.
pub fn ifindex_in(ns: Option<&str>, dev: &str) -> Result<u32> {
    link_in(ns, dev).map(|l| l.index)
}

/// Writes `value` to the sysctl `/proc/sys/{key}` as namespace `ns` sees it.
pub fn sysctl(ns: Option<&str>, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    ferry_sys::in_netns(ns, || std::fs::write(&path, value))?.with_context(|| format!("writing {value} to {path}"))
}
