//! The IPS's rule language: Snort and Suricata rules, where the two
//! agree, one a line (a line ending in `\` goes on), with `#` comments
//! and `ipvar`/`portvar`/`var` lines that define the groups rules name.
//!
//! ```text
//! ipvar HOME_NET [10.0.0.0/8,192.168.0.0/16]
//! portvar HTTP_PORTS [80,8080]
//! alert tcp $EXTERNAL_NET any -> $HOME_NET $HTTP_PORTS (msg:"sh in a URL"; \
//!     content:"/bin/sh"; nocase; classtype:attempted-user; sid:1001; rev:2;)
//! drop udp any any -> any 53 (msg:"DNS"; content:"|00 01 00 00 00 00|"; offset:4; depth:6; sid:1002;)
//! ```
//!
//! * actions `alert` (count and forward) and `drop`;
//! * protocols `tcp`, `udp`, `icmp` (ICMP and ICMPv6) and `ip` (any);
//! * addresses and ports: [`net`]; directions `->` and `<>`;
//! * `flow:` (`to_server`, `to_client`, `established`,
//!   `not_established`, `stateless`), over the IPS's own connection
//!   table;
//! * payload checks: [`detect`] (`content` with `nocase`, `offset`,
//!   `depth`, `distance`, `within`, `startswith`, `endswith`,
//!   `fast_pattern`; negated content; `pcre`; `dsize`);
//! * kept as metadata: `msg`, `sid` (required, unique), `rev`, `gid`,
//!   `classtype`, `priority`, `reference`, `metadata`.
//!
//! A rule that uses anything else is *unsupported*: an error naming the
//! option, or, when loading with `skip_unsupported`, left out and
//! counted by that option. A rule that is wrong in itself is always an
//! error naming its line and option.

pub mod detect;
mod lex;
pub mod net;

use std::collections::BTreeMap;

use detect::{Check, Content, Dsize, WindowSet};
use net::{AddrSet, PortSet, Vars};

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alert,
    Drop,
}

/// The packets a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    /// ICMP in IPv4 and ICMPv6 in IPv6.
    Icmp,
    /// Every IP packet.
    Ip,
}

impl Proto {
    /// Whether a packet of IP protocol `proto` is one of these.
    pub fn covers(self, proto: u8) -> bool {
        match self {
            Proto::Tcp => proto == 6,
            Proto::Udp => proto == 17,
            Proto::Icmp => proto == 1 || proto == 58,
            Proto::Ip => true,
        }
    }
}

/// What a rule says about itself, for alerts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    pub rev: u32,
    pub gid: u32,
    pub classtype: Option<String>,
    pub priority: Option<u32>,
    pub references: Vec<String>,
    pub metadata: Vec<String>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub action: Action,
    pub proto: Proto,
    pub src: AddrSet,
    pub src_ports: PortSet,
    pub dst: AddrSet,
    pub dst_ports: PortSet,
    /// `<>`: either way round.
    pub bidirectional: bool,
    /// In rule order.
    pub checks: Vec<Check>,
    pub dsize: Option<Dsize>,
    pub flow: Option<FlowCheck>,
    pub msg: String,
    pub sid: u32,
    pub meta: Meta,
}

impl Rule {
    /// The content the prefilter looks for: the one marked
    /// `fast_pattern`, else the longest positive one (Snort's choice).
    /// None when the rule has no positive content: it is tried on every
    /// packet its header fits.
    pub fn fast_pattern(&self) -> Option<&Content> {
        let positive = || {
            self.checks.iter().filter_map(|c| match c {
                Check::Content(c) if !c.negated => Some(c),
                _ => None,
            })
        };
        positive().find(|c| c.fast_pattern).or_else(|| positive().max_by_key(|c| c.bytes.len()))
    }
}

/// `flow:`: which side sent the packet, and whether its connection is
/// established (see the IPS's flow table for what that means).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowCheck {
    /// Some(true): `to_server`/`from_client`; Some(false): the reverse.
    pub from_client: Option<bool>,
    /// Some(true): `established`; Some(false): `not_established`.
    pub established: Option<bool>,
}

