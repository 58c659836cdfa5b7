//! Building NFs by name, for the CLI (`ferry nf list`, `ferry nf run NAME ARGS…`).

use std::net::IpAddr;

use crate::model::{Element, Offload};
use crate::{ArpResponder, IcmpEchoResponder, L2Fwd, NfSpec, PacketNf};

/// Why an NF could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NfError {
    #[error("unknown NF {name:?} (try `ferry nf list`)")]
    UnknownNf { name: String },
    #[error("{nf}: bad argument {arg:?}: {reason}")]
    BadArg { nf: &'static str, arg: String, reason: &'static str },
    #[error("{nf}: missing argument: {what}")]
    MissingArg { nf: &'static str, what: &'static str },
    #[error("{nf}: {file}: {message}")]
    BadFile { nf: &'static str, file: String, message: String },
}

/// Builds an NF from CLI-style arguments.
pub type NfBuilder = fn(&[&str]) -> Result<Box<dyn PacketNf>, NfError>;

/// One registered NF.
#[derive(Debug, Clone, Copy)]
pub struct NfInfo {
    pub spec: &'static NfSpec,
    /// One line for `ferry nf list`.
    pub summary: &'static str,
    /// What it does with IPv6 and with VLAN tag stacks.
    pub ip: &'static str,
    /// What the arguments look like.
    pub args: &'static str,
    /// Its elements and their offloadability.
    pub elements: &'static [Element],
    /// How a host runs it beyond handing it frames.
    pub hosted: Hosted,
    /// Whether its output is what it passes on (a filter's, a monitor's),
    /// which leaves by its first out-link: in a chain it needs one. A
    /// responder's output is its replies (what it does not answer may end
    /// with it), l2fwd sends back without one, rxdrop drops.
    pub passes: bool,
    /// The argument naming a file it reads when built, if one does. In a
    /// chain the NF process reads it, from `/`.
    pub file_arg: Option<usize>,
    /// What it loaded from its file, for `ferry chain check` and its
    /// process's log, if it reads one.
    pub report: Option<NfReporter>,
    /// For an NF that raises alerts (the IPS): the EVE file its
    /// arguments name (None: its log).
    pub eve_file: Option<EveFileArg>,
    build: NfBuilder,
}

/// What an NF loaded from its file, in a line.
pub type NfReporter = fn(&[&str]) -> Result<String, NfError>;

/// The EVE file an alerting NF's arguments name.
pub type EveFileArg = for<'a> fn(&[&'a str]) -> Option<&'a str>;

/// What a per-packet NF asks of the process that hosts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hosted {
    /// Frames in, verdicts out.
    Plain,
    /// A responder: its replies leave by the port the frame came in on.
    Replies,
    /// Its flows also go to a table outside the process (the flow monitor's,
    /// which ferryd reads wherever the NF runs).
    ExportsFlows,
}

impl NfInfo {
    /// Builds an instance from CLI-style arguments.
    pub fn build(&self, args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
        (self.build)(args)
    }
}

fn parse_ip(nf: &'static str, s: &str) -> Result<IpAddr, NfError> {
    s.parse().map_err(|_| NfError::BadArg { nf, arg: s.to_string(), reason: "not an IPv4 or IPv6 address" })
}

fn build_l2fwd(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    if let Some(a) = args.first() {
        return Err(NfError::BadArg { nf: "l2fwd", arg: a.to_string(), reason: "l2fwd takes no arguments" });
    }
    Ok(Box::new(L2Fwd::new()))
}

fn build_arp(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    const NF: &str = "arp-responder";
    if args.is_empty() {
        return Err(NfError::MissingArg { nf: NF, what: "at least one IP=MAC binding" });
    }
    let entries = args
        .iter()
        .map(|a| {
            let (ip, mac) =
                a.split_once('=').ok_or(NfError::BadArg { nf: NF, arg: a.to_string(), reason: "expected IP=MAC" })?;
            let mac = mac.parse::<ferry_wire::MacAddr>().map(|m| m.0).map_err(|_| NfError::BadArg {
                nf: NF,
                arg: a.to_string(),
                reason: "bad MAC",
            })?;
            Ok((parse_ip(NF, ip)?, mac))
        })
        .collect::<Result<Vec<_>, NfError>>()?;
    Ok(Box::new(ArpResponder::new(entries)))
}

fn build_rxdrop(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    if let Some(extra) = args.first() {
        return Err(NfError::BadArg { nf: "rxdrop", arg: extra.to_string(), reason: "takes no arguments" });
    }
    Ok(Box::new(crate::RxDrop::new()))
}

fn build_icmp(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    const NF: &str = "icmp-echo";
    if args.is_empty() {
        return Err(NfError::MissingArg { nf: NF, what: "at least one IPv4 or IPv6 address" });
    }
    let addrs = args.iter().map(|a| parse_ip(NF, a)).collect::<Result<Vec<_>, _>>()?;
    Ok(Box::new(IcmpEchoResponder::new(addrs)))
}

