//! IPS: Snort/Suricata rules ([`crate::ips_rules`]) over IP payloads
//! (P4SFC's non-offloadable NF: it reads the payload). One Aho-Corasick
//! automaton over every rule's fast pattern picks the rules a packet can
//! match, as Snort's and Suricata's multi-pattern prefilters do; only
//! those check their header and run their payload checks.

mod alert;
mod flows;
mod mpm;

use std::collections::HashMap;

use crate::ips_rules::{detect, Action, Rule};
use crate::payload::{inspect, Inspect, IpPacket};
use crate::{count, NfError, NfSpec, PacketNf, Verdict};
pub use alert::{Alert, EveAlert, EveRule, MAX_PENDING, MAX_PER_PACKET};
pub use flows::{FlowState, Flows, DEFAULT_CAPACITY as DEFAULT_FLOWS};
use mpm::Mpm;

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
/// - no IP header → `pass_not_inspected` (no rule can match it);
/// - a fragment → `drop_fragment`: there is no reassembly, and passing
///   fragments unseen would let any signature through split in two;
/// - a `drop` rule matches → `drop_rule`;
/// - an `alert` rule matches → `pass_alerted` (forwarded);
/// - otherwise → `pass`.
///
/// IPv4 and IPv6 alike, through up to two VLAN tags. A rule matches when
/// its protocol, addresses and ports fit (either way round for `<>`;
/// ports only for TCP and UDP, as Snort 3 reads `icmp` and `ip` rules),
/// its `dsize` holds and its payload checks match the payload, which
/// ends at the IPv4 total length or the IPv6 payload length, so Ethernet
/// padding never matches.
pub struct Ips {
    rules: Vec<Rule>,
    prefilter: Mpm,
    /// Per prefilter pattern: the rules whose fast pattern it is.
    pattern_rules: Vec<Vec<u32>>,
    /// Per prefilter pattern: the packet (by `packet`) it last made its
    /// rules candidates in, so that a pattern repeated along a payload
    /// costs its rules once.
    pattern_seen: Vec<u32>,
    packet: u32,
    /// Rules with no positive content: tried on every packet.
    unfiltered: Vec<u32>,
    /// Per rule: already a candidate for this packet.
    candidate: Vec<bool>,
    candidates: Vec<u32>,
    /// Per rule: packets it matched.
    hits: Vec<u64>,
    /// The connections seen, when a rule has `flow:`.
    flows: Option<Flows>,
    /// Alerts raised, until the host takes them.
    pending: alert::Pending,
    counters: [u64; 7],
}

impl std::fmt::Debug for Ips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ips").field("rules", &self.rules.len()).field("counters", &self.counters).finish()
    }
}

