//! The firewall's rules: 5-tuple prefixes and port ranges, first match
//! wins, and two ways to find the first match: a linear scan (what FLASH's
//! firewall does) and a bit-vector classifier (Lakshman and Stiliadis):
//! per field, the sorted boundaries of every rule's range cut the field's
//! space into intervals, each with the set of rules whose range covers
//! it; a packet's rules are the AND of its five intervals' sets, and the
//! first set bit is the first match. Five binary searches and a few dozen
//! word ANDs, whatever the rules.
//!
//! Both families share one rule set, as nftables' `inet` family does:
//! addresses live in one 128-bit space ([`IpPrefix`]), so an IPv4 prefix
//! matches IPv4 frames only, an IPv6 prefix IPv6 ones, and a rule with no
//! prefix both. `default` decides every IP frame no rule matches, IPv4 or
//! IPv6. Frames with no IP header (ARP, LLDP…) pass unless a `non-ip deny`
//! line says otherwise.
//!
//! ```text
//! # action [src PREFIX] [dst PREFIX] [proto tcp|udp|icmp|icmpv6|N] [sport P[-Q]] [dport P[-Q]]
//! deny src 10.0.0.0/8 proto udp dport 53
//! allow dst 2001:db8::/32 proto tcp dport 80-443
//! allow proto icmpv6
//! non-ip deny
//! default deny
//! ```

use ferry_wire::IpPrefix;

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FwAction {
    Allow,
    Deny,
}

/// A packet's 5-tuple (ports 0 for protocols without); addresses in the
/// 128-bit space, IPv4 ones IPv4-mapped (as the flow parser gives them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    pub src: u128,
    pub dst: u128,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

/// One rule: inclusive ranges per field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwRule {
    pub action: FwAction,
    pub src: (u128, u128),
    pub dst: (u128, u128),
    pub proto: (u8, u8),
    pub sport: (u16, u16),
    pub dport: (u16, u16),
}

impl FwRule {
    pub fn matches(&self, t: &Tuple) -> bool {
        let inside = |v: u128, (lo, hi): (u128, u128)| lo <= v && v <= hi;
        inside(t.src, self.src)
            && inside(t.dst, self.dst)
            && inside(t.proto.into(), (self.proto.0.into(), self.proto.1.into()))
            && inside(t.sport.into(), (self.sport.0.into(), self.sport.1.into()))
            && inside(t.dport.into(), (self.dport.0.into(), self.dport.1.into()))
    }
}

/// A rule file: rules in order, the action for IP frames none matches,
/// and the action for frames with no IP header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FwRules {
    pub rules: Vec<FwRule>,
    pub default: FwAction,
    pub non_ip: FwAction,
}

/// A rule file's error: its 1-based line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FwRuleError {
    pub line: usize,
    pub message: String,
}

/// An address or prefix as the range of addresses it covers.
fn prefix(s: &str) -> Result<(u128, u128), String> {
    Ok(IpPrefix::parse_or_host(s)?.range())
}

fn ports(s: &str) -> Result<(u16, u16), String> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let p = |v: &str| v.parse::<u16>().map_err(|_| format!("{s:?}: expected PORT or PORT-PORT"));
    let (lo, hi) = (p(lo)?, p(hi)?);
    if lo > hi {
        return Err(format!("{s:?}: the range is empty"));
    }
    Ok((lo, hi))
}

fn proto(s: &str) -> Result<(u8, u8), String> {
    let n = match s {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" => 58,
        n => n.parse::<u8>().map_err(|_| format!("protocol {s:?}: tcp, udp, icmp, icmpv6 or a number"))?,
    };
    Ok((n, n))
}

fn action(s: &str) -> Result<FwAction, String> {
    match s {
        "allow" => Ok(FwAction::Allow),
        "deny" => Ok(FwAction::Deny),
        other => Err(format!("action {other:?}: expected allow or deny")),
    }
}

/// The whole address space of both families.
const ANY_ADDR: (u128, u128) = (0, u128::MAX);

