//! A rule's payload checks (`content` and its modifiers, `pcre`,
//! `dsize`) and how they match a payload, byte for byte as Snort and
//! Suricata match the packet payload:
//!
//! * an absolute content lies in `[offset, offset + depth)`;
//! * a relative one (`distance`, `within`) in `[C + distance,
//!   C + distance + within)`, C being where the last positive content or
//!   pcre match ended (0 before any); a window start below 0 is 0, its
//!   end stays;
//! * a negated content holds when no occurrence lies in its window (an
//!   empty window included) and never moves C;
//! * a content whose later checks fail is tried again at its next
//!   occurrence when one of them is relative, so the first occurrence
//!   does not hide a later one that fits (the engines' backtracking),
//!   within a budget of [`RECURSION_BUDGET`] steps per packet and rule,
//!   as Suricata's `inspection-recursion-limit`.

use memchr::memmem;
use regex::bytes::{Regex, RegexBuilder};

use super::lex::{quoted, unescape};

/// Most steps of the backtracking search for one rule and packet; past
/// it the rule does not match (Suricata's default limit).
pub const RECURSION_BUDGET: u32 = 3000;

/// Where a content may lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// `offset` (>= 0) and `depth` from it.
    Absolute { offset: u32, depth: Option<u32> },
    /// `distance` (may be negative) and `within` from C + distance.
    Relative { distance: i32, within: Option<u32> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    pub bytes: Vec<u8>,
    pub negated: bool,
    pub nocase: bool,
    pub window: Window,
    /// The match must end where the payload ends.
    pub endswith: bool,
    /// Named the rule's fast pattern.
    pub fast_pattern: bool,
}

#[derive(Debug, Clone)]
pub struct Pcre {
    pub regex: Regex,
    pub negated: bool,
    /// `R`: the subject starts at C.
    pub relative: bool,
    /// As written, for messages.
    pub text: String,
}

impl PartialEq for Pcre {
    fn eq(&self, other: &Pcre) -> bool {
        (self.negated, self.relative, &self.text) == (other.negated, other.relative, &other.text)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Content(Content),
    Pcre(Pcre),
}

impl Check {
    /// Placed by C: a retry of an earlier match can change its answer.
    fn depends_on_cursor(&self) -> bool {
        match self {
            Check::Content(c) => matches!(c.window, Window::Relative { .. }),
            Check::Pcre(p) => p.relative,
        }
    }
}

/// `dsize`: the payload length within `lo..=hi`, or outside it when negated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dsize {
    pub lo: u32,
    pub hi: u32,
    pub negated: bool,
}

impl Dsize {
    pub fn holds(&self, len: usize) -> bool {
        let inside = (self.lo as usize..=self.hi as usize).contains(&len);
        inside != self.negated
    }
}

/// `dsize:` values: `N`, `!N`, `<N`, `>N`, `<=N`, `>=N`, `A<>B` (both
/// bounds excluded, as Suricata and Snort 3 read it) and `A<=>B`
/// (included).
pub fn parse_dsize(v: &str) -> Result<Dsize, String> {
    let num = |s: &str| s.trim().parse::<u32>().map_err(|_| format!("dsize {v:?}: expected N, <N, >N, A<>B or !N"));
    let v = v.trim();
    let d = |lo, hi| Ok(Dsize { lo, hi, negated: false });
    if let Some((a, b)) = v.split_once("<=>") {
        let (a, b) = (num(a)?, num(b)?);
        return if a <= b { d(a, b) } else { Err(format!("dsize {v:?}: {a} is above {b}")) };
    }
    if let Some((a, b)) = v.split_once("<>") {
        let (a, b) = (num(a)?, num(b)?);
        return if b > a.saturating_add(1) {
            d(a + 1, b - 1)
        } else {
            Err(format!("dsize {v:?}: nothing lies strictly between {a} and {b}"))
        };
    }
    if let Some(n) = v.strip_prefix("<=") {
        return d(0, num(n)?);
    }
    if let Some(n) = v.strip_prefix(">=") {
        return d(num(n)?, u32::MAX);
    }
    if let Some(n) = v.strip_prefix('<') {
        let n = num(n)?;
        return if n == 0 { Err(format!("dsize {v:?}: no length is below 0")) } else { d(0, n - 1) };
    }
    if let Some(n) = v.strip_prefix('>') {
        return d(num(n)?.saturating_add(1), u32::MAX);
    }
    if let Some(n) = v.strip_prefix('!') {
        let n = num(n)?;
        return Ok(Dsize { lo: n, hi: n, negated: true });
    }
    let n = num(v.strip_prefix('=').unwrap_or(v))?;
    d(n, n)
}

