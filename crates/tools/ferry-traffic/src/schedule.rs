//! The flow schedule: which flow each generated packet belongs to.
//!
//! A schedule keeps a fixed number of flows open in "slots". For every
//! packet it picks a slot uniformly at random (so flows interleave the way
//! independent senders do on a shared link), emits that flow's 5-tuple, and
//! once a flow has sent its sampled number of packets replaces it with a
//! fresh flow drawn from the profile's ranges. Tuples are drawn
//! independently, so two open flows may collide when the ranges are small;
//! an NF sees that as one flow, exactly as it would on a real link.
//!
//! Everything is derived from the profile's seed with a PCG generator whose
//! output is stable across releases, so a seed replays the same traffic.
//! The hot path ([`FlowSchedule::next_packet`]) does no allocation: two or
//! three random draws and, at flow end, a few more for the next flow.

use std::net::IpAddr;

use ferry_wire::{FiveTuple, L4Proto};
use rand::distributions::{Distribution, Uniform};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use crate::dist::FlowSizeSampler;
use crate::error::{Result, TrafficError};
use crate::profile::TrafficProfile;
use crate::range::{IpRange, PortRange};

/// One scheduled packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledPacket {
    /// Globally unique flow id (unique across the queues of one profile).
    pub flow_id: u64,
    /// Slot holding the flow, `0..active_flows`; index for [`crate::TemplateCache`].
    pub slot: u32,
    /// The flow's 5-tuple.
    pub tuple: FiveTuple,
    /// First packet of the flow.
    pub first: bool,
    /// Last packet of the flow (the slot gets a new flow after it).
    pub last: bool,
}

/// A flow in a slot. Our own copy of the tuple fields so that a schedule is
/// plain data regardless of what ferry-wire's `FiveTuple` derives.
#[derive(Debug, Clone, Copy)]
struct Flow {
    id: u64,
    src_ip: IpAddr,
    dst_ip: IpAddr,
    src_port: u16,
    dst_port: u16,
    sent: u32,
    remaining: u32,
}

/// Deterministic, allocation-free per-packet flow chooser. Infinite: the
/// caller stops it (e.g. `.take(count)` or a deadline).
#[derive(Debug, Clone)]
pub struct FlowSchedule {
    rng: Pcg64Mcg,
    sizes: FlowSizeSampler,
    proto: L4Proto,
    src_ip: IpRange,
    dst_ip: IpRange,
    src_port: PortRange,
    dst_port: PortRange,
    flows: Vec<Flow>,
    /// Slot picker; precomputed because `gen_range` pays a division per call.
    pick: Uniform<usize>,
    /// Next flow id; ids step by `id_stride` so queues never share one.
    next_id: u64,
    id_stride: u64,
    flows_started: u64,
}

/// The share of `total` that part `index` of `parts` gets when `total` is
/// split as evenly as possible (the first `total % parts` parts get one
/// more). Used for flows and for the packet rate of each queue.
pub fn split_evenly(total: u64, index: u32, parts: u32) -> u64 {
    assert!(parts > 0 && index < parts, "index {index} out of {parts} parts");
    let (base, extra) = (total / u64::from(parts), total % u64::from(parts));
    base + u64::from(u64::from(index) < extra)
}

impl FlowSchedule {
    /// A schedule for the whole profile (one queue).
    pub fn new(profile: &TrafficProfile) -> Result<Self> {
        Self::for_queue(profile, 0, 1)
    }

