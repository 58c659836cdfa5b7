//! This host's part of chains over several hosts: the NSH forwarder on
//! its fabric device (one per ferryd, shared by its chains), and per chain
//! the attachments of its NFs to the path and its forwarding entries
//! ([`ferry_chain::hosts`]).
//!
//! An attachment is a veth pair in the host's namespace. Its Ferry end is
//! a port of the chain's local part; the forwarder holds the other end:
//! *in* (proxy), it redirects a frame there with NSH stripped and the NF's
//! socket on the Ferry end takes it; *out* (return), what the NF sends
//! arrives there and gets its NSH back before it leaves for the next host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use ferry_bpf::nsh::{GpeEnd, NshAction, NshEncap, NshRole, NshSff, PathHop, NSH_COUNTER_NAMES};
use ferry_bpf::{AttachMode, Attachment};
use ferry_chain::hosts::{FabricEncap, HopRole, HostPart, HostSpec};
use ferry_chain::plan::ChainPlan;
use ferry_chain::spec::XdpMode;

use crate::loopdev::LoopDevice;
use crate::netdev::{ifindex_in, link_in};

/// The forwarder's device slot of the fabric.
const FABRIC_SLOT: u32 = 0;
/// TTL a frame gets when it enters the path again after a local NF.
const RETURN_TTL: u8 = 63;

/// The forwarder on this host's fabric device.
pub struct Fabric {
    pub host: HostSpec,
    sff: NshSff,
    pub mac: [u8; 6],
    mode: AttachMode,
    next_slot: u32,
    /// Device slots given back by removed chains.
    free_slots: Vec<u32>,
    /// The SPI of each chain with a part here: one chain per path.
    spis: HashMap<u32, String>,
    /// The chain whose port classifies (the classifier table is the
    /// forwarder's, one per host).
    classifying: Option<String>,
}

fn mode(m: XdpMode) -> AttachMode {
    match m {
        XdpMode::Generic => AttachMode::Generic,
        XdpMode::Driver => AttachMode::Driver,
    }
}

/// The MAC of `dev` in `ns`.
pub fn mac_of(ns: Option<&str>, dev: &str) -> Result<[u8; 6]> {
    link_in(ns, dev)?.mac.ok_or_else(|| anyhow!("{dev}: no Ethernet address"))
}

impl Fabric {
    /// Loads the forwarder and attaches it to `host`'s fabric device.
    pub fn open(host: &HostSpec) -> Result<Fabric> {
        let ns = host.netns.as_deref();
        let ifindex = ifindex_in(ns, &host.fabric.dev)?;
        let mac = mac_of(ns, &host.fabric.dev)?;
        let mode = mode(host.fabric.xdp_mode);
        let mut sff = NshSff::load().context("loading the NSH forwarder")?;
        let role = match host.fabric.encap {
            FabricEncap::VxlanGpe => {
                NshRole::Fabric { gpe: Some(GpeEnd { addr: host.fabric.addr, vni: host.fabric.vni }) }
            }
            FabricEncap::Ethernet => NshRole::Fabric { gpe: None },
        };
        sff.set_role(ifindex, role)?;
        ferry_sys::in_netns(ns, || -> Result<()> {
            sff.set_dev(FABRIC_SLOT, ifindex)?;
            sff.attach(ifindex, mode)?;
            Ok(())
        })?
        .with_context(|| format!("the NSH forwarder on {} (host {})", host.fabric.dev, host.name))?;
        Ok(Fabric {
            host: host.clone(),
            sff,
            mac,
            mode,
            next_slot: FABRIC_SLOT + 1,
            free_slots: Vec::new(),
            spis: HashMap::new(),
            classifying: None,
        })
    }

    /// Whether two chains' entries for this host name the same fabric
    /// (their control endpoints may be written differently).
    pub fn same(a: &HostSpec, b: &HostSpec) -> bool {
        a.name == b.name && a.netns == b.netns && a.fabric == b.fabric
    }

    /// The forwarder's counters, by name.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let values = self.sff.counters().unwrap_or_default();
        NSH_COUNTER_NAMES.iter().zip(values).map(|(n, v)| (n.to_string(), v)).collect()
    }

    fn slot(&mut self, ifindex: u32) -> Result<u32> {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.next_slot += 1;
                self.next_slot - 1
            }
        };
        let ns = self.host.netns.clone();
        let set = ferry_sys::in_netns(ns.as_deref(), || self.sff.set_dev(slot, ifindex));
        if !matches!(set, Ok(Ok(()))) {
            self.free_slots.push(slot);
        }
        set??;
        Ok(slot)
    }
}

