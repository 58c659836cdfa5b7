//! eLB: an L4 load balancer in proactive mode. Everything runs in XDP: a
//! new flow to the VIP hashes into the weighted server-selection array,
//! connection tracking keeps established flows on their backend, and DNAT
//! (forward) / SNAT back to the VIP (replies) fix both checksums. The
//! control plane here installs the VIP, backends and array, expires idle
//! and closed connections, and (with `feedback`) recomputes the weights
//! from each backend's measured load: its open connections.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use ferry_bpf::hybrid::{FlowTuple, HybridMaps, LbConn, LbReply, LB_CLOSING, LB_MAX_BACKENDS};

use crate::config::BalancerSpec;
use crate::config::EvnfSpec;
use crate::hybrid::{FastTable, HybridNf};
use crate::weights::{feedback_weights, selection_ring};
use crate::EvnfError;

/// A closed (FIN/RST) connection keeps its entry this long, so that the
/// last ACKs of the teardown still reach the same backend.
const CLOSING_GRACE_NS: u64 = 2_000_000_000;

pub struct Balancer {
    spec: BalancerSpec,
    conns: FastTable<FlowTuple, LbConn>,
    replies: FastTable<FlowTuple, LbReply>,
    /// Backend address of each fast-path slot. Tracked connections store
    /// the slot, so a slot keeps its address as long as the balancer runs:
    /// a backend dropped from the file keeps its slot with weight 0 and its
    /// connections keep going to it.
    slots: Vec<SocketAddr>,
    /// Configured weight per slot (0 for dropped backends).
    base: Vec<u32>,
    /// Weights in force now per slot (configured, or from feedback), ×100.
    weights: Vec<u32>,
    installed_vip: Option<(SocketAddr, u8)>,
    last_feedback_ns: u64,
    feedback_rounds: u64,
    expired: u64,
    open_per_slot: Vec<u64>,
}

impl Balancer {
    pub fn new(fast: &HybridMaps, spec: BalancerSpec) -> Result<Balancer, EvnfError> {
        let idle = Duration::from_secs_f64(spec.idle_timeout_s);
        let flow = ["saddr", "daddr", "sport", "dport", "proto"];
        let conns = FastTable::new(
            fast.map_handle("ferry_lb_conns")?,
            "lb_conns",
            &flow,
            &["backend", "flags", "last_seen_ns", "packets", "bytes"],
            idle,
        )?;
        let replies =
            FastTable::new(fast.map_handle("ferry_lb_replies")?, "lb_replies", &flow, &["vip", "vport"], idle)?;
        let mut lb = Balancer {
            spec,
            conns,
            replies,
            slots: Vec::new(),
            base: Vec::new(),
            weights: Vec::new(),
            installed_vip: None,
            last_feedback_ns: 0,
            feedback_rounds: 0,
            expired: 0,
            open_per_slot: Vec::new(),
        };
        lb.assign_slots()?;
        Ok(lb)
    }

    /// Takes `spec`, or refuses it and changes nothing.
    pub fn set_spec(&mut self, spec: BalancerSpec) -> Result<(), EvnfError> {
        let new = spec.backends.iter().filter(|b| !self.slots.contains(&b.addr)).count();
        if self.slots.len() + new > LB_MAX_BACKENDS as usize {
            return Err(EvnfError::Config(format!(
                "balancer: more than {LB_MAX_BACKENDS} backends over this run (removed ones keep their slot)"
            )));
        }
        let idle = Duration::from_secs_f64(spec.idle_timeout_s);
        self.conns.set_idle(idle);
        self.replies.set_idle(idle);
        self.spec = spec;
        self.assign_slots()
    }

    /// Gives every configured backend its slot (an existing one for a known
    /// address) and recomputes the configured weight per slot.
    fn assign_slots(&mut self) -> Result<(), EvnfError> {
        for b in &self.spec.backends {
            if !self.slots.contains(&b.addr) {
                if self.slots.len() >= LB_MAX_BACKENDS as usize {
                    return Err(EvnfError::Config(format!(
                        "balancer: more than {LB_MAX_BACKENDS} backends over this run (removed ones keep their slot)"
                    )));
                }
                self.slots.push(b.addr);
            }
        }
        self.base = self
            .slots
            .iter()
            .map(|a| self.spec.backends.iter().find(|b| b.addr == *a).map_or(0, |b| b.weight))
            .collect();
        self.open_per_slot.resize(self.slots.len(), 0);
        Ok(())
    }

    fn write_ring(&mut self, fast: &mut HybridMaps, weights: Vec<u32>) -> Result<(), EvnfError> {
        fast.lb_set_ring(0, &selection_ring(&weights))?;
        self.weights = weights;
        Ok(())
    }

