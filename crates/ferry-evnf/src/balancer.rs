//! eLB: an L4 load balancer in proactive mode. Everything runs in XDP: a
//! new flow to the VIP hashes into the weighted server-selection array,
//! connection tracking keeps established flows on their backend, and DNAT
//! (forward) / SNAT back to the VIP (replies) fix both checksums. The
//! control plane here installs the VIP, backends and array, expires idle
//! and closed connections, and (with `feedback`) recomputes the weights
//! from each backend's measured load: its open connections.

use std::collections::HashMap;
use std::time::Duration;

use ferry_bpf::evnf::{EvFlow, EvNf, Evnf, LbConn, LbReply, LB_CLOSING};
use serde_json::json;

use crate::config::BalancerSpec;
use crate::hybrid::{FastTable, HybridNf, Mode};
use crate::weights::{feedback_weights, selection_ring};
use crate::EvnfError;

/// A closed (FIN/RST) connection keeps its entry this long, so that the
/// last ACKs of the teardown still reach the same backend.
const CLOSING_GRACE_NS: u64 = 2_000_000_000;

pub struct Balancer {
    spec: BalancerSpec,
    conns: FastTable<EvFlow, LbConn>,
    replies: FastTable<EvFlow, LbReply>,
    /// Weights in force now (configured, or from feedback), ×100.
    weights: Vec<u32>,
    last_feedback_ns: u64,
    feedback_rounds: u64,
    expired: u64,
    open_per_backend: Vec<u64>,
}

impl Balancer {
    pub fn new(fast: &Evnf, spec: BalancerSpec) -> Result<Balancer, EvnfError> {
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
        let n = spec.backends.len();
        Ok(Balancer {
            spec,
            conns,
            replies,
            weights: Vec::new(),
            last_feedback_ns: 0,
            feedback_rounds: 0,
            expired: 0,
            open_per_backend: vec![0; n],
        })
    }

    pub fn set_spec(&mut self, spec: BalancerSpec) {
        self.open_per_backend = vec![0; spec.backends.len()];
        self.spec = spec;
    }

    fn configured(&self) -> Vec<u32> {
        self.spec.backends.iter().map(|b| b.weight * 100).collect()
    }

    fn write_ring(&mut self, fast: &mut Evnf, weights: Vec<u32>) -> Result<(), EvnfError> {
        fast.lb_set_ring(0, &selection_ring(&weights))?;
        self.weights = weights;
        Ok(())
    }

    /// Drops finished and idle connections, and their reply entries.
    fn expire(&mut self, now_ns: u64) -> Result<(), EvnfError> {
        let closed = |c: &LbConn| c.flags & LB_CLOSING != 0 && now_ns.saturating_sub(c.last_seen_ns) > CLOSING_GRACE_NS;
        let gone = self.conns.expire(now_ns, closed)?;
        for (flow, conn) in &gone {
            if let Some(be) = self.spec.backends.get(conn.backend as usize) {
                let back = EvFlow::new(*be.addr.ip(), be.addr.port(), flow.src().0, flow.src().1, flow.proto);
                self.replies.remove(&back)?;
            }
        }
        self.expired += gone.len() as u64;
        self.expired += self.replies.expire(now_ns, |_| false)?.len() as u64;
        Ok(())
    }

    fn count_open(&mut self) {
        self.open_per_backend.iter_mut().for_each(|c| *c = 0);
        for (_, c) in self.conns.entries() {
            if c.flags & LB_CLOSING == 0 {
                if let Some(n) = self.open_per_backend.get_mut(c.backend as usize) {
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

    fn mode(&self) -> Mode {
        Mode::Proactive
    }

    /// Backends and array first, the VIP last: a frame that sees the VIP
    /// finds everything it needs.
    fn install(&mut self, fast: &mut Evnf) -> Result<(), EvnfError> {
        for (i, b) in self.spec.backends.iter().enumerate() {
            fast.lb_set_backend(i as u32, *b.addr.ip(), b.addr.port())?;
        }
        self.write_ring(fast, self.configured())?;
        let vip = self.spec.vip;
        fast.lb_set_vip(*vip.ip(), vip.port(), self.spec.proto.number(), 0)?;
        Ok(())
    }

    fn on_tick(&mut self, fast: &mut Evnf, now_ns: u64) -> Result<(), EvnfError> {
        self.expire(now_ns)?;
        self.count_open();
        let Some(fb) = &self.spec.feedback else { return Ok(()) };
        if now_ns.saturating_sub(self.last_feedback_ns) < fb.interval_ms * 1_000_000 {
            return Ok(());
        }
        self.last_feedback_ns = now_ns;
        let base: Vec<u32> = self.spec.backends.iter().map(|b| b.weight).collect();
        let load: Vec<f64> = self.open_per_backend.iter().map(|n| *n as f64).collect();
        let new = feedback_weights(&base, &load);
        if new != self.weights {
            self.feedback_rounds += 1;
            self.write_ring(fast, new)?;
        }
        Ok(())
    }

    fn tick_interval(&self) -> Duration {
        let fb = self.spec.feedback.as_ref().map_or(500, |f| f.interval_ms.min(500));
        Duration::from_millis(fb)
    }

    fn report(&self, fast: &Evnf) -> serde_json::Value {
        let mut conns_per_backend: HashMap<u32, u64> = HashMap::new();
        for (_, c) in self.conns.entries() {
            *conns_per_backend.entry(c.backend).or_default() += 1;
        }
        let backends: Vec<serde_json::Value> = self
            .spec
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let load = fast.lb_backend_load(i as u32).unwrap_or_default();
                json!({
                    "addr": b.addr.to_string(),
                    "weight": b.weight,
                    "weight_now": self.weights.get(i).map_or(0.0, |w| *w as f64 / 100.0),
                    "packets": load.packets,
                    "bytes": load.bytes,
                    "tracked_conns": conns_per_backend.get(&(i as u32)).copied().unwrap_or(0),
                    "open_conns": self.open_per_backend.get(i).copied().unwrap_or(0),
                })
            })
            .collect();
        json!({
            "mode": self.mode(),
            "vip": self.spec.vip.to_string(),
            "counters": crate::counters_json(fast, EvNf::Balancer),
            "reply_counters": crate::counters_json(fast, EvNf::BalancerReply),
            "backends": backends,
            "expired": self.expired,
            "feedback_rounds": self.feedback_rounds,
        })
    }
}
