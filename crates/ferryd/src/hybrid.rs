//! A chain's hybrid NFs (eFW, eLB): the privileged half. ferryd loads one
//! eVNF object for the chain, writes each NF's initial configuration,
//! chains each port's hybrid NFs with the object's next-NF table, applies
//! the firewall's nftables ruleset in the port's namespace, and only then
//! attaches the programs, so no frame meets an empty table. Each NF's
//! control plane is an NF process like any other (unprivileged, started,
//! admitted and restarted by the chain) that receives the maps of its
//! type by SCM_RIGHTS, re-applies its configuration, and runs its timers
//! (expiry, feedback) and statistics.

use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{anyhow, Context, Result};
use ferry_bpf::evnf::{EvNf, Evnf};
use ferry_bpf::AttachMode;
use ferry_chain::plan::{ChainPlan, PortPlan};
use ferry_chain::spec::XdpMode;
use ferry_evnf::firewall::Firewall;
use ferry_evnf::types::HybridType;
use ferry_place::HybridPath;

use crate::ports::Port;

pub struct Hybrids {
    evnf: Evnf,
    /// Per hybrid NF: its name and type.
    nfs: Vec<(String, &'static HybridType)>,
    _nft: KernelHalves,
}

/// Firewalls' kernel halves, by the namespace they were applied in;
/// removed there when dropped (also when a setup fails midway).
#[derive(Default)]
struct KernelHalves(Vec<(Option<String>, Firewall)>);

fn mode(p: &PortPlan) -> AttachMode {
    match p.xdp_mode {
        XdpMode::Generic => AttachMode::Generic,
        XdpMode::Driver => AttachMode::Driver,
    }
}

impl Hybrids {
    /// Loads, configures and attaches the chain's hybrid paths; None if
    /// it has none.
    pub fn setup(plan: &ChainPlan, paths: &[HybridPath]) -> Result<Option<Hybrids>> {
        if paths.is_empty() {
            return Ok(None);
        }
        let port = |name: &str| plan.ports.iter().find(|p| p.name == name).ok_or_else(|| anyhow!("no port {name}"));
        let mut evnf = Evnf::load().context("loading the hybrid NFs' fast paths (evnf.bpf.c)")?;
        let (mut nfs, mut nft) = (Vec::new(), KernelHalves::default());
        for path in paths {
            let ns = port(&path.port)?.netns.clone();
            let fast: Vec<EvNf> = path.nfs.iter().map(|n| fast_path(&n.kind)).collect::<Result<_>>()?;
            evnf.set_chain(&fast).context("chaining the hybrid NFs")?;
            for n in &path.nfs {
                let t = ferry_evnf::types::find(&n.kind).ok_or_else(|| anyhow!("{}: not a hybrid type", n.kind))?;
                let spec =
                    ferry_evnf::chained::config(&n.kind, &n.config).map_err(|e| anyhow!("NF {}: {e}", n.name))?;
                let mut control = ferry_evnf::chained::control_plane(&n.kind, &spec, evnf.maps())?;
                control.install(evnf.maps_mut()).with_context(|| format!("NF {}: installing its rules", n.name))?;
                if let Some(fw) = spec.firewall.filter(|_| n.kind == "efw") {
                    let mut fw = Firewall::new(fw);
                    ferry_testbed::in_netns(ns.as_deref(), || fw.apply_nftables())?
                        .with_context(|| format!("NF {}: its nftables ruleset", n.name))?;
                    nft.0.push((ns.clone(), fw));
                }
                nfs.push((n.name.clone(), t));
            }
        }
        for path in paths {
            let p = port(&path.port)?;
            attach(&mut evnf, fast_path(&path.nfs[0].kind)?, p)?;
            for n in path.nfs.iter() {
                for reply in &n.reply_ports {
                    attach(&mut evnf, EvNf::BalancerReply, port(reply)?)?;
                }
            }
        }
        Ok(Some(Hybrids { evnf, nfs, _nft: nft }))
    }

    /// Registers `socket` (on receive queue `queue` of its path's port) as
    /// the slow path of NF `nf`, if `nf` is the chain's hybrid NF with one.
    /// Until then the fast path hands such frames to the kernel stack.
    pub fn register_slow_path(&mut self, nf: &str, queue: u32, socket: &impl AsRawFd) -> Result<()> {
        if self.nfs.iter().any(|(name, t)| name == nf && ferry_evnf::chained::has_slow_path(t.kind)) {
            self.evnf.register_xsk(queue, socket).context("registering the slow path's socket")?;
        }
        Ok(())
    }

    /// New fds of the maps NF `nf`'s control plane works on (none if it is
    /// not a hybrid NF), by name.
    pub fn map_fds(&self, nf: &str) -> Result<Vec<(&'static str, OwnedFd)>> {
        let Some((_, t)) = self.nfs.iter().find(|(name, _)| name == nf) else { return Ok(Vec::new()) };
        Ok(self.evnf.maps().fds(&ferry_evnf::types::control_maps(t))?)
    }
}

/// The program a path of hybrid NF `kind` starts with.
fn fast_path(kind: &str) -> Result<EvNf> {
    let t = ferry_evnf::types::find(kind).ok_or_else(|| anyhow!("{kind}: not a hybrid type"))?;
    Ok(t.fast_paths[0])
}

fn attach(evnf: &mut Evnf, nf: EvNf, p: &PortPlan) -> Result<()> {
    let ifindex = Port::ifindex(p)?;
    ferry_testbed::in_netns(p.netns.as_deref(), || evnf.attach(nf, ifindex, mode(p)))?
        .with_context(|| format!("attaching {} to {} ({})", nf.program(), p.netdev, p.name))
}

impl Drop for KernelHalves {
    fn drop(&mut self) {
        for (ns, fw) in &mut self.0 {
            let _ = ferry_testbed::in_netns(ns.as_deref(), || fw.remove_nft_tables());
        }
    }
}
