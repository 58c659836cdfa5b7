//! Deploying, removing and reloading chains: a whole chain placed on this
//! host, or this host's part of a chain over hosts (kept on disk so a
//! restarted ferryd deploys it again).

use ferry_chain::plan::ChainPlan;
use ferry_chain::proto::{ChainSummary, NfReload};

use super::*;
use crate::chain::ChainSetup;
use crate::nsh::NshSetup;

impl Daemon {
    /// Deploys the chain file `file` next to the chains already running.
    /// Nothing they use is touched: a new chain gets its own domains,
    /// ports, kernel hops, NF processes and uids, and one whose ports or
    /// kernel hops are another chain's is refused. `set` fills the file's
    /// placeholders.
    pub fn deploy(&self, file: &Path, set: &[(String, String)]) -> Result<ChainSummary> {
        let _changing = self.changes.lock().expect("changes lock");
        let (text, placement) = self.load(file, set)?;
        self.deploy_placed(file, set, &text, placement, None)
    }

    /// What [`Daemon::deploy`] would refuse of `file`, without deploying
    /// it: a summary with id 0 if nothing.
    pub fn check_deploy(&self, file: &Path, set: &[(String, String)]) -> Result<ChainSummary> {
        let _changing = self.changes.lock().expect("changes lock");
        let (text, placement) = self.load(file, set)?;
        let plan = self.admit(&placement, &text, &file.display().to_string())?;
        // The file's NFs, as a deploy counts them (placed in XDP or not).
        let nfs = placement.decisions.len();
        Ok(ChainSummary {
            name: plan.name,
            file: file.display().to_string(),
            nfs,
            placement: placement.explain(),
            ..Default::default()
        })
    }

    /// Chain file `file`, filled by `set`, and its placement.
    fn load(&self, file: &Path, set: &[(String, String)]) -> Result<(String, ferry_place::Placement)> {
        let (text, origin) = ferry_chain::spec::read_filled(file, set)?;
        let (spec, placement) = ferry_place::load_str_with(&text, &origin, self.cost_model.as_ref())?;
        if !spec.hosts.is_empty() {
            bail!(
                "{} is a chain over hosts: deploy it with `ferry chain deploy`, which gives each host's ferryd its part",
                file.display()
            );
        }
        Ok((text, placement))
    }

    /// The plan of `placement` (from `text`, named `origin`), if this
    /// ferryd can deploy it: its name, ports and kernel hops free, and
    /// what it needs of the machine there ([`crate::preflight`]).
    fn admit(&self, placement: &ferry_place::Placement, text: &str, origin: &str) -> Result<ChainPlan> {
        let mut plan = ChainPlan::compile(&placement.server);
        self.check_free(&plan, text, origin)?;
        if self.persist {
            // Ids are not assigned yet: none are needed to tell.
            let xdp: Vec<_> = placement.xdp.iter().map(|p| (p.clone(), Vec::new())).collect();
            let post: Vec<_> = placement.post.iter().map(|p| (p.clone(), Vec::new())).collect();
            crate::chain::adopt::check_persistable(&plan, &xdp, &post, &placement.hybrid, &placement.whole, false)?;
        }
        crate::preflight::check(&plan, placement, text, origin)?;
        // NFs started without `cpus` inherit ferryd's CPU set.
        plan.settle_polling(std::thread::available_parallelism().map_or(1, |n| n.get()));
        for nf in &plan.nfs {
            let offline = crate::spawn::offline_cpus(&nf.cpus);
            if !offline.is_empty() {
                bail!("{origin}: NF {}: cpus: {offline:?} not online on this machine (`nproc`)", nf.name);
            }
        }
        Ok(plan)
    }

