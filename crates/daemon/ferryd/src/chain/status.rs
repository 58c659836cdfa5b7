//! What `ferry chain show` reports of a chain: per NF, domain, ring and
//! port, its counters and state.

use std::sync::atomic::Ordering;

use ferry_chain::proto::{DomainStatus, NfStatus, PortStatus, RingStatus, Status};
use ferry_chain::shm::{self, COUNTERS};

use crate::spawn;

use super::{verdict_list, Chain, NfState};

impl Chain {
    /// NF `i`'s own counter `name`, summed over its threads (0 if it has
    /// none of that name).
    pub(super) fn nf_counter(&self, i: usize, st: &NfState, name: &str) -> u64 {
        let Some(k) = st.counters.iter().position(|c| c == name) else { return 0 };
        let dom = &self.domains[self.plan.nfs[i].domain];
        self.plan.nfs[i].threads.iter().map(|t| dom.block(t.tid).nf_counter(k).load(Ordering::Relaxed)).sum()
    }

    pub fn status(&self) -> Status {
        let mut s = Status { chain: self.plan.name.clone(), id: self.id, ..Default::default() };
        for (i, nf) in self.plan.nfs.iter().enumerate() {
            let st = self.nfs[i].lock().expect("nf lock");
            let dom = &self.domains[nf.domain];
            let threads = nf
                .threads
                .iter()
                .map(|t| {
                    let b = dom.block(t.tid);
                    let mut v: Vec<(String, u64)> =
                        COUNTERS.iter().enumerate().map(|(k, n)| (n.to_string(), b.counter(k))).collect();
                    for (k, n) in st.counters.iter().enumerate() {
                        v.push((n.clone(), b.nf_counter(k).load(Ordering::Relaxed)));
                    }
                    v
                })
                .collect();
            let rings = nf
                .threads
                .iter()
                .map(|t| {
                    let ring = dom.ring(t.ring);
                    let loops = dom.block(t.tid).get(shm::T_LOOPS);
                    RingStatus { depth: ring.fill_level(), capacity: ring.capacity(), loops }
                })
                .collect();
            s.nfs.push(NfStatus {
                name: nf.name.clone(),
                id: self.nf_ids[i],
                domain: dom.plan.name.clone(),
                pid: st.pid,
                uid: Some(self.creds[i].uid),
                connected: st.connected,
                restarts: st.restarts,
                awaiting_rejoin: st.awaiting_rejoin,
                threads,
                rings,
                cpu_seconds: st.pid.and_then(spawn::cpu_seconds),
                poll: nf.poll,
                ..Default::default()
            });
            if let Some(table) = &self.flow_tables[i] {
                let n = s.nfs.last_mut().expect("just pushed");
                (n.flows_total, n.flows) = crate::fastpath::flow_statuses(table.flows());
            }
            if let Some(a) = &self.alerts[i] {
                s.nfs.last_mut().expect("just pushed").alerts = rule_alerts(a.table.entries());
            }
        }
        for d in self.domains.iter() {
            let ctl = d.control.as_slice();
            s.domains.push(DomainStatus {
                name: d.plan.name.clone(),
                tenant: d.plan.tenant.clone(),
                frames_total: d.pool.frames_total(),
                in_pool: d.pool.available(),
                reclaimed: ctl[shm::RECLAIMED].load(Ordering::Relaxed),
                audits: ctl[shm::AUDITS].load(Ordering::Relaxed),
                lost: ctl[shm::LOST].load(Ordering::Relaxed),
                duplicated: ctl[shm::DUPLICATED].load(Ordering::Relaxed),
            });
        }
        for port in self.ports.iter().flatten() {
            let port = port.lock().expect("port lock");
            s.offloaded.extend(port.offloaded());
            if let Some(v) = port.verdicts() {
                s.ports.push(PortStatus { name: port.plan.name.clone(), verdicts: verdict_list(&v), classified: None });
            }
        }
        for c in self.classifiers.lock().expect("classifiers lock").iter() {
            let verdicts = verdict_list(&c.verdicts().unwrap_or_default());
            s.ports.push(PortStatus { name: c.port.clone(), verdicts, classified: Some(c.status()) });
        }
        if let Some(h) = self.hybrids.lock().expect("hybrids lock").as_ref() {
            s.offloaded.extend(h.offloaded());
        }
        if let Some(n) = self.nsh.lock().expect("nsh lock").as_ref() {
            s.nsh = n.counters();
        }
        s
    }
}

/// Each rule's alerts, summed over the threads that counted them.
fn rule_alerts(entries: Vec<(ferry_bpf::alert_table::AlertKey, u64)>) -> Vec<ferry_chain::proto::RuleAlerts> {
    let mut sums: std::collections::BTreeMap<(u32, u32), u64> = std::collections::BTreeMap::new();
    for (k, n) in entries {
        *sums.entry((k.gid, k.sid)).or_default() += n;
    }
    sums.into_iter().map(|((gid, sid), alerts)| ferry_chain::proto::RuleAlerts { gid, sid, alerts }).collect()
}
