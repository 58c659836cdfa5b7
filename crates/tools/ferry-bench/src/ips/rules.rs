//! Rules written as rulesets write them, generated from a seed: the
//! header's variables, lists, ranges and negations; one to three
//! contents, `nocase`, absolute and relative windows, negated contents,
//! pcre, flow, dsize and the metadata. With `unsupported`, about one rule
//! in seven also needs an option the IPS does not run (flowbits,
//! byte_test, thresholds, HTTP buffers, a service header), as real files
//! do.

use std::fmt::Write;

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use super::{pick, word};

/// The definitions above the rules.
const HEAD: &str = "\
ipvar HOME_NET [10.0.0.0/8,192.168.0.0/16,172.16.0.0/12]
ipvar EXTERNAL_NET !$HOME_NET
portvar WEB_PORTS [80,8000:8099,8080]
";

pub struct Generated {
    rules: Vec<String>,
    /// Contents the rules look for, for the corpus to carry some.
    pub patterns: Vec<Vec<u8>>,
}

impl Generated {
    /// The rule file of the first `n` rules.
    pub fn text(&self, n: usize) -> String {
        let mut text = HEAD.to_string();
        for r in self.rules.iter().take(n) {
            text += r;
            text.push('\n');
        }
        text
    }
}

/// `n` rules, sids from 1 000 001 on.
pub fn generate(rng: &mut Pcg64Mcg, n: usize, unsupported: bool) -> Generated {
    let mut g = Generated { rules: Vec::with_capacity(n), patterns: Vec::new() };
    for i in 0..n {
        let needs_more = unsupported && rng.gen_ratio(1, 7);
        let rule = rule(rng, 1_000_001 + i as u32, needs_more, &mut g.patterns);
        g.rules.push(rule);
    }
    g
}

/// Writes `n` generated rules, about one in seven unsupported, to `path`.
pub fn write_rules(path: &std::path::Path, n: usize, seed: u64) -> std::io::Result<()> {
    use rand::SeedableRng;
    let g = generate(&mut Pcg64Mcg::seed_from_u64(seed), n, true);
    std::fs::write(path, g.text(n))
}

fn rule(rng: &mut Pcg64Mcg, sid: u32, unsupported: bool, patterns: &mut Vec<Vec<u8>>) -> String {
    let proto = *pick(rng, &["tcp", "tcp", "tcp", "tcp", "udp", "udp", "icmp", "ip"]);
    let action = if rng.gen_ratio(1, 10) { "drop" } else { "alert" };
    let (src, dst) = *pick(rng, &[("$EXTERNAL_NET", "$HOME_NET"), ("any", "any"), ("$HOME_NET", "$EXTERNAL_NET")]);
    let dport = *pick(rng, &["any", "80", "$HTTP_PORTS", "$WEB_PORTS", "[443,8443]", "1024:", "!22", "53"]);
    let dir = if rng.gen_ratio(1, 20) { "<>" } else { "->" };
    let header = if unsupported && rng.gen_ratio(1, 4) {
        format!("{action} http {src} any -> {dst} any")
    } else {
        format!("{action} {proto} {src} any {dir} {dst} {dport}")
    };
    let mut o = format!("msg:\"generated {sid}\"; ");
    if proto == "tcp" && rng.gen_ratio(2, 5) {
        o += *pick(rng, &["flow:to_server,established; ", "flow:established; ", "flow:to_client,established; "]);
    }
    contents(rng, &mut o, patterns);
    if rng.gen_ratio(1, 20) {
        let _ = write!(o, "dsize:>{}; ", rng.gen_range(10..200));
    }
    if unsupported && !header.contains(" http ") {
        o += *pick(
            rng,
            &[
                "flowbits:set,gen.seen; ",
                "byte_test:2,>,512,0; ",
                "threshold:type limit, track by_src, count 1, seconds 60; ",
                "http_uri; ",
                "isdataat:20,relative; ",
            ],
        );
    }
    let class = pick(rng, &["trojan-activity", "web-application-attack", "attempted-recon", "policy-violation"]);
    let _ = write!(o, "reference:url,example.org/{sid}; classtype:{class}; sid:{sid}; rev:{};", rng.gen_range(1..9));
    if rng.gen_ratio(1, 3) {
        o += " metadata:created_at 2026_01_01, signature_severity Major;";
    }
    format!("{header} ({o})")
}

