//! A flow monitor: packet and byte counts per 5-tuple (P4SFC's "Monitor",
//! fully offloadable: the XDP pipeline's flow-monitor element keeps the
//! same table in a BPF hash map).

use std::collections::HashMap;
use std::net::Ipv6Addr;

use ferry_wire::flow;

use crate::{count, NfSpec, PacketNf, Verdict};

const PASS: usize = 1;
const DROP_MALFORMED: usize = 2;
const UNTRACKED: usize = 3;

pub(crate) static SPEC: NfSpec =
    NfSpec { name: "flow-monitor", counters: &["rx", "pass", "drop_malformed", "pass_untracked"] };

/// Flows tracked at most; frames of further new flows pass uncounted
/// (`pass_untracked`). The XDP element's map is an LRU hash of the same
/// size, shared by the port's flow monitors: full, it evicts the least
/// recently used flow instead, so past this many flows the two tables
/// differ (the frames' fates never do).
pub const MAX_FLOWS: usize = 65_536;

/// A flow's key: addresses in the flow key's 128-bit space (IPv4 ones
/// IPv4-mapped, `::` for frames with no IP header), ports (0 unless TCP
/// or UDP) and the protocol, as the XDP element keys its map. VLAN tags
/// are not part of it: the monitor counts the inner packet's flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
}

/// Packets and bytes of one flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCount {
    pub packets: u64,
    pub bytes: u64,
}

/// The decision, in order: malformed by [`ferry_wire::flow::parse`] →
/// `drop_malformed` (the XDP pipeline drops such frames before any
/// element, so the placed and the software NF agree); else the frame
/// passes and its flow is counted (`pass`), or, with the table full and
/// the flow new, passes uncounted (`pass_untracked`).
#[derive(Debug, Default)]
pub struct FlowMonitor {
    /// Per flow: its counts, and whether it is in `changed`.
    flows: HashMap<FlowKey, (FlowCount, bool)>,
    /// Flows counted since the last [`FlowMonitor::take_changed`]; a flow
    /// is pushed once per period (its flag says so), so the per-packet
    /// cost stays one lookup.
    changed: Vec<FlowKey>,
    counters: [u64; 4],
}

impl FlowMonitor {
    pub fn new() -> FlowMonitor {
        FlowMonitor::default()
    }

    /// A monitor that goes on counting `flows` (a restarted NF taking
    /// over its table).
    pub fn with_flows(flows: impl IntoIterator<Item = (FlowKey, FlowCount)>) -> FlowMonitor {
        let flows = flows.into_iter().take(MAX_FLOWS).map(|(k, c)| (k, (c, false))).collect();
        FlowMonitor { flows, ..FlowMonitor::default() }
    }

    /// The flows counted since the last call, with their counts now: what
    /// a copy of the table elsewhere needs to catch up.
    pub fn take_changed(&mut self) -> Vec<(FlowKey, FlowCount)> {
        let keys = std::mem::take(&mut self.changed);
        keys.into_iter()
            .filter_map(|k| {
                let (count, listed) = self.flows.get_mut(&k)?;
                *listed = false;
                Some((k, *count))
            })
            .collect()
    }

