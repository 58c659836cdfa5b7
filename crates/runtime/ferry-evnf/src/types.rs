//! The hybrid NFs as NF types, for the catalog (`ferry-catalog`): what
//! each is made of, how far its fast path reaches, and what it takes in a
//! chain file.

use ferry_bpf::hybrid::HybridElement;
use ferry_nf::model::{ArgSpec, ArgType, Element, Offload};

/// One hybrid NF type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HybridType {
    /// Its `kind:` in chain files.
    pub kind: &'static str,
    pub summary: &'static str,
    /// What it does with IPv6 and with VLAN tag stacks.
    pub ip: &'static str,
    /// Its fast paths, pipeline elements (a balancer has one per direction).
    pub fast_paths: &'static [HybridElement],
    pub elements: &'static [Element],
    /// Its control plane's own counters (after the fast paths' slots).
    pub control_counters: &'static [&'static str],
    /// Its `key=value` arguments in a chain file.
    pub args: &'static [ArgSpec],
    /// The section of an eVNF file it reads (`config=`).
    pub section: &'static str,
    /// It has a slow path: frames its fast path has no rule for go to its
    /// process, on the port's AF_XDP socket, and on to a kernel hop.
    pub slow_path: bool,
}

const CONFIG: ArgSpec = ArgSpec {
    key: "config",
    ty: ArgType::Text,
    default: None,
    help: "an eVNF file (examples/evnf/*.yaml), absolute path; the NF reads its own section of it",
};

/// The argument that names the ports where an NF's other direction
/// arrives (the eLB's backends, the eNAT's outside).
pub const REPLY_PORTS: &str = "reply_ports";

const fn reply_ports(help: &'static str) -> ArgSpec {
    ArgSpec { key: REPLY_PORTS, ty: ArgType::Text, default: None, help }
}

pub const TYPES: [HybridType; 4] = [
    HybridType {
        kind: "efw",
        summary: "firewall: XDP applies the rule table; the slow path keeps nftables for what XDP passes up",
        ip: "subnet rules of either version (IPv4 ones IPv4-mapped in one LPM trie) and port rules for both in XDP; the rest, IPv6 included, to the kernel, whose nftables (inet) ruleset decides; through up to two VLAN tags",
        fast_paths: &[HybridElement::Firewall],
        elements: &[Element { name: "ip-filter", offload: Offload::Full }],
        control_counters: &[],
        args: &[CONFIG],
        section: "firewall",
        slow_path: false,
    },
    HybridType {
        kind: "elb",
        summary: "load balancer: XDP rewrites tracked connections; the slow path weighs backends by feedback",
        ip: "one VIP per eLB, IPv4 or IPv6, its backends of the same version; IPv6 rewrites fix the L4 checksum over the new pseudo-header; the kernel routes IPv6 on (the route element is IPv4 only); through up to two VLAN tags",
        fast_paths: &[HybridElement::Balancer, HybridElement::BalancerReply],
        elements: &[
            Element { name: "ip-classifier", offload: Offload::Full },
            Element { name: "lb-rewriter", offload: Offload::Partial },
        ],
        control_counters: &["conns_open", "conns_expired", "feedback_rounds"],
        args: &[
            CONFIG,
            reply_ports(
                "the chain's ports where backends' replies arrive, comma-separated (the reverse rewrite runs there)",
            ),
        ],
        section: "balancer",
        slow_path: false,
    },
    HybridType {
        kind: "edpi",
        summary: "DPI: XDP bypasses classified flows; the slow path classifies payloads (nDPI)",
        ip: "inspects IPv4 TCP/UDP only (its nDPI slow path reads IPv4 flows); IPv6 passes uninspected, counted not_inspected",
        fast_paths: &[HybridElement::Dpi],
        elements: &[
            Element { name: "flow-bypass", offload: Offload::Full },
            Element { name: "payload-classifier", offload: Offload::No },
        ],
        control_counters: &[
            "inspected",
            "bypass_installed",
            "bypass_expired",
            "slow_path_flows",
            "bypass_errors",
            "not_ipv4",
        ],
        args: &[CONFIG],
        section: "dpi",
        slow_path: true,
    },
    HybridType {
        kind: "enat",
        summary: "NAT (RFC 4787, endpoint-independent): XDP rewrites established mappings; the slow path makes them",
        ip: "a NAT44 (NAPT): IPv4 only; IPv6 passes untranslated (counted not_natted), as NAT66 has no place here (RFC 6296's prefix translation would be a separate NF, not built)",
        fast_paths: &[HybridElement::Nat, HybridElement::NatReply],
        elements: &[
            Element { name: "ip-classifier", offload: Offload::Full },
            Element { name: "ip-rewriter", offload: Offload::Partial },
        ],
        control_counters: &[
            "mappings",
            "mappings_made",
            "mappings_expired",
            "ports_exhausted",
            "mapping_errors",
            "process_translated",
            "process_not_natted",
            "process_refused",
        ],
        args: &[
            CONFIG,
            ArgSpec {
                key: REPLY_PORTS,
                ty: ArgType::Text,
                default: Some(""),
                help: "the chain's outside ports, comma-separated (the inbound translation runs there); required \
                       where the NAT starts a hybrid path, refused inside a chain",
            },
        ],
        section: "nat",
        slow_path: true,
    },
];

/// Counters every hybrid NF's control plane keeps after its own: the
/// reloads of its configuration file it applied, and those it refused
/// (keeping what it had).
pub const RELOAD_COUNTERS: [&str; 2] = ["reloads", "reload_errors"];

/// The hybrid type `kind`, if it is one.
pub fn find(kind: &str) -> Option<&'static HybridType> {
    TYPES.iter().find(|t| t.kind == kind)
}

/// The counters of a hybrid NF type: its fast paths' slots, in order,
/// then its control plane's, then [`RELOAD_COUNTERS`].
pub fn counters(t: &HybridType) -> Vec<&'static str> {
    let fast = t.fast_paths.iter().flat_map(|f| f.counter_names().iter().copied());
    fast.chain(t.control_counters.iter().copied()).chain(RELOAD_COUNTERS).collect()
}

/// The maps its control plane is given: those of all its fast paths.
pub fn control_maps(t: &HybridType) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for f in t.fast_paths {
        for m in f.control_maps() {
            if !names.contains(m) {
                names.push(m);
            }
        }
    }
    names
}