impl Ips {
    pub fn new(rules: Vec<Rule>) -> Ips {
        // One pattern per distinct fast pattern, case folded: the
        // prefilter only has to keep every rule that could match.
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut pattern_rules: Vec<Vec<u32>> = Vec::new();
        let mut unfiltered = Vec::new();
        for (r, rule) in rules.iter().enumerate() {
            let Some(fp) = rule.fast_pattern() else {
                unfiltered.push(r as u32);
                continue;
            };
            let key = fp.bytes.to_ascii_lowercase();
            let next = index.len();
            let p = *index.entry(key).or_insert(next);
            if p == pattern_rules.len() {
                pattern_rules.push(Vec::new());
            }
            pattern_rules[p].push(r as u32);
        }
        let mut patterns: Vec<(Vec<u8>, usize)> = index.into_iter().collect();
        patterns.sort_by_key(|(_, p)| *p);
        let prefilter = Mpm::new(patterns.iter().map(|(bytes, _)| bytes.as_slice()));
        let n = rules.len();
        let flows = rules.iter().any(|r| r.flow.is_some()).then(|| Flows::new(DEFAULT_FLOWS));
        Ips {
            rules,
            prefilter,
            pattern_seen: vec![0; pattern_rules.len()],
            packet: 0,
            pattern_rules,
            unfiltered,
            candidate: vec![false; n],
            candidates: Vec::with_capacity(n),
            hits: vec![0; n],
            flows,
            pending: alert::Pending::new(),
            counters: [0; 7],
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Packets each rule matched, in rule order.
    pub fn hits(&self) -> &[u64] {
        &self.hits
    }

    /// The connection table, when a rule has `flow:`.
    pub fn flows(&self) -> Option<&Flows> {
        self.flows.as_ref()
    }

    fn classify(&mut self, frame: &[u8]) -> (Verdict, usize) {
        let packet = match inspect(frame) {
            Inspect::Malformed => return (Verdict::Drop, DROP_MALFORMED),
            Inspect::NotIp => return (Verdict::Pass, PASS_NOT_INSPECTED),
            Inspect::Fragment { .. } => return (Verdict::Drop, DROP_FRAGMENT),
            Inspect::Ip(p) => p,
        };
        let flow = self.flows.as_mut().map(|f| f.observe(&packet));
        self.pick_candidates(packet.payload);
        let mut action = None;
        let mut raised = 0;
        for &r in &self.candidates {
            self.candidate[r as usize] = false;
            let rule = &self.rules[r as usize];
            if rule_matches(rule, &packet, flow) {
                self.hits[r as usize] += 1;
                if action != Some(Action::Drop) {
                    action = Some(rule.action);
                }
                raised += 1;
                if raised > MAX_PER_PACKET {
                    self.pending.skip();
                } else {
                    self.pending.push(Alert::of(r, &packet));
                }
            }
        }
        self.candidates.clear();
        match action {
            Some(Action::Drop) => (Verdict::Drop, DROP_RULE),
            Some(Action::Alert) => (Verdict::Pass, PASS_ALERTED),
            None => (Verdict::Pass, PASS),
        }
    }

    /// The rules whose fast pattern occurs in `payload`, and those with
    /// none, each once.
    fn pick_candidates(&mut self, payload: &[u8]) {
        self.packet = self.packet.wrapping_add(1);
        if self.packet == 0 {
            self.pattern_seen.fill(0);
            self.packet = 1;
        }
        let (pattern_rules, candidate, candidates) = (&self.pattern_rules, &mut self.candidate, &mut self.candidates);
        let (seen, packet) = (&mut self.pattern_seen, self.packet);
        self.prefilter.find(payload, |p| {
            if std::mem::replace(&mut seen[p as usize], packet) == packet {
                return;
            }
            for &r in &pattern_rules[p as usize] {
                if !std::mem::replace(&mut candidate[r as usize], true) {
                    candidates.push(r);
                }
            }
        });
        for &r in &self.unfiltered {
            if !std::mem::replace(&mut self.candidate[r as usize], true) {
                self.candidates.push(r);
            }
        }
    }
}

/// The IPS's arguments: `RULE_FILE [skip-unsupported] [eve=PATH]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpsArgs<'a> {
    pub file: &'a str,
    /// Leave out (and count) the rules that need what the IPS does not do.
    pub skip_unsupported: bool,
    /// Where its alerts go as EVE JSON lines, a file ferryd opens for it
    /// (absolute); None: the NF's log.
    pub eve: Option<&'a str>,
}

impl<'a> IpsArgs<'a> {
    pub fn parse(args: &[&'a str]) -> Result<IpsArgs<'a>, NfError> {
        const NF: &str = "ips";
        let Some((file, rest)) = args.split_first() else {
            return Err(NfError::MissingArg {
                nf: NF,
                what: "the rule file, then skip-unsupported and eve=PATH if wanted",
            });
        };
        let mut a = IpsArgs { file, skip_unsupported: false, eve: None };
        for arg in rest {
            match arg.split_once('=') {
                None if *arg == "skip-unsupported" && !a.skip_unsupported => a.skip_unsupported = true,
                Some(("eve", path)) if a.eve.is_none() && path.starts_with('/') => a.eve = Some(path),
                Some(("eve", _)) if a.eve.is_none() => {
                    let reason =
                        "the EVE file is opened by ferryd, not from the chain file's directory: give an absolute path";
                    return Err(NfError::BadArg { nf: NF, arg: arg.to_string(), reason });
                }
                _ => {
                    let reason = "expected skip-unsupported or eve=PATH, each at most once";
                    return Err(NfError::BadArg { nf: NF, arg: arg.to_string(), reason });
                }
            }
        }
        Ok(a)
    }
}

/// Whether `rule` matches the packet: its header, `dsize`, `flow` (a
/// packet of no tracked flow fits none), then its payload checks.
pub(crate) fn rule_matches(rule: &Rule, p: &IpPacket, flow: Option<FlowState>) -> bool {
    if !rule.proto.covers(p.proto) || !rule.dsize.map_or(true, |d| d.holds(p.payload.len())) {
        return false;
    }
    if let Some(check) = rule.flow {
        if !flow.is_some_and(|f| check.holds(f.from_client, f.established)) {
            return false;
        }
    }
    let ported = p.proto == 6 || p.proto == 17;
    let fits = |src, sport, dst, dport| {
        rule.src.contains(src)
            && rule.dst.contains(dst)
            && (!ported || (rule.src_ports.contains(sport) && rule.dst_ports.contains(dport)))
    };
    let header = fits(p.src, p.sport, p.dst, p.dport) || (rule.bidirectional && fits(p.dst, p.dport, p.src, p.sport));
    header && detect::matches(&rule.checks, p.payload)
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

    fn drain_alerts(&mut self, out: &mut dyn FnMut(EveAlert<'_>)) -> u64 {
        let (alerts, unlogged) = self.pending.take();
        for a in alerts {
            out(a.eve(&self.rules[a.rule as usize]));
        }
        unlogged
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
        Ips::new(parse_rules(RULES).unwrap())
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
            (arp, Verdict::Pass, PASS_NOT_INSPECTED, "not IP"),
            (icmp, Verdict::Pass, PASS, "ICMP: no ICMP rule"),
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

    /// A TCP frame between 10.0.0.1:40000 (the client) and 10.0.0.2:80,
    /// `to_server` or back, with `flags`.
    fn tcp(to_server: bool, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = frame(ip_proto::TCP, 80, payload, 0);
        f[14 + 20 + 13] = flags;
        f[14 + 20..14 + 22].copy_from_slice(&40000u16.to_be_bytes());
        if !to_server {
            let (ip, l4) = (14 + 12, 14 + 20);
            let (src, dst) = (f[ip..ip + 4].to_vec(), f[ip + 4..ip + 8].to_vec());
            f[ip..ip + 4].copy_from_slice(&dst);
            f[ip + 4..ip + 8].copy_from_slice(&src);
            let (sp, dp) = (f[l4..l4 + 2].to_vec(), f[l4 + 2..l4 + 4].to_vec());
            f[l4..l4 + 2].copy_from_slice(&dp);
            f[l4 + 2..l4 + 4].copy_from_slice(&sp);
        }
        f
    }

    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const PSH_ACK: u8 = 0x18;

    /// The four rules of `ips_rules`' tests, on packets: each matches
    /// as Snort would, and only then.
    #[test]
    fn the_four_rules_match_as_snort_would() {
        let rules = crate::ips_rules::tests::FOUR;
        let mut nf = Ips::new(parse_rules(rules).unwrap());
        let mut verdict = |f: Vec<u8>| {
            let mut f = f;
            let before = nf.hits().to_vec();
            let v = nf.process(&mut f);
            let hit: Vec<usize> =
                nf.hits().iter().zip(&before).enumerate().filter(|(_, (a, b))| a > b).map(|(i, _)| i).collect();
            (v, hit)
        };
        // Before the handshake: not established, no TCP rule fires.
        assert_eq!(verdict(tcp(true, PSH_ACK, b"GET /BIN/SH")), (Verdict::Pass, vec![]));
        for (to_server, flags) in [(true, SYN), (false, SYN | ACK), (true, ACK)] {
            assert_eq!(verdict(tcp(to_server, flags, b"")).1, Vec::<usize>::new());
        }
        assert_eq!(verdict(tcp(true, PSH_ACK, b"GET /cgi?x=/BIN/SH HTTP/1.1")), (Verdict::Pass, vec![0]));
        assert_eq!(verdict(tcp(false, PSH_ACK, b"HTTP/1.1 200 /bin/sh")), (Verdict::Pass, vec![]), "to_client");
        assert_eq!(verdict(tcp(true, PSH_ACK, b"id=1 UNION ALL SELECT pw")), (Verdict::Pass, vec![1]));
        assert_eq!(
            verdict(tcp(true, PSH_ACK, b"id=1 union of every one of them select")),
            (Verdict::Pass, vec![]),
            "select beyond within:20"
        );
        assert_eq!(
            verdict(tcp(false, PSH_ACK, b"user=a&PassWord=b")),
            (Verdict::Pass, vec![3]),
            "flow:established, either way"
        );
        let dns = |header: &[u8]| frame(ip_proto::UDP, 53, header, 0);
        let query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03www";
        assert_eq!(verdict(dns(query)), (Verdict::Drop, vec![2]));
        let mut answer = query.to_vec();
        answer[7] = 1;
        assert_eq!(verdict(dns(&answer)), (Verdict::Pass, vec![]), "an answer record");
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(query);
        assert_eq!(verdict(dns(&shifted)), (Verdict::Pass, vec![]), "the bytes at offset 5: past depth");
        // One alert per match, in match order, with the rule's sid and
        // the packet's 5-tuple.
        let mut alerts = Vec::new();
        assert_eq!(nf.drain_alerts(&mut |a| alerts.push((a.alert.signature_id, a.src_port, a.dest_port))), 0);
        assert_eq!(alerts, [(2011465, 40000, 80), (2006446, 40000, 80), (2000002, 80, 40000), (2000001, 1234, 53)]);
        assert_eq!(nf.drain_alerts(&mut |_| panic!("taken already")), 0);
    }

    /// An IPS joined with another NF in one process (`firewall+ips`)
    /// hands its alerts on through the joined NF.
    #[test]
    fn a_joined_ips_hands_its_alerts_on() {
        let mut joined = crate::NfChainLocal::new(vec![Box::new(crate::RxDrop::new()), Box::new(ips())]);
        joined.process(&mut frame(ip_proto::TCP, 80, b"GET /admin", 0));
        let mut sids = Vec::new();
        assert_eq!(joined.drain_alerts(&mut |a| sids.push(a.alert.signature_id)), 0);
        assert!(sids.is_empty(), "rxdrop takes every frame: the IPS saw none");
        let mut joined = crate::NfChainLocal::new(vec![Box::new(ips())]);
        joined.process(&mut frame(ip_proto::TCP, 80, b"GET /admin", 0));
        assert_eq!(joined.drain_alerts(&mut |a| sids.push(a.alert.signature_id)), 0);
        assert_eq!(sids, [1]);
    }

    /// A packet raises at most MAX_PER_PACKET alerts; the rest are
    /// counted as unlogged, its verdict and hits untouched.
    #[test]
    fn a_packet_raises_a_bounded_number_of_alerts() {
        let n = MAX_PER_PACKET + 2;
        let text: String =
            (1..=n).map(|i| format!("alert udp any any -> any any (content:\"x\"; sid:{i};)\n")).collect();
        let mut nf = Ips::new(parse_rules(&text).unwrap());
        assert_eq!(nf.process(&mut frame(ip_proto::UDP, 9, b"x", 0)), Verdict::Pass);
        let mut logged = 0;
        assert_eq!(nf.drain_alerts(&mut |_| logged += 1), 2);
        assert_eq!((logged, nf.hits().iter().sum::<u64>()), (MAX_PER_PACKET, n as u64));
    }

    proptest::proptest! {
        /// The prefilter only narrows: the IPS with it decides as
        /// trying every rule on every packet does.
        #[test]
        fn the_prefilter_agrees_with_trying_every_rule(
            rules in proptest::collection::vec(random_rule(), 1..12),
            payloads in proptest::collection::vec(proptest::collection::vec(proptest::sample::select(b"abAB|x".to_vec()), 0..24), 1..16),
        ) {
            let text: String = rules.iter().enumerate().map(|(i, r)| r.replace("SID", &(i + 1).to_string()) + "\n").collect();
            let parsed = parse_rules(&text).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{e}: {text}")))?;
            let mut nf = Ips::new(parsed.clone());
            for payload in payloads {
                let mut f = frame(ip_proto::UDP, 53, &payload, 0);
                let Inspect::Ip(packet) = inspect(&f) else { unreachable!("a UDP frame") };
                let matched: Vec<&Rule> = parsed.iter().filter(|r| rule_matches(r, &packet, None)).collect();
                let want = if matched.iter().any(|r| r.action == Action::Drop) {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                };
                let before = nf.hits().iter().sum::<u64>();
                let got = nf.process(&mut f);
                proptest::prop_assert_eq!(got, want, "{} on {:?}", text, String::from_utf8_lossy(&payload));
                proptest::prop_assert_eq!(nf.hits().iter().sum::<u64>() - before, matched.len() as u64);
            }
        }
    }

    /// A rule of 1 to 3 contents and options over a small alphabet, so
    /// that matches, near misses and overlaps are common.
    fn random_rule() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let content = (
            proptest::collection::vec(proptest::sample::select(vec!["a", "b", "A", "|78|"]), 1..4),
            any::<bool>(),
            any::<bool>(),
            prop_oneof![
                Just(String::new()),
                (0u8..6).prop_map(|o| format!(" offset:{o};")),
                (3u8..8).prop_map(|d| format!(" depth:{d};")),
                (-2i8..4).prop_map(|d| format!(" distance:{d};")),
                (3u8..8).prop_map(|w| format!(" within:{w};")),
                Just(" fast_pattern;".to_string()),
            ],
        )
            .prop_map(|(bytes, negated, nocase, modifier)| {
                // At most 3 bytes: depth and within (3 or more) always fit.
                let text = bytes.concat();
                format!(
                    "content:{}\"{text}\";{}{modifier}",
                    if negated { "!" } else { "" },
                    if nocase { " nocase;" } else { "" }
                )
            });
        (proptest::bool::ANY, proptest::collection::vec(content, 1..4), proptest::option::of(0u8..30)).prop_map(
            |(drop, contents, dsize)| {
                let dsize = dsize.map(|d| format!(" dsize:<{};", d + 1)).unwrap_or_default();
                format!(
                    "{} udp any any -> any any ({}{dsize} sid:SID;)",
                    if drop { "drop" } else { "alert" },
                    contents.join(" ")
                )
            },
        )
    }
}
