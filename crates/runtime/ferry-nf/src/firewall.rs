//! A stateless firewall (an ACL): 5-tuple rules, first match wins, allow
//! or deny (rules: [`crate::firewall_rules`]). FLASH's firewall scans its
//! rules one by one; this one finds the same first match with a
//! bit-vector classifier by default, or scans when asked (`linear`), so
//! the two can be compared.

use ferry_wire::flow;

use crate::firewall_rules::{first_match_linear, BitVectorClassifier, FwAction, FwRules, Tuple};
use crate::{count, NfSpec, PacketNf, Verdict};

const PASS: usize = 1;
const PASS_NOT_IPV4: usize = 2;
const DROP_DENIED: usize = 3;
const DROP_MALFORMED: usize = 4;
const DROP_FRAGMENT: usize = 5;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "firewall",
    counters: &["rx", "pass", "pass_not_ipv4", "drop_denied", "drop_malformed", "drop_fragment"],
};

/// How the first matching rule is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Linear,
    BitVector,
}

/// The decision, in order:
/// - malformed by [`ferry_wire::flow::parse`] (a header cut short or
///   past the IPv4 total length, a bad IPv4 version or length, a UDP
///   length under 8) → `drop_malformed`;
/// - not IPv4 (ARP, IPv6…) → `pass_not_ipv4`: the rules speak of IPv4;
/// - a non-first fragment → `drop_fragment`: it has no ports to match,
///   and passing it would let a denied flow through in pieces;
/// - the first matching rule's action, else the default: `pass` or
///   `drop_denied`.
///
/// Ports are 0 for protocols other than TCP and UDP.
pub struct Firewall {
    rules: FwRules,
    lookup: Lookup,
    classifier: BitVectorClassifier,
    counters: [u64; 6],
}

impl Firewall {
    pub fn new(rules: FwRules, lookup: Lookup) -> Firewall {
        let classifier = BitVectorClassifier::new(&rules.rules);
        Firewall { rules, lookup, classifier, counters: [0; 6] }
    }

    /// The 5-tuple by the shared flow parser, the one the XDP ACL element
    /// uses too: placement must not change a decision.
    fn tuple(frame: &[u8]) -> Result<Option<Tuple>, usize> {
        let f = flow::parse(frame).map_err(|_| DROP_MALFORMED)?;
        if !f.is_ipv4 {
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
            Ok(None) => (Verdict::Pass, PASS_NOT_IPV4),
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

    fn frame(src: [u8; 4], proto: L4Proto, dport: u16) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
        let t = FiveTuple { src_ip: src.into(), dst_ip: [192, 0, 2, 1].into(), src_port: 1000, dst_port: dport, proto };
        let mut buf = vec![0u8; 64];
        let n = build_frame(&spec, &t, None, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// The decision table, row by row, with both lookups.
    #[test]
    fn every_rule_of_the_decision_table() {
        let rules = "deny src 10.0.0.0/8 proto udp dport 53\nallow proto tcp dport 80\ndefault deny\n";
        for lookup in [Lookup::Linear, Lookup::BitVector] {
            let mut nf = Firewall::new(parse_fw_rules(rules).unwrap(), lookup);
            let mut arp = frame([10, 0, 0, 1], L4Proto::Udp, 53);
            arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
            let mut later_fragment = frame([172, 16, 0, 1], L4Proto::Tcp, 80);
            later_fragment[14 + 7] = 1; // offset 8 bytes
            let mut cut = frame([172, 16, 0, 1], L4Proto::Tcp, 80);
            cut.truncate(14 + 20 + 10);
            let table: Vec<(Vec<u8>, Verdict, usize, &str)> = vec![
                (vec![0; 8], Verdict::Drop, DROP_MALFORMED, "runt"),
                (cut, Verdict::Drop, DROP_MALFORMED, "TCP header cut short"),
                (arp, Verdict::Pass, PASS_NOT_IPV4, "ARP"),
                (later_fragment, Verdict::Drop, DROP_FRAGMENT, "a later fragment"),
                (frame([10, 1, 2, 3], L4Proto::Udp, 53), Verdict::Drop, DROP_DENIED, "first rule"),
                (frame([172, 16, 0, 1], L4Proto::Udp, 53), Verdict::Drop, DROP_DENIED, "no rule: the default"),
                (frame([10, 1, 2, 3], L4Proto::Tcp, 80), Verdict::Pass, PASS, "second rule"),
            ];
            for (mut f, verdict, idx, what) in table {
                let before = nf.counters[idx];
                assert_eq!(nf.process(&mut f), verdict, "{lookup:?}: {what}");
                assert_eq!(nf.counters[idx], before + 1, "{lookup:?}: {what}: {}", SPEC.counters[idx]);
            }
            let c = nf.counters();
            assert_eq!(c[0], c[1..].iter().sum::<u64>(), "verdict counters partition rx");
        }
    }
}