fn parse_rule(words: &[&str]) -> Result<FwRule, String> {
    let mut rule = FwRule {
        action: action(words[0])?,
        src: ANY_ADDR,
        dst: ANY_ADDR,
        proto: (0, u8::MAX),
        sport: (0, u16::MAX),
        dport: (0, u16::MAX),
    };
    let mut seen = Vec::new();
    let mut rest = words[1..].iter();
    while let Some(&key) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{key}: no value"))?;
        if seen.contains(&key) {
            return Err(format!("{key} given twice"));
        }
        seen.push(key);
        match key {
            "src" => rule.src = prefix(value)?,
            "dst" => rule.dst = prefix(value)?,
            "proto" => rule.proto = proto(value)?,
            "sport" => rule.sport = ports(value)?,
            "dport" => rule.dport = ports(value)?,
            other => return Err(format!("{other:?}: expected src, dst, proto, sport or dport")),
        }
    }
    if rule.src != ANY_ADDR && rule.dst != ANY_ADDR && is_v4(rule.src) != is_v4(rule.dst) {
        return Err("src and dst are of different families: no frame has both".into());
    }
    Ok(rule)
}

/// Whether an address range lies in the IPv4-mapped space.
fn is_v4((lo, hi): (u128, u128)) -> bool {
    IpPrefix::ALL_V4.contains(lo.into()) && IpPrefix::ALL_V4.contains(hi.into())
}

/// Parses a rule file's text.
pub fn parse_fw_rules(text: &str) -> Result<FwRules, FwRuleError> {
    let (mut rules, mut default, mut non_ip) = (Vec::new(), None, None);
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let err = |message: String| FwRuleError { line: i + 1, message };
        let words: Vec<&str> = line.split_whitespace().collect();
        if let directive @ ("default" | "non-ip") = words[0] {
            let slot = if directive == "default" { &mut default } else { &mut non_ip };
            if slot.is_some() {
                return Err(err(format!("a second {directive}")));
            }
            let [_, a] = words[..] else { return Err(err(format!("expected: {directive} allow|deny"))) };
            *slot = Some(action(a).map_err(err)?);
            continue;
        }
        if default.is_some() {
            return Err(err("a rule after the default would never be reached first: put default last".into()));
        }
        rules.push(parse_rule(&words).map_err(err)?);
    }
    let last = text.lines().count().max(1);
    let default =
        default.ok_or(FwRuleError { line: last, message: "no default: end with default allow|deny".into() })?;
    Ok(FwRules { rules, default, non_ip: non_ip.unwrap_or(FwAction::Allow) })
}

/// One field's intervals: boundaries (sorted interval starts) and per
/// interval the bit set of rules covering it, the sets one after another
/// in one array (`words` words each). `T` is the field's own width, so
/// that the binary search stays in few cache lines.
struct FieldIndex<T> {
    starts: Vec<T>,
    sets: Vec<u64>,
    words: usize,
}

impl<T: Copy + Ord + TryFrom<u128>> FieldIndex<T> {
    /// Rule r covers `ranges[r]` (within `T`'s values), or nothing (None).
    fn new(ranges: &[Option<(u128, u128)>], words: usize) -> FieldIndex<T> {
        // A range ending at the top of the space has no interval after it.
        let mut starts: Vec<u128> =
            ranges.iter().flatten().flat_map(|&(lo, hi)| [Some(lo), hi.checked_add(1)]).flatten().collect();
        starts.push(0);
        starts.sort_unstable();
        starts.dedup();
        // One past a range's end may lie past T: no value reaches it.
        starts.retain(|&s| T::try_from(s).is_ok());
        let mut sets = vec![0u64; starts.len() * words];
        for (i, &s) in starts.iter().enumerate() {
            for (r, range) in ranges.iter().enumerate() {
                if range.is_some_and(|(lo, hi)| lo <= s && s <= hi) {
                    sets[i * words + r / 64] |= 1 << (r % 64);
                }
            }
        }
        let starts = starts.into_iter().filter_map(|s| T::try_from(s).ok()).collect();
        FieldIndex { starts, sets, words }
    }