/// One to three contents (the first positive), with modifiers, and
/// sometimes a pcre.
fn contents(rng: &mut Pcg64Mcg, o: &mut String, patterns: &mut Vec<Vec<u8>>) {
    let n = rng.gen_range(1..=3);
    for k in 0..n {
        let (text, bytes) = if rng.gen_ratio(1, 4) {
            let b: Vec<u8> = (0..rng.gen_range(3..7)).map(|_| rng.gen()).collect();
            let hex: Vec<String> = b.iter().map(|x| format!("{x:02X}")).collect();
            (format!("|{}|", hex.join(" ")), b)
        } else {
            let w = word(rng);
            (w.clone(), w.into_bytes())
        };
        let negated = k > 0 && rng.gen_ratio(1, 10);
        let _ = write!(o, "content:{}\"{text}\"; ", if negated { "!" } else { "" });
        if !negated && k == 0 {
            patterns.push(bytes.clone());
        }
        if rng.gen_ratio(1, 2) && !text.starts_with('|') {
            o.push_str("nocase; ");
        }
        if k == 0 && rng.gen_ratio(1, 5) {
            let _ = write!(o, "depth:{}; ", bytes.len() + rng.gen_range(0..64));
        } else if k > 0 && rng.gen_ratio(1, 2) {
            let _ = write!(o, "distance:0; within:{}; ", bytes.len() + rng.gen_range(0..40));
        }
    }
    if rng.gen_ratio(3, 20) {
        let _ = write!(o, "pcre:\"/{}[0-9]{{1,4}}(\\.php)?/i\"; ", word(rng));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A generated file of 1 200 rules loads with skip-unsupported:
    /// over 1 000 rules, the rest counted by the option that needed
    /// what the IPS does not run, as `ferry chain check` prints them.
    #[test]
    fn a_generated_ruleset_loads_skipping_what_is_unsupported() {
        let dir = std::env::temp_dir().join(format!("ferry-ips-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("generated.rules");
        write_rules(&file, 1200, 7).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let first = ferry_nf::ips_rules::load_rules(&text, false).unwrap_err();
        assert!(first.option.is_some(), "{first}");
        let set = ferry_nf::ips_rules::load_rules(&text, true).unwrap();
        let skipped: usize = set.skipped.values().sum();
        assert_eq!(set.rules.len() + skipped, 1200);
        assert!(set.rules.len() >= 1000, "{} rules loaded", set.rules.len());
        for option in ["protocol http", "flowbits", "byte_test", "threshold", "http_uri", "isdataat"] {
            assert!(set.skipped.get(option).is_some_and(|&n| n > 0), "{option}: {:?}", set.skipped);
        }
        let args = [file.display().to_string(), "skip-unsupported".to_string()];
        let lines = ferry_catalog::loaded("ips", &args);
        let by: Vec<String> = set.skipped.iter().map(|(o, n)| format!("{o} {n}")).collect();
        let want =
            format!("ips: {} rules, {skipped} skipped as unsupported (by option: {})", set.rules.len(), by.join(", "));
        assert_eq!(lines, [want]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_generated_rule_is_supported_without_the_mix() {
        let g = generate(&mut Pcg64Mcg::seed_from_u64(3), 2000, false);
        let set = ferry_nf::ips_rules::load_rules(&g.text(2000), false).unwrap();
        assert_eq!(set.rules.len(), 2000);
        assert!(set.rules.iter().any(|r| r.flow.is_some()) && set.rules.iter().any(|r| r.bidirectional));
    }
}
