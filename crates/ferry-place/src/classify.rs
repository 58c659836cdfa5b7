//! The edge classifier's table in XDP: a chain's classification rules
//! (their text form, as the plan carries them) read by the router NF's
//! own parser, then converted to the XDP classifier's rules. One syntax,
//! one parser, two places that run it.

use ferry_bpf::classify::ClsMatch;
use ferry_nf::classify::{Rule, Table};

// The parser's limits are the program's: rules in its table, entries (a
// rule's `out`) in its DEVMAP.
const _: () = assert!(ferry_nf::classify::MAX_RULES == ferry_bpf::classify::CLS_MAX_RULES);
const _: () = assert!(ferry_nf::classify::MAX_OUTS <= ferry_bpf::classify::CLS_MAX_RULES);

/// The XDP rules of `rules` (each `out=N,...`); an error names the rule.
pub fn classifier_rules(rules: &[String]) -> Result<Vec<ClsMatch>, String> {
    let texts: Vec<&str> = rules.iter().map(String::as_str).collect();
    let table = Table::parse(&texts).map_err(|(i, e)| format!("classification rule {i}: {e}"))?;
    Ok(table.rules.iter().map(cls_match).collect())
}

fn cls_match(r: &Rule) -> ClsMatch {
    ClsMatch {
        src: r.src.map(|p| (p.addr, p.mask())),
        dst: r.dst.map(|p| (p.addr, p.mask())),
        vlan: r.vlan,
        dport: r.dport,
        out: r.out,
    }
}