    fn set(&self, v: T) -> &[u64] {
        // The last interval starting at or before v (starts[0] is 0).
        let i = self.starts.partition_point(|&s| s <= v) - 1;
        &self.sets[i * self.words..(i + 1) * self.words]
    }
}

/// The five fields' indexes over one address space: `A` is u32 for the
/// IPv4 one, u128 for the whole 128-bit space.
struct FamilyIndex<A> {
    src: FieldIndex<A>,
    dst: FieldIndex<A>,
    proto: FieldIndex<u8>,
    sport: FieldIndex<u16>,
    dport: FieldIndex<u16>,
}

impl<A: Copy + Ord + TryFrom<u128>> FamilyIndex<A> {
    /// The rules' address ranges seen through `within`: the part of a
    /// range in this space, shifted to its values (None: none of it).
    fn new(rules: &[FwRule], words: usize, within: fn(Range) -> Option<Range>) -> Self {
        let field = |f: &dyn Fn(&FwRule) -> Option<Range>| rules.iter().map(f).collect::<Vec<_>>();
        FamilyIndex {
            src: FieldIndex::new(&field(&|r| within(r.src)), words),
            dst: FieldIndex::new(&field(&|r| within(r.dst)), words),
            proto: FieldIndex::new(&field(&|r| Some((r.proto.0.into(), r.proto.1.into()))), words),
            sport: FieldIndex::new(&field(&|r| Some((r.sport.0.into(), r.sport.1.into()))), words),
            dport: FieldIndex::new(&field(&|r| Some((r.dport.0.into(), r.dport.1.into()))), words),
        }
    }

    fn sets(&self, src: A, dst: A, t: &Tuple) -> [&[u64]; 5] {
        [
            self.src.set(src),
            self.dst.set(dst),
            self.proto.set(t.proto),
            self.sport.set(t.sport),
            self.dport.set(t.dport),
        ]
    }
}

/// An inclusive range of a field's values.
type Range = (u128, u128);

/// Where IPv4 sits in the 128-bit space: `::ffff:0:0/96`.
const V4_BASE: u128 = 0xffff << 32;

/// The IPv4 part of an address range, as IPv4 numbers.
fn ipv4_part((lo, hi): Range) -> Option<Range> {
    let (lo, hi) = (lo.max(V4_BASE), hi.min(V4_BASE | u128::from(u32::MAX)));
    (lo <= hi).then(|| (lo - V4_BASE, hi - V4_BASE))
}

/// The bit-vector classifier over a rule list. IPv4 tuples are looked up
/// in an index of 32-bit address fields (each rule's IPv4 part), the rest
/// in one of 128-bit fields: the same first match, with the IPv4 lookup
/// as fast as an IPv4-only classifier's.
pub struct BitVectorClassifier {
    v4: FamilyIndex<u32>,
    all: FamilyIndex<u128>,
    words: usize,
}

impl BitVectorClassifier {
    pub fn new(rules: &[FwRule]) -> BitVectorClassifier {
        let words = rules.len().div_ceil(64).max(1);
        BitVectorClassifier {
            v4: FamilyIndex::new(rules, words, ipv4_part),
            all: FamilyIndex::new(rules, words, Some),
            words,
        }
    }

    /// The index of the first rule `t` matches.
    pub fn first_match(&self, t: &Tuple) -> Option<usize> {
        let v4 = |a: u128| u32::try_from(a.wrapping_sub(V4_BASE)).ok().filter(|_| a >= V4_BASE);
        let sets = match (v4(t.src), v4(t.dst)) {
            (Some(src), Some(dst)) => self.v4.sets(src, dst, t),
            _ => self.all.sets(t.src, t.dst, t),
        };
        (0..self.words).find_map(|w| {
            let bits = sets.iter().fold(u64::MAX, |acc, s| acc & s[w]);
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        })
    }
}

/// FLASH's lookup: every rule in order.
pub fn first_match_linear(rules: &[FwRule], t: &Tuple) -> Option<usize> {
    rules.iter().position(|r| r.matches(t))
}

