//! Validated address and port ranges, and MAC addresses.
//!
//! Ranges are inclusive (`start..=end`) and can only be built through
//! constructors that check `start <= end`, so code drawing from them never
//! has to handle an empty range. They parse from the same strings the CLI
//! accepts and (de)serialize as those strings.

use std::fmt;
use std::net::IpAddr;

use ferry_wire::prefix::{from_flow_space, to_flow_space};
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Result, TrafficError};

/// An inclusive range of IPv4 or IPv6 addresses (one family).
///
/// Parses from `"10.0.0.1"`, `"10.0.0.1-10.0.0.254"`, `"10.0.0.0/24"`, or
/// the same forms in IPv6 (`"2001:db8::/64"`). A CIDR block includes its
/// network and broadcast addresses: the generator only needs distinct
/// flow keys, not routable hosts. Held in the 128-bit space, IPv4
/// IPv4-mapped, as ferry-wire's flow key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    start: u128,
    end: u128,
}

fn wide(a: IpAddr) -> u128 {
    to_flow_space(a).into()
}

fn narrow(a: u128) -> IpAddr {
    from_flow_space(a.into())
}

impl IpRange {
    /// `start..=end`; fails when `start > end` or they are of two families.
    pub fn new(start: IpAddr, end: IpAddr) -> Result<Self> {
        let (s, e) = (wide(start), wide(end));
        if start.is_ipv4() != end.is_ipv4() {
            return Err(TrafficError::bad("ip range", format!("{start}-{end}"), "one IP version for both ends"));
        }
        if s > e {
            return Err(TrafficError::bad("ip range", format!("{start}-{end}"), "start > end"));
        }
        Ok(IpRange { start: s, end: e })
    }

    /// A range holding one address.
    pub fn single(addr: impl Into<IpAddr>) -> Self {
        let a = wide(addr.into());
        IpRange { start: a, end: a }
    }

    /// First address.
    pub fn start(&self) -> IpAddr {
        narrow(self.start)
    }

    /// Last address (inclusive).
    pub fn end(&self) -> IpAddr {
        narrow(self.end)
    }

    /// Whether the range holds IPv6 addresses.
    pub fn is_ipv6(&self) -> bool {
        self.start().is_ipv6()
    }

    /// Number of addresses, saturated at u64::MAX (a /64 and wider).
    pub fn len(&self) -> u64 {
        u64::try_from(self.end - self.start).map_or(u64::MAX, |n| n.saturating_add(1))
    }

    /// Always false: ranges are never empty. Present for clippy's sake.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: impl Into<IpAddr>) -> bool {
        (self.start..=self.end).contains(&wide(addr.into()))
    }

    /// A uniformly drawn address.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> IpAddr {
        narrow(rng.gen_range(self.start..=self.end))
    }
}

impl FromStr for IpRange {
    type Err = TrafficError;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let ip = |t: &str| -> Result<IpAddr> {
            t.trim().parse().map_err(|_| TrafficError::bad("ip range", s, "not an IP address"))
        };
        if let Some((addr, len)) = s.split_once('/') {
            let addr = ip(addr)?;
            let (max, why) = match addr {
                IpAddr::V4(_) => (32, "prefix length must be 0..=32"),
                IpAddr::V6(_) => (128, "prefix length must be 0..=128"),
            };
            let len: u32 =
                len.trim().parse().ok().filter(|l| *l <= max).ok_or(TrafficError::bad("ip range", s, why))?;
            // In the 128-bit space an IPv4 /n is a /(96 + n).
            let mask = u128::MAX.checked_shl(max - len).unwrap_or(0);
            let net = wide(addr);
            if net & !mask != 0 {
                return Err(TrafficError::bad("ip range", s, "host bits set in CIDR block"));
            }
            return Ok(IpRange { start: net, end: net | !mask });
        }
        match s.split_once('-') {
            Some((a, b)) => IpRange::new(ip(a)?, ip(b)?).map_err(|e| match e {
                TrafficError::BadRange { reason, .. } => TrafficError::bad("ip range", s, reason),
                e => e,
            }),
            None => Ok(IpRange::single(ip(s)?)),
        }
    }
}

impl fmt::Display for IpRange {
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
serde_via_str!(IpRange);
serde_via_str!(PortRange);

impl<'de> Deserialize<'de> for IpRange {
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
        let r: IpRange = "10.0.0.1-10.0.0.254".parse().unwrap();
        assert_eq!((r.start(), r.end(), r.len()), ("10.0.0.1".parse().unwrap(), "10.0.0.254".parse().unwrap(), 254));
        let r: IpRange = "10.0.0.0/24".parse().unwrap();
        assert_eq!(r.to_string(), "10.0.0.0-10.0.0.255");
        let r: IpRange = "0.0.0.0/0".parse().unwrap();
        assert_eq!(r.len(), 1 << 32);
        let r: IpRange = " 192.168.1.7 ".parse().unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r.to_string(), "192.168.1.7");
        let r: IpRange = "2001:db8::/126".parse().unwrap();
        assert_eq!((r.len(), r.is_ipv6()), (4, true));
        assert_eq!(r.to_string(), "2001:db8::-2001:db8::3");
        assert_eq!("2001:db8::/64".parse::<IpRange>().unwrap().len(), u64::MAX);
    }

    #[test]
    fn ip_range_rejects() {
        for bad in ["10.0.0.9-10.0.0.1", "10.0.0.1/24", "10.0.0.0/33", "10.0.0", "x-y", "", "::1/129", "10.0.0.1-::2"] {
            let e = bad.parse::<IpRange>().unwrap_err();
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
        let ips: IpRange = "10.1.0.0/30".parse().unwrap();
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
        let e = serde_json::from_str::<IpRange>("\"10.0.0.9-10.0.0.1\"").unwrap_err();
        assert!(e.to_string().contains("start > end"), "{e}");
    }
}
