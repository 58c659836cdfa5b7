//! The NF model's vocabulary, shared by every kind of NF (per-packet,
//! parallel, hybrid) so that each declares its own elements once, where it
//! is implemented, and the catalog (`ferry-catalog`) gathers them.
//!
//! Offloadability follows P4SFC (§III-D, Tables I and III), with Ferry's
//! fast path being XDP rather than a P4 switch: an element that reads the
//! payload, or needs more than an XDP program can do, is not offloadable;
//! one that creates table entries while it processes packets (a NAT's or a
//! load balancer's rewriter) is partially offloadable (XDP can apply
//! entries but not create them); all others are fully offloadable.

/// Where an element can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Offload {
    /// In XDP entirely.
    Full,
    /// Its stateless part in XDP; a miss goes to its stateful part, in
    /// user space, which installs the entry.
    Partial,
    /// Only in user space.
    No,
}

impl Offload {
    pub fn as_str(self) -> &'static str {
        match self {
            Offload::Full => "fully offloadable",
            Offload::Partial => "partially offloadable",
            Offload::No => "not offloadable",
        }
    }
}

/// One packet-processing element of an NF (Click's sense).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element {
    pub name: &'static str,
    pub offload: Offload,
}

/// How an NF type runs when it is not offloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecModel {
    /// A [`crate::PacketNf`]: one frame at a time, batched by its host.
    PerPacket,
    /// Its own loop on NF threads (the SDK's `NfThread`).
    Threaded,
    /// Sequential handlers on the parallel runtime (NFOS).
    Parallel,
    /// An XDP fast path with a user-space slow path (eVNF).
    Hybrid,
    /// Any program using the SDK (`exec:` in a chain file).
    Exec,
}

impl ExecModel {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecModel::PerPacket => "per-packet",
            ExecModel::Threaded => "threaded",
            ExecModel::Parallel => "parallel",
            ExecModel::Hybrid => "hybrid",
            ExecModel::Exec => "exec",
        }
    }
}

/// An NF's offloadability from its elements (P4SFC §III-D3): fully
/// offloadable if every element is; partially if exactly one is partially
/// offloadable and the rest fully; otherwise not. An NF without elements
/// declares nothing it could offload.
pub fn nf_offload(elements: &[Element]) -> Offload {
    let partial = elements.iter().filter(|e| e.offload == Offload::Partial).count();
    if elements.is_empty() || elements.iter().any(|e| e.offload == Offload::No) || partial > 1 {
        Offload::No
    } else if partial == 1 {
        Offload::Partial
    } else {
        Offload::Full
    }
}

/// What an argument's value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    /// An integer in `min..=max`.
    U64 { min: u64, max: u64 },
    /// `0` or `1`.
    Flag,
    /// Anything; the NF checks it when it starts.
    Text,
}

/// The one syntax of an NF's `key=value` argument: a non-empty key before
/// the first `=`, the rest its value (which may hold `=` and be empty).
/// The catalog and the parallel NFs both read arguments through it.
pub fn split_key_value(arg: &str) -> Option<(&str, &str)> {
    arg.split_once('=').filter(|(key, _)| !key.is_empty())
}

/// One `key=value` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgSpec {
    pub key: &'static str,
    pub ty: ArgType,
    /// Its value when absent; None means required.
    pub default: Option<&'static str>,
    pub help: &'static str,
}

impl ArgSpec {
    /// Why `value` is not of this argument's type, if it is not.
    pub fn check(&self, value: &str) -> Result<(), String> {
        match self.ty {
            ArgType::U64 { min, max } => match value.parse::<u64>() {
                Ok(v) if (min..=max).contains(&v) => Ok(()),
                _ => Err(format!("{}={value}: expected an integer in {min}..={max}", self.key)),
            },
            ArgType::Flag if value == "0" || value == "1" => Ok(()),
            ArgType::Flag => Err(format!("{}={value}: expected 0 or 1", self.key)),
            ArgType::Text => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_value_argument_splits_at_its_first_equals_sign() {
        assert_eq!(split_key_value("rules=a=b"), Some(("rules", "a=b")));
        assert_eq!(split_key_value("mica="), Some(("mica", "")));
        assert_eq!(split_key_value("=5"), None);
        assert_eq!(split_key_value("workers"), None);
    }

    const fn el(offload: Offload) -> Element {
        Element { name: "e", offload }
    }

    /// P4SFC §III-D3's rule, row by row.
    #[test]
    fn nf_offloadability_from_elements() {
        use Offload::*;
        let table: [(&[Element], Offload); 7] = [
            (&[el(Full)], Full),
            (&[el(Full), el(Full)], Full),
            (&[el(Full), el(Partial)], Partial),
            (&[el(Partial)], Partial),
            (&[el(Partial), el(Partial)], No),
            (&[el(Full), el(No)], No),
            (&[], No),
        ];
        for (elements, want) in table {
            assert_eq!(nf_offload(elements), want, "{elements:?}");
        }
    }

    #[test]
    fn argument_types() {
        let n = ArgSpec { key: "rate", ty: ArgType::U64 { min: 1, max: 10 }, default: None, help: "" };
        assert!(n.check("10").is_ok());
        assert_eq!(n.check("11").unwrap_err(), "rate=11: expected an integer in 1..=10");
        assert!(n.check("x").is_err() && n.check("").is_err() && n.check("-1").is_err());
        let f = ArgSpec { key: "by_port", ty: ArgType::Flag, default: Some("0"), help: "" };
        assert!(f.check("1").is_ok() && f.check("yes").is_err());
    }
}
