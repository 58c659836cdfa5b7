//! Tenant classification: which tenant's entry a frame arriving on a
//! shared device belongs to (the SmartNIC paper's classification at the
//! NIC edge). A table of rules, the first match wins; a rule matches on
//! source and destination prefix (IPv4 or IPv6), outer and inner VLAN id
//! and destination port, every field it gives. The same table runs in two places that decide
//! every frame alike: the XDP classifier on the edge device
//! (`bpf/classify.bpf.c`, fed from [`Rule`] by ferry-bpf) and the
//! `tenant-router` NF, the paper's baseline of a trusted router that
//! receives into its own memory and copies to each tenant's.
//!
//! A rule's text form (the router's arguments, and what the chain file's
//! rules become):
//! `out=N[,src=CIDR][,dst=CIDR][,vlan=ID][,inner_vlan=ID][,dport=PORT]`.
//! `out` is the tenant entry's index among the classifier's entries;
//! `vlan` is the outer (or only) tag's id, `inner_vlan` the inner tag's
//! of a QinQ frame.
//!
//! The decision, in order:
//! - a frame the shared flow parser rejects → `Malformed`;
//! - the first rule all of whose fields match → `Rule(i)`. A prefix
//!   needs an IP frame of its version (`::/0` matches both), a VLAN id a
//!   tagged frame (an inner one two tags), a port TCP or UDP with its
//!   header (a later fragment has none): a frame without the field never
//!   matches a rule that asks for it;
//! - otherwise → `Default` (dropped or handed to the kernel, as the chain
//!   file says).

use std::fmt;
use std::str::FromStr;

use crate::ipv4::ip_proto;
use crate::prefix::IpPrefix;

/// Rules a table holds: the XDP classifier's bounded loop.
pub const MAX_RULES: usize = 64;
/// Tenant entries one classifier feeds (the `out` of a rule is below it).
pub const MAX_OUTS: usize = 64;
/// The largest VLAN id (4095 is reserved, but seen on the wire).
pub const MAX_VLAN: u16 = 4095;

/// One rule: the fields it matches on (None: any) and the entry it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub src: Option<IpPrefix>,
    pub dst: Option<IpPrefix>,
    pub vlan: Option<u16>,
    pub inner_vlan: Option<u16>,
    pub dport: Option<u16>,
    /// The tenant entry (index among the classifier's entries).
    pub out: u16,
}

fn vlan_id(value: &str) -> Result<u16, String> {
    value.parse().ok().filter(|v| *v <= MAX_VLAN).ok_or_else(|| format!("{value:?}: a VLAN id 0..={MAX_VLAN}"))
}

/// A rule's text that does not parse, and why (the key at fault first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct RuleError {
    /// The key at fault (`out`, `src`, `dst`, `vlan`, `inner_vlan`,
    /// `dport`), or `rule`.
    pub key: String,
    pub message: String,
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, RuleError> {
        let err = |key: &str, message: String| RuleError { key: key.to_string(), message };
        let mut rule = Rule { src: None, dst: None, vlan: None, inner_vlan: None, dport: None, out: u16::MAX };
        for part in s.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(|| err("rule", format!("{part:?} is not key=value")))?;
            let repeated = match key {
                "out" => rule.out != u16::MAX,
                "src" => rule.src.is_some(),
                "dst" => rule.dst.is_some(),
                "vlan" => rule.vlan.is_some(),
                "inner_vlan" => rule.inner_vlan.is_some(),
                "dport" => rule.dport.is_some(),
                _ => return Err(err(key, "unknown key (out, src, dst, vlan, inner_vlan, dport)".into())),
            };
            if repeated {
                return Err(err(key, "given twice".into()));
            }
            match key {
                "out" => {
                    rule.out = value
                        .parse()
                        .ok()
                        .filter(|o| usize::from(*o) < MAX_OUTS)
                        .ok_or_else(|| err(key, format!("{value:?}: an entry index below {MAX_OUTS}")))?
                }
                "src" => rule.src = Some(value.parse().map_err(|m| err(key, m))?),
                "dst" => rule.dst = Some(value.parse().map_err(|m| err(key, m))?),
                "vlan" => rule.vlan = Some(vlan_id(value).map_err(|m| err(key, m))?),
                "inner_vlan" => rule.inner_vlan = Some(vlan_id(value).map_err(|m| err(key, m))?),
                _ => rule.dport = Some(value.parse().map_err(|_| err(key, format!("{value:?}: a port 0..=65535")))?),
            }
        }
        if rule.out == u16::MAX {
            return Err(err("out", "missing: which entry the rule picks".into()));
        }
        Ok(rule)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "out={}", self.out)?;
        if let Some(p) = self.src {
            write!(f, ",src={p}")?;
        }
        if let Some(p) = self.dst {
            write!(f, ",dst={p}")?;
        }
        if let Some(v) = self.vlan {
            write!(f, ",vlan={v}")?;
        }
        if let Some(v) = self.inner_vlan {
            write!(f, ",inner_vlan={v}")?;
        }
        if let Some(p) = self.dport {
            write!(f, ",dport={p}")?;
        }
        Ok(())
    }
}

/// What the table decides for a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Malformed,
    /// Rule i matched.
    Rule(usize),
    /// No rule matched.
    Default,
}

/// The rules, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub rules: Vec<Rule>,
}

impl Table {
    /// The table of rule texts `args` (an error gives the index at fault).
    pub fn parse(args: &[&str]) -> Result<Table, (usize, RuleError)> {
        if args.len() > MAX_RULES {
            let message = format!("{} rules; a classifier holds {MAX_RULES}", args.len());
            return Err((MAX_RULES, RuleError { key: "rule".into(), message }));
        }
        let rules = args.iter().enumerate().map(|(i, a)| a.parse().map_err(|e| (i, e))).collect::<Result<_, _>>()?;
        Ok(Table { rules })
    }