/// Random rules and packets for tests and benchmarks: a xorshift
/// generator, so a seed gives the same ones every run. Rules use few
/// distinct values so random packets often match: a quarter of them and
/// of the packets are IPv6 (prefixes of 2001:db8:0-3:0-3::0-3 of length
/// 0, 32, 48, 64 or 128), the rest IPv4 (prefixes of 10.0-3.0-3.0-3 of
/// length 0, 8, 16, 24 or 32); ports up to 1200.
pub struct RandomRules(u64);

impl RandomRules {
    pub fn new(seed: u64) -> RandomRules {
        RandomRules(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u128 {
        u128::from(self.next() % n)
    }

    /// A random address of the family, in the 128-bit space.
    fn addr(&mut self, v6: bool) -> u128 {
        if v6 {
            0x2001_0db8 << 96 | self.below(4) << 80 | self.below(4) << 64 | self.below(4)
        } else {
            u128::from(IpPrefix::ALL_V4.addr()) | 10 << 24 | self.below(4) << 16 | self.below(4) << 8 | self.below(4)
        }
    }

    fn net(&mut self, v6: bool) -> (u128, u128) {
        let lens = if v6 { [0, 32, 48, 64, 128] } else { [96, 104, 112, 120, 128] };
        let len = lens[self.below(5) as usize];
        let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
        let base = self.addr(v6) & mask;
        (base, base | !mask)
    }

    fn port(&mut self) -> (u16, u16) {
        match self.below(3) {
            0 => (0, u16::MAX),
            1 => {
                let p = self.below(8) as u16 * 100;
                (p, p)
            }
            _ => {
                let lo = self.below(8) as u16 * 100;
                (lo, lo + self.below(400) as u16)
            }
        }
    }

    pub fn rule(&mut self) -> FwRule {
        let proto = [(0, 255), (6, 6), (17, 17)][self.below(3) as usize];
        let action = if self.below(2) == 0 { FwAction::Allow } else { FwAction::Deny };
        let v6 = self.below(4) == 0;
        FwRule { action, src: self.net(v6), dst: self.net(v6), proto, sport: self.port(), dport: self.port() }
    }

    pub fn tuple(&mut self) -> Tuple {
        let v6 = self.below(4) == 0;
        Tuple {
            src: self.addr(v6),
            dst: self.addr(v6),
            proto: [6, 17, 1][self.below(3) as usize],
            sport: self.below(900) as u16,
            dport: self.below(900) as u16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(a: &str) -> u128 {
        let a: std::net::IpAddr = a.parse().unwrap();
        u128::from(match a {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            std::net::IpAddr::V6(v6) => v6,
        })
    }

    fn tuple(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> Tuple {
        let v4 = |a: [u8; 4]| addr(&std::net::Ipv4Addr::from(a).to_string());
        Tuple { src: v4(src), dst: v4(dst), proto, sport, dport }
    }

    #[test]
    fn a_rule_file_parses_and_errors_name_the_line() {
        let r =
            parse_fw_rules("deny src 10.0.0.0/8 proto udp dport 53 # dns\nallow dport 80-443\ndefault deny\n").unwrap();
        assert_eq!(r.rules.len(), 2);
        assert_eq!(r.rules[0].src, (addr("10.0.0.0"), addr("10.255.255.255")));
        assert_eq!((r.rules[0].proto, r.rules[1].dport, r.default), ((17, 17), (80, 443), FwAction::Deny));
        let table = [
            ("allow\nlog src 1.2.3.4\ndefault deny", 2, "action \"log\""),
            ("allow src 10.0.0.1/8\ndefault deny", 1, "host bits set (did you mean 10.0.0.0/8?)"),
            ("allow dport 90-80\ndefault deny", 1, "the range is empty"),
            ("allow dport\ndefault deny", 1, "dport: no value"),
            ("allow color red\ndefault deny", 1, "\"color\": expected src"),
            ("allow src 1.2.3.4 src 1.2.3.5\ndefault deny", 1, "src given twice"),
            ("default deny\nallow", 2, "put default last"),
            ("allow\n", 1, "no default"),
            ("allow src 10.0.0.0/8 dst 2001:db8::/32\ndefault deny", 1, "different families"),
            ("allow src 2001:db8::1/32\ndefault deny", 1, "did you mean 2001:db8::/32?"),
            ("non-ip drop\ndefault deny", 1, "action \"drop\""),
            ("non-ip deny\nnon-ip deny\ndefault deny", 2, "a second non-ip"),
        ];
        for (text, line, want) in table {
            let e = parse_fw_rules(text).unwrap_err();
            assert_eq!(e.line, line, "{text}");
            assert!(e.message.contains(want), "{text}: {e} lacks {want:?}");
        }
    }

    /// Differential: for 1000 random rules and 20 000 random packets the
    /// classifier finds the linear scan's first match, every time.
    #[test]
    fn the_classifier_agrees_with_the_linear_scan() {
        let mut g = RandomRules::new(0x9e37_79b9_7f4a_7c15);
        for n in [1, 63, 64, 65, 1000] {
            let rules: Vec<FwRule> = (0..n).map(|_| g.rule()).collect();
            let fast = BitVectorClassifier::new(&rules);
            let mut matched = 0;
            for _ in 0..20_000 {
                let t = g.tuple();
                let want = first_match_linear(&rules, &t);
                assert_eq!(fast.first_match(&t), want, "{n} rules, {t:?}");
                matched += want.is_some() as u32;
            }
            // With many rules, many packets match (one rule may match none).
            assert!(n < 64 || matched > 1000, "{n} rules: the packets exercise matches ({matched})");
        }
    }

    #[test]
    fn edges_of_ranges_and_prefixes() {
        let r = parse_fw_rules("deny src 192.0.2.0/24 dport 10-20\nallow src 0.0.0.0/0\ndefault deny").unwrap();
        let fast = BitVectorClassifier::new(&r.rules);
        for (t, want) in [
            (tuple([192, 0, 2, 0], [1, 1, 1, 1], 6, 1, 10), Some(0)),
            (tuple([192, 0, 2, 255], [1, 1, 1, 1], 6, 1, 20), Some(0)),
            (tuple([192, 0, 3, 0], [1, 1, 1, 1], 6, 1, 10), Some(1)),
            (tuple([192, 0, 2, 7], [1, 1, 1, 1], 6, 1, 21), Some(1)),
            (tuple([255, 255, 255, 255], [0, 0, 0, 0], 255, 65535, 65535), Some(1)),
        ] {
            assert_eq!(fast.first_match(&t), want, "{t:?}");
            assert_eq!(first_match_linear(&r.rules, &t), want, "{t:?}");
        }
    }

    /// nftables' `inet` semantics: a prefix matches its own family only,
    /// a rule with none matches both.
    #[test]
    fn one_rule_set_for_both_families() {
        let r = parse_fw_rules(
            "deny src 0.0.0.0/0 dport 22\nallow src 2001:db8::/32 proto tcp\nallow proto icmpv6\ndeny dport 23\ndefault allow\n",
        )
        .unwrap();
        assert_eq!(r.non_ip, FwAction::Allow, "non-IP frames pass unless told");
        let fast = BitVectorClassifier::new(&r.rules);
        let t = |src: &str, proto: u8, dport: u16| Tuple { src: addr(src), dst: addr("::1"), proto, sport: 1, dport };
        for (t, want) in [
            (t("10.0.0.1", 6, 22), Some(0)),
            (t("2001:db8::1", 6, 22), Some(1)),
            (t("2001:db9::1", 6, 22), None),
            (t("fe80::1", 58, 0), Some(2)),
            // A protocol names no family: IPv4 carrying 58 matches too.
            (t("10.0.0.1", 58, 0), Some(2)),
            (t("fe80::1", 17, 23), Some(3)),
            (t("10.0.0.1", 17, 23), Some(3)),
        ] {
            assert_eq!(first_match_linear(&r.rules, &t), want, "{t:?}");
            assert_eq!(fast.first_match(&t), want, "{t:?}");
        }
        assert_eq!(parse_fw_rules("non-ip deny\ndefault allow").unwrap().non_ip, FwAction::Deny);
    }
}
