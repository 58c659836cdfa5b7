//! Runs the hybrid NFs of one file in the calling thread's network
//! namespace: loads the fast paths, installs each NF's rules, chains and
//! attaches them, then serves slow paths and timers until told to stop.
//! `ferry evnf run` is a thin wrapper; tests and benchmarks use it too.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry_bpf::evnf::Evnf;
use ferry_bpf::AttachMode;
use ferry_xsk::tun::{open_tun, TunKind};
use serde_json::json;

use crate::balancer::Balancer;
use crate::config::{EvnfSpec, NfName};
use crate::dpi::Dpi;
use crate::firewall::Firewall;
use crate::hybrid::{monotonic_ns, HybridNf, SlowPath};
use crate::EvnfError;

pub struct Runner {
    spec: EvnfSpec,
    evnf: Evnf,
    firewall: Option<Firewall>,
    balancer: Option<Balancer>,
    dpi: Option<Dpi>,
    slow: Vec<SlowPath>,
    tun: Option<OwnedFd>,
    next_tick_ns: [u64; 3],
    generation: u64,
    reload_errors: Vec<String>,
}

fn ifindex(dev: &str) -> Result<u32, EvnfError> {
    ferry_xsk::ifindex(dev).ok_or_else(|| EvnfError::Config(format!("no device {dev} in this network namespace")))
}

fn rx_queues(dev: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{dev}/queues"))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count())
        .unwrap_or(1)
        .max(1) as u32
}