fn build_flow_monitor(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    if let Some(extra) = args.first() {
        return Err(NfError::BadArg { nf: "flow-monitor", arg: extra.to_string(), reason: "takes no arguments" });
    }
    Ok(Box::new(crate::FlowMonitor::new()))
}

fn build_ips(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    Ok(Box::new(load_ips(args)?.0))
}

fn report_ips(args: &[&str]) -> Result<String, NfError> {
    let (nf, skipped) = load_ips(args)?;
    let mut report = format!("{} rules", nf.rules().len());
    if !skipped.is_empty() {
        let total: usize = skipped.values().sum();
        let by: Vec<String> = skipped.iter().map(|(option, n)| format!("{option} {n}")).collect();
        report += &format!(", {total} skipped as unsupported (by option: {})", by.join(", "));
    }
    Ok(report)
}

/// The IPS its arguments build, and the rules it skipped by option.
fn load_ips(args: &[&str]) -> Result<(crate::Ips, std::collections::BTreeMap<String, usize>), NfError> {
    let a = crate::ips::IpsArgs::parse(args)?;
    let bad = |message: String| NfError::BadFile { nf: "ips", file: a.file.to_string(), message };
    let text = std::fs::read_to_string(a.file).map_err(|e| bad(e.to_string()))?;
    let set = crate::ips_rules::load_rules(&text, a.skip_unsupported).map_err(|e| bad(e.to_string()))?;
    Ok((crate::Ips::new(set.rules), set.skipped))
}

fn build_firewall(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    const NF: &str = "firewall";
    let (file, lookup) = match args {
        [file] | [file, "bitvector"] => (file, crate::Lookup::BitVector),
        [file, "linear"] => (file, crate::Lookup::Linear),
        [_, other] => {
            return Err(NfError::BadArg { nf: NF, arg: other.to_string(), reason: "expected linear or bitvector" })
        }
        _ => return Err(NfError::MissingArg { nf: NF, what: "the rule file, then optionally linear or bitvector" }),
    };
    let bad = |message: String| NfError::BadFile { nf: NF, file: file.to_string(), message };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let rules = crate::firewall_rules::parse_fw_rules(&text).map_err(|e| bad(e.to_string()))?;
    Ok(Box::new(crate::Firewall::new(rules, lookup)))
}

fn build_payload_scan(args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    let config = crate::payload_scan::ScanConfig::parse(args)?;
    Ok(Box::new(crate::PayloadScan::new(&config)?))
}

