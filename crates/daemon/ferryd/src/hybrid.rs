//! A chain's hybrid NFs (eFW, eLB, eDPI, eNAT): the privileged half.
//! ferryd loads one stage pipeline for the chain's hybrid NFs, writes the
//! initial rules of the NFs that install theirs ahead (eFW, eLB), applies
//! the firewall's nftables ruleset in the port's namespace, and only then
//! deploys each port's path in the stage tables and attaches the pipeline
//! there (reply halves first), so no frame meets an empty table. NFs
//! with a slow path (eDPI, eNAT) make their rules in their own process. Each NF's
//! control plane is an NF process like any other (unprivileged, started,
//! admitted and restarted by the chain) that receives the maps of its
//! type by SCM_RIGHTS, re-applies its configuration, and runs its timers
//! (expiry, feedback) and statistics.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use ferry_bpf::hybrid::{HybridElement, HybridPipeline};
use ferry_bpf::pipeline::Element;
use ferry_chain::plan::{ChainPlan, PortPlan};
use ferry_chain::proto::OffloadedStatus;
use ferry_evnf::config::FirewallSpec;
use ferry_evnf::firewall::Firewall;
use ferry_evnf::types::HybridType;
use ferry_place::{Configs, HybridNf, HybridPath, Installed};

use crate::ports::{attach_mode, Port};

pub struct Hybrids {
    evnf: HybridPipeline,
    /// The hybrid NFs, on paths and whole.
    nfs: Vec<Member>,
    /// The NFs in XDP ahead of the hybrid NFs, by port.
    ahead: Vec<(String, Installed)>,
    /// Who gets a hybrid path's frames on its port's sockets: the NF with
    /// a slow path, or the process after the path (NF, port).
    to_sockets: Vec<(String, String)>,
    nft: KernelHalves,
}

/// One hybrid NF of the chain.
struct Member {
    name: String,
    t: &'static HybridType,
    /// Its configuration file (`config=`).
    config: PathBuf,
    /// The namespace of the port its path starts on (None: the root
    /// namespace, or an NF that runs whole as a process).
    netns: Option<String>,
}

/// Firewalls' kernel halves, by NF, with the namespace they were applied
/// in; removed there when dropped (also when a setup fails midway).
#[derive(Default)]
struct KernelHalves(Vec<(String, Option<String>, Firewall)>);

impl Hybrids {
    /// Loads, configures and attaches the chain's hybrid paths; None if
    /// it has none. Hybrid NFs that run `whole` as processes get the
    /// tables too, attached nowhere: their processes keep their state
    /// there, as the split form's do.
    pub fn setup(
        chain: u32,
        plan: &ChainPlan,
        (paths, ahead_ids): (&[HybridPath], &[Vec<u32>]),
        whole: &[HybridNf],
        nf_id: impl Fn(&str) -> Option<u32>,
    ) -> Result<Option<Hybrids>> {
        if paths.is_empty() && whole.is_empty() {
            return Ok(None);
        }
        let port = |name: &str| plan.ports.iter().find(|p| p.name == name).ok_or_else(|| anyhow!("no port {name}"));
        let mut evnf = HybridPipeline::load().context("loading the stage pipeline for the hybrid NFs")?;
        let (mut nfs, mut nft, mut fast_paths) = (Vec::new(), KernelHalves::default(), Vec::new());
        for path in paths {
            let ns = port(&path.port)?.netns.clone();
            fast_paths.push(path.nfs.iter().map(|n| fast_path(&n.kind)).collect::<Result<Vec<HybridElement>>>()?);
            for n in &path.nfs {
                let t = ferry_evnf::types::find(&n.kind).ok_or_else(|| anyhow!("{}: not a hybrid type", n.kind))?;
                let spec = read_config(&n.name, t, &n.config)?;
                // Rules installed ahead (proactive and offloading NFs); an NF
                // with a slow path makes its rules there, in its process, so
                // ferryd never runs its slow-path code (nDPI) as root.
                if !t.slow_path {
                    let mut control = ferry_evnf::chained::control_plane(&n.kind, &spec, evnf.maps())?;
                    control.install(evnf.maps_mut()).with_context(|| format!("NF {}: installing its rules", n.name))?;
                }
                let member = Member { name: n.name.clone(), t, config: n.config.clone(), netns: ns.clone() };
                if let Some(fw) = spec.firewall.filter(|f| t.section == "firewall" && f.nftables.is_some()) {
                    nft.0.push((n.name.clone(), ns.clone(), kernel_half(&member, fw)?));
                }
                nfs.push(member);
            }
        }
        for n in whole {
            let t = ferry_evnf::types::find(&n.kind).ok_or_else(|| anyhow!("{}: not a hybrid type", n.kind))?;
            nfs.push(Member { name: n.name.clone(), t, config: n.config.clone(), netns: None });
        }
        // The reply halves first: no reply meets an untranslated way back.
        for path in paths {
            for n in path.nfs.iter() {
                let Some(&reply_path) = ferry_evnf::types::find(&n.kind).and_then(|t| t.fast_paths.get(1)) else {
                    continue;
                };
                for reply in &n.reply_ports {
                    attach(&mut evnf, chain, (&[], &[reply_path], None), port(reply)?)?;
                }
            }
        }
        // The NFs ahead of a path's hybrid NFs: their configs, then the path.
        let (mut configs, mut ahead, mut to_sockets) = (Configs::default(), Vec::new(), Vec::new());
        for ((path, fast), ids) in paths.iter().zip(&fast_paths).zip(ahead_ids) {
            let (before, installed) = ferry_place::elements(evnf.pipeline_mut(), &path.before, ids, &mut configs)
                .with_context(|| format!("the NFs ahead of port {}'s hybrid path", path.port))?;
            let then = match &path.then {
                Some(nf) => Some(nf_id(nf).ok_or_else(|| anyhow!("no NF {nf} after port {}'s path", path.port))?),
                None => None,
            };
            attach(&mut evnf, chain, (&before, fast, then), port(&path.port)?)?;
            let slow = path.nfs.iter().find(|n| n.slow_path).map(|n| n.name.clone());
            to_sockets.extend(slow.or(path.then.clone()).map(|nf| (nf, path.port.clone())));
            ahead.push((path.port.clone(), installed));
        }
        Ok(Some(Hybrids { evnf, nfs, ahead, to_sockets, nft }))
    }