    /// The flows seen so far, in key order.
    pub fn flows(&self) -> Vec<(FlowKey, FlowCount)> {
        let mut v: Vec<_> = self.flows.iter().map(|(k, (c, _))| (*k, *c)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    fn classify(&mut self, frame: &[u8]) -> (Verdict, usize) {
        let Ok(f) = flow::parse(frame) else { return (Verdict::Drop, DROP_MALFORMED) };
        let key = FlowKey { src: f.src, dst: f.dst, sport: f.sport, dport: f.dport, proto: f.proto };
        let full = self.flows.len() >= MAX_FLOWS;
        match self.flows.get_mut(&key) {
            Some((c, listed)) => {
                *c = FlowCount { packets: c.packets + 1, bytes: c.bytes + frame.len() as u64 };
                if !*listed {
                    *listed = true;
                    self.changed.push(key);
                }
            }
            None if full => return (Verdict::Pass, UNTRACKED),
            None => {
                self.flows.insert(key, (FlowCount { packets: 1, bytes: frame.len() as u64 }, true));
                self.changed.push(key);
            }
        }
        (Verdict::Pass, PASS)
    }
}

impl PacketNf for FlowMonitor {
    fn spec(&self) -> &'static NfSpec {
        &SPEC
    }

    fn process(&mut self, frame: &mut [u8]) -> Verdict {
        let r = self.classify(frame);
        count(&mut self.counters, r)
    }

    fn counters(&self) -> &[u64] {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

    fn frame(sport: u16, len: usize) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: len };
        let t = FiveTuple {
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 1, 2].into(),
            src_port: sport,
            dst_port: 80,
            proto: L4Proto::Udp,
        };
        let mut buf = vec![0u8; len];
        let n = build_frame(&spec, &t, None, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// The decision table, row by row.
    #[test]
    fn counts_flows_and_drops_malformed() {
        let mut nf = FlowMonitor::new();
        assert_eq!(nf.process(&mut frame(1000, 64)), Verdict::Pass);
        assert_eq!(nf.process(&mut frame(1000, 100)), Verdict::Pass);
        assert_eq!(nf.process(&mut frame(1001, 64)), Verdict::Pass);
        let mut cut = frame(1000, 64);
        cut.truncate(14 + 20 + 4);
        assert_eq!(nf.process(&mut cut), Verdict::Drop);
        let flows = nf.flows();
        assert_eq!(flows.len(), 2);
        let v4 = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_ipv6_mapped();
        let key = FlowKey { src: v4([10, 0, 0, 1]), dst: v4([10, 0, 1, 2]), sport: 1000, dport: 80, proto: 17 };
        assert_eq!(flows[0], (key, FlowCount { packets: 2, bytes: 164 }));
        assert_eq!(nf.counters(), &[4, 3, 1, 0]);
        assert_sum(&nf);
    }

    #[test]
    fn a_full_table_passes_new_flows_uncounted() {
        let mut nf = FlowMonitor::new();
        for i in 0..MAX_FLOWS as u32 {
            let key = FlowKey { src: u128::from(i).into(), dst: Ipv6Addr::UNSPECIFIED, sport: 0, dport: 0, proto: 0 };
            nf.flows.insert(key, (FlowCount::default(), false));
        }
        assert_eq!(nf.process(&mut frame(1000, 64)), Verdict::Pass);
        assert_eq!(nf.counters(), &[1, 0, 0, 1]);
        assert_eq!(nf.flows().len(), MAX_FLOWS);
    }

    #[test]
    fn changed_flows_are_handed_out_once_and_a_restart_counts_on() {
        let mut nf = FlowMonitor::new();
        nf.process(&mut frame(1000, 64));
        nf.process(&mut frame(1001, 64));
        nf.process(&mut frame(1000, 64));
        let mut changed = nf.take_changed();
        changed.sort_by_key(|(k, _)| k.sport);
        let counts: Vec<(u16, u64)> = changed.iter().map(|(k, c)| (k.sport, c.packets)).collect();
        assert_eq!(counts, [(1000, 2), (1001, 1)]);
        assert!(nf.take_changed().is_empty(), "nothing counted since");
        nf.process(&mut frame(1001, 64));
        assert_eq!(nf.take_changed().iter().map(|(k, c)| (k.sport, c.packets)).collect::<Vec<_>>(), [(1001, 2)]);
        let mut again = FlowMonitor::with_flows(nf.flows());
        again.process(&mut frame(1000, 64));
        assert_eq!(again.take_changed()[0].1, FlowCount { packets: 3, bytes: 192 }, "counting goes on");
    }
}
