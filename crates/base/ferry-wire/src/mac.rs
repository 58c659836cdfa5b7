//! MAC addresses: the one type and the one parser every Ferry crate uses.

use std::fmt;
use std::str::FromStr;

/// An IEEE 802 MAC address.
///
/// Text form: six groups of one or two hex digits (either case), all
/// separated by `:` or all by `-`, as iproute2 prints and accepts them.
/// Displayed as lowercase `aa:bb:cc:dd:ee:ff`. Serialized as that string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

/// Why a MAC address did not parse or is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MacError {
    #[error("invalid MAC address {0:?}: expected six hex octets like 02:00:00:00:00:01")]
    Syntax(String),
    #[error("invalid MAC address {0:?}: not a unicast address (the I/G bit is set, or it is all zero)")]
    NotUnicast(String),
}

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group (multicast and broadcast) addresses: the I/G bit,
    /// the first octet's lowest bit (IEEE 802-2014 §8.2), is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// The Ethernet group address an IPv6 multicast address maps to:
    /// 33:33 and its last four octets (RFC 2464 §7).
    pub fn ipv6_multicast(a: std::net::Ipv6Addr) -> MacAddr {
        let o = a.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }

    /// An address one station can own: not a group address and not zero.
    /// The kernel refuses anything else on a veth (EADDRNOTAVAIL).
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && self.0 != [0; 6]
    }

    /// Parses `s` and refuses an address that is not [unicast](Self::is_unicast).
    pub fn parse_unicast(s: &str) -> Result<MacAddr, MacError> {
        let mac: MacAddr = s.parse()?;
        if !mac.is_unicast() {
            return Err(MacError::NotUnicast(s.to_string()));
        }
        Ok(mac)
    }
}

impl FromStr for MacAddr {
    type Err = MacError;

    fn from_str(s: &str) -> Result<MacAddr, MacError> {
        let bad = || MacError::Syntax(s.to_string());
        let sep = if s.contains('-') { '-' } else { ':' };
        let mut out = [0u8; 6];
        let mut parts = s.split(sep);
        for byte in &mut out {
            let part = parts.next().ok_or_else(bad)?;
            if part.is_empty() || part.len() > 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        match parts.next() {
            Some(_) => Err(bad()),
            None => Ok(MacAddr(out)),
        }
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(bytes: [u8; 6]) -> MacAddr {
        MacAddr(bytes)
    }
}

impl serde::Serialize for MacAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for MacAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MacAddr, D::Error> {
        d.deserialize_str(MacVisitor { unicast: false })
    }
}

/// A serde `deserialize_with` for an optional field that must hold a
/// [unicast](MacAddr::is_unicast) address (a device's own MAC), so a config
/// file's line says what the kernel would refuse later.
pub fn deserialize_unicast<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<MacAddr>, D::Error> {
    d.deserialize_str(MacVisitor { unicast: true }).map(Some)
}

/// Parses inside the deserializer, so a YAML error points at the value.
struct MacVisitor {
    unicast: bool,
}

impl serde::de::Visitor<'_> for MacVisitor {
    type Value = MacAddr;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a MAC address like 02:00:00:00:00:01")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MacAddr, E> {
        let parsed = if self.unicast { MacAddr::parse_unicast(s) } else { s.parse() };
        parsed.map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::{MacAddr, MacError};

    #[test]
    fn parses_both_separators_and_either_case() {
        let m: MacAddr = "02:00:0a:FF:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0xff, 0, 1]);
        assert_eq!(m.to_string(), "02:00:0a:ff:00:01");
        assert_eq!("02-00-0a-ff-00-01".parse::<MacAddr>().unwrap(), m);
        assert_eq!("2:0:a:ff:0:1".parse::<MacAddr>().unwrap(), m);
    }

    #[test]
    fn refuses_what_is_not_six_octets() {
        for bad in [
            "",
            "02:00:0a:ff:00",
            "02:00:0a:ff:00:01:02",
            "02:00:0a:ff:00:zz",
            "020:0:a:ff:00:01",
            "02:00-0a:ff:00:01",
            "02::0a:ff:00:01",
            "+2:00:0a:ff:00:01",
        ] {
            assert!(matches!(bad.parse::<MacAddr>(), Err(MacError::Syntax(_))), "{bad}");
        }
    }

    #[test]
    fn unicast_refuses_group_and_zero_addresses() {
        assert!(MacAddr::parse_unicast("02:00:00:00:01:0a").is_ok());
        for group in ["01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"] {
            assert!(matches!(MacAddr::parse_unicast(group), Err(MacError::NotUnicast(_))), "{group}");
        }
        assert!(MacAddr::BROADCAST.is_multicast());
    }

    #[test]
    fn serde_goes_through_the_text_form() {
        let m: MacAddr = serde_json::from_str("\"02:00:00:00:00:01\"").unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), "\"02:00:00:00:00:01\"");
        assert!(serde_json::from_str::<MacAddr>("\"nope\"").is_err());
    }
}
