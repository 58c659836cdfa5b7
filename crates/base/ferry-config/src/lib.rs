//! YAML parsing that reports `file:line:column: field.path: message`, for
//! every Ferry config file (testbeds, chains).
//!
//! Two stages: serde deserialization (unknown fields, types, values; the
//! field path comes from serde_path_to_error, the location from serde_yaml),
//! then cross-reference checks that only know a field path; [`locate`] walks
//! the YAML a second time to find that path's line.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A config error with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub origin: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// A path like `links[0].a.mac`; empty for the document root.
    pub field: String,
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, ":{l}:{c}")?,
            (Some(l), None) => write!(f, ":{l}")?,
            _ => {}
        }
        write!(f, ": ")?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for YamlError {}

/// Reads a config file; the error names it. Returns (text, origin).
pub fn read_file(path: &std::path::Path) -> Result<(String, String), YamlError> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((text, origin)),
        Err(e) => Err(YamlError {
            origin,
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read: {e}"),
        }),
    }
}

/// Where byte `index` of `text` is, as an editor shows it: its line
/// counted by LF, its column in characters (both from 1). The YAML
/// parser counts lines its own way (a lone CR, NEL, LS and PS end lines
/// too), so its line numbers are not used: they could name a line the
/// operator does not see, or one past the end of the file.
pub fn editor_position(text: &str, index: usize) -> (usize, usize) {
    let before = text.get(..index).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// Deserializes `text` and runs `validate`; either failure becomes a
/// [`YamlError`] naming `origin`, the line and the field.
pub fn parse_located<T: DeserializeOwned>(
    text: &str,
    origin: &str,
    validate: impl FnOnce(&T) -> Result<(), (Vec<Seg>, String)>,
) -> Result<T, YamlError> {
    // A byte-order mark is no content (YAML would read a second document
    // into it), and no editor shows it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let de = serde_yaml::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = match e.path().to_string() {
            p if p == "." => String::new(),
            p => p,
        };
        let inner = e.into_inner();
        let loc = inner.location();
        let mut message = inner.to_string();
        // serde_yaml appends its own " at line L column C" and prefixes its
        // own path; we print both ourselves in a fixed format.
        if let Some(l) = &loc {
            let suffix = format!(" at line {} column {}", l.line(), l.column());
            if let Some(m) = message.strip_suffix(&suffix) {
                message = m.to_string();
            }
        }
        // serde_yaml's path is the same as ours or a prefix of it.
        if let Some((prefix, rest)) = message.split_once(": ") {
            if !prefix.is_empty() && !prefix.contains(' ') && field.starts_with(prefix) {
                message = rest.to_string();
            }
        }
        let at = loc.as_ref().map(|l| editor_position(text, l.index()));
        YamlError { origin: origin.to_string(), line: at.map(|a| a.0), column: at.map(|a| a.1), field, message }
    })?;
    if let Err((path, message)) = validate(&value) {
        let loc = locate(text, &path);
        return Err(YamlError {
            origin: origin.to_string(),
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            field: path_string(&path),
            message,
        });
    }
    Ok(value)
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(&'static str),
    Index(usize),
}

pub fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Finds the (line, column) of the value at `path` by deserializing `text`
/// again with a visitor that follows the path and fails on arrival: serde_yaml
/// stamps that failure with the position of the value being visited.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let de = serde_yaml::Deserializer::from_str(text);
    match Locate(path).deserialize(de) {
        Ok(()) => None,
        Err(e) => e.location().map(|l| editor_position(text, l.index())),
    }
}

struct Locate<'a>(&'a [Seg]);

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Locate<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom("found"))
        } else {
            Ok(())
        }
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(de::Error::custom("found"));
        };
        while let Some(key) = map.next_key::<String>()? {
            match first {
                Seg::Key(k) if *k == key => map.next_value_seed(Locate(rest))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(de::Error::custom("found"));
        };
        let mut i = 0;
        loop {
            let found = match first {
                Seg::Index(want) if *want == i => seq.next_element_seed(Locate(rest))?,
                _ => seq.next_element::<IgnoredAny>()?.map(|_| ()),
            };
            if found.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[allow(dead_code)]
        a: u32,
    }

    fn parse(text: &str) -> Result<Doc, YamlError> {
        parse_located(text, "f.yaml", |_: &Doc| Ok(()))
    }

    /// Errors name the line and column an editor shows, whatever line
    /// breaks the YAML parser counts besides LF (a fuzzer's finding: its
    /// own line numbers ran past the end of the file).
    #[test]
    fn errors_name_the_line_an_editor_shows() {
        assert!(parse("a: 1\r\n").is_ok());
        for (text, line, column) in [
            ("a: 1\rb: 2\n", 1, 6),
            ("# x\na: 1 # \u{85}b: 2\n", 2, 9),
            ("\n\na: 1\u{2028}c: 3", 3, 6),
            ("# é\r\n\r\na: x\r\n", 3, 4),
            ("\u{feff}a: 1\nb: 2\n", 2, 1),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!((e.line, e.column), (Some(line), Some(column)), "{text:?}: {e}");
        }
    }
}