/// One chain's part on this host: its attachments and entries. Dropping
/// it takes them away (the attachments' devices last).
pub struct NshInstall {
    fabric: Arc<Mutex<Fabric>>,
    hops: Vec<PathHop>,
    /// The entries that send to another host: taken out while that host
    /// is unreachable (its frames then count as `no_hop` drops here), put
    /// back when it is reachable again.
    forwards: Vec<(PathHop, NshAction, String)>,
    /// The chain's hosts.
    peers: Vec<HostSpec>,
    down: std::collections::HashSet<String>,
    /// Its device slots, and its path's SPI (registered with the fabric).
    slots: Vec<u32>,
    spi: u32,
    roles: Vec<u32>,
    attached: Vec<Attachment>,
    classifies: bool,
    _devices: Vec<LoopDevice>,
}

impl NshInstall {
    /// Installs `part` on `fabric`: makes each attachment's device (and
    /// names it in `plan`, so the NF's sockets bind there), gives the
    /// forwarder's end its role, and writes the entries. `macs` are the
    /// other hosts' fabric MACs.
    pub fn open(
        fabric: &Arc<Mutex<Fabric>>,
        chain: &str,
        part: &HostPart,
        peers: &[HostSpec],
        macs: &HashMap<String, [u8; 6]>,
        plan: Option<&mut ChainPlan>,
    ) -> Result<NshInstall> {
        let mut f = fabric.lock().expect("fabric lock");
        if !Fabric::same(&f.host, &part.host) {
            bail!("this ferryd forwards for host {:?} ({}); the chain's host differs", f.host.name, f.host.fabric.dev);
        }
        if let Some(other) = f.spis.get(&part.spi) {
            bail!("SPI {} is chain {other:?}'s on host {:?}: one path per SPI", part.spi, f.host.name);
        }
        f.spis.insert(part.spi, chain.to_string());
        let mut install = NshInstall {
            fabric: fabric.clone(),
            hops: Vec::new(),
            forwards: Vec::new(),
            peers: peers.to_vec(),
            down: Default::default(),
            slots: Vec::new(),
            spi: part.spi,
            roles: Vec::new(),
            attached: Vec::new(),
            classifies: false,
            _devices: Vec::new(),
        };
        let filled = install.fill(&mut f, chain, part, peers, macs, plan);
        // The lock goes first: a half-made install's drop takes it again.
        drop(f);
        filled.map(|()| install)
    }

    /// What [`NshInstall::open`] does under the fabric's lock: every
    /// attachment, role and entry, each recorded as it is made (so that
    /// dropping a half-made install takes back what it made).
    fn fill(
        &mut self,
        f: &mut Fabric,
        chain: &str,
        part: &HostPart,
        peers: &[HostSpec],
        macs: &HashMap<String, [u8; 6]>,
        plan: Option<&mut ChainPlan>,
    ) -> Result<()> {
        let ns = part.host.netns.clone();
        let ns = ns.as_deref();
        for p in peers.iter().filter(|p| p.name != part.host.name) {
            f.sff.add_peer(p.fabric.addr)?;
        }
        let far_end = self.attachments(part, plan)?;
        for hop in &part.hops {
            let at = PathHop::new(part.spi, hop.si)?;
            match &hop.role {
                HopRole::Classify { dev } => self.classify(f, chain, part, dev)?,
                HopRole::Return { port } => {
                    let ifindex = far_end[port];
                    f.sff.set_role(ifindex, NshRole::Return { hop: at, ttl: RETURN_TTL })?;
                    self.roles.push(ifindex);
                    let (m, sff) = (f.mode, &mut f.sff);
                    // The device goes with the chain, and the program with it.
                    ferry_sys::in_netns(ns, || sff.attach(ifindex, m))??;
                }
                HopRole::Forward { to } => {
                    let next = peers.iter().find(|p| &p.name == to).ok_or_else(|| anyhow!("no host {to:?}"))?;
                    let dst_mac = *macs.get(to).ok_or_else(|| anyhow!("no fabric MAC of host {to:?}"))?;
                    let encap = match part.host.fabric.encap {
                        FabricEncap::VxlanGpe => NshEncap::VxlanGpe {
                            src: part.host.fabric.addr,
                            dst: next.fabric.addr,
                            vni: next.fabric.vni,
                        },
                        FabricEncap::Ethernet => NshEncap::Ethernet,
                    };
                    let action = NshAction::Forward { dev: FABRIC_SLOT, dst_mac, src_mac: f.mac, encap };
                    f.sff.set_hop(at, action)?;
                    self.hops.push(at);
                    self.forwards.push((at, action, to.clone()));
                }
                HopRole::Proxy { port } => {
                    let slot = f.slot(far_end[port])?;
                    self.slots.push(slot);
                    f.sff.set_hop(at, NshAction::Proxy { dev: slot })?;
                    self.hops.push(at);
                }
                HopRole::End { dev } => {
                    let slot = f.slot(ifindex_in(ns, dev)?)?;
                    self.slots.push(slot);
                    f.sff.set_hop(at, NshAction::End { dev: slot })?;
                    self.hops.push(at);
                }
            }
        }
        Ok(())
    }