    /// Deploys this host's part of the chain over hosts in `text`
    /// ([`ferry_chain::hosts`]): its NFs and ports as a chain of this
    /// ferryd, and its NSH attachments and entries on the host's
    /// forwarder; a part with no NF is only the entries.
    pub fn deploy_part(&self, text: &str, origin: &str, macs: &[(String, String)]) -> Result<ChainSummary> {
        let _changing = self.changes.lock().expect("changes lock");
        let host = self.host.as_deref().ok_or_else(|| {
            anyhow!("this ferryd was started without --host, so it has no part in a chain over hosts")
        })?;
        if self.persist {
            bail!("parts of chains over hosts cannot outlive ferryd yet: this ferryd runs with --persist");
        }
        let spec = ferry_catalog::parse_chain_str(text, origin)?;
        let part = spec.host_part(host).map_err(|e| anyhow!("{origin}: {e}"))?;
        let name = spec.name();
        if self.chain(&name).is_ok() || self.paths.lock().expect("paths lock").iter().any(|(n, _)| *n == name) {
            bail!("chain {name:?} is already deployed");
        }
        let mut by_host = std::collections::HashMap::new();
        for (h, mac) in macs {
            let mac = mac.parse::<ferry_wire::MacAddr>().map_err(|e| anyhow!("host {h}: {e}"))?;
            by_host.insert(h.clone(), mac.0);
        }
        let fabric = self.fabric(&part.host)?;
        let setup = NshSetup { fabric, part, peers: spec.hosts.clone(), macs: by_host };
        let Some(local) = setup.part.chain.clone() else {
            let install = NshInstall::open(&setup.fabric, &name, &setup.part, &setup.peers, &setup.macs, None)?;
            self.keep_part(&name, text, origin, macs)?;
            self.paths.lock().expect("paths lock").push((name.clone(), install));
            tracing::info!("deployed chain {name:?}: NSH forwarding only on host {host}");
            let id = self.next_chain.fetch_add(1, Ordering::Relaxed);
            return Ok(ChainSummary {
                id,
                name,
                file: origin.to_string(),
                placement: "nsh only".into(),
                ..Default::default()
            });
        };
        let placement = ferry_place::place_with(&local, self.cost_model.as_ref())
            .map_err(|e| anyhow!("{origin}: {}", e.message))?;
        let summary = self.deploy_placed(Path::new(origin), &[], text, placement, Some(setup))?;
        if let Err(e) = self.keep_part(&name, text, origin, macs) {
            if let Ok(c) = self.chain(&name) {
                self.chains.lock().expect("chains lock").retain(|x| !Arc::ptr_eq(x, &c));
                c.stop(REMOVE_GRACE);
            }
            return Err(e);
        }
        Ok(summary)
    }

    /// Keeps a part this ferryd deployed, to deploy it again when it starts
    /// after a crash: the other hosts' forwarders find this host again.
    pub(super) fn keep_part(&self, name: &str, text: &str, origin: &str, macs: &[(String, String)]) -> Result<()> {
        let record = crate::persist::PartRecord { text: text.into(), origin: origin.into(), macs: macs.to_vec() };
        record.save(&self.state_dir, name)
    }

    /// Deploys again the parts of chains over hosts this host had when its
    /// ferryd went away.
    pub(super) fn redeploy_parts(&self) {
        let parts = match crate::persist::PartRecord::load_all(&self.state_dir) {
            Ok((parts, bad)) => {
                bad.iter().for_each(|b| tracing::warn!("{b}"));
                parts
            }
            Err(e) => {
                tracing::warn!("deploying no earlier part: {e:#}");
                return;
            }
        };
        for (name, p) in parts {
            match self.deploy_part(&p.text, &p.origin, &p.macs) {
                Ok(_) => tracing::info!("deployed again this host's part of chain {name:?}"),
                Err(e) => tracing::info!("this host's part of chain {name:?} not deployed again: {e:#}"),
            }
        }
    }

