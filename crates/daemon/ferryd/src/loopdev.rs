//! The loop device in front of a port with a post-server part: a veth
//! pair in the port's namespace. A frame an AF_XDP socket transmits goes
//! straight to its device's driver, past XDP and TC, so there is no hook
//! on the port itself for NFs after the last process. The process sends
//! into one end instead; the other end receives the frame, its XDP
//! program (the stage pipeline) runs the post-server NFs and redirects
//! what survives out of the port. The price: one more veth crossing, in
//! which the kernel copies the frame once more.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};

use ferry_sys::link;

use crate::netdev::{ifindex_in, in_ns, link_in, sysctl};

pub struct LoopDevice {
    ns: Option<String>,
    /// The end the server NF's sockets send into.
    pub send_end: String,
    pub send_ifindex: u32,
    /// The end whose receive side runs the pipeline.
    pub receive_end: String,
    pub receive_ifindex: u32,
}

/// Pairs this ferryd made so far: each gets the next number.
static MADE: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "fyl";

/// Names for the two ends (at most 15 bytes): `fyl`, this ferryd's pid
/// (6 hex digits: pids stay below 2^22) and its pair number (5), then `s`
/// or `r`. Unique to this ferryd, and they say whose they are, so a
/// ferryd can sweep the pairs of one that was killed before it could
/// delete them ([`sweep_dead`]).
fn names() -> (String, String) {
    let n = MADE.fetch_add(1, Ordering::Relaxed) & 0xf_ffff;
    let tag = format!("{PREFIX}{:06x}{n:05x}", std::process::id());
    (format!("{tag}s"), format!("{tag}r"))
}

/// The pid in a pair's sending end's name, if `name` is one.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?.strip_suffix('s')?;
    if rest.len() != 11 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(&rest[..6], 16).ok()
}

/// Whether `pid` is a running ferryd.
fn ferryd_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "ferryd")
}

/// Deletes the pairs in `ns` whose ferryd is gone (killed before it could
/// clean up); deleting one end deletes both. This takes ferryds that share
/// a network namespace to share a pid namespace too (one ferryd per host,
/// as the DaemonSet runs it), and a ferryd to run as `ferryd`: another's
/// pid would look dead.
fn sweep_dead(ns: Option<&str>) -> Result<()> {
    in_ns(ns, || {
        for device in link::links()? {
            if owner(&device.name).is_some_and(|pid| !ferryd_alive(pid)) {
                let _ = link::delete(&device.name);
            }
        }
        Ok(())
    })
}

/// The largest MTU a loop device gets. It carries only frames an NF built
/// in one UMEM frame (at most 4096 - 256 bytes), so a jumbo port needs no
/// jumbo loop; and veth takes an XDP program without multi-buffer support
/// only up to about 3.5 kB (a page, less XDP headroom and the skb's shared
/// info), so a loop device copying a 9000-byte port MTU could not attach.
const LOOP_MTU_MAX: u32 = 3500;

impl LoopDevice {
    /// Creates the pair for port `port`, whose device is `dev` in `ns`, with `queues` queues (thread i sends on queue i) and
    /// the port's MTU up to [`LOOP_MTU_MAX`], so every frame the NF may send fits.
    pub fn create(ns: Option<&str>, port: &str, dev: &str, queues: u32) -> Result<LoopDevice> {
        let (send_end, receive_end) = names();
        let mtu = link_in(ns, dev)?.mtu.min(LOOP_MTU_MAX);
        sweep_dead(ns).context("sweeping the devices of ferryds that are gone")?;
        // A device of this very name can only be left by a killed ferryd
        // whose pid this one now has.
        let _ = in_ns(ns, || link::delete(&send_end));
        // Both ends: the port's MTU, and a queue per sending thread.
        in_ns(ns, || link::add_veth(&send_end, &receive_end, Some(queues), Some(mtu)))
            .with_context(|| format!("creating the loop device in front of port {port}"))?;
        let mut dev =
            LoopDevice { ns: ns.map(str::to_string), send_end, send_ifindex: 0, receive_end, receive_ifindex: 0 };
        let ipv6 = std::path::Path::new("/proc/sys/net/ipv6").exists();
        for end in [&dev.send_end, &dev.receive_end] {
            // Nothing but the NF's frames may cross it: no IPv6 of the
            // kernel's own (router solicitations, MLD) leaving by the port.
            // (A kernel without IPv6 sends none.)
            if ipv6 {
                sysctl(ns, &format!("net/ipv6/conf/{end}/disable_ipv6"), "1")?;
            }
            in_ns(ns, || link::set_up(end))?;
        }
        dev.send_ifindex = ifindex_in(ns, &dev.send_end)?;
        dev.receive_ifindex = ifindex_in(ns, &dev.receive_end)?;
        Ok(dev)
    }
}

impl Drop for LoopDevice {
    /// Deleting one end deletes both, and the XDP program on it.
    fn drop(&mut self) {
        let _ = in_ns(self.ns.as_deref(), || link::delete(&self.send_end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_whose_they_are() {
        let (s, r) = names();
        assert!(s.len() <= 15 && r.len() <= 15, "{s} {r}");
        assert_eq!(owner(&s), Some(std::process::id()));
        assert_eq!(owner(&r), None, "one end is enough");
        assert_ne!(names().0, s, "each pair its own name");
        for other in ["fyl123", "d0", "fylzzzzzz00000s", "fyl00000100000"] {
            assert_eq!(owner(other), None, "{other}");
        }
        assert_eq!(owner("fyl0004d200007s"), Some(0x4d2));
    }
}
