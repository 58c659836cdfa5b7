//! IPS: matches content signatures over TCP and UDP payloads with one
//! Aho-Corasick automaton for all rules (P4SFC's non-offloadable NF: it
//! reads the payload). Rules: [`crate::ips_rules`].

use aho_corasick::{AhoCorasick, MatchKind};

use crate::ips_rules::{Action, Rule};
use crate::payload::{l4_payload, L4Payload};
use crate::{count, NfSpec, PacketNf, Verdict};

const PASS: usize = 1;
const PASS_ALERTED: usize = 2;
const PASS_NOT_INSPECTED: usize = 3;
const DROP_RULE: usize = 4;
const DROP_MALFORMED: usize = 5;
const DROP_FRAGMENT: usize = 6;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "ips",
    counters: &["rx", "pass", "pass_alerted", "pass_not_inspected", "drop_rule", "drop_malformed", "drop_fragment"],
};

/// The decision, in order:
/// - what the shared flow parser rejects (as the XDP pipeline does: a
///   third VLAN tag, truncated headers, an IPv6 extension header chain
///   it does not walk) → `drop_malformed`;
/// - no IP header, or neither TCP nor UDP → `pass_not_inspected` (no rule
///   can match it);
/// - a fragment → `drop_fragment`: there is no reassembly, and passing
///   fragments unseen would let any signature through split in two;
/// - a `drop` rule matches → `drop_rule`;
/// - an `alert` rule matches → `pass_alerted` (forwarded);
/// - otherwise → `pass`.
///
/// IPv4 and IPv6 alike (rules name no addresses), through up to two VLAN
/// tags. A rule matches when the protocol and destination port fit and
/// every one of its contents occurs in the L4 payload (up to the IPv4
/// total length or the IPv6 payload length, so Ethernet padding never
/// matches).
pub struct Ips {
    rules: Vec<Rule>,
    matcher: AhoCorasick,
    /// Pattern id -> (rule, its content's bit).
    pattern_rule: Vec<(usize, u64)>,
    /// Per rule: contents seen in this packet (reset after each).
    seen: Vec<u64>,
    touched: Vec<usize>,
    /// Per rule: packets it matched.
    hits: Vec<u64>,
    counters: [u64; 7],
}

impl std::fmt::Debug for Ips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ips").field("rules", &self.rules.len()).field("counters", &self.counters).finish()
    }
}

impl Ips {
    pub fn new(rules: Vec<Rule>) -> Result<Ips, aho_corasick::BuildError> {
        let mut patterns: Vec<&[u8]> = Vec::new();
        let mut pattern_rule = Vec::new();
        for (r, rule) in rules.iter().enumerate() {
            for (k, c) in rule.contents.iter().enumerate() {
                patterns.push(c);
                pattern_rule.push((r, 1u64 << k));
            }
        }
        // Standard semantics report every pattern, overlapping ones too.
        let matcher = AhoCorasick::builder().match_kind(MatchKind::Standard).build(&patterns)?;
        let n = rules.len();
        Ok(Ips {
            rules,
            matcher,
            pattern_rule,
            seen: vec![0; n],
            touched: Vec::with_capacity(n),
            hits: vec![0; n],
            counters: [0; 7],
        })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Packets each rule matched, in rule order.
    pub fn hits(&self) -> &[u64] {
        &self.hits
    }

    fn classify(&mut self, frame: &[u8]) -> (Verdict, usize) {
        let (proto, dst_port, payload) = match l4_payload(frame) {
            L4Payload::Malformed => return (Verdict::Drop, DROP_MALFORMED),
            L4Payload::NotInspected => return (Verdict::Pass, PASS_NOT_INSPECTED),
            L4Payload::Fragment => return (Verdict::Drop, DROP_FRAGMENT),
            L4Payload::Payload { proto, dst_port, bytes } => (proto, dst_port, bytes),
        };
        let mut action = None;
        for m in self.matcher.find_overlapping_iter(payload) {
            let (r, bit) = self.pattern_rule[m.pattern().as_usize()];
            if self.seen[r] == 0 {
                self.touched.push(r);
            }
            self.seen[r] |= bit;
        }
        for &r in &self.touched {
            let rule = &self.rules[r];
            let all = if rule.contents.len() == 64 { u64::MAX } else { (1u64 << rule.contents.len()) - 1 };
            let fits = rule.proto == proto && rule.dst_port.map_or(true, |p| p == dst_port);
            if fits && self.seen[r] == all {
                self.hits[r] += 1;
                if action != Some(Action::Drop) {
                    action = Some(rule.action);
                }
            }
            self.seen[r] = 0;
        }
        self.touched.clear();
        match action {
            Some(Action::Drop) => (Verdict::Drop, DROP_RULE),
            Some(Action::Alert) => (Verdict::Pass, PASS_ALERTED),
            None => (Verdict::Pass, PASS),
        }
    }
}

impl PacketNf for Ips {
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
    use crate::ips_rules::parse_rules;
    use ferry_wire::ethernet::ethertype;
    use ferry_wire::ipv4::ip_proto;

