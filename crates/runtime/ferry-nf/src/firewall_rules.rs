//! The firewall's rules: 5-tuple prefixes and port ranges, first match
//! wins, and two ways to find the first match: a linear scan (what FLASH's
//! firewall does) and a bit-vector classifier (Lakshman and Stiliadis):
//! per field, the sorted boundaries of every rule's range cut the field's
//! space into intervals, each with the set of rules whose range covers
//! it; a packet's rules are the AND of its five intervals' sets, and the
//! first set bit is the first match. Five binary searches and a few dozen
//! word ANDs, whatever the rules.
//!
//! ```text
//! # action [src PREFIX] [dst PREFIX] [proto tcp|udp|icmp|N] [sport P[-Q]] [dport P[-Q]]
//! deny src 10.0.0.0/8 proto udp dport 53
//! allow dst 192.0.2.0/24 proto tcp dport 80-443
//! default deny
//! ```

use ferry_wire::classify::Ipv4Prefix;

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FwAction {
    Allow,
    Deny,
}

/// A packet's 5-tuple (ports 0 for protocols without).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    pub src: u32,
    pub dst: u32,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

/// One rule: inclusive ranges per field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwRule {
    pub action: FwAction,
    pub src: (u32, u32),
    pub dst: (u32, u32),
    pub proto: (u8, u8),
    pub sport: (u16, u16),
    pub dport: (u16, u16),
}

impl FwRule {
    pub fn matches(&self, t: &Tuple) -> bool {
        let inside = |v: u64, (lo, hi): (u64, u64)| lo <= v && v <= hi;
        inside(t.src.into(), (self.src.0.into(), self.src.1.into()))
            && inside(t.dst.into(), (self.dst.0.into(), self.dst.1.into()))
            && inside(t.proto.into(), (self.proto.0.into(), self.proto.1.into()))
            && inside(t.sport.into(), (self.sport.0.into(), self.sport.1.into()))
            && inside(t.dport.into(), (self.dport.0.into(), self.dport.1.into()))
    }
}

/// A rule file: rules in order and the action when none matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FwRules {
    pub rules: Vec<FwRule>,
    pub default: FwAction,
}

/// A rule file's error: its 1-based line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FwRuleError {
    pub line: usize,
    pub message: String,
}

/// An address or prefix as the range of addresses it covers.
fn prefix(s: &str) -> Result<(u32, u32), String> {
    let p = Ipv4Prefix::parse_or_host(s)?;
    let base = u32::from(p.addr);
    Ok((base, base | !p.mask()))
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
        n => n.parse::<u8>().map_err(|_| format!("protocol {s:?}: tcp, udp, icmp or a number"))?,
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

fn parse_rule(words: &[&str]) -> Result<FwRule, String> {
    let mut rule = FwRule {
        action: action(words[0])?,
        src: (0, u32::MAX),
        dst: (0, u32::MAX),
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
    Ok(rule)
}

/// Parses a rule file's text.
pub fn parse_fw_rules(text: &str) -> Result<FwRules, FwRuleError> {
    let (mut rules, mut default) = (Vec::new(), None);
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let err = |message: String| FwRuleError { line: i + 1, message };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0] == "default" {
            if default.is_some() {
                return Err(err("a second default".into()));
            }
            let [_, a] = words[..] else { return Err(err("expected: default allow|deny".into())) };
            default = Some(action(a).map_err(err)?);
            continue;
        }
        if default.is_some() {
            return Err(err("a rule after the default would never be reached first: put default last".into()));
        }
        rules.push(parse_rule(&words).map_err(err)?);
    }
    let default = default.ok_or(FwRuleError { line: text.lines().count().max(1), message: "no default".into() })?;
    Ok(FwRules { rules, default })
}

/// One field's intervals: boundaries (sorted interval starts) and per
/// interval the bit set of rules covering it.
struct FieldIndex {
    starts: Vec<u64>,
    sets: Vec<Vec<u64>>,
}

impl FieldIndex {
    fn new(ranges: &[(u64, u64)], words: usize) -> FieldIndex {
        let mut starts: Vec<u64> = ranges.iter().flat_map(|&(lo, hi)| [lo, hi + 1]).collect();
        starts.push(0);
        starts.sort_unstable();
        starts.dedup();
        let sets = starts
            .iter()
            .map(|&s| {
                let mut set = vec![0u64; words];
                for (r, &(lo, hi)) in ranges.iter().enumerate() {
                    if lo <= s && s <= hi {
                        set[r / 64] |= 1 << (r % 64);
                    }
                }
                set
            })
            .collect();
        FieldIndex { starts, sets }
    }

    fn set(&self, v: u64) -> &[u64] {
        // The last interval starting at or before v (starts[0] is 0).
        let i = self.starts.partition_point(|&s| s <= v) - 1;
        &self.sets[i]
    }
}

/// The bit-vector classifier over a rule list.
pub struct BitVectorClassifier {
    fields: [FieldIndex; 5],
    words: usize,
}

impl BitVectorClassifier {
    pub fn new(rules: &[FwRule]) -> BitVectorClassifier {
        let words = rules.len().div_ceil(64).max(1);
        let field = |f: fn(&FwRule) -> (u64, u64)| FieldIndex::new(&rules.iter().map(f).collect::<Vec<_>>(), words);
        BitVectorClassifier {
            fields: [
                field(|r| (r.src.0.into(), r.src.1.into())),
                field(|r| (r.dst.0.into(), r.dst.1.into())),
                field(|r| (r.proto.0.into(), r.proto.1.into())),
                field(|r| (r.sport.0.into(), r.sport.1.into())),
                field(|r| (r.dport.0.into(), r.dport.1.into())),
            ],
            words,
        }
    }

    /// The index of the first rule `t` matches.
    pub fn first_match(&self, t: &Tuple) -> Option<usize> {
        let sets = [
            self.fields[0].set(t.src.into()),
            self.fields[1].set(t.dst.into()),
            self.fields[2].set(t.proto.into()),
            self.fields[3].set(t.sport.into()),
            self.fields[4].set(t.dport.into()),
        ];
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
/// distinct values (prefixes of 10.0-3.0-3.0-3 of length 0, 8, 16, 24 or
/// 32; ports up to 1200), so random packets often match.
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

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn net(&mut self) -> (u32, u32) {
        let len = [0, 8, 16, 24, 32][self.below(5) as usize];
        let base =
            (10u32 << 24) | ((self.below(4) as u32) << 16) | ((self.below(4) as u32) << 8) | self.below(4) as u32;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        (base & mask, (base & mask) | !mask)
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
        FwRule { action, src: self.net(), dst: self.net(), proto, sport: self.port(), dport: self.port() }
    }

    pub fn tuple(&mut self) -> Tuple {
        let mut addr = || u32::from_be_bytes([10, self.below(4) as u8, self.below(4) as u8, self.below(4) as u8]);
        let (src, dst) = (addr(), addr());
        Tuple {
            src,
            dst,
            proto: [6, 17, 1][self.below(3) as usize],
            sport: self.below(900) as u16,
            dport: self.below(900) as u16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> Tuple {
        Tuple { src: u32::from_be_bytes(src), dst: u32::from_be_bytes(dst), proto, sport, dport }
    }

    #[test]
    fn a_rule_file_parses_and_errors_name_the_line() {
        let r =
            parse_fw_rules("deny src 10.0.0.0/8 proto udp dport 53 # dns\nallow dport 80-443\ndefault deny\n").unwrap();
        assert_eq!(r.rules.len(), 2);
        assert_eq!(r.rules[0].src, (0x0a00_0000, 0x0aff_ffff));
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
}
