//! Per-packet logic of Ferry's network functions.
//!
//! Each NF implements [`PacketNf`]: it gets one Ethernet frame (without FCS)
//! at a time, may rewrite it in place (never changing its length) and
//! returns a [`Verdict`]. Batching and I/O (AF_XDP) live elsewhere; the
//! per-packet logic is written once, here, and must never panic or allocate.
//!
//! # Counting
//!
//! Every NF has `rx` as its first counter and exactly one further counter
//! per verdict it can return (`tx`, `pass`, one `drop_*` per reason), and
//! bumps `rx` plus exactly one of those for every frame, so that the sum of
//! all counters after `rx` always equals `rx`. The counter names are data
//! ([`NfSpec`]), VPP/Click style, so the CLI can print them without knowing
//! the NF.
//!
//! # VLANs
//!
//! Frames with one 802.1Q tag are handled like untagged ones and the tag is
//! kept in replies (a reply goes back on the VLAN the request came in on).
//! QinQ (a second tag) is not unwrapped, so it is "not mine" (`Pass`).

pub mod args;
mod arp;
mod chain;
mod firewall;
pub mod firewall_rules;
pub mod flow_monitor;
mod icmp;
pub mod ips;
pub mod ips_rules;
mod l2fwd;
pub mod mica_client;
pub mod model;
mod payload;
pub mod payload_scan;
mod registry;
mod rxdrop;

pub use arp::ArpResponder;
pub use chain::NfChainLocal;
pub use firewall::{Firewall, Lookup};
pub use flow_monitor::FlowMonitor;
pub use icmp::IcmpEchoResponder;
pub use ips::{EveAlert, FlowState, Flows, Ips};
pub use l2fwd::L2Fwd;
pub use payload_scan::PayloadScan;
pub use registry::{by_name, info, registry, EveFileArg, Hosted, NfBuilder, NfError, NfInfo, NfReporter};
pub use rxdrop::RxDrop;

/// What to do with a frame after an NF has looked at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The frame was rewritten in place: send it back out the port it came in.
    Tx,
    /// Drop it (the NF counted why).
    Drop,
    /// Not mine: offer it to the next NF in this process. The runner drops
    /// (and counts) frames no NF takes.
    Pass,
}

/// NF metadata as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfSpec {
    /// Name used by the CLI and in configs.
    pub name: &'static str,
    /// Counter names, in the order of [`PacketNf::counters`]. The first is
    /// always `rx`; the others partition it.
    pub counters: &'static [&'static str],
}

/// The per-packet interface of an NF.
pub trait PacketNf: Send {
    fn spec(&self) -> &'static NfSpec;
    /// Processes one frame in place. The frame length never changes for
    /// these NFs. Must never panic on any input.
    fn process(&mut self, frame: &mut [u8]) -> Verdict;
    /// Counter values, in the order of `spec().counters`.
    fn counters(&self) -> &[u64];
    /// Hands `out` the alerts raised since the last call (the IPS's; no
    /// other NF raises any) and returns how many were raised but not
    /// held (see [`ips::MAX_PENDING`]).
    fn drain_alerts(&mut self, _out: &mut dyn FnMut(EveAlert<'_>)) -> u64 {
        0
    }
}

/// Index of `rx` in every NF's counters.
pub(crate) const RX: usize = 0;

/// Bumps `rx` and the counter chosen for the verdict. Taking the pair from a
/// single classification function is what guarantees "verdict counters sum
/// to rx".
#[inline]
pub(crate) fn count(counters: &mut [u64], (verdict, idx): (Verdict, usize)) -> Verdict {
    counters[RX] += 1;
    counters[idx] += 1;
    verdict
}

/// The counters of the `tenant-router` NF, which runs a
/// [`ferry_wire::classify::Table`]: frames per decision.
pub const ROUTER_COUNTERS: [&str; 3] = ["classified", "unmatched", "drop_malformed"];

#[cfg(test)]
pub(crate) mod test_util {
    use super::PacketNf;

    /// Asserts that the verdict counters partition rx.
    pub fn assert_sum(nf: &dyn PacketNf) {
        let c = nf.counters();
        assert_eq!(c.len(), nf.spec().counters.len());
        assert_eq!(nf.spec().counters[0], "rx");
        assert_eq!(c[1..].iter().sum::<u64>(), c[0], "{}: {:?}", nf.spec().name, c);
    }
}