/// A `content:` value: `[!]"text |hex| text"`, with Snort 3's `, nocase,
/// offset N, …` written after it applied as the modifiers would be.
pub fn parse_content(value: &str) -> Result<Content, String> {
    let (negated, text, suffix) = quoted(value)?;
    let bytes = content_bytes(text)?;
    let mut c = Content {
        bytes,
        negated,
        nocase: false,
        window: Window::Absolute { offset: 0, depth: None },
        endswith: false,
        fast_pattern: false,
    };
    let mut c_set = WindowSet::default();
    if !suffix.is_empty() {
        let rest = suffix.strip_prefix(',').ok_or_else(|| format!("{value:?}: after the string, expected , or ;"))?;
        for part in rest.split(',') {
            let part = part.trim();
            let (name, arg) = match part.split_once(char::is_whitespace) {
                Some((n, a)) => (n, Some(a.trim())),
                None => (part, None),
            };
            modify(&mut c, &mut c_set, name, arg)?;
        }
    }
    Ok(c)
}

/// Which window modifiers a content has had, so that absolute and
/// relative ones are not mixed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowSet {
    absolute: bool,
    relative: bool,
}

/// Applies one content modifier (`nocase`, `offset`, `depth`,
/// `distance`, `within`, `startswith`, `endswith`, `fast_pattern`,
/// `rawbytes`). None: `name` is not a content modifier.
pub fn modify(c: &mut Content, set: &mut WindowSet, name: &str, arg: Option<&str>) -> Result<(), String> {
    let int = |what: &str| -> Result<i64, String> {
        let a = arg.ok_or_else(|| format!("{what} needs a number: {what}:N"))?;
        a.trim().parse::<i64>().map_err(|_| format!("{what} {a:?}: expected a number"))
    };
    let len = c.bytes.len() as i64;
    match name {
        "nocase" => c.nocase = true,
        "rawbytes" => {}
        // Snort 3's fast_pattern_offset/_length pick part of the content
        // for the prefilter, and fast_pattern_only leaves the rest
        // unchecked: here the whole content is both pattern and check.
        "fast_pattern" | "fast_pattern_offset" | "fast_pattern_length" | "fast_pattern_only" => c.fast_pattern = true,
        "offset" | "depth" | "startswith" => {
            if set.relative {
                return Err(format!("{name} after distance or within: a content is either absolute or relative"));
            }
            set.absolute = true;
            let Window::Absolute { offset, depth } = &mut c.window else { unreachable!("absolute") };
            match name {
                "offset" => *offset = u32::try_from(int(name)?).map_err(|_| "offset: 0..=4294967295".to_string())?,
                "depth" => {
                    let d = int(name)?;
                    if d < len {
                        return Err(format!("depth {d} is shorter than the content ({len} bytes)"));
                    }
                    *depth = Some(d as u32);
                }
                _ => (*offset, *depth) = (0, Some(len as u32)),
            }
        }
        "distance" | "within" => {
            if set.absolute {
                return Err(format!("{name} after offset or depth: a content is either absolute or relative"));
            }
            if !set.relative {
                c.window = Window::Relative { distance: 0, within: None };
            }
            set.relative = true;
            let Window::Relative { distance, within } = &mut c.window else { unreachable!("relative") };
            let v = int(name)?;
            if name == "distance" {
                *distance = i32::try_from(v).map_err(|_| format!("distance {v}: out of range"))?;
            } else if v < len {
                return Err(format!("within {v} is shorter than the content ({len} bytes)"));
            } else {
                *within = Some(v as u32);
            }
        }
        "endswith" => c.endswith = true,
        other => return Err(format!("{other}: not a content modifier")),
    }
    Ok(())
}

