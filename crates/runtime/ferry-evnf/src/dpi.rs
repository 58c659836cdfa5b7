//! eDPI: deep packet inspection in reactive mode. Frames of flows without
//! a bypass rule go to the slow path, where nDPI classifies the flow; once
//! a flow is classified as one of the configured elephant protocols, a
//! 5-tuple bypass rule (both directions) lets the rest of it skip the slow
//! path in XDP. Idle bypass rules age out. With `bypass: false` it is
//! nDPI alone: every frame is inspected in user space.

use std::collections::HashMap;
use std::time::Duration;

use ferry_bpf::abi::SlowMeta;
use ferry_bpf::hybrid::{DpiBypass, FlowTuple, HybridMaps};
use ferry_ndpi::{Classification, Flow, Ndpi};

use crate::config::DpiSpec;
use crate::config::EvnfSpec;
use ferry_sys::monotonic_ns;

use crate::hybrid::{ip_packet, FastTable, HybridNf, SlowVerdict};
use crate::EvnfError;

struct FlowState {
    flow: Flow,
    class: Option<Classification>,
    last_seen_ns: u64,
    packets: u64,
}

pub struct Dpi {
    spec: DpiSpec,
    ndpi: Ndpi,
    elephants: Vec<u16>,
    /// nDPI state per flow (one entry for both directions, keyed by the
    /// first packet's 5-tuple).
    flows: HashMap<FlowTuple, FlowState>,
    bypass: FastTable<FlowTuple, DpiBypass>,
    bypass_installed: u64,
    bypass_expired: u64,
    bypass_errors: u64,
    inspected: u64,
    not_ipv4: u64,
}

/// The 5-tuple of a frame's IPv4 packet (ports 0 for protocols without
/// them), read by the one flow parser, as the fast path reads it
/// (`ferry_parse.h` keeps the same rules); None for a frame without IPv4.
/// An error is a malformed frame.
pub fn flow_of(frame: &[u8]) -> Result<Option<FlowTuple>, ferry_wire::WireError> {
    let flow = ferry_wire::flow::parse(frame)?;
    Ok(flow.is_ipv4().then(|| FlowTuple::new(flow.src, flow.sport, flow.dst, flow.dport, flow.proto)))
}

impl Dpi {
    pub fn new(fast: &HybridMaps, spec: DpiSpec) -> Result<Dpi, EvnfError> {
        let ndpi = Ndpi::new(spec.protocols_file.as_deref())?;
        let elephants = resolve_elephants(&ndpi, &spec)?;
        let bypass = FastTable::new(
            fast.map_handle("ferry_dpi_bypass")?,
            "dpi_bypass",
            &["saddr", "daddr", "sport", "dport", "proto"],
            &["app", "last_seen_ns", "packets", "bytes"],
            Duration::from_secs_f64(spec.idle_timeout_s),
        )?;
        Ok(Dpi {
            spec,
            ndpi,
            elephants,
            flows: HashMap::new(),
            bypass,
            bypass_installed: 0,
            bypass_expired: 0,
            bypass_errors: 0,
            inspected: 0,
            not_ipv4: 0,
        })
    }

    /// Timeouts, elephants and the bypass switch may change on reload;
    /// the protocols file is read once, at start.
    pub fn set_spec(&mut self, spec: DpiSpec) -> Result<(), EvnfError> {
        self.elephants = resolve_elephants(&self.ndpi, &spec)?;
        self.bypass.set_idle(Duration::from_secs_f64(spec.idle_timeout_s));
        self.spec = spec;
        Ok(())
    }

    fn install_bypass(&mut self, key: FlowTuple, app: u16, now: u64) {
        let rule = DpiBypass { app: app as u32, last_seen_ns: now, ..Default::default() };
        for k in [key, key.reversed()] {
            match self.bypass.install(k, rule) {
                Ok(()) => self.bypass_installed += 1,
                Err(e) => {
                    self.bypass_errors += 1;
                    tracing::warn!("eDPI: bypass rule for {k}: {e}");
                }
            }
        }
    }
}

