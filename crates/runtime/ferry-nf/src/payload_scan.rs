//! Payload scan (the SmartNIC paper's payload-scan offload): looks for a
//! few byte strings in the first [`WINDOW`] bytes of TCP and UDP payloads
//! (IPv4 or IPv6, through up to two VLAN tags), and drops the frames that hold one, or counts them and lets
//! them go on. The window is the XDP payload-scan element's
//! (`bpf/include/ferry_scan.h`), so this NF and the element decide every
//! frame alike, and placement runs the scan in XDP whenever its patterns
//! fit the element's limits (ferry-place checks them). More or longer
//! patterns run here (Aho-Corasick), over the same window.
//!
//! Arguments: `drop|count PATTERN...`; a pattern is text, or `hex:` and
//! its bytes in hex (`hex:deadbeef`).
//!
//! The decision, in order:
//! - a header that does not fit → `drop_malformed`;
//! - no IP header, or neither TCP nor UDP → `pass_not_scanned`;
//! - a fragment → `drop_fragment` (a pattern could straddle pieces);
//! - a pattern lies wholly in the window → `drop_matched`, or with
//!   `count`, `pass_matched`;
//! - otherwise → `pass`.

use aho_corasick::AhoCorasick;

use crate::payload::{l4_payload, L4Payload};
use crate::{count, NfError, NfSpec, PacketNf, Verdict};

/// Payload bytes scanned, from the first: the XDP element's window (a
/// ferry-place test keeps the two equal).
pub const WINDOW: usize = 256;

const PASS: usize = 1;
const PASS_NOT_SCANNED: usize = 2;
const PASS_MATCHED: usize = 3;
const DROP_MATCHED: usize = 4;
const DROP_MALFORMED: usize = 5;
const DROP_FRAGMENT: usize = 6;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "payload-scan",
    counters: &["rx", "pass", "pass_not_scanned", "pass_matched", "drop_matched", "drop_malformed", "drop_fragment"],
};

/// What a match does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMatch {
    Drop,
    /// Count it and let the frame go on.
    Count,
}

/// A scan's configuration, parsed from the NF's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanConfig {
    pub on_match: OnMatch,
    pub patterns: Vec<Vec<u8>>,
}

impl ScanConfig {
    pub fn parse(args: &[&str]) -> Result<ScanConfig, NfError> {
        const NF: &str = "payload-scan";
        let (on_match, patterns) = match args {
            ["drop", p @ ..] => (OnMatch::Drop, p),
            ["count", p @ ..] => (OnMatch::Count, p),
            [other, ..] => {
                return Err(NfError::BadArg { nf: NF, arg: other.to_string(), reason: "expected drop or count" })
            }
            [] => return Err(NfError::MissingArg { nf: NF, what: "drop or count, then the patterns" }),
        };
        if patterns.is_empty() {
            return Err(NfError::MissingArg { nf: NF, what: "at least one pattern after drop or count" });
        }
        let patterns = patterns.iter().map(|p| pattern(p)).collect::<Result<Vec<_>, _>>()?;
        Ok(ScanConfig { on_match, patterns })
    }
}

/// A pattern argument: text, or `hex:` and hex digits.
fn pattern(arg: &str) -> Result<Vec<u8>, NfError> {
    let bad = |reason| NfError::BadArg { nf: "payload-scan", arg: arg.to_string(), reason };
    let bytes = match arg.strip_prefix("hex:") {
        Some(hex) => {
            let digits = hex.as_bytes();
            if digits.len() % 2 != 0 {
                return Err(bad("hex: needs an even number of digits"));
            }
            let nibble = |d: u8| (d as char).to_digit(16).map(|v| v as u8).ok_or_else(|| bad("hex: needs hex digits"));
            digits.chunks(2).map(|pair| Ok(nibble(pair[0])? << 4 | nibble(pair[1])?)).collect::<Result<Vec<u8>, _>>()?
        }
        None => arg.as_bytes().to_vec(),
    };
    if bytes.is_empty() {
        return Err(bad("an empty pattern matches everything"));
    }
    if bytes.len() > WINDOW {
        return Err(bad("longer than the 256-byte window: it can never match"));
    }
    Ok(bytes)
}

pub struct PayloadScan {
    on_match: OnMatch,
    matcher: AhoCorasick,
    counters: [u64; 7],
}

impl PayloadScan {
    pub fn new(config: &ScanConfig) -> Result<PayloadScan, NfError> {
        let matcher = AhoCorasick::new(&config.patterns).map_err(|_| NfError::BadArg {
            nf: "payload-scan",
            arg: format!("{} patterns", config.patterns.len()),
            reason: "more than the matcher can build",
        })?;
        Ok(PayloadScan { on_match: config.on_match, matcher, counters: [0; 7] })
    }