    const RULES: &str = "\
alert tcp any any -> any 80 (msg:\"admin page\"; content:\"GET /admin\"; sid:1;)
drop tcp any any -> any any (msg:\"shell\"; content:\"/bin/sh\"; sid:2;)
drop udp any any -> any 53 (msg:\"both parts\"; content:\"evil\"; content:\"|00 ff|\"; sid:3;)
alert udp any any -> any any (msg:\"overlap\"; content:\"abcab\"; sid:4;)
";

    /// Ethernet + IPv4 (20 bytes, no checksum: the IPS does not read it) +
    /// TCP (20) or UDP (8) to `port`, carrying `payload`, plus `pad` bytes
    /// of Ethernet padding.
    fn frame(proto: u8, port: u16, payload: &[u8], pad: usize) -> Vec<u8> {
        let l4 = if proto == ip_proto::TCP { 20 } else { 8 };
        let total = 20 + l4 + payload.len();
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        f.extend_from_slice(&ip);
        let mut l4h = vec![0u8; l4];
        l4h[0..2].copy_from_slice(&1234u16.to_be_bytes());
        l4h[2..4].copy_from_slice(&port.to_be_bytes());
        if proto == ip_proto::TCP {
            l4h[12] = 5 << 4;
        } else {
            l4h[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        }
        f.extend_from_slice(&l4h);
        f.extend_from_slice(payload);
        f.resize(f.len() + pad, 0);
        f
    }

    fn ips() -> Ips {
        Ips::new(parse_rules(RULES).unwrap()).unwrap()
    }

    /// The decision table, one row per rule of the doc comment.
    #[test]
    fn every_rule_of_the_decision_table() {
        const TCP: u8 = ip_proto::TCP;
        const UDP: u8 = ip_proto::UDP;
        let mut nf = ips();
        let mut fragment = frame(TCP, 80, b"GET /admin", 0);
        fragment[14 + 6] = 0x20; // MF
        let mut bad_tcp = frame(TCP, 80, b"", 0);
        bad_tcp[14 + 20 + 12] = 0x10; // data offset 4 words
        let mut arp = frame(UDP, 53, b"", 0);
        arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        let mut icmp = frame(UDP, 53, b"evil\x00\xff", 0);
        icmp[14 + 9] = ip_proto::ICMP;
        // Rule 3's second content completed only by a padding byte.
        let mut padded = frame(UDP, 53, b"evil\x00", 1);
        *padded.last_mut().unwrap() = 0xff;
        let table: Vec<(Vec<u8>, Verdict, usize, &str)> = vec![
            (vec![0u8; 10], Verdict::Drop, DROP_MALFORMED, "runt"),
            (bad_tcp, Verdict::Drop, DROP_MALFORMED, "TCP header longer than the packet"),
            (arp, Verdict::Pass, PASS_NOT_INSPECTED, "not IPv4"),
            (icmp, Verdict::Pass, PASS_NOT_INSPECTED, "neither TCP nor UDP"),
            (fragment, Verdict::Drop, DROP_FRAGMENT, "a fragment"),
            (frame(TCP, 80, b"GET /admin HTTP/1.1", 0), Verdict::Pass, PASS_ALERTED, "alert rule"),
            (frame(TCP, 8080, b"GET /admin HTTP/1.1", 0), Verdict::Pass, PASS, "alert rule, other port"),
            (frame(TCP, 80, b"GET /admin; /bin/sh", 0), Verdict::Drop, DROP_RULE, "drop wins over alert"),
            (frame(UDP, 53, b"an evil \x00\xff", 0), Verdict::Drop, DROP_RULE, "every content present"),
            (frame(UDP, 53, b"an evil one", 0), Verdict::Pass, PASS, "one content of two"),
            (frame(UDP, 53, b"\x00\xff evil", 0), Verdict::Drop, DROP_RULE, "contents in any order"),
            (frame(UDP, 9, b"xabcabcabx", 0), Verdict::Pass, PASS_ALERTED, "overlapping occurrences"),
            (padded, Verdict::Pass, PASS, "padding is not payload"),
            (frame(TCP, 80, b"GET /admin", 6), Verdict::Pass, PASS_ALERTED, "content before padding is payload"),
            (
                frame(TCP, 80, b"/bin/sh", 0).iter().map(|b| b.to_ascii_uppercase()).collect(),
                Verdict::Pass,
                PASS,
                "case counts",
            ),
        ];
        for (mut f, verdict, idx, what) in table {
            let before = nf.counters[idx];
            assert_eq!(nf.process(&mut f), verdict, "{what}");
            assert_eq!(nf.counters[idx], before + 1, "{what}: counter {}", SPEC.counters[idx]);
        }
        let c = nf.counters();
        assert_eq!(c[0], c[1..].iter().sum::<u64>(), "the verdict counters partition rx");
        assert_eq!(nf.hits(), &[3, 1, 2, 1], "per-rule hits (a packet may hit two rules)");
    }
}