/// Content text: characters, `|41 42|` hex runs, and the escapes.
fn content_bytes(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (i, part) in s.split('|').enumerate() {
        if i % 2 == 1 {
            let digits: String = part.chars().filter(|c| !c.is_whitespace()).collect();
            if digits.len() % 2 != 0 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("content {s:?}: |{part}| is not hex bytes"));
            }
            out.extend((0..digits.len()).step_by(2).map(|k| u8::from_str_radix(&digits[k..k + 2], 16).unwrap()));
        } else {
            out.extend_from_slice(unescape(part)?.as_bytes());
        }
    }
    if s.split('|').count() % 2 == 0 {
        return Err(format!("content {s:?}: a |hex| run is not closed"));
    }
    if out.is_empty() {
        return Err("an empty content".into());
    }
    Ok(out)
}

/// Why a `pcre` was not loaded: `unsupported` when it is PCRE this IPS
/// cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcreError {
    pub unsupported: bool,
    pub message: String,
}

/// `pcre:[!]"/regex/flags"`. The regex runs on the `regex` crate, in
/// time linear in the payload; what it cannot run (back-references,
/// look-around, possessive quantifiers) is refused as unsupported, as
/// are the flags that name HTTP buffers.
pub fn parse_pcre(value: &str) -> Result<Pcre, PcreError> {
    let bad = |message: String| PcreError { unsupported: false, message };
    let unsupported = |message: String| PcreError { unsupported: true, message };
    let (negated, text, suffix) = quoted(value).map_err(bad)?;
    if !suffix.is_empty() {
        return Err(bad(format!("{value:?}: nothing may follow the string")));
    }
    let body = text.strip_prefix('/').ok_or_else(|| bad(format!("{text:?}: expected \"/regex/flags\"")))?;
    let end = body.rfind('/').ok_or_else(|| bad(format!("{text:?}: the regex has no closing /")))?;
    let (re, flags) = (&body[..end], &body[end + 1..]);
    for f in flags.chars() {
        match f {
            // `$` at the very end only (E) is the regex crate's `$`
            // already; B (raw bytes) and O (no match limit) change nothing.
            'i' | 's' | 'm' | 'x' | 'G' | 'A' | 'R' | 'E' | 'B' | 'O' => {}
            'U' | 'I' | 'P' | 'H' | 'D' | 'M' | 'C' | 'K' | 'S' | 'Y' | 'Q' | 'V' | 'W' | 'Z' => {
                return Err(unsupported(format!("flag {f} names an HTTP buffer, which this IPS does not parse")))
            }
            other => return Err(bad(format!("flag {other:?}: expected i, s, m, x, A, E, G, R, B or O"))),
        }
    }
    let has = |f: char| flags.contains(f);
    let pattern = if has('A') { format!(r"\A(?:{re})") } else { re.to_string() };
    // Bytes, not UTF-8 text: `.` and classes match any byte, as PCRE does
    // on a packet; each regex's compiled size is bounded.
    let regex = RegexBuilder::new(&pattern)
        .unicode(false)
        .size_limit(1 << 20)
        .case_insensitive(has('i'))
        .dot_matches_new_line(has('s'))
        .multi_line(has('m'))
        .ignore_whitespace(has('x'))
        .swap_greed(has('G'))
        .build()
        .map_err(|e| unsupported(format!("{text:?}: {}", first_line(&e.to_string()))))?;
    Ok(Pcre { regex, negated, relative: has('R'), text: text.to_string() })
}

fn first_line(s: &str) -> String {
    s.lines().rfind(|l| !l.trim().is_empty()).unwrap_or(s).trim().to_string()
}

/// Whether `checks` hold on `payload`, in order, with backtracking.
pub fn matches(checks: &[Check], payload: &[u8]) -> bool {
    let mut budget = RECURSION_BUDGET;
    chain(checks, payload, 0, &mut budget)
}

fn chain(checks: &[Check], payload: &[u8], cursor: usize, budget: &mut u32) -> bool {
    let Some((first, rest)) = checks.split_first() else { return true };
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    // Only a later check placed by C can turn out differently after a
    // retry here.
    let retry = rest.iter().any(Check::depends_on_cursor);
    match first {
        Check::Content(c) => {
            let (start, end) = window(c, cursor, payload.len());
            let mut at = start;
            if c.negated {
                return find(c, payload, at, end).is_none() && chain(rest, payload, cursor, budget);
            }
            while let Some(pos) = find(c, payload, at, end) {
                if chain(rest, payload, pos + c.bytes.len(), budget) {
                    return true;
                }
                if !retry || *budget == 0 {
                    return false;
                }
                at = pos + 1;
            }
            false
        }
        Check::Pcre(p) => {
            let base = if p.relative { cursor.min(payload.len()) } else { 0 };
            let subject = &payload[base..];
            if p.negated {
                return !p.regex.is_match(subject) && chain(rest, payload, cursor, budget);
            }
            let mut at = 0;
            while let Some(m) = p.regex.find_at(subject, at) {
                if chain(rest, payload, base + m.end(), budget) {
                    return true;
                }
                if !retry || *budget == 0 {
                    return false;
                }
                at = m.start() + 1;
                if at > subject.len() {
                    return false;
                }
            }
            false
        }
    }
}

