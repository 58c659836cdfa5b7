//! Small validated value types used by the testbed spec.
//!
//! Every type checks its invariants when it is constructed (`FromStr` /
//! `TryFrom`), and serde goes through those constructors
//! (`#[serde(try_from = ...)]`). A spec that deserialized successfully
//! therefore never holds a malformed MAC, CIDR or interface name, and the
//! error for a bad value carries the YAML location of that exact value.

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::Serialize;
use std::fmt;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::str::FromStr;

/// Length of the unique prefix put in front of every namespace name:
/// `fy` + 6 hex digits + `-`.
pub(crate) const NS_PREFIX_LEN: usize = 9;
/// Longest real namespace name we produce; keeps `ip netns` output and
/// `/run/netns/...` paths short and readable.
pub(crate) const MAX_REAL_NS_LEN: usize = 30;
/// Linux `IFNAMSIZ` is 16 including the NUL terminator.
const MAX_IFNAME_LEN: usize = 15;

/// Deserializes through `TryFrom<String>` *inside* `visit_str`, so serde_yaml
/// attaches the position of the offending scalar to the error (with
/// `#[serde(try_from)]` the check runs after the scalar is consumed and the
/// error points at the enclosing mapping instead).
struct ViaStr<T>(PhantomData<T>);

impl<T: TryFrom<String, Error = String>> Visitor<'_> for ViaStr<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        T::try_from(v.to_string()).map_err(E::custom)
    }
}

/// Same as [`ViaStr`] for small unsigned integers.
struct ViaU32<T>(PhantomData<T>);

impl<T: TryFrom<u32, Error = String>> Visitor<'_> for ViaU32<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an unsigned integer")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        let n = u32::try_from(v).map_err(|_| E::custom(format!("{v} is too large")))?;
        T::try_from(n).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Err(E::custom(format!("{v} is negative"))),
        }
    }
}

macro_rules! deserialize_from_str {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(ViaStr(PhantomData))
            }
        }
    };
}

macro_rules! deserialize_from_u32 {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_u32(ViaU32(PhantomData))
            }
        }
    };
}

deserialize_from_str!(IpCidr);
deserialize_from_str!(RouteDest);
deserialize_from_u32!(QueueCount);
deserialize_from_u32!(Mtu);

/// Defines a `String` newtype whose constructor runs `$check`.
macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(into = "String")]
        pub struct $name(String);

        deserialize_from_str!($name);

        impl $name {
            /// The validated name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                let check: fn(&str) -> Result<(), String> = $check;
                check(&s)?;
                Ok(Self(s))
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                Self::try_from(s.to_string())
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

fn check_chars(kind: &str, s: &str, max: usize, extra: &[char]) -> Result<(), String> {
    if s.is_empty() || s.len() > max {
        return Err(format!("invalid {kind} {s:?}: must be 1..={max} characters long"));
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || extra.contains(c))) {
        return Err(format!("invalid {kind} {s:?}: character {c:?} not allowed"));
    }
    Ok(())
}

string_newtype!(
    /// Logical namespace name as written in the spec (`client`, `dut`).
    /// The real name gets a unique prefix, so the logical part is limited to
    /// what fits in 30 characters after it.
    NsName,
    |s| check_chars("namespace name", s, MAX_REAL_NS_LEN - NS_PREFIX_LEN, &[])
);

string_newtype!(
    /// Interface name inside a namespace. Namespaces isolate device names,
    /// so these are used verbatim (no suffix) and must fit `IFNAMSIZ`.
    IfName,
    |s| {
        check_chars("interface name", s, MAX_IFNAME_LEN, &['.'])?;
        if s == "." || s == ".." || s == "lo" {
            return Err(format!("invalid interface name {s:?}: reserved"));
        }
        Ok(())
    }
);

string_newtype!(
    /// Testbed name; used as the state-file name, so it must be a safe file name.
    SpecName,
    |s| {
        check_chars("testbed name", s, 64, &['.'])?;
        if s.starts_with('.') {
            return Err(format!("invalid testbed name {s:?}: must not start with '.'"));
        }
        Ok(())
    }
);

string_newtype!(
    /// A sysctl key. Only `net.*` keys are accepted: those are per network
    /// namespace, anything else would silently change the host.
    SysctlKey,
    |s| {
        check_chars("sysctl key", s, 128, &['.', '/'])?;
        if !(s.starts_with("net.") || s.starts_with("net/")) {
            return Err(format!(
                "invalid sysctl key {s:?}: only net.* keys are namespaced"
            ));
        }
        if s.contains("..") || s.contains("//") || s.ends_with(['.', '/']) {
            return Err(format!("invalid sysctl key {s:?}: empty path component"));
        }
        Ok(())
    }
);

