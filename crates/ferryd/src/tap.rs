//! Kernel hops: TAP devices ferryd creates so that NFs can hand frames to
//! the kernel stack (a write() per frame; the kernel receives it as if it
//! had arrived on the TAP device). The device lives as long as ferryd's fd.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;

use anyhow::{bail, Context, Result};
use ferry_chain::spec::KernelSpec;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

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
        let fd = ferry_testbed::in_netns(ns, move || -> Result<OwnedFd> {
            // SAFETY: open(2) of a path literal; the result is checked.
            let raw = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if raw < 0 {
                bail!(
                    "opening /dev/net/tun: {} (not supported: needs the tun module)",
                    std::io::Error::last_os_error()
                );
            }
            // SAFETY: a fresh fd we own.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let mut req = IfReq { name: [0; 16], flags: IFF_TAP | IFF_NO_PI, _pad: [0; 22] };
            req.name[..dev.len()].copy_from_slice(dev.as_bytes());
            // SAFETY: TUNSETIFF reads and writes an ifreq we own.
            if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
                bail!("creating TAP {dev}: {}", std::io::Error::last_os_error());
            }
            Ok(fd)
        })??;
        for a in &spec.addrs {
            ip(ns, &["addr", "add", a, "dev", &spec.dev])?;
        }
        ip(ns, &["link", "set", "dev", &spec.dev, "up"])?;
        Ok(Tap { fd })
    }
}