impl FlowCheck {
    pub fn holds(&self, from_client: bool, established: bool) -> bool {
        self.from_client.map_or(true, |c| c == from_client) && self.established.map_or(true, |e| e == established)
    }
}

/// `flow:` options, comma separated. `no_stream` and `no_frag` always
/// hold here (nothing is reassembled; fragments are dropped before the
/// rules); `only_stream` and `only_frag` never could.
fn parse_flow(v: &str) -> Result<FlowCheck, Fault> {
    let mut f = FlowCheck::default();
    let mut stateless = false;
    for word in v.split(',').map(|w| w.trim().to_ascii_lowercase()) {
        let (slot, value) = match word.as_str() {
            "to_server" | "from_client" => (&mut f.from_client, true),
            "to_client" | "from_server" => (&mut f.from_client, false),
            "established" => (&mut f.established, true),
            "not_established" => (&mut f.established, false),
            "stateless" => {
                stateless = true;
                continue;
            }
            "no_stream" | "no_frag" => continue,
            "only_stream" | "only_frag" => {
                return Err(Fault::unsupported("flow", format!("{word}: nothing is reassembled here")))
            }
            other => {
                let m = format!("{other:?}: expected to_server, to_client, established, not_established or stateless");
                return Err(Fault::malformed("flow", m));
            }
        };
        if slot.is_some_and(|s| s != value) {
            return Err(Fault::malformed("flow", format!("{v:?}: contradicts itself")));
        }
        *slot = Some(value);
    }
    if stateless && f.established.is_some() {
        return Err(Fault::malformed("flow", format!("{v:?}: stateless with established or not_established")));
    }
    Ok(f)
}

/// Why a rule was not loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Written right, but asks for what this IPS does not do.
    Unsupported,
    /// Wrong in itself.
    Malformed,
}

/// A rule file's error: its 1-based line, the option (or header field)
/// at fault, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {}{message}", option.as_ref().map(|o| format!("{o}: ")).unwrap_or_default())]
pub struct RuleError {
    pub line: usize,
    pub option: Option<String>,
    pub problem: Problem,
    pub message: String,
}

/// A loaded rule file.
#[derive(Debug, Clone, Default)]
pub struct Ruleset {
    pub rules: Vec<Rule>,
    /// Rules left out, by the option (or header field) they needed.
    pub skipped: BTreeMap<String, usize>,
}

/// Parses a rule file: the first rule that cannot be loaded is an error.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, RuleError> {
    load_rules(text, false).map(|r| r.rules)
}

/// Parses a rule file; with `skip_unsupported`, a rule that needs what
/// this IPS does not do is left out and counted instead.
pub fn load_rules(text: &str, skip_unsupported: bool) -> Result<Ruleset, RuleError> {
    let mut set = Ruleset::default();
    let mut vars = Vars::snort_defaults();
    let mut sids: BTreeMap<u32, usize> = BTreeMap::new();
    for (line, text) in logical_lines(text) {
        let err = |f: Fault| RuleError { line, option: f.option, problem: f.problem, message: f.message };
        if let Some(def) = variable(&text) {
            def.and_then(|(kind, name, value)| define(&mut vars, kind, name, value)).map_err(err)?;
            continue;
        }
        match parse_rule(&text, &vars) {
            Ok(rule) => {
                if let Some(&first) = sids.get(&rule.sid) {
                    let message = format!("{} is already the sid of line {first}", rule.sid);
                    return Err(err(Fault::malformed("sid", message)));
                }
                sids.insert(rule.sid, line);
                set.rules.push(rule);
            }
            Err(f) if skip_unsupported && f.problem == Problem::Unsupported => {
                *set.skipped.entry(f.option.unwrap_or_default()).or_default() += 1;
            }
            Err(f) => return Err(err(f)),
        }
    }
    Ok(set)
}

/// The file's lines with comments and blanks left out and `\`-continued
/// lines joined, each with the number of its first line.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let (first, mut acc) = open.take().unwrap_or((i + 1, String::new()));
        if acc.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                acc.push_str(part);
                acc.push(' ');
                open = Some((first, acc));
            }
            None => {
                acc.push_str(line);
                out.push((first, acc));
            }
        }
    }
    out.extend(open);
    out
}