fn ip(args: &[&str]) -> Result<(), EvnfError> {
    let out = Command::new("ip").args(args).output().map_err(|e| EvnfError::Io { what: "running ip", source: e })?;
    if !out.status.success() {
        return Err(EvnfError::Config(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl Runner {
    /// Everything is configured before the first program is attached, so
    /// no frame meets a half-installed NF.
    pub fn start(spec: EvnfSpec) -> Result<Runner, EvnfError> {
        let mode: AttachMode = spec.xdp_mode.as_deref().unwrap_or("driver").parse().map_err(EvnfError::Config)?;
        let mut evnf = Evnf::load()?;
        let mut firewall = spec.firewall.clone().filter(|_| spec.uses(NfName::Firewall)).map(Firewall::new);
        let mut balancer = match &spec.balancer {
            Some(b) if spec.uses(NfName::Balancer) || spec.uses(NfName::BalancerReply) => {
                Some(Balancer::new(evnf.maps(), b.clone())?)
            }
            _ => None,
        };
        let mut dpi = match &spec.dpi {
            Some(d) if spec.uses(NfName::Dpi) => Some(Dpi::new(evnf.maps(), d.clone())?),
            _ => None,
        };
        if let Some(f) = firewall.as_mut() {
            f.install(evnf.maps_mut())?;
            f.apply_nftables()?;
        }
        if let Some(b) = balancer.as_mut() {
            b.install(evnf.maps_mut())?;
        }
        if let Some(d) = dpi.as_mut() {
            d.install(evnf.maps_mut())?;
        }
        // One chain id per port: paths of two ports may share NFs, and an
        // NF's place in the stage tables is per chain.
        for (chain, p) in spec.ports.iter().enumerate() {
            let path: Vec<_> = p.chain.iter().map(|nf| nf.fast_path()).collect();
            evnf.deploy(chain as u32, ifindex(&p.dev)?, &[], &path, None)?;
        }
        let (mut slow, mut tun) = (Vec::new(), None);
        if let Some(d) = &spec.dpi.as_ref().filter(|_| dpi.is_some()) {
            tun = Some(open_tun(&d.reinject_dev, TunKind::Tun)?);
            // Packets coming back from the slow path arrive on the TUN
            // device but are answered through the ports: no reverse-path check.
            let _ = std::fs::write(format!("/proc/sys/net/ipv4/conf/{}/rp_filter", d.reinject_dev), "0");
            ip(&["link", "set", "dev", &d.reinject_dev, "up"])?;
            for p in spec.ports.iter().filter(|p| p.chain.contains(&NfName::Dpi)) {
                let index = ifindex(&p.dev)?;
                for q in 0..rx_queues(&p.dev) {
                    slow.push(SlowPath::open(&mut evnf, index, q)?);
                }
            }
        }
        for p in &spec.ports {
            evnf.attach(ifindex(&p.dev)?, mode)?;
        }
        Ok(Runner {
            spec,
            evnf,
            firewall,
            balancer,
            dpi,
            slow,
            tun,
            next_tick_ns: [0; 3],
            generation: 1,
            reload_errors: Vec::new(),
        })
    }

    pub fn evnf(&self) -> &Evnf {
        &self.evnf
    }

    /// Applies a changed file: rules, weights, timeouts, the VIP. Ports and
    /// chains are fixed while running (they need a restart). A failure
    /// leaves the NFs that were already updated updated.
    pub fn reload(&mut self, spec: EvnfSpec) -> Result<(), EvnfError> {
        let shape = |s: &EvnfSpec| s.ports.iter().map(|p| (p.dev.clone(), p.chain.clone())).collect::<Vec<_>>();
        if shape(&spec) != shape(&self.spec) {
            return Err(EvnfError::Config(format!("{}: ports and chains change only on restart", spec.origin)));
        }
        if let (Some(f), Some(s)) = (self.firewall.as_mut(), spec.firewall.clone()) {
            f.set_spec(s);
            f.install(self.evnf.maps_mut())?;
            f.apply_nftables()?;
        }
        if let (Some(b), Some(s)) = (self.balancer.as_mut(), spec.balancer.clone()) {
            b.set_spec(s)?;
            b.install(self.evnf.maps_mut())?;
        }
        if let (Some(d), Some(s)) = (self.dpi.as_mut(), spec.dpi.clone()) {
            d.set_spec(s)?;
        }
        self.spec = spec;
        Ok(())
    }

    /// Serves until `stop` is set. `reload` set: the file is read again.
    /// The report is written to `status` (atomically) after every tick.
    pub fn run(&mut self, stop: &AtomicBool, reload: &AtomicBool, status: Option<&Path>) -> Result<(), EvnfError> {
        let mut fds: Vec<libc::pollfd> =
            self.slow.iter().map(|s| libc::pollfd { fd: s.fd(), events: libc::POLLIN, revents: 0 }).collect();
        while !stop.load(Ordering::Relaxed) {
            if reload.swap(false, Ordering::Relaxed) {
                let result = crate::config::parse(Path::new(&self.spec.origin))
                    .map_err(|e| EvnfError::Config(e.to_string()))
                    .and_then(|s| self.reload(s));
                // Every attempt is a generation; a failed one adds to reload_errors.
                self.generation += 1;
                if let Err(e) = result {
                    tracing::warn!("reload: {e}");
                    self.reload_errors.push(e.to_string());
                }
                self.write_status(status)?;
            }
            if fds.is_empty() {
                std::thread::sleep(Duration::from_millis(20));
            } else {
                // SAFETY: polls an array of pollfds we own.
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
                self.service_slow_paths()?;
            }
            if self.tick(monotonic_ns())? {
                self.write_status(status)?;
            }
        }
        self.write_status(status)
    }

    fn service_slow_paths(&mut self) -> Result<(), EvnfError> {
        let (Some(tun), Some(dpi)) = (self.tun.as_ref(), self.dpi.as_mut()) else { return Ok(()) };
        let evnf = &mut self.evnf;
        for sp in self.slow.iter_mut() {
            // Drain what is there, bounded so that timers still run.
            for _ in 0..64 {
                if sp.service(tun, &mut |frame, meta| dpi.on_slow_path(evnf.maps_mut(), frame, meta))? == 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Runs every NF's timer that is due; true if any ran.
    fn tick(&mut self, now: u64) -> Result<bool, EvnfError> {
        let mut ran = false;
        let nfs: [Option<&mut dyn HybridNf>; 3] = [
            self.firewall.as_mut().map(|n| n as &mut dyn HybridNf),
            self.balancer.as_mut().map(|n| n as &mut dyn HybridNf),
            self.dpi.as_mut().map(|n| n as &mut dyn HybridNf),
        ];
        for (i, nf) in nfs.into_iter().enumerate() {
            let Some(nf) = nf else { continue };
            if now >= self.next_tick_ns[i] {
                nf.on_tick(self.evnf.maps_mut(), now)?;
                self.next_tick_ns[i] = now + nf.tick_interval().as_nanos() as u64;
                ran = true;
            }
        }
        Ok(ran)
    }

    pub fn report(&self) -> serde_json::Value {
        let mut nfs = serde_json::Map::new();
        let all: [Option<&dyn HybridNf>; 3] = [
            self.firewall.as_ref().map(|n| n as &dyn HybridNf),
            self.balancer.as_ref().map(|n| n as &dyn HybridNf),
            self.dpi.as_ref().map(|n| n as &dyn HybridNf),
        ];
        for nf in all.into_iter().flatten() {
            nfs.insert(nf.name().into(), nf.report(self.evnf.maps()));
        }
        let [routed, kernel] = self.evnf.maps().route_counters().unwrap_or_default();
        let slow: Vec<_> = self.slow.iter().map(SlowPath::counters).collect();
        json!({
            "generation": self.generation,
            "config": self.spec.origin,
            "nfs": nfs,
            "chain_end": { "routed": routed.packets, "to_kernel": kernel.packets },
            "slow_path": slow,
            "reload_errors": self.reload_errors,
        })
    }

    fn write_status(&self, status: Option<&Path>) -> Result<(), EvnfError> {
        let Some(path) = status else { return Ok(()) };
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(&self.report()).unwrap_or_default();
        std::fs::write(&tmp, text).map_err(|e| EvnfError::Io { what: "writing the status file", source: e })?;
        std::fs::rename(&tmp, path).map_err(|e| EvnfError::Io { what: "writing the status file", source: e })
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(f) = self.firewall.as_mut() {
            f.shutdown();
        }
    }
}
