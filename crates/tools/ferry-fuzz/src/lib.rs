//! Fuzz targets: one per parser that reads bytes from outside Ferry, and
//! differential targets that run the BPF parse header and element
//! decisions (built for user space from `bpf/include`) against their Rust
//! twins.
//!
//! A target is a plain function of the input bytes that panics when an
//! invariant breaks: not only "no crash", but what the parser promises
//! (a parse re-emits to the same bytes where the format allows, lengths
//! lie within the buffer, errors name a line or field, both parsers give
//! the same answer). The same functions run three ways:
//! - under libFuzzer, by `make fuzz TARGET=… SECONDS=…` (`src/bin`,
//!   built with coverage instrumentation);
//! - over the committed corpora and past findings, by `cargo test`
//!   (`tests/replay.rs`), deterministically;
//! - by hand: `FERRY_FUZZ_TARGET=frame target/fuzz/…/ferry-fuzz FILE`.

pub mod differential;
pub mod files;
pub mod frames;
pub mod protocol;
pub mod state;

/// A fuzz target: its name (the corpus directory under `fuzz/corpus`),
/// what it feeds, and the check.
pub struct Target {
    pub name: &'static str,
    pub about: &'static str,
    pub check: fn(&[u8]),
}

/// Every target, in the order `make fuzz-all` runs them.
pub const TARGETS: &[Target] = &[
    Target { name: "frame", about: "ferry-wire's flow parser and header reprs", check: frames::frame },
    Target { name: "nsh", about: "NSH and VXLAN-GPE headers from other hosts", check: frames::nsh },
    Target { name: "mica", about: "MICA request and response batches", check: frames::mica },
    Target { name: "parse-diff", about: "the BPF parse header against flow::parse", check: differential::parse },
    Target { name: "acl-diff", about: "the XDP ACL element against the firewall NF", check: differential::acl },
    Target {
        name: "classify-diff",
        about: "the XDP classifier's walk against classify::Table",
        check: differential::classify,
    },
    Target { name: "chain-file", about: "chain files (YAML)", check: files::chain },
    Target { name: "evnf-file", about: "eVNF files (YAML)", check: files::evnf },
    Target { name: "firewall-rules", about: "firewall rule files", check: files::firewall_rules },
    Target { name: "ips-rules", about: "IPS rule files", check: files::ips_rules },
    Target { name: "classifier-rules", about: "classifier rule texts", check: files::classifier_rules },
    Target { name: "control-protocol", about: "the NF, admin and remote control protocol", check: protocol::control },
    Target { name: "state-file", about: "the chain state a persistent ferryd adopts", check: state::chain_state },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// `data` as UTF-8 text, the way the file readers take it: they read a
/// `String`, so invalid UTF-8 never reaches the parser.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}