    /// A loop device per attachment (a proxy or return hop's port); the
    /// NF's end is named in the plan. Returns each port's far-end ifindex.
    fn attachments(&mut self, part: &HostPart, mut plan: Option<&mut ChainPlan>) -> Result<HashMap<String, u32>> {
        let ns = part.host.netns.as_deref();
        let mut far_end: HashMap<String, u32> = HashMap::new();
        for hop in &part.hops {
            let (HopRole::Proxy { port } | HopRole::Return { port }) = &hop.role else { continue };
            let plan = plan.as_deref_mut().ok_or_else(|| anyhow!("attachment {port} without a local part"))?;
            let p = plan.ports.iter_mut().find(|p| &p.name == port).ok_or_else(|| anyhow!("no port {port}"))?;
            let dev = LoopDevice::create(ns, port, &part.host.fabric.dev, p.queues)
                .with_context(|| format!("the NSH attachment {port}"))?;
            p.netdev = dev.send_end.clone();
            far_end.insert(port.clone(), dev.receive_ifindex);
            self._devices.push(dev);
        }
        Ok(far_end)
    }

    /// Makes `dev` this host's classifier, into the part's path (one
    /// classifier per host).
    fn classify(&mut self, f: &mut Fabric, chain: &str, part: &HostPart, dev: &str) -> Result<()> {
        let ns = part.host.netns.as_deref();
        if let Some(other) = &f.classifying {
            bail!("chain {other:?} classifies on host {:?} already (one classifier per host)", f.host.name);
        }
        let rule: ferry_wire::classify::Rule = "out=0".parse().map_err(|e| anyhow!("{e}"))?;
        f.sff.set_classifier(&[rule], &[part.spi])?;
        let ifindex = ifindex_in(ns, dev)?;
        f.sff.set_role(ifindex, NshRole::Classify)?;
        self.roles.push(ifindex);
        let (m, sff) = (f.mode, &mut f.sff);
        let a = ferry_sys::in_netns(ns, || sff.attach_one(ifindex, m))??;
        self.attached.push(a);
        f.classifying = Some(chain.to_string());
        self.classifies = true;
        Ok(())
    }

    /// The host forwarder's counters.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.fabric.lock().expect("fabric lock").counters()
    }

    /// The hosts this part sends to.
    pub fn next_hosts(&self) -> Vec<HostSpec> {
        let names: std::collections::BTreeSet<&str> = self.forwards.iter().map(|(_, _, h)| h.as_str()).collect();
        self.peers.iter().filter(|p| names.contains(p.name.as_str())).cloned().collect()
    }

    /// Host `host` is reachable or not: its entries go back in, or out.
    /// Whether anything changed.
    pub fn set_reachable(&mut self, host: &str, up: bool) -> bool {
        if up != self.down.contains(host) {
            return false;
        }
        let mut f = self.fabric.lock().expect("fabric lock");
        for (at, action, _) in self.forwards.iter().filter(|(_, _, h)| h == host) {
            let _ = if up { f.sff.set_hop(*at, *action) } else { f.sff.remove_hop(*at) };
        }
        if up {
            self.down.remove(host);
        } else {
            self.down.insert(host.to_string());
        }
        true
    }
}

/// What a chain's part over hosts is set up from.
pub struct NshSetup {
    pub fabric: Arc<Mutex<Fabric>>,
    pub part: HostPart,
    /// Every host of the chain.
    pub peers: Vec<HostSpec>,
    /// Their fabric MACs, by host name.
    pub macs: HashMap<String, [u8; 6]>,
}

impl Drop for NshInstall {
    fn drop(&mut self) {
        let mut f = self.fabric.lock().expect("fabric lock");
        for at in &self.hops {
            let _ = f.sff.remove_hop(*at);
        }
        for &ifindex in &self.roles {
            let _ = f.sff.clear_role(ifindex);
        }
        for a in self.attached.drain(..) {
            let _ = f.sff.detach(a);
        }
        if self.classifies {
            let _ = f.sff.set_classifier(&[], &[]);
            f.classifying = None;
        }
        f.free_slots.append(&mut self.slots);
        f.spis.remove(&self.spi);
    }
}
