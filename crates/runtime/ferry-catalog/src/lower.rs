//! Lowering: an offloadable NF as elements of the XDP stage pipeline, and
//! their configs. Only NF types whose XDP form decides every frame as the
//! process does are lowered; the differential and equivalence tests hold
//! them to it.

use std::net::Ipv6Addr;

use ferry_bpf::hybrid::HybridElement;
use ferry_bpf::pipeline::{AclRule, ACL_ALLOW, ACL_DENY, ACL_MAX_RULES};
use ferry_bpf::scan::{SCAN_MAX_LEN, SCAN_MAX_PATTERNS};
use ferry_nf::firewall_rules::{parse_fw_rules, FwAction, FwRule, FwRules};
use ferry_nf::payload_scan::ScanConfig;

/// What an offloaded NF becomes in XDP (its elements: [`Lowering::steps`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lowering {
    /// An ACL element, then a counter of what passed.
    Firewall { rules: Vec<AclRule>, default_action: u8, non_ip_action: u8 },
    /// A flow-monitor element.
    FlowMonitor,
    /// A partially offloadable NF's stateless part: a hybrid NF's element,
    /// whose misses go to the NF's process (its stateful part).
    Split(HybridElement),
    /// A payload-scan element whose patterns fit the element.
    Scan(ScanConfig),
    /// l2fwd: its MACs swapped, passed on.
    EtherSwap,
    /// fwd on one out-link: passed on unchanged.
    Forward,
}

/// One pipeline element of a lowered NF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A packet counter, shown as the NF's counter `name`.
    Counter(&'static str),
    /// The ACL element with these rules, its default for IP frames and
    /// its action for the others.
    Acl {
        rules: &'a [AclRule],
        default_action: u8,
        non_ip_action: u8,
    },
    FlowMonitor,
    /// A hybrid NF's element.
    Split(HybridElement),
    /// The payload-scan element; its matches shown as counter `matched`.
    Scan(&'a ScanConfig),
    /// The MAC-swap element.
    EtherSwap,
}

impl Lowering {
    /// Its pipeline elements in order: what `install` deploys and
    /// `--explain` lists.
    pub fn steps(&self) -> Vec<Step<'_>> {
        match self {
            Lowering::Firewall { rules, default_action, non_ip_action } => {
                let acl = Step::Acl { rules, default_action: *default_action, non_ip_action: *non_ip_action };
                vec![Step::Counter("rx"), acl, Step::Counter("pass")]
            }
            Lowering::FlowMonitor => vec![Step::Counter("rx"), Step::FlowMonitor],
            Lowering::Split(nf) => vec![Step::Split(*nf)],
            Lowering::Scan(config) => vec![Step::Counter("rx"), Step::Scan(config), Step::Counter("on")],
            Lowering::EtherSwap => vec![Step::Counter("rx"), Step::EtherSwap],
            Lowering::Forward => vec![Step::Counter("rx")],
        }
    }

    /// [`Lowering::steps`] in words.
    pub fn elements(&self) -> String {
        let words: Vec<String> = self
            .steps()
            .iter()
            .map(|s| match s {
                Step::Counter(name) => format!("counter {name}"),
                Step::Acl { rules, .. } => format!("acl ({} rules)", rules.len()),
                Step::FlowMonitor => "flow-monitor".into(),
                Step::EtherSwap => "ether-swap".into(),
                Step::Scan(c) => {
                    format!("payload-scan ({} patterns, {:?} on a match)", c.patterns.len(), c.on_match).to_lowercase()
                }
                Step::Split(nf) => {
                    format!("{:?} (its table's hits; misses to its process)", nf.element()).to_lowercase()
                }
            })
            .collect();
        words.join(", ")
    }
}

/// The kinds [`lower`] has an XDP form for, and when.
pub const LOWERED_KINDS: [(&str, &str); 5] = [
    ("firewall", "yes, when its rules fit the ACL element (32 rules of prefixes and one protocol or any)"),
    ("flow-monitor", "yes"),
    ("payload-scan", "yes, up to 16 patterns of up to 32 bytes"),
    ("l2fwd", "yes, with an out-link (without one it sends frames back: a process)"),
    ("fwd", "yes, with by_port=0"),
];

