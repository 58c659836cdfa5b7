//! AF_XDP ports: the XDP program on each receiving netdev (the redirect
//! program, or the stage pipeline when NFs were placed in XDP there), the
//! loop device in front of a sending port with post-server NFs, and the
//! sockets ferryd creates (in the port's namespace) for an NF thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use ferry_bpf::abi::Verdicts;
use ferry_bpf::pinned::PinnedRedirect;
use ferry_bpf::{AttachMode, LoadedXdp, Object};
use ferry_chain::plan::PortPlan;
use ferry_chain::proto::OffloadedStatus;
use ferry_chain::spec::{PreferBusyPoll, XdpMode};
use ferry_place::OffloadedNf;
use ferry_xsk::{BindMode, BusyPoll, SocketConfig, Umem, XskSocket};

use crate::fastpath::{FastPath, FastPathEnd, FastPathIds};
use crate::loopdev::LoopDevice;
use crate::netdev::ifindex_in;

/// The XDP program that steers a receiving port's frames to its sockets.
pub enum Steering {
    /// Every frame to the socket of its queue.
    Redirect(LoadedXdp),
    /// Through the NFs placed in XDP first.
    Pipeline(FastPath),
    /// As `Redirect`, pinned in bpffs: it outlives ferryd (`--persist`).
    Pinned(PinnedRedirect),
}

pub struct Port {
    pub plan: PortPlan,
    /// The device the port's sockets are bound to: the port's own, or its
    /// loop device's sending end.
    pub ifindex: u32,
    /// That device's name.
    sock_dev: String,
    /// The device settings preferred busy polling changed, put back when
    /// the port goes (first: before a loop device is deleted).
    napi: Option<NapiDeferral>,
    /// The steering program, when the port delivers to an NF.
    pub xdp: Option<Steering>,
    /// The post-server NFs in front of a port that only sends.
    post: Option<PostServer>,
}

/// A device's `napi_defer_hard_irqs` and `gro_flush_timeout` as they were
/// before an NF's preferred busy polling set them; dropping it puts them
/// back.
struct NapiDeferral {
    ns: Option<String>,
    dev: String,
    old: [(&'static str, String); 2],
}

impl NapiDeferral {
    fn set(ns: Option<&str>, dev: &str, b: &PreferBusyPoll) -> Result<NapiDeferral> {
        let set = |attr: &'static str, v: String| {
            ferry_sys::devattr::replace(ns, dev, attr, &v).map(|old| (attr, old)).with_context(|| {
                format!("setting {attr} of {dev} for preferred busy polling (needs a kernel with it in sysfs)")
            })
        };
        let defer = set("napi_defer_hard_irqs", b.defer_hard_irqs.to_string())?;
        let flush = match set("gro_flush_timeout", b.gro_flush_timeout_ns.to_string()) {
            Ok(f) => f,
            Err(e) => {
                let _ = ferry_sys::devattr::write(ns, dev, defer.0, &defer.1);
                return Err(e);
            }
        };
        Ok(NapiDeferral { ns: ns.map(str::to_string), dev: dev.to_string(), old: [defer, flush] })
    }
}

impl Drop for NapiDeferral {
    fn drop(&mut self) {
        for (attr, old) in &self.old {
            if let Err(e) = ferry_sys::devattr::write(self.ns.as_deref(), &self.dev, attr, old) {
                tracing::warn!("putting back {attr} of {}: {e}", self.dev);
            }
        }
    }
}

/// The pipeline on a loop device, and the device. Fields drop in order:
/// the programs leave before the device goes.
struct PostServer {
    fast: FastPath,
    /// A split NF's way out: the redirect on the sending end.
    _send_end: Option<LoadedXdp>,
    dev: LoopDevice,
    /// Whether a split NF ends it (a NAT whose misses go to its process).
    split: bool,
}

/// What a port's XDP parts are opened from.
pub struct PortParts<'a> {
    /// The pre-server NFs on the port's device.
    pub fast: Option<(&'a [OffloadedNf], FastPathIds<'a>)>,
    /// The post-server NFs in front of it (on its loop device).
    pub post: Option<PostParts<'a>>,
    /// A hybrid path starts at the port.
    pub hybrid: bool,
    /// Pin the redirect program here (`--persist`); only a port with no
    /// XDP parts gets one.
    pub pin: Option<&'a Path>,
}

