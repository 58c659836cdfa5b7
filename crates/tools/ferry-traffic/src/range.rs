//! Validated address and port ranges, and MAC addresses.
//!
//! Ranges are inclusive (`start..=end`) and can only be built through
//! constructors that check `start <= end`, so code drawing from them never
//! has to handle an empty range. They parse from the same strings the CLI
//! accepts and (de)serialize as those strings.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Result, TrafficError};

/// An inclusive range of IPv4 addresses.
///
/// Parses from `"10.0.0.1"`, `"10.0.0.1-10.0.0.254"` or `"10.0.0.0/24"`.
/// A CIDR block includes its network and broadcast addresses: the generator
/// only needs distinct flow keys, not routable hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Range {
    start: u32,
    end: u32,
}

impl Ipv4Range {
    /// `start..=end`; fails when `start > end`.
    pub fn new(start: Ipv4Addr, end: Ipv4Addr) -> Result<Self> {
        let (s, e) = (u32::from(start), u32::from(end));
        if s > e {
            return Err(TrafficError::bad("ip range", format!("{start}-{end}"), "start > end"));
        }
        Ok(Ipv4Range { start: s, end: e })
    }

    /// A range holding one address.
    pub fn single(addr: Ipv4Addr) -> Self {
        let a = u32::from(addr);
        Ipv4Range { start: a, end: a }
    }

    /// First address.
    pub fn start(&self) -> Ipv4Addr {
        self.start.into()
    }

    /// Last address (inclusive).
    pub fn end(&self) -> Ipv4Addr {
        self.end.into()
    }

    /// Number of addresses (up to 2^32, hence u64).
    pub fn len(&self) -> u64 {
        u64::from(self.end - self.start) + 1
    }

    /// Always false: ranges are never empty. Present for clippy's sake.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        (self.start..=self.end).contains(&u32::from(addr))
    }

    /// A uniformly drawn address.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Ipv4Addr {
        rng.gen_range(self.start..=self.end).into()
    }
}

impl FromStr for Ipv4Range {
    type Err = TrafficError;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let ip = |t: &str| -> Result<Ipv4Addr> {
            t.trim().parse().map_err(|_| TrafficError::bad("ip range", s, "not an IPv4 address"))
        };
        if let Some((addr, len)) = s.split_once('/') {
            let len: u32 = len
                .trim()
                .parse()
                .ok()
                .filter(|l| *l <= 32)
                .ok_or_else(|| TrafficError::bad("ip range", s, "prefix length must be 0..=32"))?;
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            let net = u32::from(ip(addr)?);
            if net & !mask != 0 {
                return Err(TrafficError::bad("ip range", s, "host bits set in CIDR block"));
            }
            return Ok(Ipv4Range { start: net, end: net | !mask });
        }
        match s.split_once('-') {
            Some((a, b)) => Ipv4Range::new(ip(a)?, ip(b)?).map_err(|_| TrafficError::bad("ip range", s, "start > end")),
            None => Ok(Ipv4Range::single(ip(s)?)),
        }
    }
}

impl fmt::Display for Ipv4Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start())
        } else {
            write!(f, "{}-{}", self.start(), self.end())
        }
    }
}

/// An inclusive range of L4 ports. Parses from `"1000-2000"` or `"53"`; in
/// serialized profiles a bare integer is accepted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    start: u16,
    end: u16,
}

impl PortRange {
    /// `start..=end`; fails when `start > end`.
    pub fn new(start: u16, end: u16) -> Result<Self> {
        if start > end {
            return Err(TrafficError::bad("port range", format!("{start}-{end}"), "start > end"));
        }
        Ok(PortRange { start, end })
    }

    /// A range holding one port.
    pub fn single(port: u16) -> Self {
        PortRange { start: port, end: port }
    }

    /// First port.
    pub fn start(&self) -> u16 {
        self.start
    }

    /// Last port (inclusive).
    pub fn end(&self) -> u16 {
        self.end
    }

    /// Number of ports.
    pub fn len(&self) -> u32 {
        u32::from(self.end - self.start) + 1
    }

    /// Always false: ranges are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `port` lies in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.start..=self.end).contains(&port)
    }

    /// A uniformly drawn port.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u16 {
        rng.gen_range(self.start..=self.end)
    }
}

impl FromStr for PortRange {
    type Err = TrafficError;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let port = |t: &str| -> Result<u16> {
            t.trim().parse().map_err(|_| TrafficError::bad("port range", s, "not a port (0..=65535)"))
        };
        match s.split_once('-') {
            Some((a, b)) => {
                PortRange::new(port(a)?, port(b)?).map_err(|_| TrafficError::bad("port range", s, "start > end"))
            }
            None => Ok(PortRange::single(port(s)?)),
        }
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

// Serde goes through the string forms so profiles read like the CLI flags.
macro_rules! serde_via_str {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}
serde_via_str!(Ipv4Range);
serde_via_str!(PortRange);

impl<'de> Deserialize<'de> for Ipv4Range {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u16),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(p) => Ok(PortRange::single(p)),
            Raw::Str(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_range_forms() {
        let r: Ipv4Range = "10.0.0.1-10.0.0.254".parse().unwrap();
        assert_eq!((r.start(), r.end(), r.len()), ("10.0.0.1".parse().unwrap(), "10.0.0.254".parse().unwrap(), 254));
        let r: Ipv4Range = "10.0.0.0/24".parse().unwrap();
        assert_eq!(r.to_string(), "10.0.0.0-10.0.0.255");
        let r: Ipv4Range = "0.0.0.0/0".parse().unwrap();
        assert_eq!(r.len(), 1 << 32);
        let r: Ipv4Range = " 192.168.1.7 ".parse().unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r.to_string(), "192.168.1.7");
    }

    #[test]
    fn ip_range_rejects() {
        for bad in ["10.0.0.9-10.0.0.1", "10.0.0.1/24", "10.0.0.0/33", "10.0.0", "x-y", ""] {
            let e = bad.parse::<Ipv4Range>().unwrap_err();
            assert!(matches!(e, TrafficError::BadRange { field: "ip range", .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn port_range_forms() {
        assert_eq!("1000-2000".parse::<PortRange>().unwrap().len(), 1001);
        assert_eq!("53".parse::<PortRange>().unwrap(), PortRange::single(53));
        assert!("2000-1000".parse::<PortRange>().is_err());
        assert!("70000".parse::<PortRange>().is_err());
        assert!(PortRange::new(5, 4).is_err());
    }

    #[test]
    fn sampling_stays_in_range() {
        let mut rng = rand_pcg::Pcg64Mcg::new(7);
        let ips: Ipv4Range = "10.1.0.0/30".parse().unwrap();
        let ports = PortRange::new(100, 103).unwrap();
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let a = ips.sample(&mut rng);
            assert!(ips.contains(a));
            let p = ports.sample(&mut rng);
            seen[usize::from(p - 100)] = true;
        }
        assert_eq!(seen, [true; 4]);
    }

    #[test]
    fn serde_round_trip() {
        let r: PortRange = serde_json::from_str("80").unwrap();
        assert_eq!(r, PortRange::single(80));
        let r: PortRange = serde_json::from_str("\"80-90\"").unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"80-90\"");
        let e = serde_json::from_str::<Ipv4Range>("\"10.0.0.9-10.0.0.1\"").unwrap_err();
        assert!(e.to_string().contains("start > end"), "{e}");
    }
}
