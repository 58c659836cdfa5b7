//! Checks a protocols file before nDPI 4.2 loads it. nDPI reports only a
//! file it cannot open: it skips rules it cannot use, drops a last line
//! without a newline, keeps a CRLF's `\r` in the protocol name, rewrites
//! some characters of names to `_`, and reads an unparsable port as 0.
//! Each of those is an error here.
//!
//! Syntax (nDPI's `ndpi_handle_rule`), one rule a line, `#` comments:
//! `<match>,<match>,...@<Name>` with `<match>` one of `tcp:<port>`,
//! `tcp:<lo>-<hi>`, `udp:...`, `ip:<addr>[/<len>][:<port>]`,
//! `host:"<name>"`; or `ip_risk_mask:`, `host_risk_mask:`,
//! `trusted_issuer_dn:` settings.

use crate::NdpiError;
use std::path::Path;

/// Characters nDPI replaces with `_` in a protocol name.
const REWRITTEN: &[char] = &['/', '&', '^', ':', ';', '\'', '"', ' '];
const SETTINGS: &[&str] = &["ip_risk_mask:", "host_risk_mask:", "trusted_issuer_dn:"];

pub(crate) fn check(path: &Path, text: &str) -> Result<(), NdpiError> {
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let reason = if !raw.ends_with('\n') {
            Some("last line has no newline (nDPI 4.2 ignores it)")
        } else if line.ends_with('\r') {
            Some("CRLF line ending (nDPI would keep the \\r)")
        } else {
            check_rule(line).err()
        };
        if let Some(reason) = reason {
            return Err(NdpiError::ProtocolsRule {
                path: path.to_path_buf(),
                line: index + 1,
                text: line.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

fn check_rule(rule: &str) -> Result<(), &'static str> {
    let Some((matches, name)) = rule.rsplit_once('@') else {
        return if SETTINGS.iter().any(|s| rule.starts_with(s)) {
            Ok(())
        } else {
            Err("expected <match>,...@<protocol>")
        };
    };
    if name.is_empty() {
        return Err("no protocol name after @");
    }
    if name.contains(REWRITTEN) {
        return Err("protocol name has a character nDPI rewrites to '_' (/&^:;'\" or space)");
    }
    for m in matches.split(',') {
        if let Some(ports) = m.strip_prefix("tcp:").or_else(|| m.strip_prefix("udp:")) {
            check_ports(ports)?;
        } else if let Some(value) = m.strip_prefix("ip:").or_else(|| m.strip_prefix("host:")) {
            if value.trim_matches('"').is_empty() {
                return Err("empty ip: or host: value");
            }
        } else {
            return Err("match is not tcp:, udp:, ip: or host:");
        }
    }
    Ok(())
}

fn check_ports(ports: &str) -> Result<(), &'static str> {
    let port = |s: &str| s.parse::<u16>().map_err(|_| "port is not a number 0-65535");
    match ports.split_once('-') {
        Some((lo, hi)) if port(lo)? <= port(hi)? => Ok(()),
        Some(_) => Err("port range is reversed"),
        None => port(ports).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_error(text: &str) -> Option<(usize, &'static str)> {
        match check(Path::new("protos.txt"), text) {
            Ok(()) => None,
            Err(NdpiError::ProtocolsRule { line, reason, .. }) => Some((line, reason)),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn accepts_the_debian_example_syntax() {
        let text = "# comment\n\ntcp:81,tcp:8181@HTTP\nudp:5061-5062@SIP\n\
                    host:\"api-global.netflix.com\"@Netflix\nip:213.75.170.11/32:443@CustomProtocol\n\
                    host_risk_mask:\".home\"=0\n";
        assert_eq!(first_error(text), None);
    }

    #[test]
    fn names_the_line_of_each_rule_ndpi_would_mishandle() {
        let bad = [
            "tcp:5201",
            "@Iperf",
            "tcp:5201@",
            "tcp:5201@My Proto",
            "tcp:99999@Iperf",
            "tcp:6000-5000@X",
            "sctp:5201@Iperf",
            "tcp:5201@Iperf\r",
        ];
        for rule in bad {
            let text = format!("# header\n{rule}\n");
            assert_eq!(first_error(&text).map(|e| e.0), Some(2), "{rule:?}");
        }
        assert_eq!(first_error("tcp:5201@Iperf"), Some((1, "last line has no newline (nDPI 4.2 ignores it)")));
    }
}