/// The XDP form of an NF of type `kind` with `args`, or why there is none.
pub fn lower(kind: &str, args: &[String]) -> Result<Lowering, String> {
    match kind {
        "firewall" => lower_firewall(args),
        "flow-monitor" => Ok(Lowering::FlowMonitor),
        "payload-scan" => lower_scan(args),
        // l2fwd takes no arguments (its catalog check refuses any).
        "l2fwd" => Ok(Lowering::EtherSwap),
        "fwd" if args.iter().any(|a| a == "by_port=1") => {
            Err("with by_port=1 it routes by arrival port; an XDP part is one straight path".into())
        }
        "fwd" => Ok(Lowering::Forward),
        _ => Err(format!("{kind} has no XDP form yet")),
    }
}

/// A scan the element can run: at most SCAN_MAX_PATTERNS patterns of at
/// most SCAN_MAX_LEN bytes (the NF checked that none is empty).
fn lower_scan(args: &[String]) -> Result<Lowering, String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let config = ScanConfig::parse(&args).map_err(|e| e.to_string())?;
    if config.patterns.len() > SCAN_MAX_PATTERNS {
        return Err(format!("{} patterns, the XDP element takes at most {SCAN_MAX_PATTERNS}", config.patterns.len()));
    }
    if let Some(i) = config.patterns.iter().position(|p| p.len() > SCAN_MAX_LEN) {
        let len = config.patterns[i].len();
        return Err(format!("pattern {i} has {len} bytes, the XDP element takes at most {SCAN_MAX_LEN}"));
    }
    Ok(Lowering::Scan(config))
}

fn lower_firewall(args: &[String]) -> Result<Lowering, String> {
    let file = args.first().ok_or("no rule file")?;
    // ferryd reads it here, the NF process (run in `/`) would read it
    // there: only an absolute path names the same file for both.
    if !std::path::Path::new(file).is_absolute() {
        return Err(format!("rule file {file:?} is a relative path; give an absolute one"));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("rule file {file}: {e}"))?;
    let rules = parse_fw_rules(&text).map_err(|e| format!("rule file {file}: {e}"))?;
    lower_fw_rules(&rules)
}

/// A firewall's rules as the ACL element's: at most ACL_MAX_RULES, each
/// a prefix pair with one protocol or any.
pub fn lower_fw_rules(rules: &FwRules) -> Result<Lowering, String> {
    if rules.rules.len() > ACL_MAX_RULES {
        return Err(format!(
            "{} rules; the XDP ACL element holds at most {ACL_MAX_RULES} (it scans them in order)",
            rules.rules.len()
        ));
    }
    let acl = rules
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| acl_rule(r).map_err(|why| format!("rule {}: {why}", i + 1)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Lowering::Firewall { rules: acl, default_action: action(rules.default), non_ip_action: action(rules.non_ip) })
}

fn action(a: FwAction) -> u8 {
    match a {
        FwAction::Allow => ACL_ALLOW,
        FwAction::Deny => ACL_DENY,
    }
}

/// The prefix length of the address range `lo..=hi` in the 128-bit
/// space, if it is a prefix.
fn prefix_len((lo, hi): (u128, u128)) -> Option<u8> {
    let host_bits = hi.checked_sub(lo)?;
    // A prefix's host part is all ones: size - 1 = 2^k - 1, and lo has none.
    (host_bits & host_bits.wrapping_add(1) == 0 && lo & host_bits == 0).then(|| host_bits.count_zeros() as u8)
}

