//! A stateless firewall (an ACL): 5-tuple rules over IPv4 and IPv6 alike,
//! first match wins, allow or deny (rules: [`crate::firewall_rules`]).
//! VLAN tags (up to two) are looked through: the rules see the inner
//! packet. FLASH's firewall scans its
//! rules one by one; this one finds the same first match with a
//! bit-vector classifier by default, or scans when asked (`linear`), so
//! the two can be compared.

use ferry_wire::flow;

use crate::firewall_rules::{first_match_linear, BitVectorClassifier, FwAction, FwRules, Tuple};
use crate::{count, NfSpec, PacketNf, Verdict};

const PASS: usize = 1;
const PASS_NOT_IP: usize = 2;
const DROP_DENIED: usize = 3;
const DROP_MALFORMED: usize = 4;
const DROP_FRAGMENT: usize = 5;
const DROP_NOT_IP: usize = 6;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "firewall",
    counters: &["rx", "pass", "pass_not_ip", "drop_denied", "drop_malformed", "drop_fragment", "drop_not_ip"],
};

/// How the first matching rule is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Linear,
    BitVector,
}

/// The decision, in order:
/// - malformed by [`ferry_wire::flow::parse`] (a header cut short or
///   past the IP payload, a bad IP version or length, a UDP length under
///   8, an IPv6 extension header chain it does not walk, three VLAN
///   tags) → `drop_malformed`;
/// - no IP header (ARP, LLDP…) → the rule file's `non-ip` action, pass
///   unless it says deny: `pass_not_ip` or `drop_not_ip`;
/// - a non-first fragment (IPv4, or IPv6 by its fragment header) →
///   `drop_fragment`: it has no ports to match, and passing it would let
///   a denied flow through in pieces;
/// - the first matching rule's action, else the default (for IPv4 and
///   IPv6 alike): `pass` or `drop_denied`.
///
/// Ports are 0 for protocols other than TCP and UDP.
pub struct Firewall {
    rules: FwRules,
    lookup: Lookup,
    classifier: BitVectorClassifier,
    counters: [u64; 7],
}

impl Firewall {
    pub fn new(rules: FwRules, lookup: Lookup) -> Firewall {
        let classifier = BitVectorClassifier::new(&rules.rules);
        Firewall { rules, lookup, classifier, counters: [0; 7] }
    }

    /// The 5-tuple by the shared flow parser, the one the XDP ACL element
    /// uses too: placement must not change a decision.
    fn tuple(frame: &[u8]) -> Result<Option<Tuple>, usize> {
        let f = flow::parse(frame).map_err(|_| DROP_MALFORMED)?;
        if f.ip.is_none() {
            return Ok(None);
        }
        if f.later_fragment {
            return Err(DROP_FRAGMENT);
        }
        Ok(Some(Tuple { src: f.src.into(), dst: f.dst.into(), proto: f.proto, sport: f.sport, dport: f.dport }))
    }

    /// The action for `t`: its first matching rule's, else the default.
    pub fn decide(&self, t: &Tuple) -> FwAction {
        let first = match self.lookup {
            Lookup::Linear => first_match_linear(&self.rules.rules, t),
            Lookup::BitVector => self.classifier.first_match(t),
        };
        first.map_or(self.rules.default, |i| self.rules.rules[i].action)
    }

    fn classify(&self, frame: &[u8]) -> (Verdict, usize) {
        match Self::tuple(frame) {
            Err(reason) => (Verdict::Drop, reason),
            Ok(None) => match self.rules.non_ip {
                FwAction::Allow => (Verdict::Pass, PASS_NOT_IP),
                FwAction::Deny => (Verdict::Drop, DROP_NOT_IP),
            },
            Ok(Some(t)) => match self.decide(&t) {
                FwAction::Allow => (Verdict::Pass, PASS),
                FwAction::Deny => (Verdict::Drop, DROP_DENIED),
            },
        }
    }
}

impl PacketNf for Firewall {
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
    use crate::firewall_rules::parse_fw_rules;
    use ferry_wire::{build_frame, ethertype, FiveTuple, FrameSpec, L4Proto};
    use std::net::IpAddr;

    fn frame(src: [u8; 4], proto: L4Proto, dport: u16) -> Vec<u8> {
        frame_of(src.into(), [192, 0, 2, 1].into(), proto, dport)
    }

    fn frame6(src: &str, proto: L4Proto, dport: u16) -> Vec<u8> {
        frame_of(src.parse().unwrap(), "2001:db8:ff::1".parse().unwrap(), proto, dport)
    }

