//! The text of a rule: its header tokens and its options.
//!
//! An option ends at a `;` that is not escaped (`\;`, Suricata's rule),
//! or, where that splits a rule into pieces that are no options, at one
//! that is not inside a quoted string either (Snort 3's lexer); so rules
//! written for either split as their own engine splits them. Its name is what comes before the first
//! `:`, case folded; a bare name (`nocase`) has no value.

/// One `name[:value];` option, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOption<'a> {
    pub name: String,
    pub value: Option<&'a str>,
}

/// A rule split into its header words and the body of its parentheses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRule<'a> {
    pub header: Vec<&'a str>,
    pub options: Vec<RawOption<'a>>,
}

/// Splits a rule; the header's lists (`[a, b]`) stay one word.
pub fn split_rule(line: &str) -> Result<RawRule<'_>, String> {
    let open = line.find('(').ok_or("no options: a rule ends with (msg:\"…\"; sid:N;)")?;
    let body = line[open + 1..].trim_end();
    let body = body.strip_suffix(')').ok_or("the options do not end with )")?;
    Ok(RawRule { header: header_words(&line[..open])?, options: split_options(body)? })
}

/// Blank-separated words, where a `[…]` list may hold blanks.
fn header_words(head: &str) -> Result<Vec<&str>, String> {
    let (mut words, mut depth, mut start) = (Vec::new(), 0usize, None);
    for (i, ch) in head.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or("an unbalanced ] in the header")?,
            c if c.is_whitespace() && depth == 0 => {
                if let Some(s) = start.take() {
                    words.push(&head[s..i]);
                }
                continue;
            }
            _ => {}
        }
        start.get_or_insert(i);
    }
    if depth != 0 {
        return Err("an unbalanced [ in the header".into());
    }
    if let Some(s) = start {
        words.push(&head[s..]);
    }
    Ok(words)
}

/// The options, split as Suricata does (only `\;` stays in a value: a
/// Suricata rule may hold a bare `"` inside a pcre), or, where that
/// leaves a piece that is no option, as Snort 3 does (a `;` inside
/// quotes stays too). Suricata's first: two bare quotes in two options
/// must not pair up across the `;` between them.
fn split_options(body: &str) -> Result<Vec<RawOption<'_>>, String> {
    split_options_at(body, false).or_else(|_| split_options_at(body, true))
}

fn split_options_at(body: &str, quotes: bool) -> Result<Vec<RawOption<'_>>, String> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, ch) in body.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' if quotes => quoted = !quoted,
            ';' if !quoted => {
                out.push(option(&body[start..i])?);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return Err("an unterminated string".into());
    }
    let rest = body[start..].trim();
    if !rest.is_empty() {
        return Err(format!("option {rest:?} does not end with ;"));
    }
    Ok(out)
}

fn option(text: &str) -> Result<RawOption<'_>, String> {
    let text = text.trim();
    let (name, value) = match text.split_once(':') {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (text, None),
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(format!("option {text:?}: expected name or name:value"));
    }
    Ok(RawOption { name: name.to_ascii_lowercase(), value })
}

/// A quoted value: its text between the quotes, after an optional `!`
/// (returned as true), and what follows the closing quote (Snort 3's
/// `, nocase, offset 4` suffixes).
pub fn quoted(value: &str) -> Result<(bool, &str, &str), String> {
    let (negated, rest) = match value.strip_prefix('!') {
        Some(r) => (true, r.trim_start()),
        None => (false, value),
    };
    let inner = rest.strip_prefix('"').ok_or_else(|| format!("{value:?}: expected a quoted string"))?;
    let mut escaped = false;
    for (i, ch) in inner.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => {
                let after = inner[i + 1..].trim();
                // Suricata strips the outer quotes only: a bare quote
                // inside stays, when what follows it is no suffix.
                return match inner.trim_end().strip_suffix('"') {
                    Some(whole) if !after.is_empty() && !after.starts_with(',') => Ok((negated, whole, "")),
                    _ => Ok((negated, &inner[..i], after)),
                };
            }
            _ => {}
        }
    }
    Err(format!("{value:?}: the string has no closing quote"))
}