/// A firewall rule as an ACL element rule: address ranges must be
/// prefixes and the protocol one value or any.
fn acl_rule(r: &FwRule) -> Result<AclRule, String> {
    let src_plen = prefix_len(r.src).ok_or("its source range is not a prefix")?;
    let dst_plen = prefix_len(r.dst).ok_or("its destination range is not a prefix")?;
    let proto = match r.proto {
        (0, 255) => 0,
        (p, q) if p == q && p != 0 => p,
        _ => return Err("the ACL element matches one protocol or any".into()),
    };
    Ok(AclRule {
        src: Ipv6Addr::from(r.src.0).into(),
        dst: Ipv6Addr::from(r.dst.0).into(),
        src_plen,
        dst_plen,
        proto,
        action: action(r.action),
        sport_lo: r.sport.0,
        sport_hi: r.sport.1,
        dport_lo: r.dport.0,
        dport_hi: r.dport.1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NF scans the element's window: placement changes no decision.
    #[test]
    fn the_scan_nf_and_element_share_the_window() {
        assert_eq!(ferry_nf::payload_scan::WINDOW, ferry_bpf::scan::SCAN_WINDOW);
    }

    /// What `nf list` says of the XDP forms' limits is the elements'.
    #[test]
    fn the_stated_limits_are_the_elements() {
        let when = |kind: &str| LOWERED_KINDS.iter().find(|(k, _)| *k == kind).unwrap().1;
        assert!(when("firewall").contains(&format!("{ACL_MAX_RULES} rules")));
        assert!(when("payload-scan").contains(&format!("{SCAN_MAX_PATTERNS} patterns of up to {SCAN_MAX_LEN} bytes")));
        assert_eq!(lower("l2fwd", &[]), Ok(Lowering::EtherSwap));
        assert_eq!(lower("fwd", &["by_port=0".into()]), Ok(Lowering::Forward));
        assert!(lower("fwd", &["by_port=1".into()]).unwrap_err().contains("arrival port"));
    }

    #[test]
    fn prefixes() {
        let v4 = |a: u32| u128::from(std::net::Ipv4Addr::from(a).to_ipv6_mapped());
        assert_eq!(prefix_len((0, u128::MAX)), Some(0));
        assert_eq!(prefix_len((v4(0), v4(u32::MAX))), Some(96));
        assert_eq!(prefix_len((v4(0x0a00_0000), v4(0x0aff_ffff))), Some(104));
        assert_eq!(prefix_len((v4(0x0a00_0001), v4(0x0a00_0001))), Some(128));
        assert_eq!(prefix_len((v4(0x0a00_0001), v4(0x0a00_0002))), None);
        assert_eq!(prefix_len((v4(0x0a00_0000), v4(0x0a00_0002))), None);
        assert_eq!(prefix_len((0x2001_0db8 << 96, (0x2001_0db8 << 96) | (u128::MAX >> 32))), Some(32));
    }

    #[test]
    fn firewall_rules_become_acl_rules() {
        let dir = std::env::temp_dir().join(format!("ferry-place-lower-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fw.rules");
        std::fs::write(&file, "deny src 10.0.0.0/8 proto udp dport 53\nallow proto tcp dport 80-90\ndefault deny\n")
            .unwrap();
        let Lowering::Firewall { rules, default_action, non_ip_action } =
            lower("firewall", &[file.display().to_string()]).unwrap()
        else {
            panic!("not a firewall lowering")
        };
        assert_eq!((default_action, non_ip_action), (ACL_DENY, ACL_ALLOW));
        assert_eq!(rules.len(), 2);
        let ten: ferry_bpf::abi::In6 = std::net::Ipv4Addr::new(10, 0, 0, 0).into();
        assert_eq!((rules[0].src, rules[0].src_plen, rules[0].proto), (ten, 104, 17));
        assert_eq!((rules[0].dport_lo, rules[0].dport_hi, rules[0].action), (53, 53, ACL_DENY));
        assert_eq!((rules[1].proto, rules[1].dport_lo, rules[1].dport_hi, rules[1].dst_plen), (6, 80, 90, 0));
        let many: String = (0..33).map(|i| format!("allow dport {i}\n")).collect::<String>() + "default deny\n";
        std::fs::write(&file, many).unwrap();
        let why = lower("firewall", &[file.display().to_string()]).unwrap_err();
        assert!(why.contains("33 rules"), "{why}");
        assert!(lower("ips", &[]).unwrap_err().contains("no XDP form"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