    /// Reads every hybrid NF's configuration file again and re-applies the
    /// firewalls' nftables rulesets (which need CAP_NET_ADMIN); returns
    /// the NFs whose control planes must now re-read their files and
    /// write their tables. A file that does not parse changes nothing.
    pub fn reload(&mut self) -> Result<Vec<String>> {
        let mut specs = Vec::new();
        for n in &self.nfs {
            specs.push(read_config(&n.name, n.t, &n.config)?);
        }
        // Every firewall's new ruleset is checked before any is applied:
        // as at deploy, a table it declares that is someone else's is
        // refused, not replaced.
        let rulesets: Vec<(usize, FirewallSpec)> = specs
            .into_iter()
            .enumerate()
            .filter_map(|(i, spec)| spec.firewall.filter(|_| self.nfs[i].t.section == "firewall").map(|fw| (i, fw)))
            .collect();
        for (i, fw) in &rulesets {
            let n = &self.nfs[*i];
            let ns = n.netns.as_deref();
            let candidate = Firewall::new(fw.clone());
            let mut taken = ferry_sys::in_netns(ns, || candidate.tables_taken())??;
            if let Some((_, _, applied)) = self.nft.0.iter().find(|(name, _, _)| *name == n.name) {
                taken.retain(|t| !applied.tables().contains(t));
            }
            refuse_taken(&n.name, ns, &taken)?;
        }
        for (i, fw) in rulesets {
            let n = &self.nfs[i];
            match self.nft.0.iter_mut().find(|(name, _, _)| *name == n.name) {
                Some((_, ns, applied)) => {
                    // Replaces the tables it applied before, in one
                    // transaction; no ruleset now removes them.
                    applied.set_spec(fw);
                    ferry_sys::in_netns(ns.as_deref(), || applied.apply_nftables())?
                        .with_context(|| format!("NF {}: its nftables ruleset", n.name))?;
                }
                None if fw.nftables.is_some() => {
                    let applied = kernel_half(n, fw)?;
                    self.nft.0.push((n.name.clone(), n.netns.clone(), applied));
                }
                None => {}
            }
        }
        Ok(self.nfs.iter().map(|n| n.name.clone()).collect())
    }

    /// The NFs running in XDP ahead of the hybrid NFs: their counters and
    /// flows, as a port's XDP part reports its own.
    pub fn offloaded(&self) -> Vec<OffloadedStatus> {
        let p = self.evnf.pipeline();
        self.ahead.iter().flat_map(|(port, installed)| crate::fastpath::offloaded_status(p, installed, port)).collect()
    }

    /// Registers `socket` (NF `nf`'s, on receive queue `queue` of port
    /// `port`) where a hybrid path hands frames, if `nf` gets them on that
    /// port: the path's NF with a slow path, or the process after it.
    /// Until then the fast path hands such frames to the kernel stack;
    /// from then until the process has filled the socket's fill ring, the
    /// kernel drops them (counted in the socket's statistics).
    pub fn register_socket(&mut self, nf: &str, port: &str, queue: u32, socket: &impl AsRawFd) -> Result<()> {
        if self.to_sockets.iter().any(|(n, p)| n == nf && p == port) {
            self.evnf.register_xsk(queue, socket).context("registering the socket a hybrid path hands frames to")?;
        }
        Ok(())
    }

    /// New fds of the maps NF `nf`'s control plane works on (none if it is
    /// not a hybrid NF), by name.
    pub fn map_fds(&self, nf: &str) -> Result<Vec<(&'static str, OwnedFd)>> {
        let Some(n) = self.nfs.iter().find(|n| n.name == nf) else {
            return Ok(Vec::new());
        };
        Ok(self.evnf.maps().fds(&ferry_evnf::types::control_maps(n.t))?)
    }
}

