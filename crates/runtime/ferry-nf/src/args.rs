//! NF arguments given as `key=value`: the one parser and reader every NF
//! kind that takes them uses. The catalog checks a kind's declared
//! arguments with it (`ferry_catalog::Values`); the parallel NFs read
//! theirs with it.

/// Errors in an NF's name or arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("argument {arg:?} is not key=value")]
    NotKeyValue { arg: String },
    #[error("{key}={value}: {reason}")]
    BadValue { key: String, value: String, reason: &'static str },
    #[error("unknown argument {key}= (this NF takes: {known})")]
    Unknown { key: String, known: String },
    #[error("missing argument {key}= ({expected})")]
    Missing { key: String, expected: &'static str },
    /// An output port (NF port `p` is out-link `p` in live mode) the NF
    /// does not have.
    #[error("{key}: port {port} is not an out-link of the NF (it has {out_links}: 0..{out_links})")]
    NoOutLink { key: String, port: u16, out_links: u16 },
    /// The NF could not be built (e.g. a data structure refused its size).
    #[error("{nf}: {message}")]
    Build { nf: &'static str, message: String },
}

impl ArgError {
    /// The argument at fault, if one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ArgError::BadValue { key, .. }
            | ArgError::Unknown { key, .. }
            | ArgError::Missing { key, .. }
            | ArgError::NoOutLink { key, .. } => Some(key),
            ArgError::NotKeyValue { .. } | ArgError::Build { .. } => None,
        }
    }
}

/// `key=value` arguments, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NfArgs {
    pairs: Vec<(String, String)>,
}

impl NfArgs {
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<NfArgs, ArgError> {
        let pairs = args
            .iter()
            .map(|a| {
                let a = a.as_ref();
                match crate::model::split_key_value(a) {
                    Some((k, v)) => Ok((k.to_string(), v.to_string())),
                    None => Err(ArgError::NotKeyValue { arg: a.to_string() }),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(NfArgs { pairs })
    }

    /// Arguments already split (and checked) elsewhere, in order.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> NfArgs {
        NfArgs { pairs }
    }

    /// Every `(key, value)`, in the order given.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The last value given for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `key` as a number, `default` when absent.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, ArgError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| ArgError::BadValue {
                key: key.to_string(),
                value: v.to_string(),
                reason: "not a non-negative integer",
            }),
        }
    }

    /// The value of `key`; [`ArgError::Missing`] (with `expected`, what a
    /// value looks like) when absent.
    pub fn required(&self, key: &str, expected: &'static str) -> Result<&str, ArgError> {
        self.get(key).ok_or_else(|| ArgError::Missing { key: key.to_string(), expected })
    }

    /// `key` read by `parse`, `default` when absent; a value `parse`
    /// refuses is [`ArgError::BadValue`] with `expected` as the reason.
    pub fn parse_or<T>(
        &self,
        key: &str,
        default: T,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, ArgError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse(v).ok_or_else(|| bad_value(key, v, expected)),
        }
    }

    /// [`NfArgs::parse_or`] for an argument without a default.
    pub fn parse_required<T>(
        &self,
        key: &str,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, ArgError> {
        let v = self.required(key, expected)?;
        parse(v).ok_or_else(|| bad_value(key, v, expected))
    }

    /// A duration given as a whole number of `unit_ns` units (e.g.
    /// `idle_ms=500` with `unit_ns` 1 000 000), in nanoseconds;
    /// `default_ns` when absent.
    pub fn duration_ns_or(&self, key: &str, unit_ns: u64, default_ns: u64) -> Result<u64, ArgError> {
        match self.get(key) {
            None => Ok(default_ns),
            Some(v) => {
                let n: u64 = v.parse().map_err(|_| bad_value(key, v, "not a non-negative integer"))?;
                n.checked_mul(unit_ns).ok_or_else(|| bad_value(key, v, "too large"))
            }
        }
    }

    /// Fails on the first key not in `known`.
    pub fn only(&self, known: &[&str]) -> Result<(), ArgError> {
        match self.pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some((k, _)) => Err(ArgError::Unknown { key: k.clone(), known: known.join(", ") }),
        }
    }

    /// Moves the pairs whose key is in `keys` into a new `NfArgs` (a host
    /// takes its own keys before the rest goes to the NF).
    pub fn take(&mut self, keys: &[&str]) -> NfArgs {
        let (taken, rest) = std::mem::take(&mut self.pairs).into_iter().partition(|(k, _)| keys.contains(&k.as_str()));
        self.pairs = rest;
        NfArgs { pairs: taken }
    }
}

/// [`ArgError::BadValue`] for `key=value`.
pub fn bad_value(key: &str, value: &str, reason: &'static str) -> ArgError {
    ArgError::BadValue { key: key.to_string(), value: value.to_string(), reason }
}