    /// The part of the profile's traffic that transmit queue `queue` of
    /// `nqueues` sends. The active flows are split evenly between queues,
    /// each queue gets its own random stream (derived from the seed and the
    /// queue number) and flow ids `queue, queue + nqueues, ...`, so running
    /// all queues together is the profile's traffic, with no flow split
    /// across queues (which would reorder it).
    pub fn for_queue(profile: &TrafficProfile, queue: u32, nqueues: u32) -> Result<Self> {
        profile.validate()?;
        if nqueues == 0 || queue >= nqueues {
            return Err(TrafficError::bad("queue", format!("{queue}/{nqueues}"), "queue must be < nqueues"));
        }
        // Checked for every queue (not only those left empty) so that all
        // queues of one run agree on whether the profile is usable.
        if profile.active_flows < nqueues {
            return Err(TrafficError::bad(
                "active_flows",
                profile.active_flows,
                "fewer active flows than queues: some queue would send nothing",
            ));
        }
        let mut s = FlowSchedule {
            rng: Pcg64Mcg::seed_from_u64(mix(profile.seed, queue)),
            sizes: profile.flow_sizes.sampler()?,
            proto: profile.proto.into(),
            src_ip: profile.src_ip,
            dst_ip: profile.dst_ip,
            src_port: profile.src_port,
            dst_port: profile.dst_port,
            flows: Vec::new(),
            pick: Uniform::new(0, 1),
            next_id: u64::from(queue),
            id_stride: u64::from(nqueues),
            flows_started: 0,
        };
        for _ in 0..split_evenly(u64::from(profile.active_flows), queue, nqueues) {
            let f = s.new_flow();
            s.flows.push(f);
        }
        s.pick = Uniform::new(0, s.flows.len());
        Ok(s)
    }

    /// Number of flow slots (flows open at any time).
    pub fn active_flows(&self) -> usize {
        self.flows.len()
    }

    /// Flows started so far, including the initially open ones.
    pub fn flows_started(&self) -> u64 {
        self.flows_started
    }

    fn new_flow(&mut self) -> Flow {
        let icmp = self.proto == L4Proto::Icmp;
        let id = self.next_id;
        self.next_id += self.id_stride;
        self.flows_started += 1;
        Flow {
            id,
            src_ip: self.src_ip.sample(&mut self.rng),
            dst_ip: self.dst_ip.sample(&mut self.rng),
            // For ICMP echo the "source port" is the echo identifier and
            // there is no destination port (ferry-wire reports 0).
            src_port: self.src_port.sample(&mut self.rng),
            dst_port: if icmp { 0 } else { self.dst_port.sample(&mut self.rng) },
            sent: 0,
            remaining: self.sizes.sample(&mut self.rng),
        }
    }

    /// The next packet. Never fails and never allocates.
    pub fn next_packet(&mut self) -> ScheduledPacket {
        let slot = self.pick.sample(&mut self.rng);
        let f = &mut self.flows[slot];
        f.sent += 1;
        f.remaining -= 1;
        let (first, last) = (f.sent == 1, f.remaining == 0);
        let pkt = ScheduledPacket {
            flow_id: f.id,
            slot: slot as u32,
            tuple: FiveTuple {
                src_ip: f.src_ip,
                dst_ip: f.dst_ip,
                src_port: f.src_port,
                dst_port: f.dst_port,
                proto: self.proto,
            },
            first,
            last,
        };
        if last {
            self.flows[slot] = self.new_flow();
        }
        pkt
    }
}

impl Iterator for FlowSchedule {
    type Item = ScheduledPacket;

    fn next(&mut self) -> Option<ScheduledPacket> {
        Some(self.next_packet())
    }
}