/// What went wrong in a rule, before its line is known.
#[derive(Debug)]
struct Fault {
    option: Option<String>,
    problem: Problem,
    message: String,
}

impl Fault {
    fn malformed(option: &str, message: impl Into<String>) -> Fault {
        Fault { option: Some(option.into()), problem: Problem::Malformed, message: message.into() }
    }

    fn unsupported(option: &str, message: impl Into<String>) -> Fault {
        Fault { option: Some(option.into()), problem: Problem::Unsupported, message: message.into() }
    }
}

/// A `ipvar`/`portvar`/`var NAME VALUE` line, or None for a rule.
fn variable(line: &str) -> Option<Result<(&str, &str, &str), Fault>> {
    let (kind, rest) = line.split_once(char::is_whitespace)?;
    if !matches!(kind, "ipvar" | "portvar" | "var") {
        return None;
    }
    Some(match rest.trim().split_once(char::is_whitespace) {
        Some((name, value)) => Ok((kind, name, value.trim())),
        None => Err(Fault::malformed(kind, format!("expected `{kind} NAME VALUE`"))),
    })
}

/// Snort's rule for `var`: a name with PORT in it is a port group.
fn define(vars: &mut Vars, kind: &str, name: &str, value: &str) -> Result<(), Fault> {
    let ports = kind == "portvar" || (kind == "var" && name.contains("PORT"));
    let set = if ports { vars.set_port(name, value) } else { vars.set_addr(name, value) };
    set.map_err(|m| Fault::malformed(kind, m))
}

fn parse_rule(text: &str, vars: &Vars) -> Result<Rule, Fault> {
    let raw = lex::split_rule(text).map_err(|m| Fault::malformed("rule", m))?;
    if let [_, service] = raw.header[..] {
        // Snort 3's service and file rules: `alert http (…)`.
        let message = format!("a rule for what Snort 3's {service} inspector sees: there is none here");
        return Err(Fault::unsupported(&format!("protocol {service}"), message));
    }
    let [action, proto, src, sport, dir, dst, dport] = raw.header[..] else {
        let message = format!("expected ACTION PROTO SRC SPORT -> DST DPORT, got {:?}", raw.header.join(" "));
        return Err(Fault::malformed("header", message));
    };
    let action = match action {
        "alert" => Action::Alert,
        "drop" => Action::Drop,
        "pass" | "reject" | "rejectsrc" | "rejectdst" | "rejectboth" | "sdrop" | "log" | "block" | "react"
        | "rewrite" => return Err(Fault::unsupported(&format!("action {action}"), "only alert and drop are")),
        other => return Err(Fault::malformed("action", format!("{other:?}: expected alert or drop"))),
    };
    let proto = match proto.to_ascii_lowercase().as_str() {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        "ip" => Proto::Ip,
        other => {
            let what = format!("protocol {other}");
            return Err(Fault::unsupported(&what, "an application-layer protocol: use tcp, udp, icmp or ip"));
        }
    };
    let bidirectional = match dir {
        "->" => false,
        "<>" => true,
        other => return Err(Fault::malformed("direction", format!("{other:?}: expected -> or <>"))),
    };
    let addrs = |field: &str, v: &str| net::parse_addrs(v, vars).map_err(|m| header_fault(field, m));
    let ports = |field: &str, v: &str| net::parse_ports(v, vars).map_err(|m| header_fault(field, m));
    let mut rule = Rule {
        action,
        proto,
        src: addrs("source address", src)?,
        src_ports: ports("source port", sport)?,
        dst: addrs("destination address", dst)?,
        dst_ports: ports("destination port", dport)?,
        bidirectional,
        checks: Vec::new(),
        dsize: None,
        flow: None,
        msg: String::new(),
        sid: 0,
        meta: Meta { gid: 1, ..Meta::default() },
    };
    options(&mut rule, &raw.options)?;
    if rule.sid == 0 {
        return Err(Fault::malformed("sid", "every rule needs a sid:N (N >= 1)"));
    }
    Ok(rule)
}

/// An undefined variable is a rule this file cannot load as written.
fn header_fault(field: &str, message: String) -> Fault {
    if message.contains("is not defined") {
        Fault::unsupported(field, message)
    } else {
        Fault::malformed(field, message)
    }
}