impl SysctlKey {
    /// Path under `/proc/sys`. Like sysctl(8): if the key contains `/` the
    /// separators are taken literally (so interface names with dots work),
    /// otherwise dots separate components.
    pub fn proc_path(&self) -> String {
        if self.0.contains('/') {
            format!("/proc/sys/{}", self.0)
        } else {
            format!("/proc/sys/{}", self.0.replace('.', "/"))
        }
    }
}

/// An IPv4 or IPv6 address with prefix length, e.g. `10.0.1.1/24`.
/// Host bits may be set (it is an interface address, not only a network).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct IpCidr {
    addr: IpAddr,
    prefix: u8,
}

impl IpCidr {
    /// Builds a CIDR, checking the prefix length against the address family.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("invalid CIDR \"{addr}/{prefix}\": prefix exceeds {max}"));
        }
        Ok(IpCidr { addr, prefix })
    }
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl FromStr for IpCidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid CIDR {s:?}: expected ADDRESS/PREFIX");
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        IpCidr::new(addr, prefix)
    }
}

impl TryFrom<String> for IpCidr {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<IpCidr> for String {
    fn from(c: IpCidr) -> String {
        c.to_string()
    }
}

impl fmt::Display for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Destination of a route: `default` or a CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub enum RouteDest {
    Default,
    Net(IpCidr),
}

impl TryFrom<String> for RouteDest {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s == "default" {
            Ok(RouteDest::Default)
        } else {
            Ok(RouteDest::Net(s.parse()?))
        }
    }
}

impl From<RouteDest> for String {
    fn from(r: RouteDest) -> String {
        match r {
            RouteDest::Default => "default".into(),
            RouteDest::Net(c) => c.to_string(),
        }
    }
}

/// Queue count for a multi-queue veth (`numtxqueues`/`numrxqueues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "u32")]
pub struct QueueCount(u32);

impl QueueCount {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for QueueCount {
    type Error = String;
    fn try_from(n: u32) -> Result<Self, String> {
        if (1..=64).contains(&n) {
            Ok(QueueCount(n))
        } else {
            Err(format!("invalid queue count {n}: must be 1..=64"))
        }
    }
}

impl From<QueueCount> for u32 {
    fn from(q: QueueCount) -> u32 {
        q.0
    }
}

/// Link MTU; 68 is the IPv4 minimum, 65535 the veth maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "u32")]
pub struct Mtu(u32);

impl Mtu {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for Mtu {
    type Error = String;
    fn try_from(n: u32) -> Result<Self, String> {
        if (68..=65535).contains(&n) {
            Ok(Mtu(n))
        } else {
            Err(format!("invalid MTU {n}: must be 68..=65535"))
        }
    }
}

impl From<Mtu> for u32 {
    fn from(m: Mtu) -> u32 {
        m.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parse() {
        let c: IpCidr = "10.0.1.1/24".parse().unwrap();
        assert_eq!(c.prefix(), 24);
        assert_eq!(c.to_string(), "10.0.1.1/24");
        assert!("fd00::1/64".parse::<IpCidr>().is_ok());
        for bad in ["10.0.1.1", "10.0.1.1/33", "fd00::1/129", "10.0.1/24", "10.0.0.1/+1"] {
            assert!(bad.parse::<IpCidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn names() {
        assert!("client".parse::<NsName>().is_ok());
        assert!("a".repeat(21).parse::<NsName>().is_ok());
        assert!("a".repeat(22).parse::<NsName>().is_err());
        assert!("has space".parse::<NsName>().is_err());
        assert!("veth0.100".parse::<IfName>().is_ok());
        assert!("a".repeat(16).parse::<IfName>().is_err());
        assert!("lo".parse::<IfName>().is_err());
        assert!("a/b".parse::<IfName>().is_err());
    }

    #[test]
    fn sysctl_keys() {
        let k: SysctlKey = "net.ipv4.ip_forward".parse().unwrap();
        assert_eq!(k.proc_path(), "/proc/sys/net/ipv4/ip_forward");
        let k: SysctlKey = "net/ipv4/conf/c0.100/rp_filter".parse().unwrap();
        assert_eq!(k.proc_path(), "/proc/sys/net/ipv4/conf/c0.100/rp_filter");
        assert!("kernel.panic".parse::<SysctlKey>().is_err());
        assert!("net..x".parse::<SysctlKey>().is_err());
    }
}