/// Removes the rule language's escapes (`\"`, `\;`, `\:`, `\\`).
pub fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('"' | ';' | ':' | '\\')) => out.push(e),
            Some(e) => {
                return Err(format!("\\{e}: only \\\" \\; \\: and \\\\ are escapes (write other bytes as |hex|)"))
            }
            None => return Err("a \\ ends the string".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_splits_into_header_and_options() {
        let r = split_rule(
            r#"alert tcp [1.1.1.1, 2.2.2.2] any -> $HOME_NET 80 (msg:"a; \"b\""; content:"x\;y"; nocase; sid:1;)"#,
        )
        .unwrap();
        assert_eq!(r.header, ["alert", "tcp", "[1.1.1.1, 2.2.2.2]", "any", "->", "$HOME_NET", "80"]);
        let names: Vec<_> = r.options.iter().map(|o| (o.name.as_str(), o.value)).collect();
        assert_eq!(
            names,
            [("msg", Some(r#""a; \"b\"""#)), ("content", Some(r#""x\;y""#)), ("nocase", None), ("sid", Some("1"))]
        );
    }

    #[test]
    fn quoted_values_and_escapes() {
        assert_eq!(quoted(r#"!"ab\"c", nocase"#).unwrap(), (true, r#"ab\"c"#, ", nocase"));
        assert_eq!(quoted(r#""x""#).unwrap(), (false, "x", ""));
        assert!(quoted("x").unwrap_err().contains("expected a quoted string"));
        assert!(quoted(r#""x"#).unwrap_err().contains("no closing quote"));
        assert_eq!(unescape(r#"a\"b\;c\:d\\e"#).unwrap(), r#"a"b;c:d\e"#);
        assert!(unescape(r"\n").unwrap_err().contains("only"));
    }

    #[test]
    fn malformed_text_is_refused() {
        assert!(split_rule("alert tcp any any -> any any").unwrap_err().contains("no options"));
        assert!(split_rule("alert tcp any any -> any any (sid:1;").unwrap_err().contains("do not end with )"));
        assert!(split_rule("alert tcp any any -> any any (sid:1)").unwrap_err().contains("does not end with ;"));
        // A string left open splits as Suricata splits: its option's
        // value is then refused by whoever reads it.
        let open = split_rule(r#"alert tcp any any -> any any (msg:"x; sid:1;)"#).unwrap();
        assert_eq!(open.options[0].value, Some("\"x"));
        assert!(split_rule(r#"alert tcp any any -> any any (msg:"x\;)"#).unwrap_err().contains("unterminated"));
        assert!(split_rule("alert tcp [1.1.1.1 any -> any any (sid:1;)").unwrap_err().contains("unbalanced ["));
        assert!(split_rule("alert tcp any any -> any any (a b:1;)").unwrap_err().contains("expected name"));
    }

    /// Each engine's rules split as that engine splits them: Snort 3's
    /// quoted `;`, Suricata's bare quotes, one in each of two options.
    #[test]
    fn rules_split_as_their_engine_splits_them() {
        let names = |r: &str| -> Vec<(String, Option<String>)> {
            let raw = split_rule(r).unwrap();
            raw.options.into_iter().map(|o| (o.name, o.value.map(str::to_string))).collect()
        };
        let snort = names(r#"alert tcp any any -> any any (msg:"a;b"; sid:1;)"#);
        assert_eq!(snort, [("msg".into(), Some("\"a;b\"".into())), ("sid".into(), Some("1".into()))]);
        let suricata = names(r#"alert tcp any any -> any any (pcre:"/a"b/"; pcre:"/c"d/"; sid:1;)"#);
        let values: Vec<_> = suricata.iter().map(|(_, v)| v.clone().unwrap()).collect();
        assert_eq!(values, [r#""/a"b/""#, r#""/c"d/""#, "1"]);
    }
}