    fn classify(&self, frame: &[u8]) -> (Verdict, usize) {
        let payload = match l4_payload(frame) {
            L4Payload::Malformed => return (Verdict::Drop, DROP_MALFORMED),
            L4Payload::NotInspected => return (Verdict::Pass, PASS_NOT_SCANNED),
            L4Payload::Fragment => return (Verdict::Drop, DROP_FRAGMENT),
            L4Payload::Payload { bytes, .. } => bytes,
        };
        let window = &payload[..payload.len().min(WINDOW)];
        match (self.matcher.is_match(window), self.on_match) {
            (false, _) => (Verdict::Pass, PASS),
            (true, OnMatch::Drop) => (Verdict::Drop, DROP_MATCHED),
            (true, OnMatch::Count) => (Verdict::Pass, PASS_MATCHED),
        }
    }
}

impl PacketNf for PayloadScan {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

    /// A UDP or TCP frame whose payload is `payload`.
    fn frame(proto: L4Proto, payload: &[u8]) -> Vec<u8> {
        let at = 14 + 20 + proto.header_len();
        let spec =
            FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: at + payload.len() };
        let t =
            FiveTuple { src_ip: [10, 0, 0, 1].into(), dst_ip: [10, 0, 0, 2].into(), src_port: 1, dst_port: 2, proto };
        let mut f = vec![0u8; spec.frame_len.max(60)];
        let n = build_frame(&FrameSpec { frame_len: f.len(), ..spec }, &t, None, &mut f).unwrap();
        f.truncate(n);
        f[at..at + payload.len()].copy_from_slice(payload);
        f
    }

    fn scan(args: &[&str]) -> PayloadScan {
        PayloadScan::new(&ScanConfig::parse(args).unwrap()).unwrap()
    }

    /// The decision table, row by row.
    #[test]
    fn every_rule_of_the_decision_table() {
        let mut at_end = vec![b'.'; WINDOW - 6];
        at_end.extend_from_slice(b"attack");
        let mut across = vec![b'.'; WINDOW - 3];
        across.extend_from_slice(b"attack");
        let mut fragment = frame(L4Proto::Udp, b"attack");
        fragment[14 + 6] = 0x20; // more fragments
        let mut arp = frame(L4Proto::Udp, b"attack");
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let icmp = frame(L4Proto::Icmp, b"attack at dawn");
        let short = frame(L4Proto::Udp, b"attack")[..40].to_vec();
        // Bytes after the IP datagram (its total length) are not payload.
        let trailing = |mut f: Vec<u8>, tail: &[u8]| {
            f.extend_from_slice(tail);
            f
        };
        let rows: Vec<(&str, Vec<u8>, Verdict, usize)> = vec![
            ("at the start", frame(L4Proto::Udp, b"attack at dawn"), Verdict::Drop, DROP_MATCHED),
            ("in the middle, tcp", frame(L4Proto::Tcp, b"we attack now"), Verdict::Drop, DROP_MATCHED),
            ("hex pattern", frame(L4Proto::Udp, &[1, 0xde, 0xad, 0xbe, 0xef]), Verdict::Drop, DROP_MATCHED),
            ("ending at the window's end", frame(L4Proto::Udp, &at_end), Verdict::Drop, DROP_MATCHED),
            ("across the window's end", frame(L4Proto::Udp, &across), Verdict::Pass, PASS),
            ("none", frame(L4Proto::Udp, b"peace"), Verdict::Pass, PASS),
            ("in a trailer", trailing(frame(L4Proto::Udp, b"peace"), b"attack"), Verdict::Pass, PASS),
            ("before a trailer", trailing(frame(L4Proto::Udp, b"attack"), b"zzzzzz"), Verdict::Drop, DROP_MATCHED),
            ("a fragment", fragment, Verdict::Drop, DROP_FRAGMENT),
            ("not IPv4", arp, Verdict::Pass, PASS_NOT_SCANNED),
            ("ICMP", icmp, Verdict::Pass, PASS_NOT_SCANNED),
            ("truncated", short, Verdict::Drop, DROP_MALFORMED),
        ];
        let mut nf = scan(&["drop", "attack", "hex:deadbeef"]);
        for (what, mut f, verdict, counter) in rows {
            let before = nf.counters()[counter];
            assert_eq!(nf.process(&mut f), verdict, "{what}");
            assert_eq!(nf.counters()[counter], before + 1, "{what}: counted in {}", SPEC.counters[counter]);
        }
        assert_eq!(nf.counters()[1..].iter().sum::<u64>(), nf.counters()[0], "every frame counted once");
        let mut counting = scan(&["count", "attack"]);
        assert_eq!(counting.process(&mut frame(L4Proto::Udp, b"attack")), Verdict::Pass);
        assert_eq!(counting.counters()[PASS_MATCHED], 1);
    }

    #[test]
    fn arguments() {
        let c = ScanConfig::parse(&["count", "GET /admin", "hex:00ff"]).unwrap();
        assert_eq!((c.on_match, c.patterns.clone()), (OnMatch::Count, vec![b"GET /admin".to_vec(), vec![0, 255]]));
        let bad_args: [&[&str]; 8] = [
            &["pass", "x"],
            &["drop"],
            &[],
            &["drop", "hex:abc"],
            &["drop", "hex:zz"],
            &["drop", ""],
            &["drop", "hex:aé0"],
            &["drop", "hex:+f"],
        ];
        for bad in bad_args {
            assert!(ScanConfig::parse(bad).is_err(), "{bad:?}");
        }
    }
}