/// The program a path of hybrid NF `kind` starts with.
fn fast_path(kind: &str) -> Result<HybridElement> {
    let t = ferry_evnf::types::find(kind).ok_or_else(|| anyhow!("{kind}: not a hybrid type"))?;
    Ok(t.fast_paths[0])
}

/// Applies firewall `n`'s nftables ruleset `fw` in its port's namespace,
/// unless a table it declares exists there already (another chain's, or
/// the host's).
fn kernel_half(n: &Member, fw: FirewallSpec) -> Result<Firewall> {
    let mut fw = Firewall::new(fw);
    let ns = n.netns.as_deref();
    let taken = ferry_sys::in_netns(ns, || fw.tables_taken())??;
    refuse_taken(&n.name, ns, &taken)?;
    ferry_sys::in_netns(ns, || fw.apply_nftables())?.with_context(|| format!("NF {}: its nftables ruleset", n.name))?;
    Ok(fw)
}

/// Refuses tables `taken` (which exist in namespace `ns`, and are not NF
/// `nf`'s own): its ruleset would replace them.
fn refuse_taken(nf: &str, ns: Option<&str>, taken: &[String]) -> Result<()> {
    if taken.is_empty() {
        return Ok(());
    }
    bail!(
        "NF {nf}: nftables tables {taken:?} already exist in namespace {} (another chain's, or the host's): its \
         ruleset would replace them",
        ns.unwrap_or("(root)")
    )
}

/// Hybrid NF `name`'s configuration file, checked. A firewall's file
/// with an nftables ruleset, which ferryd applies as root, must be
/// [`trusted_by_root`], checked before the file is read.
fn read_config(name: &str, t: &HybridType, config: &std::path::Path) -> Result<ferry_evnf::EvnfSpec> {
    let trusted = trusted_by_root(config);
    let spec = ferry_evnf::chained::config(t.kind, config).map_err(|e| anyhow!("NF {name}: {e}"))?;
    if t.section == "firewall" && spec.firewall.as_ref().is_some_and(|f| f.nftables.is_some()) {
        trusted.with_context(|| format!("NF {name}: its nftables ruleset"))?;
    }
    Ok(spec)
}

/// ferryd applies an eFW's nftables ruleset as root: its file must be
/// root's and writable by no one else, not a symlink, and in a directory
/// only root can change (so nobody swaps the file between this check and
/// the read).
fn trusted_by_root(file: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(file).with_context(|| format!("{}", file.display()))?;
    if m.file_type().is_symlink() || m.uid() != 0 || m.mode() & 0o022 != 0 {
        bail!(
            "{}: ferryd applies its nftables ruleset as root, so the file must be root's, writable by no one else \
             and not a symlink (owner uid {}, mode {:o})",
            file.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    let dir = file.parent().unwrap_or(std::path::Path::new("/"));
    let d = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    if d.uid() != 0 || d.mode() & 0o022 != 0 {
        bail!(
            "{}: ferryd applies its nftables ruleset as root, so its directory {} must be root's and writable by no \
             one else (owner uid {}, mode {:o})",
            file.display(),
            dir.display(),
            d.uid(),
            d.mode() & 0o7777
        );
    }
    Ok(())
}

/// Deploys `before`, then `path`, for the frames arriving on port `p`,
/// then attaches the pipeline there.
fn attach(
    evnf: &mut HybridPipeline,
    chain: u32,
    elements: (&[Element], &[HybridElement], Option<u32>),
    p: &PortPlan,
) -> Result<()> {
    let ifindex = Port::ifindex(p)?;
    let (before, path, then) = elements;
    evnf.deploy(chain, ifindex, before, path, then)
        .with_context(|| format!("deploying {path:?} for port {}", p.name))?;
    ferry_sys::in_netns(p.netns.as_deref(), || evnf.attach(ifindex, attach_mode(p)))?
        .with_context(|| format!("attaching the hybrid path {path:?} to {} ({})", p.netdev, p.name))
}

impl Drop for KernelHalves {
    fn drop(&mut self) {
        for (_, ns, fw) in &mut self.0 {
            let _ = ferry_sys::in_netns(ns.as_deref(), || fw.remove_nft_tables());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_nftables_file_must_be_roots_alone() {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = std::env::temp_dir().join(format!("ferryd-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("fw.yaml");
        std::fs::write(&file, "firewall: {}\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(trusted_by_root(&file).is_ok());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = trusted_by_root(&file).unwrap_err().to_string();
        assert!(e.contains("writable by no one else") && e.contains("mode 664"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(trusted_by_root(&link).unwrap_err().to_string().contains("not a symlink"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = trusted_by_root(&file).unwrap_err().to_string();
        assert!(e.contains("its directory") && e.contains("mode 777"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
