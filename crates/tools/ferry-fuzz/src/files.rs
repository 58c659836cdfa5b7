//! Files an operator writes: chain files, eVNF files and the rule files
//! of the firewall, the IPS and the classifier. A file either loads, and
//! what loaded holds together, or its error names where it went wrong.

use ferry_catalog::Catalog;
use ferry_chain::spec::{ChainSpec, KindCheck};
use ferry_config::YamlError;
use ferry_nf::firewall_rules::{first_match_linear, parse_fw_rules, BitVectorClassifier, Tuple};
use ferry_nf::ips_rules::{load_rules, Problem};
use ferry_nf::{Ips, PacketNf};
use ferry_wire::classify::{Rule, Table, MAX_RULES};

use crate::text;

/// The catalog, but no argument may name a file: the firewall and eVNF
/// kinds read the files their arguments name, and what a fuzz input
/// names on this machine is no part of the parser under test.
struct NoFiles;

impl KindCheck for NoFiles {
    fn check(&self, kind: &str, args: &[String], out_links: usize) -> Result<(), (Option<usize>, String)> {
        if let Some(i) = args.iter().position(|a| a.contains('/')) {
            return Err((Some(i), "fuzzing reads no files".into()));
        }
        Catalog.check(kind, args, out_links)
    }

    fn needs_out_link(&self, kind: &str) -> bool {
        Catalog.needs_out_link(kind)
    }
}

/// A chain file: an error names a line of the file (when it names a
/// field); a file that loads normalises to a file that loads to itself.
pub fn chain(data: &[u8]) {
    let Some(text) = text(data) else { return };
    match ChainSpec::from_yaml_str(text, "fuzz.yaml", &NoFiles) {
        Err(e) => yaml_error_holds(&e, text),
        Ok(spec) => {
            let once = serde_yaml::to_string(&spec).expect("a chain spec serialises");
            let again = ChainSpec::from_yaml_str(&once, "fuzz.yaml", &NoFiles)
                .unwrap_or_else(|e| panic!("a loaded chain, written out, fails to load: {e}\n{once}"));
            let twice = serde_yaml::to_string(&again).expect("a chain spec serialises");
            assert_eq!(once, twice, "normalising a loaded chain changed it");
        }
    }
}

/// A located error: it starts with its file, and a line it names is one
/// of the text's (or the one past the last, where YAML finds a missing
/// end).
fn yaml_error_holds(e: &YamlError, text: &str) {
    let shown = e.to_string();
    assert!(shown.starts_with("fuzz.yaml"), "an error that names no file: {shown}");
    if let Some(line) = e.line {
        let lines = text.lines().count().max(1);
        assert!((1..=lines + 1).contains(&line), "line {line} of a {lines}-line file: {shown}");
    }
    assert!(!e.message.is_empty(), "an error that says nothing: {shown}");
}

/// An eVNF file: it loads, or its error is located as a chain file's.
pub fn evnf(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Err(e) = ferry_evnf::config::EvnfSpec::from_yaml_str(text, "fuzz.yaml") {
        yaml_error_holds(&e, text);
    }
}

/// The line an error names is a line of the file (the last one for what
/// the file lacks; line 1 of an empty file).
fn line_holds(line: usize, text: &str, shown: &str) {
    let lines = text.lines().count().max(1);
    assert!((1..=lines).contains(&line), "error on line {line} of {lines}: {shown}");
}

/// A firewall rule file: an error names a rule's line; loaded rules have
/// ordered ranges, and the bit-vector lookup agrees with the linear scan
/// at every rule's corners.
pub fn firewall_rules(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let rules = match parse_fw_rules(text) {
        Err(e) => return line_holds(e.line, text, &e.to_string()),
        Ok(r) => r,
    };
    let classifier = BitVectorClassifier::new(&rules.rules);
    for r in &rules.rules {
        assert!(r.src.0 <= r.src.1 && r.dst.0 <= r.dst.1 && r.proto.0 <= r.proto.1, "a range upside down: {r:?}");
        assert!(r.sport.0 <= r.sport.1 && r.dport.0 <= r.dport.1, "a port range upside down: {r:?}");
        for (src, dst, sport) in [(r.src.0, r.dst.0, r.sport.0), (r.src.1, r.dst.1, r.sport.1)] {
            let t = Tuple { src, dst, proto: r.proto.0, sport, dport: r.dport.1 };
            assert_eq!(classifier.first_match(&t), first_match_linear(&rules.rules, &t), "{t:?}");
        }
    }
}

/// An IPS rule file: an error names a line of the file; a file that
/// loads whole loads the same with skip-unsupported, nothing skipped; one
/// refused for an unsupported rule loads with it, that rule's option
/// counted; loaded rules build the NF, which takes a frame of the
/// file's own bytes without panicking.
pub fn ips_rules(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let lenient = load_rules(text, true);
    match load_rules(text, false) {
        Err(e) => {
            line_holds(e.line, text, &e.to_string());
            if e.problem == Problem::Unsupported {
                let option = e.option.clone().unwrap_or_default();
                // The same rule is skipped, unless a later line is malformed.
                if let Ok(set) = &lenient {
                    assert!(set.skipped.get(&option).is_some_and(|&n| n > 0), "{e}: not counted: {:?}", set.skipped);
                }
            } else {
                assert!(lenient.is_err(), "{e}: loaded when skipping unsupported rules");
            }
        }
        Ok(set) => {
            let skipping = lenient.expect("a file that loads whole loads skipping");
            assert!(skipping.skipped.is_empty() && skipping.rules.len() == set.rules.len());
            let mut nf = Ips::new(set.rules);
            let mut frame = data.to_vec();
            nf.process(&mut frame);
        }
    }
}

/// Classifier rules, one per line, as a chain file's classifier passes
/// them: an error names a rule and a key; a loaded rule, written out,
/// reads back the same.
pub fn classifier_rules(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let args: Vec<&str> = text.lines().collect();
    match Table::parse(&args) {
        Err((i, e)) => {
            assert!(i < args.len().min(MAX_RULES + 1), "rule {i} of {}", args.len());
            // A known key, or the unknown one the rule wrote.
            let keys = ["rule", "out", "src", "dst", "vlan", "inner_vlan", "dport"];
            let written = args.get(i).is_some_and(|a| a.split(',').any(|kv| kv.split('=').next() == Some(&e.key)));
            assert!(keys.contains(&e.key.as_str()) || written, "an error blaming key {:?}", e.key);
        }
        Ok(table) => {
            for r in &table.rules {
                let back: Rule = r.to_string().parse().unwrap_or_else(|e| panic!("{r} reads back: {e}"));
                assert_eq!(&back, r);
            }
        }
    }
}