    /// The reply-direction key of a tracked connection.
    fn back_flow(&self, flow: &FlowTuple, conn: &LbConn) -> Option<FlowTuple> {
        let be = self.slots.get(conn.backend as usize)?;
        let (client, client_port) = flow.src();
        Some(FlowTuple::new(be.ip(), be.port(), client, client_port, flow.proto))
    }

    /// Removes a connection and its reply entry together, once neither
    /// direction has been seen for the idle timeout (or it closed and the
    /// grace period passed); then reply entries left without a connection.
    fn expire(&mut self, now_ns: u64) -> Result<(), EvnfError> {
        let replies: HashMap<FlowTuple, LbReply> = self.replies.entries().into_iter().collect();
        let idle = self.conns.idle_ns();
        let (mut live, mut removed) = (HashSet::new(), HashSet::new());
        for (flow, conn) in self.conns.entries() {
            let back = self.back_flow(&flow, &conn);
            let reply_seen = back.and_then(|b| replies.get(&b)).map_or(0, |r| r.last_seen_ns);
            let quiet = now_ns.saturating_sub(conn.last_seen_ns.max(reply_seen));
            if quiet > idle || (conn.flags & LB_CLOSING != 0 && quiet > CLOSING_GRACE_NS) {
                self.conns.remove(&flow)?;
                if let Some(b) = back {
                    self.replies.remove(&b)?;
                    removed.insert(b);
                }
                self.expired += 1;
            } else if let Some(b) = back {
                live.insert(b);
            }
        }
        for (back, reply) in replies {
            let orphan = !live.contains(&back) && !removed.contains(&back);
            if orphan && now_ns.saturating_sub(reply.last_seen_ns) > idle {
                self.replies.remove(&back)?;
            }
        }
        Ok(())
    }

    fn count_open(&mut self) {
        self.open_per_slot.iter_mut().for_each(|c| *c = 0);
        for (_, c) in self.conns.entries() {
            if c.flags & LB_CLOSING == 0 {
                if let Some(n) = self.open_per_slot.get_mut(c.backend as usize) {
                    *n += 1;
                }
            }
        }
    }
}

impl HybridNf for Balancer {
    fn name(&self) -> &'static str {
        "balancer"
    }

    /// Backends, weights, the VIP, timeouts and feedback may change; a
    /// dropped backend keeps its slot at weight 0, so its connections
    /// stay where they are.
    fn reconfigure(&mut self, spec: &EvnfSpec) -> Result<(), EvnfError> {
        self.set_spec(spec.balancer.clone().ok_or_else(|| spec.missing("balancer"))?)
    }

    /// Backends and array first, the VIP last: a frame that sees the VIP
    /// finds everything it needs.
    fn install(&mut self, fast: &mut HybridMaps) -> Result<(), EvnfError> {
        for (i, addr) in self.slots.iter().enumerate() {
            fast.lb_set_backend(i as u32, addr.ip(), addr.port())?;
        }
        let configured = self.base.iter().map(|w| w * 100).collect();
        self.write_ring(fast, configured)?;
        let vip = (self.spec.vip, self.spec.proto.number());
        fast.lb_set_vip(vip.0.ip(), vip.0.port(), vip.1, 0)?;
        if let Some(old) = self.installed_vip.filter(|old| *old != vip) {
            fast.lb_remove_vip(old.0.ip(), old.0.port(), old.1)?;
        }
        self.installed_vip = Some(vip);
        Ok(())
    }

    fn on_tick(&mut self, fast: &mut HybridMaps, now_ns: u64) -> Result<(), EvnfError> {
        self.expire(now_ns)?;
        self.count_open();
        let Some(fb) = &self.spec.feedback else { return Ok(()) };
        if now_ns.saturating_sub(self.last_feedback_ns) < fb.interval_ms * 1_000_000 {
            return Ok(());
        }
        self.last_feedback_ns = now_ns;
        let load: Vec<f64> = self.open_per_slot.iter().map(|n| *n as f64).collect();
        let new = feedback_weights(&self.base, &self.weights, &load);
        if new != self.weights {
            self.feedback_rounds += 1;
            self.write_ring(fast, new)?;
        }
        Ok(())
    }

    /// Feedback counts open connections every round (at most 500 ms
    /// apart); without it, the scan is for expiry: its timeout sets it,
    /// but never past half the grace of a closed connection.
    fn tick_interval(&self) -> Duration {
        match &self.spec.feedback {
            Some(fb) => Duration::from_millis(fb.interval_ms.min(500)),
            None => crate::hybrid::scan_interval(Duration::from_nanos(self.conns.idle_ns()))
                .min(Duration::from_nanos(CLOSING_GRACE_NS / 2)),
        }
    }

    /// `conns_open`, `conns_expired`, `feedback_rounds`.
    fn control_counters(&self) -> Vec<u64> {
        vec![self.open_per_slot.iter().sum(), self.expired, self.feedback_rounds]
    }
}
