//! The BPF parse header and element decisions against their Rust twins.
//!
//! `c/bpf_user.c` builds `bpf/include` for user space: the probes' result
//! functions, `ferry_pl_parse`, the ACL element and the classifier's rule
//! walk, unchanged, over tables this module fills. An NF placed in XDP
//! must decide every frame as the same NF in a process does, so any
//! disagreement is a finding.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::{Result, Unstructured};
use ferry_bpf::abi::{NshParseResult, ParseResult};
use ferry_bpf::classify::ClsRule;
use ferry_bpf::pipeline::{AclMeta, AclRule};
use ferry_catalog::lower::{lower_fw_rules, Lowering};
use ferry_nf::firewall_rules::{FwAction, FwRule, FwRules};
use ferry_nf::{Firewall, Lookup, PacketNf, Verdict};
use ferry_wire::classify::{Decision, Rule, Table, MAX_OUTS, MAX_RULES};
use ferry_wire::flow;
use ferry_wire::prefix::IpPrefix;

mod c {
    use super::*;

    extern "C" {
        pub fn ferry_user_parse(frame: *const u8, len: u32, r: *mut ParseResult);
        pub fn ferry_user_nsh(frame: *const u8, len: u32, r: *mut NshParseResult);
        pub fn ferry_user_pl_parse(frame: *const u8, len: u32, r: *mut ParseResult) -> i32;
        pub fn ferry_user_acl_load(meta: *const AclMeta, rules: *const AclRule);
        pub fn ferry_user_acl(frame: *const u8, len: u32) -> i32;
        pub fn ferry_user_cls_load(rules: *const ClsRule, n: u32);
        pub fn ferry_user_classify(frame: *const u8, len: u32, n: u32, hit: *mut u32) -> i32;
    }
}

/// The largest frame the C side takes (its arena; XDP's is smaller).
const MAX_FRAME: usize = 64 * 1024;
const XDP_DROP: i32 = 1;
const XDP_PASS: i32 = 2;

fn frame_of(data: &[u8]) -> &[u8] {
    &data[..data.len().min(MAX_FRAME)]
}

/// `ferry_parse_result_of` (what `ferry_parse_probe` runs) and the
/// pipeline's `ferry_pl_parse` against `flow::parse`, field by field; and
/// `ferry_nsh_result_of` against ferry-wire's NSH and VXLAN-GPE parsers.
pub fn parse(data: &[u8]) {
    let frame = frame_of(data);
    let len = frame.len() as u32;
    let rust = flow::parse(frame).ok();
    let mut probe = ParseResult::default();
    let mut pl = ParseResult::default();
    let mut nsh = NshParseResult::default();
    // SAFETY: the pointers are valid for `len` bytes and one result each;
    // the C reads the frame only through its own guarded copy.
    let pl_ok = unsafe {
        c::ferry_user_parse(frame.as_ptr(), len, &mut probe);
        c::ferry_user_nsh(frame.as_ptr(), len, &mut nsh);
        c::ferry_user_pl_parse(frame.as_ptr(), len, &mut pl)
    };
    assert_eq!(probe.to_flow(), rust, "ferry_parse_l4 and flow::parse disagree on {frame:02x?}");
    assert_eq!(pl_ok == 1, rust.is_some(), "ferry_pl_parse and flow::parse disagree on {frame:02x?}");
    if let Some(f) = rust {
        pipeline_fields_agree(&pl, &f, frame);
    }
    assert_eq!(nsh, NshParseResult::of_frame(frame), "ferry_parse_nsh and ferry-wire disagree on {frame:02x?}");
}

/// The element view holds what the flow holds, IP offsets included.
fn pipeline_fields_agree(pl: &ParseResult, f: &flow::Flow, frame: &[u8]) {
    let l3 = if f.ip.is_some() { f.l3_offset } else { 0 };
    let want = (f.proto, f.fragment, f.later_fragment, f.src, f.dst, f.sport, f.dport, l3, f.l4_offset.unwrap_or(0));
    let got = (
        pl.proto,
        pl.fragment == 1,
        pl.later_fragment == 1,
        pl.saddr.to_ipv6(),
        pl.daddr.to_ipv6(),
        u16::from_be(pl.sport),
        u16::from_be(pl.dport),
        usize::from(pl.l3_off),
        usize::from(pl.l4_off),
    );
    assert_eq!(got, want, "ferry_pl_parse's fields and flow::parse disagree on {frame:02x?}");
    let version = match f.ip {
        Some(flow::IpVersion::V4) => 4,
        Some(flow::IpVersion::V6) => 6,
        None => 0,
    };
    assert_eq!(pl.ip_version, version, "IP version of {frame:02x?}");
}

/// A firewall of rules drawn from the input, lowered to the ACL element
/// as placement lowers it, against the firewall NF on the input's frame:
/// pass or drop, the same.
pub fn acl(data: &[u8]) {
    let (frame, mut u) = frame_then_rules(data);
    let Ok(rules) = fw_rules(&mut u) else { return };
    let Ok(Lowering::Firewall { rules: acl, default_action, non_ip_action }) = lower_fw_rules(&rules) else {
        return;
    };
    let meta = AclMeta::new(acl.len(), default_action, non_ip_action);
    let mut nf = Firewall::new(rules, Lookup::BitVector);
    let want = match nf.process(&mut frame.to_vec()) {
        Verdict::Pass => XDP_PASS,
        _ => XDP_DROP,
    };
    // SAFETY: `acl` holds meta.rules rules; the frame pointer is valid
    // for its length.
    let got = unsafe {
        c::ferry_user_acl_load(&meta, acl.as_ptr());
        c::ferry_user_acl(frame.as_ptr(), frame.len() as u32)
    };
    assert_eq!(got, want, "the ACL element and the firewall disagree on {frame:02x?} under {acl:?}");
}