/// SplitMix64 finalizer over (seed, queue): decorrelates the queues' seeds.
fn mix(seed: u64, queue: u32) -> u64 {
    let mut z = seed ^ (u64::from(queue).wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::FlowSizeDist;
    use std::collections::{HashMap, HashSet};

    fn profile() -> TrafficProfile {
        TrafficProfile { active_flows: 16, seed: 5, ..Default::default() }
    }

    #[test]
    fn deterministic_per_seed() {
        let a: Vec<_> = FlowSchedule::new(&profile()).unwrap().take(1000).collect();
        let b: Vec<_> = FlowSchedule::new(&profile()).unwrap().take(1000).collect();
        assert_eq!(a, b);
        let c: Vec<_> = FlowSchedule::new(&TrafficProfile { seed: 6, ..profile() }).unwrap().take(1000).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn flows_have_sampled_sizes_and_stay_in_ranges() {
        let p = TrafficProfile { flow_sizes: FlowSizeDist::Fixed(5), ..profile() };
        let mut s = FlowSchedule::new(&p).unwrap();
        let mut per_flow: HashMap<u64, (u32, bool, bool, FiveTuple)> = HashMap::new();
        let mut open_slots: HashMap<u32, u64> = HashMap::new();
        for _ in 0..10_000 {
            let pkt = s.next_packet();
            assert!(p.src_ip.contains(pkt.tuple.src_ip) && p.dst_ip.contains(pkt.tuple.dst_ip));
            assert!(p.src_port.contains(pkt.tuple.src_port) && p.dst_port.contains(pkt.tuple.dst_port));
            let e = per_flow.entry(pkt.flow_id).or_insert((0, pkt.first, false, pkt.tuple));
            e.0 += 1;
            e.2 |= pkt.last;
            assert_eq!(e.3, pkt.tuple, "a flow keeps its tuple");
            // A slot holds one flow at a time.
            if pkt.first {
                open_slots.insert(pkt.slot, pkt.flow_id);
            }
            assert_eq!(open_slots.get(&pkt.slot), Some(&pkt.flow_id));
        }
        let finished: Vec<_> = per_flow.values().filter(|v| v.2).collect();
        assert!(finished.len() > 1900, "{}", finished.len());
        assert!(finished.iter().all(|v| v.0 == 5 && v.1));
        assert!(per_flow.values().all(|v| v.0 <= 5));
        // Each finished flow was replaced by a new one; 16 opened at start.
        assert_eq!(s.flows_started(), finished.len() as u64 + 16);
    }

    #[test]
    fn keeps_active_flows_interleaved() {
        let p = TrafficProfile { flow_sizes: FlowSizeDist::Fixed(1000), ..profile() };
        let s = FlowSchedule::new(&p).unwrap();
        let ids: HashSet<u64> = s.take(200).map(|p| p.flow_id).collect();
        assert_eq!(ids.len(), 16, "all 16 open flows get packets early on");
    }

    #[test]
    fn mean_flow_length_follows_distribution() {
        let p = TrafficProfile { active_flows: 64, ..profile() };
        let s = FlowSchedule::new(&p).unwrap();
        let n = 2_000_000u64;
        let ended = s.take(n as usize).filter(|p| p.last).count() as f64;
        let mean = n as f64 / ended;
        assert!((mean - 21.0).abs() < 2.0, "mean packets per flow {mean}");
    }

    #[test]
    fn queues_partition_flows() {
        let p = TrafficProfile { active_flows: 10, ..profile() };
        let mut slots = 0;
        for q in 0..3 {
            let s = FlowSchedule::for_queue(&p, q, 3).unwrap();
            slots += s.active_flows();
            for pkt in s.take(5000) {
                assert_eq!(pkt.flow_id % 3, u64::from(q), "flow ids never collide across queues");
            }
        }
        assert_eq!(slots, 10);
        assert!(FlowSchedule::for_queue(&p, 3, 3).is_err());
        assert!(FlowSchedule::for_queue(&TrafficProfile { active_flows: 2, ..p }, 0, 3).is_err());
        assert_eq!((0..3).map(|q| split_evenly(10, q, 3)).collect::<Vec<_>>(), [4, 3, 3]);
    }

    #[test]
    fn icmp_uses_echo_id_and_no_dst_port() {
        let p = TrafficProfile { proto: crate::Proto::Icmp, ..profile() };
        for pkt in FlowSchedule::new(&p).unwrap().take(100) {
            assert!(p.src_port.contains(pkt.tuple.src_port));
            assert_eq!((pkt.tuple.dst_port, pkt.tuple.proto), (0, L4Proto::Icmp));
        }
    }
}
