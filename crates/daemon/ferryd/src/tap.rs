//! Kernel hops: TAP devices ferryd creates so that NFs can hand frames to
//! the kernel stack (a write() per frame; the kernel receives it as if it
//! had arrived on the TAP device). The device lives as long as ferryd's fd.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use ferry_chain::spec::KernelSpec;
use ferry_xsk::tun::open_tap;

use crate::iproute::{ip, sysctl};

pub struct Tap {
    pub fd: OwnedFd,
}

impl Tap {
    pub fn create(spec: &KernelSpec) -> Result<Tap> {
        let ns = spec.netns.as_deref();
        let dev = spec.dev.clone();
        // The device is created in the namespace /dev/net/tun was opened in.
        let fd =
            ferry_sys::in_netns(ns, move || open_tap(&dev))?.with_context(|| format!("creating TAP {}", spec.dev))?;
        for a in &spec.addrs {
            ip(ns, &["addr", "add", a, "dev", &spec.dev])?;
        }
        if let Some(mac) = &spec.mac {
            ip(ns, &["link", "set", "dev", &spec.dev, "address", &mac.to_string()])?;
        }
        // What an NF hands the stack may carry this host's own address as
        // its source (a NAT's public address) and comes from no route's
        // device: accept both, as if the NF were part of the host.
        sysctl(ns, &format!("net/ipv4/conf/{}/accept_local", spec.dev), "1")?;
        sysctl(ns, &format!("net/ipv4/conf/{}/rp_filter", spec.dev), "0")?;
        ip(ns, &["link", "set", "dev", &spec.dev, "up"])?;
        Ok(Tap { fd })
    }
}