/// A port's post-server part, as it is opened.
pub struct PostParts<'a> {
    pub nfs: &'a [OffloadedNf],
    pub chain: u32,
    /// One per NF.
    pub ids: &'a [u32],
    /// The split NF among them (a NAT whose misses go to its process).
    pub split: Option<&'a str>,
}

impl Port {
    /// Its XDP parts: the pre-server NFs on its device, then the
    /// post-server NFs on its loop device.
    pub fn fast_paths(&self) -> Vec<&FastPath> {
        let pre = match &self.xdp {
            Some(Steering::Pipeline(f)) => Some(f),
            _ => None,
        };
        pre.into_iter().chain(self.post.as_ref().map(|p| &p.fast)).collect()
    }

    /// The device's ifindex in the port's namespace.
    pub fn ifindex(plan: &PortPlan) -> Result<u32> {
        ifindex_in(plan.netns.as_deref(), &plan.netdev)
    }

    /// Opens the port with its XDP parts. A hybrid path's port gets no
    /// program here: the pipeline of the chain's hybrid NFs holds its hook, and its
    /// slow-path sockets are registered there ([`crate::hybrid::Hybrids`]).
    pub fn open(plan: &PortPlan, PortParts { fast, post, hybrid, pin }: PortParts) -> Result<Port> {
        let ns = plan.netns.as_deref();
        let device = Port::ifindex(plan)?;
        let mode = attach_mode(plan);
        let post = match post {
            Some(PostParts { nfs: path, chain, ids: nfs, split }) => {
                let dev = LoopDevice::create(ns, &plan.name, &plan.netdev, plan.queues)?;
                let ids = FastPathIds { chain, nfs, then: FastPathEnd::Device(device) };
                // The port's attach mode: in driver mode a veth sends a
                // redirected frame only when its peer runs XDP (or GRO) too.
                let fast = FastPath::open(plan, dev.receive_ifindex, mode, path, ids)
                    .with_context(|| format!("post-server XDP part on {} ({})", dev.receive_end, plan.name))?;
                let send_end = match split {
                    Some(_) => Some(send_end_redirect(plan, &dev, device, mode)?),
                    None => None,
                };
                Some(PostServer { fast, _send_end: send_end, dev, split: split.is_some() })
            }
            None => None,
        };
        let xdp = match fast {
            Some((path, ids)) => Some(Steering::Pipeline(
                FastPath::open(plan, device, mode, path, ids)
                    .with_context(|| format!("XDP part on {} ({})", plan.netdev, plan.name))?,
            )),
            None if !plan.rx || hybrid => None,
            None if pin.is_some() => {
                let dir = pin.expect("just checked");
                let prog =
                    ferry_sys::in_netns(ns, || PinnedRedirect::attach(device, mode, dir, plan.unowned_to_kernel))?
                        .with_context(|| {
                            format!("attaching XDP to {} ({}), pinned in {}", plan.netdev, plan.name, dir.display())
                        })?;
                Some(Steering::Pinned(prog))
            }
            None => {
                let prog = ferry_sys::in_netns(ns, || {
                    let mut prog = LoadedXdp::load(Object::XskRedirect, "ferry_xsk_redirect")?;
                    prog.set_unowned_queues(plan.unowned_to_kernel)?;
                    prog.attach_to(device, mode)?;
                    Ok::<_, ferry_bpf::BpfError>(prog)
                })?
                .with_context(|| format!("attaching XDP to {} ({})", plan.netdev, plan.name))?;
                Some(Steering::Redirect(prog))
            }
        };
        let ifindex = post.as_ref().map_or(device, |p| p.dev.send_ifindex);
        let sock_dev = post.as_ref().map_or(&plan.netdev, |p| &p.dev.send_end).clone();
        Ok(Port { plan: plan.clone(), ifindex, sock_dev, xdp, post, napi: None })
    }

