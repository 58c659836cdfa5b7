//! The IPS's rule language: a small subset of Snort's, one rule a line.
//!
//! ```text
//! # comment
//! alert tcp any any -> any 80 (msg:"admin page"; content:"GET /admin"; sid:1001;)
//! drop udp any any -> any any (msg:"bad magic"; content:"|de ad be ef|"; content:"x"; sid:1002;)
//! ```
//!
//! * action `alert` (count and forward) or `drop`;
//! * protocol `tcp` or `udp`;
//! * source and destination address `any`; source port `any`;
//!   destination port `any` or a number;
//! * options: `msg:"…"` (required), `content:"…"` (one or more; all must
//!   occur in the payload, anywhere; `|hex bytes|` inside the quotes as in
//!   Snort), `sid:N` (required, unique).
//!
//! Anything else is an error naming the line.

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alert,
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub proto: Proto,
    /// None: any port.
    pub dst_port: Option<u16>,
    pub msg: String,
    pub sid: u32,
    /// Byte strings that must all occur in the payload.
    pub contents: Vec<Vec<u8>>,
}

/// Most `content` options a rule may have (the matcher tracks them in a
/// 64-bit mask).
pub const MAX_CONTENTS: usize = 64;

/// A rule file's error: its 1-based line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct RuleError {
    pub line: usize,
    pub message: String,
}

/// Parses a rule file's text.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, RuleError> {
    let mut rules: Vec<Rule> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| RuleError { line: i + 1, message };
        let rule = parse_rule(line).map_err(err)?;
        if let Some(other) = rules.iter().find(|r| r.sid == rule.sid) {
            return Err(err(format!("sid {} is already rule {:?}'s", rule.sid, other.msg)));
        }
        rules.push(rule);
    }
    Ok(rules)
}

fn parse_rule(line: &str) -> Result<Rule, String> {
    let open = line.find('(').ok_or("no options: expected (msg:\"…\"; content:\"…\"; sid:N;)")?;
    let head: Vec<&str> = line[..open].split_whitespace().collect();
    let [action, proto, src, sport, arrow, dst, dport] = head[..] else {
        return Err(format!("expected ACTION PROTO any any -> any PORT, got {:?}", line[..open].trim()));
    };
    let action = match action {
        "alert" => Action::Alert,
        "drop" => Action::Drop,
        other => return Err(format!("action {other:?}: expected alert or drop")),
    };
    let proto = match proto {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        other => return Err(format!("protocol {other:?}: expected tcp or udp")),
    };
    for (what, v) in [("source address", src), ("source port", sport), ("destination address", dst)] {
        if v != "any" {
            return Err(format!("{what} {v:?}: only `any` is supported"));
        }
    }
    if arrow != "->" {
        return Err(format!("{arrow:?}: expected ->"));
    }
    let dst_port = match dport {
        "any" => None,
        p => Some(p.parse::<u16>().map_err(|_| format!("destination port {p:?}: expected any or 0..=65535"))?),
    };
    let body = line[open + 1..].trim_end();
    let body = body.strip_suffix(')').ok_or("options do not end with )")?;
    let (mut msg, mut sid, mut contents) = (None, None, Vec::new());
    for (key, value) in options(body)? {
        match key.as_str() {
            "msg" => msg = Some(quoted(&value)?),
            "content" => contents.push(content_bytes(&quoted(&value)?)?),
            "sid" => sid = Some(value.parse::<u32>().map_err(|_| format!("sid {value:?}: expected a number"))?),
            other => return Err(format!("option {other:?}: expected msg, content or sid")),
        }
    }
    let msg = msg.ok_or("no msg option")?;
    let sid = sid.ok_or("no sid option")?;
    if contents.is_empty() {
        return Err("no content option: a rule must match some payload".into());
    }
    if contents.len() > MAX_CONTENTS {
        return Err(format!("{} content options, at most {MAX_CONTENTS}", contents.len()));
    }
    Ok(Rule { action, proto, dst_port, msg, sid, contents })
}

