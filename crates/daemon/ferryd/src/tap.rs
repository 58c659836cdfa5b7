//! Kernel hops: TAP devices ferryd creates so that NFs can hand frames to
//! the kernel stack (a write() per frame; the kernel receives it as if it
//! had arrived on the TAP device). The device lives as long as ferryd's fd.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use ferry_chain::spec::KernelSpec;

use ferry_sys::link;
use ferry_sys::tap::open_tap;

use crate::netdev::{in_ns, sysctl};

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
            let (addr, prefix) = interface_address(a)?;
            in_ns(ns, || link::add_address(&spec.dev, addr, prefix))?;
        }
        if let Some(mac) = spec.mac {
            in_ns(ns, || link::set_mac(&spec.dev, mac.0))?;
        }
        // What an NF hands the stack may carry this host's own address as
        // its source (a NAT's public address) and comes from no route's
        // device: accept both, as if the NF were part of the host.
        sysctl(ns, &format!("net/ipv4/conf/{}/accept_local", spec.dev), "1")?;
        sysctl(ns, &format!("net/ipv4/conf/{}/rp_filter", spec.dev), "0")?;
        in_ns(ns, || link::set_up(&spec.dev))?;
        Ok(Tap { fd })
    }
}

/// `ADDR/LEN`, or a bare address as one host, as `ip addr add` reads it.
fn interface_address(text: &str) -> Result<(std::net::IpAddr, u8)> {
    let (addr, len) = text.split_once('/').map_or((text, None), |(a, l)| (a, Some(l)));
    let addr: std::net::IpAddr = addr.parse().with_context(|| format!("{text:?}: not an IP address"))?;
    let host = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => host,
        Some(l) => l
            .parse()
            .ok()
            .filter(|l| *l <= host)
            .ok_or_else(|| anyhow::anyhow!("{text:?}: prefix length 0..={host}"))?,
    };
    Ok((addr, len))
}

#[cfg(test)]
mod tests {
    use super::interface_address;

    #[test]
    fn an_interface_address_is_read_as_ip_addr_add_reads_it() {
        assert_eq!(interface_address("10.0.9.1/24").unwrap(), ("10.0.9.1".parse().unwrap(), 24));
        assert_eq!(interface_address("10.0.9.1").unwrap(), ("10.0.9.1".parse().unwrap(), 32));
        assert_eq!(interface_address("2001:db8::1").unwrap(), ("2001:db8::1".parse().unwrap(), 128));
        assert_eq!(interface_address("2001:db8::1/64").unwrap().1, 64);
        for bad in ["10.0.9.1/33", "2001:db8::1/129", "10.0.9/24", "10.0.9.1/x", ""] {
            assert!(interface_address(bad).is_err(), "{bad}");
        }
    }
}
