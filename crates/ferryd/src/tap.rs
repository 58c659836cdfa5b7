//! Kernel hops: TAP devices ferryd creates so that NFs can hand frames to
//! the kernel stack (a write() per frame; the kernel receives it as if it
//! had arrived on the TAP device). The device lives as long as ferryd's fd.

use std::os::fd::OwnedFd;
use std::process::Command;

use anyhow::{bail, Context, Result};
use ferry_chain::spec::KernelSpec;
use ferry_xsk::tun::{open_tun, TunKind};

pub struct Tap {
    pub fd: OwnedFd,
}

fn ip(ns: Option<&str>, args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = ns {
        cmd.args(["-n", ns]);
    }
    let out = cmd.args(args).output().context("running ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Tap {
    pub fn create(spec: &KernelSpec) -> Result<Tap> {
        let ns = spec.netns.as_deref();
        let dev = spec.dev.clone();
        // The device is created in the namespace /dev/net/tun was opened in.
        let fd = ferry_testbed::in_netns(ns, move || open_tun(&dev, TunKind::Tap))?
            .with_context(|| format!("creating TAP {}", spec.dev))?;
        for a in &spec.addrs {
            ip(ns, &["addr", "add", a, "dev", &spec.dev])?;
        }
        if let Some(mac) = &spec.mac {
            ip(ns, &["link", "set", "dev", &spec.dev, "address", &mac.to_string()])?;
        }
        // What an NF hands the stack may carry this host's own address as
        // its source (a NAT's public address) and comes from no route's
        // device: accept both, as if the NF were part of the host.
        let dev = spec.dev.clone();
        ferry_testbed::in_netns(ns, move || -> std::io::Result<()> {
            std::fs::write(format!("/proc/sys/net/ipv4/conf/{dev}/accept_local"), "1")?;
            std::fs::write(format!("/proc/sys/net/ipv4/conf/{dev}/rp_filter"), "0")
        })?
        .with_context(|| format!("sysctls of {}", spec.dev))?;
        ip(ns, &["link", "set", "dev", &spec.dev, "up"])?;
        Ok(Tap { fd })
    }
}
