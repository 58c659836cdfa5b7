//! Running iproute2's `ip` in a port's namespace, for the devices ferryd
//! makes itself (kernel hops, loop devices).

use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

/// `ip [-n NS] ARGS...`; a failure carries the command and ip's stderr.
pub fn ip(ns: Option<&str>, args: &[&str]) -> Result<()> {
    ip_output(ns, args).map(drop)
}

/// As [`ip`], returning what it printed.
pub fn ip_output(ns: Option<&str>, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = ns {
        cmd.args(["-n", ns]);
    }
    let out = cmd.args(args).output().context("running ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The word after `key` in `ip -d -o link show dev DEV` of namespace
/// `ns` (`mtu`, `link/ether`, `numrxqueues`).
pub fn link_word(ns: Option<&str>, dev: &str, key: &str) -> Result<String> {
    let text = ip_output(ns, &["-d", "-o", "link", "show", "dev", dev])?;
    let mut words = text.split_whitespace();
    words.by_ref().find(|w| *w == key);
    words.next().map(str::to_string).ok_or_else(|| anyhow!("no {key} in {text:?}"))
}

/// As [`link_word`], a number (`mtu`, `numrxqueues`).
pub fn link_number(ns: Option<&str>, dev: &str, key: &str) -> Result<u32> {
    let word = link_word(ns, dev, key)?;
    word.parse().map_err(|_| anyhow!("{dev}: {key} {word:?}"))
}

/// The ifindex of device `dev` as namespace `ns` sees it.
pub fn ifindex_in(ns: Option<&str>, dev: &str) -> Result<u32> {
    let name = dev.to_string();
    ferry_sys::in_netns(ns, move || ferry_xsk::ifindex(&name))?
        .ok_or_else(|| anyhow!("no device {dev:?} in namespace {}", ns.unwrap_or("(root)")))
}

/// Writes `value` to the sysctl `/proc/sys/{key}` as namespace `ns` sees it.
pub fn sysctl(ns: Option<&str>, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    ferry_sys::in_netns(ns, || std::fs::write(&path, value))?.with_context(|| format!("writing {value} to {path}"))
}
