//! AF_XDP ports: the XDP redirect program on each receiving netdev, and the
//! sockets ferryd creates (in the port's namespace) for an NF thread.

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use ferry_bpf::{AttachMode, LoadedXdp, Object};
use ferry_chain::plan::PortPlan;
use ferry_chain::spec::XdpMode;
use ferry_xsk::{BindMode, RingSizes, SocketConfig, Umem, XskSocket};

/// Ring sizes of every chain socket (rx, tx, fill, completion).
pub const XSK_RINGS: RingSizes = RingSizes { rx: 512, tx: 512, fill: 512, comp: 512 };

pub struct Port {
    pub plan: PortPlan,
    pub ifindex: u32,
    /// The redirect program, when the port delivers to an NF.
    pub xdp: Option<LoadedXdp>,
}

fn ifindex_in(ns: Option<&str>, dev: &str) -> Result<u32> {
    ferry_testbed::in_netns(ns, || ferry_xsk::ifindex(dev))?
        .ok_or_else(|| anyhow!("no device {dev:?} in namespace {}", ns.unwrap_or("(root)")))
}

impl Port {
    pub fn open(plan: &PortPlan) -> Result<Port> {
        let ns = plan.netns.as_deref();
        let ifindex = ifindex_in(ns, &plan.netdev)?;
        let xdp = if plan.rx {
            let mode = match plan.xdp_mode {
                XdpMode::Generic => AttachMode::Generic,
                XdpMode::Driver => AttachMode::Driver,
            };
            let prog = ferry_testbed::in_netns(ns, || {
                LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", ifindex, mode)
            })?
            .with_context(|| format!("attaching XDP to {} ({})", plan.netdev, plan.name))?;
            Some(prog)
        } else {
            None
        };
        Ok(Port { plan: plan.clone(), ifindex, xdp })
    }

    /// A socket on `queue` over `umem`, steered to by the XDP program when
    /// the port receives. The NF gets the only fd that stays open, so the
    /// kernel releases the socket (and its frames) when the NF dies.
    pub fn socket(&mut self, umem: &Arc<Umem>, queue: u32) -> Result<XskSocket> {
        let cfg = SocketConfig { rings: XSK_RINGS, bind: BindMode::Auto, need_wakeup: true, busy_poll: None };
        let ns = self.plan.netns.clone();
        let (ifindex, umem) = (self.ifindex, umem.clone());
        let sock = ferry_testbed::in_netns(ns.as_deref(), move || XskSocket::create(umem, ifindex, queue, &cfg, None))?
            .with_context(|| format!("AF_XDP socket on {} queue {queue}", self.plan.netdev))?;
        if let Some(xdp) = &mut self.xdp {
            xdp.register_xsk(queue, &sock).context("registering the socket in the XSKMAP")?;
        }
        Ok(sock)
    }
}