    pub fn decide(&self, frame: &[u8]) -> Decision {
        let Ok(flow) = crate::flow::parse(frame) else {
            return Decision::Malformed;
        };
        let ports = matches!(flow.proto, ip_proto::TCP | ip_proto::UDP) && flow.l4_offset.is_some();
        let matches = |r: &Rule| {
            let prefix = |p: Option<IpPrefix>, a| p.map_or(true, |p| flow.ip.is_some() && p.contains(a));
            prefix(r.src, flow.src)
                && prefix(r.dst, flow.dst)
                && r.vlan.map_or(true, |v| flow.outer_vlan == Some(v))
                && r.inner_vlan.map_or(true, |v| flow.inner_vlan == Some(v))
                && r.dport.map_or(true, |p| ports && flow.dport == p)
        };
        match self.rules.iter().position(matches) {
            Some(i) => Decision::Rule(i),
            None => Decision::Default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build_frame, FiveTuple, FrameSpec, L4Proto};

    fn table(rules: &[&str]) -> Table {
        Table::parse(rules).unwrap()
    }

    fn udp(src: [u8; 4], dst: [u8; 4], dport: u16) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
        let t =
            FiveTuple { src_ip: src.into(), dst_ip: dst.into(), src_port: 1000, dst_port: dport, proto: L4Proto::Udp };
        let mut f = vec![0u8; spec.frame_len];
        build_frame(&spec, &t, None, &mut f).unwrap();
        f
    }

    /// `frame` with an 802.1Q tag of `vid` after the MAC addresses.
    fn tagged(frame: &[u8], vid: u16) -> Vec<u8> {
        let mut f = frame[..12].to_vec();
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&vid.to_be_bytes());
        f.extend_from_slice(&frame[12..]);
        f
    }

    #[test]
    fn the_text_form_round_trips_and_blames_the_key() {
        for text in [
            "out=0",
            "out=3,src=10.0.0.0/8,dst=192.168.1.0/24,vlan=100,dport=53",
            "out=1,dst=0.0.0.0/0",
            "out=2,src=2001:db8::/32,vlan=100,inner_vlan=200",
        ] {
            assert_eq!(text.parse::<Rule>().unwrap().to_string(), text);
        }
        let key = |t: &str| t.parse::<Rule>().unwrap_err().key;
        assert_eq!(key("dst=10.0.0.0/8"), "out");
        assert_eq!(key("out=64"), "out");
        assert_eq!(key("out=0,dst=10.0.0.1/8"), "dst");
        assert_eq!(key("out=0,src=10.0.0.0/33"), "src");
        assert_eq!(key("out=0,vlan=4096"), "vlan");
        assert_eq!(key("out=0,inner_vlan=4096"), "inner_vlan");
        assert_eq!(key("out=0,dport=65536"), "dport");
        assert_eq!(key("out=0,proto=6"), "proto");
        assert_eq!(key("out=0,out=1"), "out");
        assert_eq!(key("out=0,dst"), "rule");
        let e = "out=0,dst=10.0.0.1/8".parse::<Rule>().unwrap_err().to_string();
        assert!(e.contains("did you mean 10.0.0.0/8"), "{e}");
        let many: Vec<String> = (0..=MAX_RULES).map(|_| "out=0".to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(Table::parse(&many).is_err());
    }

    /// The decision table: each row a frame and the rule it lands on.
    #[test]
    fn first_match_wins_and_every_field_must_match() {
        let t = table(&["out=0,src=10.9.0.0/16,dport=53", "out=1,vlan=200", "out=0,dst=10.1.0.0/16", "out=1,dport=80"]);
        let plain = udp([10, 0, 0, 1], [10, 1, 2, 3], 9);
        let rows: Vec<(&str, Vec<u8>, Decision)> = vec![
            ("src prefix and port", udp([10, 9, 1, 1], [10, 1, 0, 1], 53), Decision::Rule(0)),
            ("src prefix, other port: on to dst", udp([10, 9, 1, 1], [10, 1, 0, 1], 54), Decision::Rule(2)),
            ("vlan before dst", tagged(&plain, 200), Decision::Rule(1)),
            ("other vlan: dst", tagged(&plain, 201), Decision::Rule(2)),
            ("dst prefix", plain.clone(), Decision::Rule(2)),
            ("port only", udp([10, 0, 0, 1], [10, 2, 0, 1], 80), Decision::Rule(3)),
            ("nothing", udp([10, 0, 0, 1], [10, 2, 0, 1], 81), Decision::Default),
            ("malformed", plain[..30].to_vec(), Decision::Malformed),
        ];
        for (what, frame, want) in rows {
            assert_eq!(t.decide(&frame), want, "{what}");
        }
    }

    #[test]
    fn a_frame_without_the_field_never_matches_a_rule_asking_for_it() {
        let t = table(&["out=0,dst=0.0.0.0/0", "out=1,vlan=0", "out=2,dport=0"]);
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        assert_eq!(t.decide(&arp), Decision::Default, "ARP has no IPv4 header");
        let mut later_fragment = udp([10, 0, 0, 1], [10, 1, 0, 1], 0);
        later_fragment[20] = 0x00;
        later_fragment[21] = 0x10;
        let only_ports = table(&["out=2,dport=0"]);
        assert_eq!(only_ports.decide(&later_fragment), Decision::Default, "a later fragment has no ports");
        assert_eq!(table(&["out=1,vlan=0"]).decide(&udp([1, 1, 1, 1], [2, 2, 2, 2], 1)), Decision::Default);
        assert_eq!(table(&["out=3"]).decide(&arp), Decision::Rule(0), "a rule with no fields matches all");
    }
}