/// The content's window `[start, end)` in a payload of `len` bytes.
fn window(c: &Content, cursor: usize, len: usize) -> (usize, usize) {
    let (start, end) = match c.window {
        Window::Absolute { offset, depth } => {
            let start = i64::from(offset);
            (start, depth.map_or(len as i64, |d| start + i64::from(d)))
        }
        Window::Relative { distance, within } => {
            let start = cursor as i64 + i64::from(distance);
            (start, within.map_or(len as i64, |w| start + i64::from(w)))
        }
    };
    let clamp = |v: i64| v.clamp(0, len as i64) as usize;
    (clamp(start), clamp(end))
}

/// The first occurrence of the content starting at or after `from` and
/// ending by `end` (and at `end` exactly, for `endswith`).
fn find(c: &Content, payload: &[u8], from: usize, end: usize) -> Option<usize> {
    let n = c.bytes.len();
    if from > end || end - from < n {
        return None;
    }
    if c.endswith {
        let pos = payload.len().checked_sub(n)?;
        let fits = pos >= from && pos + n <= end && same(&payload[pos..pos + n], &c.bytes, c.nocase);
        return fits.then_some(pos);
    }
    let hay = &payload[from..end];
    let rel = if c.nocase {
        hay.windows(n).position(|w| w.eq_ignore_ascii_case(&c.bytes))
    } else {
        memmem::find(hay, &c.bytes)
    };
    rel.map(|r| from + r)
}

