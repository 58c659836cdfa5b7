//! The fabric between hosts: probing the hosts this host's parts send to,
//! and the NSH forwarder on the host's fabric device.

use super::*;

impl Daemon {
    /// Probes, every [`PROBE_EVERY`], the hosts this host's parts send to
    /// (a status request for the chain, over the control channel). After
    /// [`DOWN_AFTER`] failures in a row a host is unreachable: the entries
    /// that send to it are taken out, so its frames are dropped and
    /// counted here (`no_hop`) instead of vanishing in a host that lost its
    /// part; its first answer puts them back.
    pub(super) fn watch_peers(self: Arc<Self>) {
        let mut failures: std::collections::HashMap<(String, String), u32> = Default::default();
        let me = self.host.clone().unwrap_or_default();
        // Made once: a probe every 200 ms reads no key file.
        let tls = match self.tls_dir.as_deref().map(|d| ferry_remote::TlsDir::new(d).client(&me)).transpose() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("probing over TLS impossible: {e}");
                None
            }
        };
        while !self.stop.load(Ordering::Acquire) && !signalled() {
            std::thread::sleep(PROBE_EVERY);
            let mut targets: Vec<(String, ferry_chain::hosts::HostSpec)> = Vec::new();
            for c in self.chains.lock().expect("chains lock").iter() {
                targets.extend(c.nsh_next_hosts().into_iter().map(|h| (c.plan.name.clone(), h)));
            }
            for (name, install) in self.paths.lock().expect("paths lock").iter() {
                targets.extend(install.next_hosts().into_iter().map(|h| (name.clone(), h)));
            }
            for (chain, host) in targets {
                let Some(control) = host.control.as_deref() else { continue };
                let msg = Msg::Status { chain: chain.clone() };
                // Up once its part is there and its NFs are connected: a
                // host that is still starting them would lose frames
                // nobody counts.
                let answered = matches!(
                    ferry_remote::request_control(control, &host.name, tls.as_ref(), &msg, PROBE_TIMEOUT),
                    Ok(Msg::StatusReply(s)) if s.nfs.iter().all(|n| n.connected)
                );
                let n = failures.entry((chain.clone(), host.name.clone())).or_default();
                *n = if answered { 0 } else { *n + 1 };
                let up = *n < DOWN_AFTER;
                let changed = match self.chain(&chain) {
                    Ok(c) => c.nsh_set_reachable(&host.name, up),
                    Err(_) => self
                        .paths
                        .lock()
                        .expect("paths lock")
                        .iter_mut()
                        .find(|(n, _)| *n == chain)
                        .is_some_and(|(_, i)| i.set_reachable(&host.name, up)),
                };
                if changed {
                    let now = if up { "reachable again" } else { "unreachable: its frames are dropped here" };
                    tracing::info!("chain {chain:?}: host {} is {now}", host.name);
                }
            }
        }
    }

    /// The forwarder on this host's fabric, loaded for the first chain
    /// over hosts; every later one must name the same fabric.
    pub(super) fn fabric(&self, host: &ferry_chain::hosts::HostSpec) -> Result<Arc<Mutex<Fabric>>> {
        let mut fabric = self.fabric.lock().expect("fabric lock");
        if let Some(f) = fabric.as_ref() {
            let have = f.lock().expect("fabric lock").host.clone();
            if !Fabric::same(&have, host) {
                bail!("host {:?}: its fabric is {:?}; this chain gives {:?}", have.name, have.fabric, host.fabric);
            }
            return Ok(f.clone());
        }
        let f = Arc::new(Mutex::new(Fabric::open(host)?));
        *fabric = Some(f.clone());
        Ok(f)
    }

    /// This host's fabric MAC, for a chain over hosts.
    pub(super) fn fabric_mac(&self, text: &str, origin: &str) -> Result<Msg> {
        let host = self.host.as_deref().ok_or_else(|| anyhow!("this ferryd was started without --host"))?;
        let spec = ferry_catalog::parse_chain_str(text, origin)?;
        let me = spec.hosts.iter().find(|h| h.name == host).ok_or_else(|| anyhow!("{origin}: no host {host:?}"))?;
        let mac = crate::nsh::mac_of(me.netns.as_deref(), &me.fabric.dev)?;
        Ok(Msg::FabricReply { host: host.to_string(), mac: ferry_wire::MacAddr(mac).to_string() })
    }
}