    /// The port of a chain an earlier ferryd set up: its redirect program
    /// (if it receives) from the pins in `pin`.
    pub fn adopt(plan: &PortPlan, pin: Option<&Path>) -> Result<Port> {
        let ifindex = Port::ifindex(plan)?;
        let xdp = match pin {
            Some(dir) => Some(Steering::Pinned(
                PinnedRedirect::open(dir).with_context(|| format!("port {}: its pinned program", plan.name))?,
            )),
            None => None,
        };
        Ok(Port { plan: plan.clone(), ifindex, sock_dev: plan.netdev.clone(), xdp, post: None, napi: None })
    }

    /// Its pinned program stays on the device after ferryd is gone.
    pub fn keep_pinned(&mut self) {
        if let Some(Steering::Pinned(p)) = &mut self.xdp {
            p.keep();
        }
    }

    /// The pin directory of its program, if pinned.
    pub fn pin_dir(&self) -> Option<PathBuf> {
        match &self.xdp {
            Some(Steering::Pinned(p)) => Some(p.dir().to_path_buf()),
            _ => None,
        }
    }

    /// The port through which a split NF's process gets the misses of
    /// port `of`'s post-server part: sockets on the loop device's
    /// receiving end, steered to by that pipeline
    /// ([`Port::register_miss_socket`] of `of`).
    pub fn open_miss(plan: &PortPlan, of: &Port) -> Result<Port> {
        let post = of.post.as_ref().filter(|p| p.split);
        let post = post.ok_or_else(|| anyhow::anyhow!("port {} has no split NF in front of it", of.plan.name))?;
        // Its sockets are on the loop device's receiving end: errors name it.
        let plan = PortPlan { netdev: post.dev.receive_end.clone(), ..plan.clone() };
        let sock_dev = post.dev.receive_end.clone();
        Ok(Port { plan, ifindex: post.dev.receive_ifindex, sock_dev, xdp: None, post: None, napi: None })
    }

    /// Steers the misses of queue `queue` of the post-server part to
    /// `socket` (of the split NF's thread on the miss port).
    pub fn register_miss_socket(&mut self, queue: u32, socket: &impl std::os::fd::AsRawFd) -> Result<()> {
        let post = self.post.as_mut().ok_or_else(|| anyhow::anyhow!("port {} has no loop device", self.plan.name))?;
        post.fast.register_xsk(queue, socket).context("registering the split NF's socket in the loop pipeline")
    }