static REGISTRY: [NfInfo; 8] = [
    NfInfo {
        spec: &crate::l2fwd::SPEC,
        summary: "swap source and destination MAC; send on by its out-link, or back out its port without one",
        ip: "any EtherType, IPv4 or IPv6 alike; tags untouched",
        args: "(none)",
        elements: &[Element { name: "ether-swap", offload: Offload::Full }],
        hosted: Hosted::Plain,
        passes: false,
        file_arg: None,
        report: None,
        eve_file: None,
        build: build_l2fwd,
    },
    NfInfo {
        spec: &crate::arp::SPEC,
        summary: "answer ARP requests and IPv6 neighbor solicitations for the given addresses",
        ip: "ARP for its IPv4 bindings, Neighbor Solicitation -> Advertisement (RFC 4861) for its IPv6 ones; through up to two VLAN tags, kept in the reply",
        args: "IP=MAC ...",
        // Answering needs the reply built from the request: a header
        // rewrite XDP does (XDP_TX), with a static table.
        elements: &[Element { name: "arp-reply", offload: Offload::Full }],
        hosted: Hosted::Replies,
        passes: false,
        file_arg: None,
        report: None,
        eve_file: None,
        build: build_arp,
    },
    NfInfo {
        spec: &crate::icmp::SPEC,
        summary: "answer ICMP and ICMPv6 echo requests (ping, ping -6) to the given addresses",
        ip: "ICMP echo for its IPv4 addresses, ICMPv6 echo (RFC 4443) for its IPv6 ones; through up to two VLAN tags, kept in the reply",
        args: "IP ...",
        // The reply moves the ICMP message over any IP options: payload access.
        elements: &[Element { name: "icmp-echo-reply", offload: Offload::No }],
        hosted: Hosted::Replies,
        passes: false,
        file_arg: None,
        report: None,
        eve_file: None,
        build: build_icmp,
    },
    NfInfo {
        spec: &crate::firewall::SPEC,
        summary: "stateless 5-tuple firewall (ACL): prefixes, port ranges, first match wins",
        ip: "one rule set for both versions (nftables inet): an IPv4 prefix matches IPv4, an IPv6 prefix IPv6, a rule without one both; default covers every IP frame, non-ip the rest; rules see through up to two VLAN tags, a third is malformed",
        args: "RULE_FILE [linear|bitvector]",
        elements: &[Element { name: "ip-filter", offload: Offload::Full }],
        hosted: Hosted::Plain,
        passes: true,
        file_arg: Some(0),
        report: None,
        eve_file: None,
        build: build_firewall,
    },
    NfInfo {
        spec: &crate::flow_monitor::SPEC,
        summary: "count packets and bytes per 5-tuple flow (P4SFC's monitor)",
        ip: "IPv4 and IPv6 flows in one 128-bit key (IPv4 mapped); the flow is the inner packet's, through up to two VLAN tags",
        args: "(none)",
        elements: &[Element { name: "flow-monitor", offload: Offload::Full }],
        hosted: Hosted::ExportsFlows,
        passes: true,
        file_arg: None,
        report: None,
        eve_file: None,
        build: build_flow_monitor,
    },
    NfInfo {
        spec: &crate::ips::SPEC,
        summary: "drop or alert on packets matching Snort/Suricata rules (content, pcre, flow; Aho-Corasick prefilter)",
        ip: "IPv4 and IPv6 alike (rule addresses in either family), through up to two VLAN tags; fragments of either dropped",
        args: "RULE_FILE [skip-unsupported] [eve=PATH]",
        elements: &[Element { name: "payload-matcher", offload: Offload::No }],
        hosted: Hosted::Plain,
        passes: true,
        file_arg: Some(0),
        report: Some(report_ips),
        eve_file: Some(|args| crate::ips::IpsArgs::parse(args).ok()?.eve),
        build: build_ips,
    },
    NfInfo {
        spec: &crate::payload_scan::SPEC,
        summary: "drop (or count) TCP/UDP frames whose first 256 payload bytes hold one of some byte strings",
        ip: "IPv4 and IPv6 payloads alike, through up to two VLAN tags, in XDP as in the process",
        args: "drop|count PATTERN... (text, or hex:BYTES)",
        // In XDP when its patterns fit the element (16 of up to 32 bytes);
        // placement checks (ferry-place's lowering).
        elements: &[Element { name: "payload-scan", offload: Offload::Full }],
        hosted: Hosted::Plain,
        passes: true,
        file_arg: None,
        report: None,
        eve_file: None,
        build: build_payload_scan,
    },
    NfInfo {
        spec: &crate::rxdrop::SPEC,
        summary: "count and drop every frame (receive baseline)",
        ip: "any frame",
        args: "(none)",
        elements: &[Element { name: "drop", offload: Offload::Full }],
        hosted: Hosted::Plain,
        passes: false,
        file_arg: None,
        report: None,
        eve_file: None,
        build: build_rxdrop,
    },
];

/// All NFs this crate provides.
pub fn registry() -> &'static [NfInfo] {
    &REGISTRY
}

/// The registry entry of the NF called `name`.
pub fn info(name: &str) -> Option<&'static NfInfo> {
    REGISTRY.iter().find(|i| i.spec.name == name)
}

/// Builds the NF called `name` (see [`registry`]) from CLI-style arguments.
pub fn by_name(name: &str, args: &[&str]) -> Result<Box<dyn PacketNf>, NfError> {
    info(name).ok_or_else(|| NfError::UnknownNf { name: name.to_string() })?.build(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_by_name() {
        let names: Vec<_> = registry().iter().map(|i| i.spec.name).collect();
        assert_eq!(
            names,
            ["l2fwd", "arp-responder", "icmp-echo", "firewall", "flow-monitor", "ips", "payload-scan", "rxdrop"]
        );
        for info in registry() {
            assert_eq!(info.spec.counters[0], "rx");
        }
        assert_eq!(by_name("l2fwd", &[]).unwrap().spec().name, "l2fwd");
        let nf = by_name("arp-responder", &["10.0.0.1=02:00:00:00:00:01"]).unwrap();
        assert_eq!(nf.spec().name, "arp-responder");
        assert_eq!(nf.counters().len(), nf.spec().counters.len());
        assert!(by_name("icmp-echo", &["10.0.0.1", "10.0.0.2"]).is_ok());
        assert_eq!(by_name("nat", &[]).err(), Some(NfError::UnknownNf { name: "nat".into() }));
        assert!(matches!(by_name("l2fwd", &["x"]), Err(NfError::BadArg { .. })));
        assert!(matches!(by_name("icmp-echo", &[]), Err(NfError::MissingArg { .. })));
        assert!(matches!(by_name("icmp-echo", &["10.0.0.256"]), Err(NfError::BadArg { .. })));
        assert!(matches!(
            by_name("arp-responder", &["10.0.0.1"]),
            Err(NfError::BadArg { reason: "expected IP=MAC", .. })
        ));
        assert!(matches!(
            by_name("arp-responder", &["10.0.0.1=02:00"]),
            Err(NfError::BadArg { reason: "bad MAC", .. })
        ));
    }
}