/// The options that are known but not supported, with why.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("flowbits", "no per-flow state"),
    ("threshold", "every match alerts: there are no thresholds"),
    ("detection_filter", "every match alerts: there are no thresholds"),
    ("byte_test", "not supported"),
    ("byte_jump", "not supported"),
    ("byte_extract", "not supported"),
    ("byte_math", "not supported"),
    ("isdataat", "not supported"),
];

fn options(rule: &mut Rule, raw: &[lex::RawOption]) -> Result<(), Fault> {
    let mut window = WindowSet::default();
    for o in raw {
        let name = o.name.as_str();
        let need = || o.value.ok_or_else(|| Fault::malformed(name, format!("expected {name}:VALUE")));
        let number = |max: u64| {
            let v = need()?;
            v.parse::<u64>()
                .ok()
                .filter(|n| *n <= max)
                .map(|n| n as u32)
                .ok_or_else(|| Fault::malformed(name, format!("{v:?}: expected a number up to {max}")))
        };
        let bad = |m: String| Fault::malformed(name, m);
        match name {
            "msg" => {
                let (negated, text, rest) = lex::quoted(need()?).map_err(bad)?;
                if negated || !rest.is_empty() {
                    return Err(bad(format!("{:?}: expected msg:\"TEXT\"", need()?)));
                }
                rule.msg = lex::unescape(text).map_err(bad)?;
            }
            "sid" => rule.sid = number(u64::from(u32::MAX))?,
            "rev" => rule.meta.rev = number(u64::from(u32::MAX))?,
            "gid" => rule.meta.gid = number(u64::from(u32::MAX))?,
            "priority" => rule.meta.priority = Some(number(255)?),
            "classtype" => rule.meta.classtype = Some(need()?.to_string()),
            "reference" => rule.meta.references.push(need()?.to_string()),
            "metadata" => rule.meta.metadata.push(need()?.to_string()),
            "content" => {
                window = WindowSet::default();
                rule.checks.push(Check::Content(detect::parse_content(need()?).map_err(bad)?));
            }
            "nocase" | "rawbytes" | "fast_pattern" | "offset" | "depth" | "distance" | "within" | "startswith"
            | "endswith" => {
                let Some(Check::Content(c)) = rule.checks.last_mut() else {
                    return Err(bad("a content modifier with no content right before it".into()));
                };
                // `fast_pattern:only` and `fast_pattern:O,L` pick the whole
                // content here: it must occur in full all the same.
                let arg = if name == "fast_pattern" { None } else { o.value };
                detect::modify(c, &mut window, name, arg).map_err(bad)?;
            }
            "pcre" => {
                let p = detect::parse_pcre(need()?).map_err(|e| match e.unsupported {
                    true => Fault::unsupported(name, e.message),
                    false => bad(e.message),
                })?;
                rule.checks.push(Check::Pcre(p));
            }
            "flow" if rule.flow.is_some() => return Err(bad("a rule has one flow".into())),
            "flow" => rule.flow = Some(parse_flow(need()?)?),
            "dsize" if rule.dsize.is_some() => return Err(bad("a rule has one dsize".into())),
            "dsize" => rule.dsize = Some(detect::parse_dsize(need()?).map_err(bad)?),
            other => {
                let why = UNSUPPORTED.iter().find(|(n, _)| *n == other).map_or("not supported by this IPS", |(_, w)| w);
                return Err(Fault::unsupported(other, why));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The four rules a new user tried, as Snort and Suricata rulesets
    /// write them.
    pub(crate) const FOUR: &str = r#"
alert tcp $EXTERNAL_NET any -> $HOME_NET 80 (msg:"ET WEB_SERVER /bin/sh In URI"; flow:to_server,established; content:"/bin/sh"; nocase; classtype:web-application-attack; sid:2011465; rev:2;)
alert tcp $EXTERNAL_NET any -> $HOME_NET any (msg:"SQL union select"; flow:to_server,established; content:"union"; nocase; content:"select"; nocase; distance:0; within:20; classtype:web-application-attack; sid:2006446; rev:13;)
drop udp any any -> any 53 (msg:"DNS standard query, no other records"; content:"|00 01 00 00 00 00|"; offset:4; depth:6; classtype:bad-unknown; sid:2000001; rev:1;)
alert tcp any any -> any any (msg:"password in the clear"; flow:established; pcre:"/passw(or)?d=/i"; classtype:policy-violation; sid:2000002; rev:1;)
"#;

    #[test]
    fn the_four_rules_load_with_their_metadata() {
        let r = parse_rules(FOUR).unwrap();
        assert_eq!(r.iter().map(|r| r.sid).collect::<Vec<_>>(), [2011465, 2006446, 2000001, 2000002]);
        assert_eq!(r[0].msg, "ET WEB_SERVER /bin/sh In URI");
        assert_eq!((r[0].meta.rev, r[0].meta.gid), (2, 1));
        assert_eq!(r[0].meta.classtype.as_deref(), Some("web-application-attack"));
        assert_eq!(r[0].flow, Some(FlowCheck { from_client: Some(true), established: Some(true) }));
        assert!(r[0].dst_ports.contains(80) && !r[0].dst_ports.contains(81));
        assert_eq!(r[2].action, Action::Drop);
        assert_eq!(r[1].fast_pattern().map(|c| c.bytes.as_slice()), Some(&b"select"[..]), "the longest content");
        assert!(r[3].fast_pattern().is_none(), "a pcre-only rule has no fast pattern");
    }

    #[test]
    fn variables_lists_and_continued_lines() {
        let text = "ipvar HOME_NET [10.0.0.0/8,!10.9.0.0/16]\n\
                    portvar WEB [80,8000:8099]\n\
                    var SSH_PORTS 22\n\
                    alert tcp !$HOME_NET any <> $HOME_NET [$WEB,$SSH_PORTS] \\\n\
                    \t(msg:\"two lines\"; sid:7;)\n\
                    # a comment\n\
                    alert udp any any -> any any (sid:8;)\n";
        let r = parse_rules(text).unwrap();
        assert_eq!(r.len(), 2);
        let v4 = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().to_ipv6_mapped();
        assert!(r[0].dst.contains(v4("10.1.2.3")) && !r[0].dst.contains(v4("10.9.1.1")));
        assert!(r[0].src.contains(v4("10.9.1.1")) && !r[0].src.contains(v4("10.1.2.3")));
        assert!(r[0].dst_ports.contains(22) && r[0].dst_ports.contains(8080) && !r[0].dst_ports.contains(443));
        assert!(r[0].bidirectional);
        let e = parse_rules("alert udp any any -> any any (sid:8;)\n\nalert tcp any any -> any any (sid:9; nope:1;)")
            .unwrap_err();
        assert_eq!(e.line, 3);
    }

    /// Each mistake, with its line and option, and whether
    /// `--skip-unsupported` would skip it.
    #[test]
    fn errors_name_the_line_and_option() {
        let good = r#"alert tcp any any -> any 80 (msg:"m"; content:"c"; sid:1;)"#;
        use Problem::*;
        let table = [
            (good.replace("alert", "allow"), "action", Malformed, "expected alert or drop"),
            (good.replace("alert", "reject"), "action reject", Unsupported, "only alert and drop"),
            (good.replace("tcp", "http"), "protocol http", Unsupported, "application-layer"),
            (good.replace("any 80", "10.0.0.x 80"), "destination address", Malformed, "expected any, an address"),
            (good.replace("any 80", "$WEB_NET 80"), "destination address", Unsupported, "ipvar WEB_NET"),
            (good.replace(" 80", " 90:80"), "destination port", Malformed, "90 is above 80"),
            (good.replace("->", "<-"), "direction", Malformed, "expected -> or <>"),
            (good.replace("sid:1;", ""), "sid", Malformed, "every rule needs a sid"),
            (good.replace("\"m\"", "\"m\"x"), "msg", Malformed, "expected msg:\"TEXT\""),
            (good.replace("sid:1", "sid:x"), "sid", Malformed, "expected a number"),
            (good.replace("\"c\"", "\"c"), "content", Malformed, "no closing quote"),
            (good.replace("\"c\"", "\"|zz|\""), "content", Malformed, "is not hex bytes"),
            (good.replace("\"c\"", "\"|41\""), "content", Malformed, "not closed"),
            (good.replace("sid:1;)", "sid:1)"), "rule", Malformed, "does not end with ;"),
            (good.replace("msg:\"m\"; ", "nocase; "), "nocase", Malformed, "no content right before it"),
            (good.replace("\"c\";", "\"cc\"; depth:1;"), "depth", Malformed, "shorter than the content"),
            (
                good.replace("\"c\";", "\"c\"; offset:1; distance:1;"),
                "distance",
                Malformed,
                "either absolute or relative",
            ),
            (good.replace("\"c\";", "\"c\"; within:x;"), "within", Malformed, "expected a number"),
            (good.replace("content:\"c\"", "pcre:\"/(a)\\1/\""), "pcre", Unsupported, "backreferences"),
            (good.replace("content:\"c\"", "pcre:\"/a/U\""), "pcre", Unsupported, "HTTP buffer"),
            (good.replace("content:\"c\"", "pcre:\"/a/q\""), "pcre", Malformed, "expected i, s, m"),
            (good.replace("content:\"c\"", "pcre:\"a\""), "pcre", Malformed, "expected \"/regex/flags\""),
            (good.replace("content:\"c\"", "dsize:1<>2"), "dsize", Malformed, "nothing lies strictly between"),
            (good.replace("content:\"c\"", "flow:to_server,to_client"), "flow", Malformed, "contradicts itself"),
            (good.replace("content:\"c\"", "flow:only_stream"), "flow", Unsupported, "reassembled"),
            (
                good.replace("content:\"c\"", "threshold:type limit, track by_src, count 1, seconds 60"),
                "threshold",
                Unsupported,
                "no thresholds",
            ),
            (good.replace("content:\"c\"", "http_uri"), "http_uri", Unsupported, "not supported"),
            ("ipvar HOME_NET".to_string(), "ipvar", Malformed, "expected `ipvar NAME VALUE`"),
            ("portvar P [1,!1]".to_string(), "portvar", Malformed, "the negations leave no port"),
        ];
        for (rule, option, problem, want) in table {
            let e = parse_rules(&format!("# one\n{rule}\n")).unwrap_err();
            assert_eq!((e.line, e.option.as_deref(), e.problem), (2, Some(option), problem), "{rule}: {e}");
            assert!(e.message.contains(want), "{rule}: {e} lacks {want:?}");
            assert!(e.to_string().starts_with(&format!("line 2: {option}: ")), "{e}");
        }
        let dup = format!("{good}\n{}", good.replace("\"m\"", "\"n\""));
        assert_eq!(parse_rules(&dup).unwrap_err().to_string(), "line 2: sid: 1 is already the sid of line 1");
    }

    #[test]
    fn skip_unsupported_counts_what_it_left_out_by_option() {
        let text = format!(
            "{FOUR}\n\
             alert tcp any any -> any any (msg:\"u\"; content:\"x\"; http_uri; sid:10;)\n\
             alert tcp any any -> any any (msg:\"u\"; http_uri; content:\"y\"; sid:11;)\n\
             alert http any any -> any any (msg:\"app\"; sid:12;)\n\
             alert http (msg:\"service rule\"; sid:15;)\n\
             alert tcp any any -> any any (msg:\"b\"; byte_test:1,>,2,0; sid:13;)\n\
             alert tcp any any -> any $MY_PORTS (msg:\"v\"; sid:14;)\n"
        );
        assert_eq!(parse_rules(&text).unwrap_err().option.as_deref(), Some("http_uri"));
        let set = load_rules(&text, true).unwrap();
        assert_eq!(set.rules.len(), 4);
        let skipped: Vec<(&str, usize)> = set.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(skipped, [("byte_test", 1), ("destination port", 1), ("http_uri", 2), ("protocol http", 2)]);
        // A malformed rule is an error even then.
        let bad = format!("{text}alert tcp any any -> any any (sid:x;)\n");
        assert_eq!(load_rules(&bad, true).unwrap_err().option.as_deref(), Some("sid"));
    }
}
