//! The loop device in front of a port with a post-server part: a veth
//! pair in the port's namespace. A frame an AF_XDP socket transmits goes
//! straight to its device's driver, past XDP and TC, so there is no hook
//! on the port itself for NFs after the last process. The process sends
//! into one end instead; the other end receives the frame, its XDP
//! program (the stage pipeline) runs the post-server NFs and redirects
//! what survives out of the port. The price: one more veth crossing, in
//! which the kernel copies the frame once more.

use std::hash::{DefaultHasher, Hash, Hasher};

use anyhow::{anyhow, Context, Result};

use crate::iproute::{ifindex_in, ip, ip_output, sysctl};

pub struct LoopDevice {
    ns: Option<String>,
    /// The end the server NF's sockets send into.
    pub send_end: String,
    pub send_ifindex: u32,
    /// The end whose receive side runs the pipeline.
    pub receive_end: String,
    pub receive_ifindex: u32,
}

/// Names for the two ends (at most 15 bytes): unique to this ferryd, its
/// chain and port, so ferryd instances sharing a namespace never clash.
fn names(chain: u32, port: &str) -> (String, String) {
    let mut h = DefaultHasher::new();
    (std::process::id(), chain, port).hash(&mut h);
    let tag = h.finish() as u32;
    (format!("fyl{tag:08x}s"), format!("fyl{tag:08x}r"))
}

/// The MTU of `dev` in namespace `ns`.
fn mtu(ns: Option<&str>, dev: &str) -> Result<u32> {
    let text = ip_output(ns, &["-o", "link", "show", "dev", dev])?;
    let mut words = text.split_whitespace();
    words.by_ref().find(|w| *w == "mtu");
    words.next().and_then(|m| m.parse().ok()).ok_or_else(|| anyhow!("no mtu in {text:?}"))
}

impl LoopDevice {
    /// Creates the pair for port `port` of chain `chain`, whose device is
    /// `dev` in `ns`, with `queues` queues (thread i sends on queue i) and
    /// the port's MTU, so every frame the NF may send fits.
    pub fn create(ns: Option<&str>, chain: u32, port: &str, dev: &str, queues: u32) -> Result<LoopDevice> {
        let (send_end, receive_end) = names(chain, port);
        let (q, mtu) = (queues.to_string(), mtu(ns, dev)?.to_string());
        // Only a ferryd that was killed before it could clean up can have
        // left a device of this name: one whose pid this ferryd now has.
        let _ = ip(ns, &["link", "del", "dev", &send_end]);
        // Both ends: the port's MTU, and a queue per sending thread.
        let end = |name| [name, "mtu", &mtu, "numtxqueues", &q, "numrxqueues", &q];
        let (send, receive) = (end(&send_end), end(&receive_end));
        ip(ns, &[&["link", "add"][..], &send, &["type", "veth", "peer", "name"], &receive].concat())
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
            ip(ns, &["link", "set", "dev", end, "up"])?;
        }
        dev.send_ifindex = ifindex_in(ns, &dev.send_end)?;
        dev.receive_ifindex = ifindex_in(ns, &dev.receive_end)?;
        Ok(dev)
    }
}

impl Drop for LoopDevice {
    /// Deleting one end deletes both, and the XDP program on it.
    fn drop(&mut self) {
        let _ = ip(self.ns.as_deref(), &["link", "del", "dev", &self.send_end]);
    }
}