/// The input of the rule targets: a frame, its length in the first two
/// bytes (big-endian), then the bytes the rules are drawn from (none: no
/// rules). A frame first, so that a seed frame stays one.
pub fn frame_then_rules(data: &[u8]) -> (&[u8], Unstructured<'_>) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return (&[], Unstructured::new(&[])) };
    let (frame, rules) = rest.split_at(usize::from(u16::from_be_bytes(*len)).min(rest.len()));
    (frame_of(frame), Unstructured::new(rules))
}

fn fw_rules(u: &mut Unstructured) -> Result<FwRules> {
    let n = u.int_in_range(0..=8)?;
    let rules = (0..n).map(|_| fw_rule(u)).collect::<Result<_>>()?;
    Ok(FwRules { rules, default: fw_action(u)?, non_ip: fw_action(u)? })
}

fn fw_action(u: &mut Unstructured) -> Result<FwAction> {
    Ok(if u.arbitrary()? { FwAction::Allow } else { FwAction::Deny })
}

/// A rule as the rule file can state it: prefixes of either family, one
/// protocol or any, port ranges.
fn fw_rule(u: &mut Unstructured) -> Result<FwRule> {
    let proto = match u.int_in_range(0..=4)? {
        0 => (0, 255),
        1 => (6, 6),
        2 => (17, 17),
        3 => (1, 1),
        _ => {
            let p = u.int_in_range(1..=255)?;
            (p, p)
        }
    };
    Ok(FwRule {
        action: fw_action(u)?,
        src: prefix(u)?.map_or((0, u128::MAX), |p| p.range()),
        dst: prefix(u)?.map_or((0, u128::MAX), |p| p.range()),
        proto,
        sport: port_range(u)?,
        dport: port_range(u)?,
    })
}

fn port_range(u: &mut Unstructured) -> Result<(u16, u16)> {
    if u.arbitrary()? {
        return Ok((0, u16::MAX));
    }
    let (a, b): (u16, u16) = (u.arbitrary()?, u.arbitrary()?);
    Ok((a.min(b), a.max(b)))
}

/// A prefix of either family with its host bits cleared, or None (any).
fn prefix(u: &mut Unstructured) -> Result<Option<IpPrefix>> {
    let (addr, len) = match u.int_in_range(0..=2)? {
        0 => return Ok(None),
        1 => (IpAddr::V4(Ipv4Addr::from(u.arbitrary::<u32>()?)), u.int_in_range(0..=32)?),
        _ => (IpAddr::V6(Ipv6Addr::from(u.arbitrary::<u128>()?)), u.int_in_range(0..=128)?),
    };
    let masked = |max: u32, bits: u128| bits & u128::MAX.checked_shl(max - u32::from(len)).unwrap_or(0);
    let base = match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(masked(32, u32::from(a).into()) as u32)),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(masked(128, u128::from(a)))),
    };
    // IPv6 prefixes over ::ffff:0:0/96 are refused by the rule files.
    Ok(IpPrefix::new(base, len).ok())
}

/// A classifier table drawn from the input, as ferryd loads it into the
/// XDP classifier, against `Table::decide` on the input's frame: the same
/// first rule, or none, or malformed.
pub fn classify(data: &[u8]) {
    let (frame, mut u) = frame_then_rules(data);
    let Ok(table) = cls_table(&mut u) else { return };
    let loaded: Vec<ClsRule> = table.rules.iter().map(ClsRule::from).collect();
    let mut hit = 0u32;
    // SAFETY: `loaded` holds n rules; the pointers are valid.
    let parsed = unsafe {
        c::ferry_user_cls_load(loaded.as_ptr(), loaded.len() as u32);
        c::ferry_user_classify(frame.as_ptr(), frame.len() as u32, loaded.len() as u32, &mut hit)
    };
    let got = match (parsed, hit as usize) {
        (0, _) => Decision::Malformed,
        (_, i) if i < MAX_RULES => Decision::Rule(i),
        _ => Decision::Default,
    };
    assert_eq!(got, table.decide(frame), "the XDP classifier and Table disagree on {frame:02x?} under {table:?}");
}

fn cls_table(u: &mut Unstructured) -> Result<Table> {
    let n = u.int_in_range(0..=6)?;
    let rules = (0..n)
        .map(|_| {
            Ok(Rule {
                src: prefix(u)?,
                dst: prefix(u)?,
                vlan: u.arbitrary::<Option<u16>>()?.map(|v| v & 0x0fff),
                inner_vlan: u.arbitrary::<Option<u16>>()?.map(|v| v & 0x0fff),
                dport: u.arbitrary()?,
                out: u.int_in_range(0..=MAX_OUTS as u16 - 1)?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Table { rules })
}