    fn frame_of(src: IpAddr, dst: IpAddr, proto: L4Proto, dport: u16) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 96 };
        let t = FiveTuple { src_ip: src, dst_ip: dst, src_port: 1000, dst_port: dport, proto };
        let mut buf = vec![0u8; 96];
        let n = build_frame(&spec, &t, None, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// `f` with tags pushed after the MACs: `(tpid, vid)` outermost first.
    fn tagged(f: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
        let mut out = f[..12].to_vec();
        for (tpid, vid) in tags {
            out.extend_from_slice(&tpid.to_be_bytes());
            out.extend_from_slice(&vid.to_be_bytes());
        }
        out.extend_from_slice(&f[12..]);
        out
    }

    fn run_table(rules: &str, table: Vec<(Vec<u8>, Verdict, usize, &str)>) {
        for lookup in [Lookup::Linear, Lookup::BitVector] {
            let mut nf = Firewall::new(parse_fw_rules(rules).unwrap(), lookup);
            for (f, verdict, idx, what) in &table {
                let before = nf.counters[*idx];
                assert_eq!(nf.process(&mut f.clone()), *verdict, "{lookup:?}: {what}");
                assert_eq!(nf.counters[*idx], before + 1, "{lookup:?}: {what}: {}", SPEC.counters[*idx]);
            }
            let c = nf.counters();
            assert_eq!(c[0], c[1..].iter().sum::<u64>(), "verdict counters partition rx");
        }
    }

    /// IPv6 and stacked tags: `default deny` drops the IPv6 no rule
    /// allows; IPv6 rules and family-less rules match IPv6; the rules see
    /// through two tags; a third tag is malformed; `non-ip deny` drops ARP.
    #[test]
    fn ipv6_and_tag_stacks_meet_the_same_rules() {
        let rules = "allow src 2001:db8::/32 proto tcp dport 80\nallow proto icmpv6\nallow src 10.0.0.0/8\nnon-ip deny\ndefault deny\n";
        let v4 = frame([10, 0, 0, 1], L4Proto::Udp, 53);
        let mut arp = v4.clone();
        arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        let mut later_fragment6 = frame6("2001:db8::1", L4Proto::Tcp, 80);
        // Next header: a fragment header at offset 8, then TCP's bytes.
        later_fragment6[14 + 6] = 44;
        later_fragment6.splice(54..54, [6, 0, 0, 8, 0, 0, 0, 1]);
        later_fragment6[14 + 5] += 8;
        let table: Vec<(Vec<u8>, Verdict, usize, &str)> = vec![
            (frame6("2001:db8::1", L4Proto::Tcp, 80), Verdict::Pass, PASS, "an IPv6 rule"),
            (frame6("2001:db9::1", L4Proto::Tcp, 80), Verdict::Drop, DROP_DENIED, "IPv6 no rule allows: default"),
            (frame6("2001:db9::1", L4Proto::Udp, 53), Verdict::Drop, DROP_DENIED, "IPv6 UDP: default"),
            (frame6("fe80::1", L4Proto::Icmp, 0), Verdict::Pass, PASS, "proto icmpv6, no prefix"),
            (later_fragment6, Verdict::Drop, DROP_FRAGMENT, "an IPv6 later fragment"),
            (v4.clone(), Verdict::Pass, PASS, "an IPv4 rule"),
            (tagged(&v4, &[(0x88a8, 100), (0x8100, 200)]), Verdict::Pass, PASS, "QinQ: the inner packet"),
            (
                tagged(&frame6("2001:db9::1", L4Proto::Tcp, 80), &[(0x8100, 1), (0x8100, 2)]),
                Verdict::Drop,
                DROP_DENIED,
                "two C-tags, IPv6",
            ),
            (tagged(&v4, &[(0x8100, 1), (0x8100, 2), (0x8100, 3)]), Verdict::Drop, DROP_MALFORMED, "a third tag"),
            (arp, Verdict::Drop, DROP_NOT_IP, "non-ip deny"),
        ];
        run_table(rules, table);
    }

    /// The decision table, row by row, with both lookups.
    #[test]
    fn every_rule_of_the_decision_table() {
        let rules = "deny src 10.0.0.0/8 proto udp dport 53\nallow proto tcp dport 80\ndefault deny\n";
        let mut arp = frame([10, 0, 0, 1], L4Proto::Udp, 53);
        arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        let mut later_fragment = frame([172, 16, 0, 1], L4Proto::Tcp, 80);
        later_fragment[14 + 7] = 1; // offset 8 bytes
        let mut cut = frame([172, 16, 0, 1], L4Proto::Tcp, 80);
        cut.truncate(14 + 20 + 10);
        let table: Vec<(Vec<u8>, Verdict, usize, &str)> = vec![
            (vec![0; 8], Verdict::Drop, DROP_MALFORMED, "runt"),
            (cut, Verdict::Drop, DROP_MALFORMED, "TCP header cut short"),
            (arp, Verdict::Pass, PASS_NOT_IP, "ARP"),
            (later_fragment, Verdict::Drop, DROP_FRAGMENT, "a later fragment"),
            (frame([10, 1, 2, 3], L4Proto::Udp, 53), Verdict::Drop, DROP_DENIED, "first rule"),
            (frame([172, 16, 0, 1], L4Proto::Udp, 53), Verdict::Drop, DROP_DENIED, "no rule: the default"),
            (frame([10, 1, 2, 3], L4Proto::Tcp, 80), Verdict::Pass, PASS, "second rule"),
            (frame6("2001:db8::1", L4Proto::Tcp, 80), Verdict::Pass, PASS, "second rule names no family"),
            (frame6("2001:db8::1", L4Proto::Udp, 80), Verdict::Drop, DROP_DENIED, "IPv6: the default"),
        ];
        run_table(rules, table);
    }
}