fn resolve_elephants(ndpi: &Ndpi, spec: &DpiSpec) -> Result<Vec<u16>, EvnfError> {
    spec.elephants
        .iter()
        .map(|name| {
            ndpi.protocol_id(name)
                .ok_or_else(|| EvnfError::Config(format!("dpi.elephants: nDPI knows no protocol {name:?}")))
        })
        .collect()
}

impl HybridNf for Dpi {
    fn name(&self) -> &'static str {
        "dpi"
    }

    fn reconfigure(&mut self, spec: &EvnfSpec) -> Result<(), EvnfError> {
        self.set_spec(spec.dpi.clone().ok_or_else(|| spec.missing("dpi"))?)
    }

    fn install(&mut self, _fast: &mut HybridMaps) -> Result<(), EvnfError> {
        Ok(())
    }

    fn on_slow_path(&mut self, _fast: &mut HybridMaps, frame: &mut [u8], _meta: SlowMeta) -> SlowVerdict {
        // Malformed: dropped, as the fast path drops it.
        let Ok(flow) = flow_of(frame) else { return SlowVerdict::Drop };
        let (Some(key), Some(ip)) = (flow, ip_packet(frame)) else {
            self.not_ipv4 += 1;
            return SlowVerdict::Reinject;
        };
        let now = monotonic_ns();
        let known = if self.flows.contains_key(&key.reversed()) { key.reversed() } else { key };
        let state = self.flows.entry(known).or_insert_with(|| FlowState {
            flow: Flow::new(),
            class: None,
            last_seen_ns: now,
            packets: 0,
        });
        state.last_seen_ns = now;
        state.packets += 1;
        if state.class.is_some() {
            return SlowVerdict::Reinject;
        }
        self.inspected += 1;
        let class = self.ndpi.process(&mut state.flow, ip, now / 1_000_000);
        if !class.done {
            return SlowVerdict::Reinject;
        }
        state.class = Some(class);
        let app = class.protocol();
        if self.spec.bypass && self.elephants.contains(&app) {
            self.install_bypass(key, app, now);
        }
        SlowVerdict::Reinject
    }

    fn on_tick(&mut self, _fast: &mut HybridMaps, now_ns: u64) -> Result<(), EvnfError> {
        self.bypass_expired += self.bypass.expire(now_ns, |_| false)?.len() as u64;
        let idle = (self.spec.idle_timeout_s * 1e9) as u64;
        // Bypassed flows never reach the slow path, so their nDPI state
        // looks idle too; it is dropped with everything else that is.
        self.flows.retain(|_, s| now_ns.saturating_sub(s.last_seen_ns) <= idle);
        Ok(())
    }

    /// `inspected`, `bypass_installed`, `bypass_expired`, `slow_path_flows`,
    /// `bypass_errors`, `not_ipv4`.
    fn control_counters(&self) -> Vec<u64> {
        let flows = self.flows.len() as u64;
        vec![self.inspected, self.bypass_installed, self.bypass_expired, flows, self.bypass_errors, self.not_ipv4]
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn flow_of_reads_the_5_tuple_and_refuses_malformed_frames() {
        use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
        let tuple = FiveTuple {
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 0, 2].into(),
            src_port: 40000,
            dst_port: 5201,
            proto: L4Proto::Tcp,
        };
        let mut frame = vec![0u8; 64];
        build_frame(&spec, &tuple, None, &mut frame).unwrap();
        let f = flow_of(&frame).unwrap().unwrap();
        assert_eq!(f.src(), (Ipv4Addr::new(10, 0, 0, 1).into(), 40000));
        assert_eq!(f.dst(), (Ipv4Addr::new(10, 0, 0, 2).into(), 5201));
        assert!(flow_of(&frame[..40]).is_err(), "cut inside the TCP header");
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(flow_of(&arp), Ok(None));
    }
}