    /// New fds of the split NF's tables `names` (its control plane's):
    /// the pipeline in front of the port, or the port's own.
    pub fn split_map_fds(&self, names: &[&'static str]) -> Result<Vec<(&'static str, std::os::fd::OwnedFd)>> {
        let fast = match (&self.post, &self.xdp) {
            (Some(post), _) if post.split => &post.fast,
            (_, Some(Steering::Pipeline(fast))) => fast,
            _ => anyhow::bail!("port {} has no split NF's pipeline", self.plan.name),
        };
        Ok(fast.evnf().maps().fds(names)?)
    }

    /// Takes the port's XDP programs and its loop device away.
    pub fn detach(&mut self) {
        self.napi = None;
        self.xdp = None;
        self.post = None;
    }

    /// A socket on `queue` over `umem`, steered to by the XDP program when
    /// the port receives. The NF gets the only fd that stays open, so the
    /// kernel releases the socket (and its frames) when the NF dies.
    /// With `busy`, the socket gets preferred busy polling, and the device
    /// it is bound to the settings that go with it.
    pub fn socket(&mut self, umem: &Arc<Umem>, queue: u32, busy: Option<&PreferBusyPoll>) -> Result<XskSocket> {
        // Whether the device can do it was checked when the port opened.
        if let (Some(b), None) = (busy, &self.napi) {
            self.napi = Some(NapiDeferral::set(self.plan.netns.as_deref(), &self.sock_dev, b)?);
        }
        let busy_poll = busy.map(|b| BusyPoll { usecs: b.usecs, budget: b.budget, prefer: true });
        let cfg = SocketConfig { rings: self.plan.rings.sizes(), bind: BindMode::Auto, need_wakeup: true, busy_poll };
        let ns = self.plan.netns.clone();
        let (ifindex, umem) = (self.ifindex, umem.clone());
        let sock = ferry_sys::in_netns(ns.as_deref(), move || XskSocket::create(umem, ifindex, queue, &cfg, None))?
            .with_context(|| format!("AF_XDP socket on {} queue {queue}", self.plan.netdev))?;
        match &mut self.xdp {
            Some(Steering::Redirect(xdp)) => {
                xdp.register_xsk(queue, &sock).context("registering the socket in the XSKMAP")?
            }
            Some(Steering::Pinned(xdp)) => {
                xdp.register_xsk(queue, &sock).context("registering the socket in the pinned XSKMAP")?
            }
            Some(Steering::Pipeline(fast)) => {
                fast.register_xsk(queue, &sock).context("registering the socket in the pipeline's XSKMAP")?
            }
            None => {}
        }
        Ok(sock)
    }

    /// Refuses preferred busy polling where the kernel cannot do it. A
    /// busy poll runs the NAPI the socket was marked with on its first
    /// receive. Generic-mode XDP names no NAPI for its queue, and a veth
    /// (on the kernels Ferry is built on) registers its XDP receive queue
    /// before its NAPI exists, so their AF_XDP sockets are never marked, a
    /// busy poll polls nothing, and the deferred softirq would only hold
    /// frames back.
    pub fn check_busy_pollable(&self) -> Result<()> {
        if self.plan.xdp_mode == ferry_chain::spec::XdpMode::Generic {
            anyhow::bail!(
                "port {}: not supported: preferred busy polling needs driver-mode XDP (generic mode names no NAPI \
                 for the socket to poll); set `xdp_mode: driver` or leave `poll.prefer_busy_poll` out",
                self.plan.name
            );
        }
        let ns = self.plan.netns.as_deref();
        let dev = self.sock_dev.clone();
        let link = ferry_sys::in_netns(ns, move || ferry_sys::link::link(&dev))??
            .ok_or_else(|| anyhow::anyhow!("port {}: device {} is gone", self.plan.name, self.sock_dev))?;
        if link.kind.as_deref() == Some("veth") {
            anyhow::bail!(
                "port {}: not supported: preferred busy polling needs a device whose XDP receive queue names its \
                 NAPI, and {} is a veth (its AF_XDP sockets get no NAPI id); leave `poll.prefer_busy_poll` out \
                 (`poll: {{ busy: true }}` spins without it)",
                self.plan.name,
                self.sock_dev
            );
        }
        Ok(())
    }

    /// The steering program's verdict counters, or those of the
    /// post-server pipeline of a port that only sends.
    pub fn verdicts(&self) -> Option<Verdicts> {
        match (&self.xdp, &self.post) {
            (Some(Steering::Redirect(xdp)), _) => xdp.verdicts().ok(),
            (Some(Steering::Pinned(xdp)), _) => xdp.verdicts().ok(),
            (Some(Steering::Pipeline(fast)), _) => fast.verdicts(),
            (None, Some(post)) => post.fast.verdicts(),
            (None, None) => None,
        }
    }

    /// The NFs placed in XDP on this port and in front of it (a split
    /// NF's fast path shows with its process).
    pub fn offloaded(&self) -> Vec<OffloadedStatus> {
        let mut nfs = match &self.xdp {
            Some(Steering::Pipeline(fast)) => fast.status(),
            _ => Vec::new(),
        };
        if let Some(p) = &self.post {
            nfs.extend(p.fast.status());
        }
        nfs
    }
}

/// The XDP attach mode the chain file gives port `p`.
pub fn attach_mode(p: &PortPlan) -> AttachMode {
    match p.xdp_mode {
        XdpMode::Generic => AttachMode::Generic,
        XdpMode::Driver => AttachMode::Driver,
    }
}

/// A split NF's process sends what it handled back into the loop device's
/// receiving end, so it arrives on the sending end: a redirect there sends
/// it out of the port (the NFs before the split one ran already). A
/// program of its own, so the port's verdicts (the pipeline's) count each
/// frame once.
fn send_end_redirect(plan: &PortPlan, dev: &LoopDevice, device: u32, mode: AttachMode) -> Result<LoadedXdp> {
    ferry_sys::in_netns(plan.netns.as_deref(), || -> Result<LoadedXdp> {
        let mut prog = LoadedXdp::attach(Object::Redirect, "ferry_redirect", dev.send_ifindex, mode)?;
        prog.set_redirect_target(device)?;
        Ok(prog)
    })?
    .with_context(|| format!("the redirect out of {} on {} ({})", plan.netdev, dev.send_end, plan.name))
}