fn same(a: &[u8], b: &[u8], nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks of `options` (content, its modifiers, pcre), parsed as
    /// a rule's would be.
    fn checks(options: &str) -> Vec<Check> {
        let rule = format!("alert tcp any any -> any any ({options} sid:1;)");
        let mut r = crate::ips_rules::parse_rules(&rule).unwrap_or_else(|e| panic!("{options}: {e}"));
        r.remove(0).checks
    }

    /// One row per modifier: the checks, then payloads they match and
    /// payloads they do not, byte for byte.
    #[test]
    fn each_modifier_places_its_content() {
        type Row<'a> = (&'a str, &'a [&'a [u8]], &'a [&'a [u8]]);
        let table: &[Row] = &[
            ("content:\"abc\";", &[b"abc", b"xxabcxx"], &[b"ab", b"ABC", b"a bc"]),
            ("content:\"abc\"; nocase;", &[b"ABC", b"xAbCx"], &[b"AB C"]),
            ("content:\"|00 01|a\";", &[b"\x00\x01a"], &[b"\x00\x02a", b"|00 01|a"]),
            ("content:\"a\\;b\\\"c\";", &[b"a;b\"c"], &[b"a\\;b"]),
            // offset: the match starts at 2 or later.
            ("content:\"abc\"; offset:2;", &[b"xxabc", b"xxxabc"], &[b"xabc", b"abc"]),
            // depth: the match ends within the first 4 bytes (from offset).
            ("content:\"abc\"; depth:4;", &[b"abc", b"xabc"], &[b"xxabc"]),
            ("content:\"abc\"; offset:1; depth:3;", &[b"xabc"], &[b"abc", b"xxabc"]),
            ("content:\"abc\"; depth:4; offset:1;", &[b"xabcd", b"xxabc"], &[b"xxxabc"]),
            ("content:\"abc\"; startswith;", &[b"abcd"], &[b"xabc"]),
            ("content:\"abc\"; endswith;", &[b"xxabc", b"abcabc"], &[b"abcx"]),
            // distance: at least 2 bytes after the previous match's end.
            ("content:\"ab\"; content:\"cd\"; distance:2;", &[b"abxxcd", b"abxxxcd"], &[b"abxcd", b"cdab"]),
            // within: ends within 4 bytes of the previous match's end.
            ("content:\"ab\"; content:\"cd\"; within:4;", &[b"abcd", b"abxxcd"], &[b"abxxxcd", b"cdab"]),
            // within counts from C + distance, not from C.
            ("content:\"ab\"; content:\"cd\"; distance:1; within:3;", &[b"abxcd", b"abxxcd"], &[b"abcd", b"abxxxcd"]),
            // A negative distance reaches back into the previous match.
            ("content:\"abcd\"; content:\"bc\"; distance:-3; within:2;", &[b"abcd"], &[b"abdc"]),
            // The backtracking: the first "ab" does not fit, the second does.
            ("content:\"ab\"; content:\"cd\"; within:2;", &[b"abxx abcd"], &[b"abxx ab cd"]),
            // A negated content: absent from its window.
            ("content:!\"evil\";", &[b"good", b""], &[b"so evil"]),
            ("content:\"GET\"; content:!\"admin\"; distance:0; within:10;", &[b"GET /x/y/z/admin"], &[b"GET /admin"]),
            // A negated content does not move C.
            ("content:\"a\"; content:!\"x\"; distance:0; content:\"b\"; distance:0; within:1;", &[b"ab"], &[b"axb"]),
            (
                "content:\"union\"; nocase; content:\"select\"; nocase; distance:0; within:20;",
                &[b"UNION ALL SELECT", b"union/**/select"],
                &[b"select union", b"union 1234567890123456789 select"],
            ),
            ("pcre:\"/passw(or)?d=/i\";", &[b"PASSWORD=x", b"passwd=1"], &[b"pass=1"]),
            ("pcre:\"/^GET/\";", &[b"GET /"], &[b" GET /"]),
            ("content:\"id=\"; pcre:\"/^[0-9]+&/R\";", &[b"x id=123&"], &[b"id=x12&", b"12&id="]),
            ("pcre:!\"/admin/\";", &[b"user"], &[b"/admin"]),
            ("pcre:\"/a.b/s\";", &[b"a\nb"], &[b"ab"]),
            ("pcre:\"/\\xff\\x00/\";", &[b"\xff\x00"], &[b"\xff"]),
        ];
        for (options, hits, misses) in table {
            let c = checks(options);
            for p in *hits {
                assert!(matches(&c, p), "{options} should match {:?}", String::from_utf8_lossy(p));
            }
            for p in *misses {
                assert!(!matches(&c, p), "{options} should not match {:?}", String::from_utf8_lossy(p));
            }
        }
    }

    #[test]
    fn snort3_commas_read_as_the_modifiers() {
        assert_eq!(
            checks("content:\"abc\", nocase, offset 1, depth 4;"),
            checks("content:\"abc\"; nocase; offset:1; depth:4;")
        );
        assert_eq!(
            checks("content:\"a\"; content:\"b\", distance 1, within 2;"),
            checks("content:\"a\"; content:\"b\"; distance:1; within:2;")
        );
    }

    #[test]
    fn dsize_forms() {
        let table: &[(&str, &[usize], &[usize])] = &[
            ("10", &[10], &[9, 11]),
            ("!10", &[9, 11], &[10]),
            ("<10", &[0, 9], &[10]),
            (">10", &[11], &[10]),
            ("<=10", &[10], &[11]),
            (">=10", &[10], &[9]),
            ("10<>20", &[11, 19], &[10, 20]),
            ("10<=>20", &[10, 20], &[9, 21]),
        ];
        for (v, inside, outside) in table {
            let d = parse_dsize(v).unwrap();
            assert!(inside.iter().all(|&n| d.holds(n)), "{v}");
            assert!(outside.iter().all(|&n| !d.holds(n)), "{v}");
        }
        for bad in ["x", "10<>11", "<0", "20<=>10"] {
            assert!(parse_dsize(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_backtracking_is_bounded() {
        // Every "a" is a start for the first content, and the second
        // never fits: without a budget this is quadratic per level.
        let c = checks("content:\"a\"; content:\"a\"; distance:0; content:\"b\"; distance:0; within:1;");
        let payload = vec![b'a'; 5000];
        assert!(!matches(&c, &payload));
        let mut fits = payload.clone();
        fits.extend_from_slice(b"ab");
        assert!(!matches(&c, &fits), "past the budget a rule does not match, as in Suricata");
        assert!(matches(&c, b"aaab"));
    }
}
