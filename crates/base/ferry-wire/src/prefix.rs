//! Address prefixes of either family, in the flow key's one 128-bit space
//! ([`crate::flow`]): an IPv4 prefix `a.b.c.d/n` is held as the
//! IPv4-mapped prefix `::ffff:a.b.c.d/(96 + n)` (RFC 4291 §2.5.5.2). So
//! `10.0.0.0/8` matches IPv4 frames only, `2001:db8::/32` IPv6 ones, and
//! a rule that names no prefix (or `::/0`) matches both: nftables' `inet`
//! family. An IPv6 prefix that covers `::ffff:0:0/96` other than `::/0`
//! (`::/8`, say) is refused: it would match every IPv4 frame too.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// `a` in the flow key's 128-bit space: IPv4 IPv4-mapped.
pub fn to_flow_space(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// An address of the 128-bit space in its own family.
pub fn from_flow_space(a: Ipv6Addr) -> IpAddr {
    a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
}

/// Where IPv4 sits in the 128-bit space: the length of `::ffff:0:0/96`.
const MAPPED_LEN: u8 = 96;

/// A prefix with no host bits set; `len` counts in the 128-bit space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    addr: Ipv6Addr,
    len: u8,
}

impl IpPrefix {
    /// Every IPv4 address: `0.0.0.0/0`.
    pub const ALL_V4: IpPrefix = IpPrefix { addr: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), len: MAPPED_LEN };

    /// `addr/len` with `len` in the address's own family (0..=32 for IPv4).
    pub fn new(addr: IpAddr, len: u8) -> Result<IpPrefix, String> {
        let (addr6, len6, max) = match addr {
            IpAddr::V4(a) => (a.to_ipv6_mapped(), len.saturating_add(MAPPED_LEN), 32),
            IpAddr::V6(a) => (a, len, 128),
        };
        if len > max {
            return Err(format!("prefix length {len}: 0..={max}"));
        }
        let p = IpPrefix { addr: addr6, len: len6 };
        if u128::from(addr6) & !p.mask() != 0 {
            let base = IpPrefix { addr: Ipv6Addr::from(u128::from(addr6) & p.mask()), len: len6 };
            return Err(format!("host bits set (did you mean {base}?)"));
        }
        if addr.is_ipv6() && len6 > 0 && p.contains(IpPrefix::ALL_V4.addr) {
            return Err(format!(
                "{p} covers ::ffff:0:0/96, where Ferry keeps IPv4 addresses, so it would match every IPv4 frame: \
                 use ::/0 for both versions, an IPv4 prefix for IPv4, or IPv6 prefixes around it"
            ));
        }
        Ok(p)
    }

    /// One host: `/32` or `/128`.
    pub fn host(addr: IpAddr) -> IpPrefix {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        IpPrefix::new(addr, len).expect("a host prefix has no host bits")
    }

    /// `ADDR/LEN`, or a bare address as one host: the firewall rules' form.
    pub fn parse_or_host(s: &str) -> Result<IpPrefix, String> {
        match s.split_once('/') {
            Some(parts) => IpPrefix::parse(s, parts),
            None => Ok(IpPrefix::host(s.parse().map_err(|_| format!("{s:?} is not an IP address"))?)),
        }
    }

    fn parse(s: &str, (addr, len): (&str, &str)) -> Result<IpPrefix, String> {
        let addr: IpAddr = addr.parse().map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let len: u8 = len.parse().map_err(|_| format!("{s:?}: {len:?} is not a prefix length"))?;
        IpPrefix::new(addr, len).map_err(|e| format!("{s:?}: {e}"))
    }

    /// An IPv4 prefix (inside `::ffff:0:0/96`).
    pub fn is_ipv4(&self) -> bool {
        self.len >= MAPPED_LEN && self.addr.to_ipv4_mapped().is_some()
    }

    /// The network address in the 128-bit space.
    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }

    /// The length in the 128-bit space (IPv4 prefixes: 96 + their own).
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// The mask in the 128-bit space.
    pub fn mask(&self) -> u128 {
        u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0)
    }

    /// The first and last address it covers, as 128-bit numbers.
    pub fn range(&self) -> (u128, u128) {
        let base = u128::from(self.addr);
        (base, base | !self.mask())
    }

    /// Whether `a` (a flow key address, IPv4 mapped) is inside.
    pub fn contains(&self, a: Ipv6Addr) -> bool {
        u128::from(a) & self.mask() == u128::from(self.addr)
    }
}

impl FromStr for IpPrefix {
    type Err = String;

    /// `ADDR/LEN`: the length is required.
    fn from_str(s: &str) -> Result<Self, String> {
        IpPrefix::parse(s, s.split_once('/').ok_or_else(|| format!("{s:?}: expected ADDRESS/LENGTH"))?)
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr.to_ipv4_mapped().filter(|_| self.is_ipv4()) {
            Some(v4) => write!(f, "{v4}/{}", self.len - MAPPED_LEN),
            None => write!(f, "{}/{}", self.addr, self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    fn a(s: &str) -> Ipv6Addr {
        match s.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        }
    }

    #[test]
    fn each_family_matches_its_own_addresses() {
        assert!(p("10.0.0.0/8").contains(a("10.9.8.7")));
        assert!(!p("10.0.0.0/8").contains(a("11.0.0.1")));
        assert!(!p("0.0.0.0/0").contains(a("2001:db8::1")), "an IPv4 prefix never matches IPv6");
        assert!(p("0.0.0.0/0").contains(a("255.255.255.255")));
        assert!(p("2001:db8::/32").contains(a("2001:db8:ffff::1")));
        assert!(!p("2001:db8::/32").contains(a("10.0.0.1")));
        assert!(p("::/0").contains(a("10.0.0.1")) && p("::/0").contains(a("fe80::1")), "::/0 is both");
        assert_eq!(p("0.0.0.0/0"), IpPrefix::ALL_V4);
        assert_eq!(p("192.0.2.0/24").range(), (u128::from(a("192.0.2.0")), u128::from(a("192.0.2.255"))));
    }

    #[test]
    fn text_round_trips_and_errors_say_the_fix() {
        for s in ["10.0.0.0/8", "0.0.0.0/0", "192.0.2.1/32", "2001:db8::/32", "::/0", "fe80::1/128"] {
            assert_eq!(p(s).to_string(), s);
        }
        assert_eq!(IpPrefix::parse_or_host("2001:db8::1").unwrap().prefix_len(), 128);
        assert_eq!(IpPrefix::parse_or_host("10.0.0.1").unwrap().to_string(), "10.0.0.1/32");
        let e = |s: &str| s.parse::<IpPrefix>().unwrap_err();
        assert!(e("10.0.0.1/8").contains("did you mean 10.0.0.0/8?"), "{}", e("10.0.0.1/8"));
        assert!(e("2001:db8::1/32").contains("did you mean 2001:db8::/32?"));
        assert!(e("10.0.0.0/33").contains("0..=32"));
        assert!(e("::/129").contains("0..=128"));
        assert!(e("::/8").contains("would match every IPv4 frame"), "{}", e("::/8"));
        assert!(e("::ffff:0:0/96").contains("would match every IPv4 frame"));
        assert!("::/0".parse::<IpPrefix>().is_ok() && "::/97".parse::<IpPrefix>().is_ok());
        assert!(e("10.0.0.0").contains("ADDRESS/LENGTH"));
        assert!(IpPrefix::parse_or_host("banana").is_err());
    }
}