/// `key:value;` pairs; a `;` inside quotes belongs to the value.
fn options(body: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let (mut cur, mut in_quotes) = (String::new(), false);
    for ch in body.chars() {
        match ch {
            '"' => {
                in_quotes = !in_quotes;
                cur.push(ch);
            }
            ';' if !in_quotes => {
                let opt = std::mem::take(&mut cur);
                let opt = opt.trim();
                let (k, v) = opt.split_once(':').ok_or_else(|| format!("option {opt:?}: expected key:value"))?;
                out.push((k.trim().to_string(), v.trim().to_string()));
            }
            _ => cur.push(ch),
        }
    }
    if in_quotes {
        return Err("unterminated string".into());
    }
    if !cur.trim().is_empty() {
        return Err(format!("option {:?} does not end with ;", cur.trim()));
    }
    Ok(out)
}

fn quoted(v: &str) -> Result<String, String> {
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .map(str::to_string)
        .ok_or_else(|| format!("{v:?}: expected a quoted string"))
}

/// Snort content: text with `|41 42|` hex runs.
fn content_bytes(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut parts = s.split('|');
    let mut in_hex = false;
    for part in parts.by_ref() {
        if in_hex {
            for h in part.split_whitespace() {
                let b = u8::from_str_radix(h, 16).ok().filter(|_| h.len() == 2);
                out.push(b.ok_or_else(|| format!("content {s:?}: {h:?} is not a hex byte"))?);
            }
        } else {
            out.extend_from_slice(part.as_bytes());
        }
        in_hex = !in_hex;
    }
    // An odd number of parts means every | was closed.
    if !in_hex {
        return Err(format!("content {s:?}: unclosed |hex|"));
    }
    if out.is_empty() {
        return Err("empty content".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_file_parses() {
        let text = "# rules\n\nalert tcp any any -> any 80 (msg:\"admin; page\"; content:\"GET /admin\"; sid:1;)\n\
                    drop udp any any -> any any (msg:\"magic\"; content:\"|de ad|x\"; content:\"y\"; sid:2;)\n";
        let r = parse_rules(text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].action, r[0].proto, r[0].dst_port), (Action::Alert, Proto::Tcp, Some(80)));
        assert_eq!(r[0].msg, "admin; page");
        assert_eq!(r[1].contents, vec![vec![0xde, 0xad, b'x'], b"y".to_vec()]);
        assert_eq!((r[1].dst_port, r[1].sid), (None, 2));
    }

    /// Each mistake, with the line it is reported on.
    #[test]
    fn errors_name_the_line() {
        let good = "alert tcp any any -> any 80 (msg:\"m\"; content:\"c\"; sid:1;)";
        let table = [
            (good.replace("alert", "log"), "action \"log\": expected alert or drop"),
            (good.replace("tcp", "icmp"), "protocol \"icmp\""),
            (good.replace("any 80", "10.0.0.1 80"), "destination address \"10.0.0.1\": only `any`"),
            (good.replace(" 80", " http"), "destination port \"http\""),
            (good.replace("->", "<>"), "\"<>\": expected ->"),
            (good.replace("sid:1;", ""), "no sid option"),
            (good.replace("content:\"c\"; ", ""), "no content option"),
            (good.replace("\"c\"", "\"c"), "unterminated string"),
            (good.replace("\"c\"", "\"|zz|\""), "\"zz\" is not a hex byte"),
            (good.replace("\"c\"", "\"|41\""), "unclosed |hex|"),
            (good.replace("sid:1;)", "sid:1)"), "does not end with ;"),
            (good.replace("msg:", "rev:1; msg:"), "option \"rev\""),
            (good.replace("(", ""), "no options"),
        ];
        for (rule, want) in table {
            let e = parse_rules(&format!("# one\n{rule}\n")).unwrap_err();
            assert_eq!(e.line, 2, "{rule}");
            assert!(e.message.contains(want), "{rule}: {e} lacks {want:?}");
        }
        let dup = format!("{good}\n{}", good.replace("\"m\"", "\"n\""));
        assert_eq!(parse_rules(&dup).unwrap_err().to_string(), "line 2: sid 1 is already rule \"m\"'s");
    }
}
