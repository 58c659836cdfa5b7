//! The hybrid NFs as NF types, for the catalog (`ferry-catalog`): what
//! each is made of and how far its fast path reaches.

use ferry_bpf::evnf::EvNf;
use ferry_nf::model::{Element, Offload};

/// One hybrid NF type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HybridType {
    /// Its `kind:` in chain files.
    pub kind: &'static str,
    pub summary: &'static str,
    /// Its XDP programs (a balancer has one per direction).
    pub fast_paths: &'static [EvNf],
    pub elements: &'static [Element],
}

pub const TYPES: [HybridType; 3] = [
    HybridType {
        kind: "efw",
        summary: "firewall: XDP applies the rule table; the slow path keeps nftables for what XDP passes up",
        fast_paths: &[EvNf::Firewall],
        elements: &[Element { name: "ip-filter", offload: Offload::Full }],
    },
    HybridType {
        kind: "elb",
        summary: "load balancer: XDP rewrites tracked connections; the slow path weighs backends by feedback",
        fast_paths: &[EvNf::Balancer, EvNf::BalancerReply],
        elements: &[
            Element { name: "ip-classifier", offload: Offload::Full },
            Element { name: "lb-rewriter", offload: Offload::Partial },
        ],
    },
    HybridType {
        kind: "edpi",
        summary: "DPI: XDP bypasses classified flows; the slow path classifies payloads (nDPI)",
        fast_paths: &[EvNf::Dpi],
        elements: &[
            Element { name: "flow-bypass", offload: Offload::Full },
            Element { name: "payload-classifier", offload: Offload::No },
        ],
    },
];

/// The counters of a hybrid NF type: its fast paths' slots, in order.
pub fn counters(t: &HybridType) -> Vec<&'static str> {
    t.fast_paths.iter().flat_map(|f| f.counter_names().iter().copied()).collect()
}