    pub(super) fn deploy_placed(
        &self,
        file: &Path,
        set: &[(String, String)],
        text: &str,
        placement: ferry_place::Placement,
        nsh: Option<NshSetup>,
    ) -> Result<ChainSummary> {
        let origin = file.display().to_string();
        let plan = self.admit(&placement, text, &origin)?;
        // Taken back if the chain fails to come up, so that ids count the
        // chains deployed (deploys are serialised by `changes`).
        let first_nf = self.next_nf.load(Ordering::Relaxed);
        let id = self.next_chain.fetch_add(1, Ordering::Relaxed);
        let release_ids = || {
            self.next_chain.store(id, Ordering::Relaxed);
            self.next_nf.store(first_nf, Ordering::Relaxed);
        };
        let new_id = || self.next_nf.fetch_add(1, Ordering::Relaxed);
        let nf_ids: Vec<u32> = plan.nfs.iter().map(|_| new_id()).collect();
        // A split NF is one NF: its element has its process's id.
        let process_id = |name: &str| plan.nfs.iter().position(|n| n.name == name).map(|i| nf_ids[i]);
        let ids = |nfs: &[ferry_place::OffloadedNf], split: Option<&String>| -> Vec<u32> {
            nfs.iter()
                .map(|n| (split == Some(&n.name)).then(|| process_id(&n.name)).flatten().unwrap_or_else(new_id))
                .collect()
        };
        let xdp = placement.xdp.iter().map(|p| (p.clone(), ids(&p.nfs, p.split.as_ref()))).collect();
        let post = placement.post.iter().map(|p| (p.clone(), ids(&p.nfs, p.split.as_ref()))).collect();
        let ahead_ids = placement.hybrid.iter().map(|h| h.before.iter().map(|_| new_id()).collect()).collect();
        let setup = ChainSetup {
            id,
            nf_ids,
            file: file.to_path_buf(),
            set: set.to_vec(),
            plan,
            socket: self.socket.clone(),
            spawn: self.spawn,
            uids: self.uids,
            xdp,
            post,
            hybrid: placement.hybrid.clone(),
            ahead_ids,
            whole: placement.whole.clone(),
            placement: placement.explain(),
            persist: self.persist.then(|| self.state_dir.clone()),
            nsh,
        };
        let chain = match Chain::setup(setup) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                release_ids();
                return Err(e.context(format!("chain from {origin}")));
            }
        };
        // Listed before its NFs start: their hellos look it up.
        self.chains.lock().expect("chains lock").push(chain.clone());
        if let Err(e) = chain.start().and_then(|()| chain.save_state()) {
            self.chains.lock().expect("chains lock").retain(|c| c.id != id);
            chain.stop(REMOVE_GRACE);
            release_ids();
            return Err(e);
        }
        let summary = chain.summary();
        let processes = chain.plan.nfs.len();
        tracing::info!(
            "deployed chain {:?} (id {id}) from {}: {processes} NF processes, {} NFs in XDP",
            chain.plan.name,
            file.display(),
            summary.nfs - processes
        );
        Ok(summary)
    }

    /// Refuses a chain whose name, ports or kernel hops are taken; a taken
    /// port is named by its line of `text` (the chain file, `origin`).
    pub(super) fn check_free(&self, plan: &ChainPlan, text: &str, origin: &str) -> Result<()> {
        let name = &plan.name;
        let again = format!("remove it first (`ferry chain remove {name}`), or give this one another `name:`");
        if self.paths.lock().expect("paths lock").iter().any(|(n, _)| n == name) {
            bail!("{origin}: chain {name:?} is already deployed (its part over hosts here): {again}");
        }
        for c in self.chains.lock().expect("chains lock").iter() {
            if c.plan.name == *name {
                bail!("{origin}: chain {name:?} is already deployed (id {}): {again}", c.id);
            }
            let other = &c.plan.name;
            for p in &plan.ports {
                if let Some(q) = c.plan.ports.iter().find(|q| q.netns == p.netns && q.netdev == p.netdev) {
                    let message = format!(
                        "device {} (netns {}) is already port {:?} of chain {other:?}: a device is one chain's. \
                         Give this port another device, or remove that chain first (`ferry chain remove {other}`)",
                        p.netdev,
                        p.netns.as_deref().unwrap_or("(root)"),
                        q.name,
                    );
                    return Err(crate::devices::located(text, origin, &p.name, "netdev", message).into());
                }
            }
            for k in &plan.kernel {
                if c.plan.kernel.iter().any(|q| q.netns == k.netns && q.dev == k.dev) {
                    bail!(
                        "{origin}: kernel hop {:?}: device {} is already chain {other:?}'s: give this hop another \
                         `dev:`, or remove that chain first (`ferry chain remove {other}`)",
                        k.name,
                        k.dev
                    );
                }
            }
        }
        Ok(())
    }

    /// Removes chain `name`: it stops taking hellos, its NFs are stopped
    /// and everything it holds is released. Other chains are not touched.
    pub fn remove(&self, name: &str) -> Result<()> {
        let _changing = self.changes.lock().expect("changes lock");
        crate::persist::PartRecord::remove(&self.state_dir, name);
        let mut paths = self.paths.lock().expect("paths lock");
        if let Some(i) = paths.iter().position(|(n, _)| n == name) {
            paths.remove(i);
            tracing::info!("removed chain {name:?} (NSH forwarding only)");
            return Ok(());
        }
        drop(paths);
        let chain = self.chain(name)?;
        self.chains.lock().expect("chains lock").retain(|c| c.id != chain.id);
        chain.stop(REMOVE_GRACE);
        tracing::info!("removed chain {:?} (id {})", chain.plan.name, chain.id);
        Ok(())
    }

    /// Re-reads the configuration files of chain `name`'s hybrid NFs and
    /// applies them, without restarting anything (see [`Chain::reload`]).
    pub fn reload(&self, name: &str) -> Result<Vec<NfReload>> {
        let _changing = self.changes.lock().expect("changes lock");
        let chain = self.chain(name)?;
        let outcomes = chain.reload()?;
        tracing::info!("reloaded chain {:?}: {outcomes:?}", chain.plan.name);
        Ok(outcomes)
    }
}
