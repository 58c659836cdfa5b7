//! The traffic profile: everything `ferry gen` needs to know about what to
//! send. Loaded from a file (any serde format) and/or built from CLI flags
//! via [`TrafficProfile::set`].
//!
//! Deserializing checks each field's own syntax (ranges, MACs, the flow-size
//! distribution); numeric limits are checked by [`TrafficProfile::validate`],
//! which [`crate::FlowSchedule::new`] calls, so an invalid profile can never
//! generate traffic.

use std::fmt;
use std::str::FromStr;

use ferry_wire::flow::IpVersion;
use ferry_wire::{FrameSpec, L4Proto};
use serde::{Deserialize, Serialize};

use crate::dist::{deserialize_dist, FlowSizeDist};
use crate::error::{Result, TrafficError};
use crate::range::{IpRange, PortRange};
use ferry_wire::MacAddr;

/// Smallest Ethernet frame without FCS (64 on the wire).
pub const MIN_FRAME_LEN: usize = 60;
/// Largest frame we generate (jumbo), without FCS.
pub const MAX_FRAME_LEN: usize = 9000;

/// L4 protocol of generated traffic. Mirrors [`L4Proto`], which lives in
/// ferry-wire and has no serde support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// UDP (the default).
    #[default]
    Udp,
    /// TCP (segments carry no handshake: each flow just sends data).
    Tcp,
    /// ICMP echo requests.
    Icmp,
}

impl From<Proto> for L4Proto {
    fn from(p: Proto) -> L4Proto {
        match p {
            Proto::Udp => L4Proto::Udp,
            Proto::Tcp => L4Proto::Tcp,
            Proto::Icmp => L4Proto::Icmp,
        }
    }
}

impl FromStr for Proto {
    type Err = TrafficError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "udp" => Ok(Proto::Udp),
            "tcp" => Ok(Proto::Tcp),
            "icmp" => Ok(Proto::Icmp),
            _ => Err(TrafficError::bad("proto", s, "expected udp, tcp or icmp")),
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
            Proto::Icmp => "icmp",
        })
    }
}

/// What to generate. Missing fields take the [`Default`] values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrafficProfile {
    /// L4 protocol.
    pub proto: Proto,
    /// Source MAC of every frame.
    pub src_mac: MacAddr,
    /// Destination MAC of every frame.
    pub dst_mac: MacAddr,
    /// Source addresses flows are drawn from (uniformly): IPv4 or IPv6,
    /// the family of every frame.
    pub src_ip: IpRange,
    /// Destination addresses flows are drawn from, of the same family.
    pub dst_ip: IpRange,
    /// Source ports flows are drawn from (for ICMP: the echo identifier).
    pub src_port: PortRange,
    /// Destination ports flows are drawn from (unused for ICMP).
    pub dst_port: PortRange,
    /// Frame length in bytes, without FCS: 60..=9000.
    pub frame_len: usize,
    /// Packets per flow.
    #[serde(deserialize_with = "deserialize_dist")]
    pub flow_sizes: FlowSizeDist,
    /// Flows kept open at once (across all queues).
    pub active_flows: u32,
    /// Rate limit in packets per second (all queues together); None = line rate.
    pub rate_pps: Option<u64>,
    /// Token-bucket depth in packets: how far the pacer may catch up at once.
    pub burst: u64,
    /// Stop after this many seconds.
    pub duration_secs: Option<f64>,
    /// Stop after this many packets (whichever limit comes first).
    pub count: Option<u64>,
    /// Seed of the flow schedule; the same seed replays the same traffic.
    pub seed: u64,
}

impl Default for TrafficProfile {
    fn default() -> Self {
        TrafficProfile {
            proto: Proto::Udp,
            // Locally administered unicast addresses.
            src_mac: MacAddr([0x02, 0, 0, 0, 0, 0x01]),
            dst_mac: MacAddr([0x02, 0, 0, 0, 0, 0x02]),
            src_ip: "10.0.0.0/16".parse().expect("valid literal"),
            dst_ip: "10.1.0.0/16".parse().expect("valid literal"),
            src_port: PortRange::new(1024, 65535).expect("valid literal"),
            dst_port: PortRange::single(5001),
            frame_len: MIN_FRAME_LEN,
            flow_sizes: FlowSizeDist::default(),
            active_flows: 1024,
            rate_pps: None,
            burst: 64,
            duration_secs: None,
            count: None,
            seed: 0,
        }
    }
}

/// The profiles built in, by name: what `ferry gen --profile NAME` takes
/// besides a file.
pub const BUILTIN_PROFILES: [&str; 2] = ["ipv4", "ipv6"];

impl TrafficProfile {
    /// A built-in profile: `ipv4` (the default) or `ipv6`, the same
    /// traffic over 2001:db8::/112 to 2001:db8:1::/112 (documentation
    /// prefixes, RFC 3849) in 78-byte frames, the shortest IPv6 UDP frame
    /// with room for the stamp.
    pub fn builtin(name: &str) -> Option<TrafficProfile> {
        match name {
            "ipv4" => Some(TrafficProfile::default()),
            "ipv6" => Some(TrafficProfile {
                src_ip: "2001:db8::/112".parse().expect("valid literal"),
                dst_ip: "2001:db8:1::/112".parse().expect("valid literal"),
                frame_len: 78,
                ..TrafficProfile::default()
            }),
            _ => None,
        }
    }

    /// Checks the numeric limits and the flow-size parameters.
    pub fn validate(&self) -> Result<()> {
        if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&self.frame_len) {
            return Err(TrafficError::bad("frame_len", self.frame_len, "must be 60..=9000 bytes (without FCS)"));
        }
        if self.src_ip.is_ipv6() != self.dst_ip.is_ipv6() {
            return Err(TrafficError::bad("dst_ip", self.dst_ip, "must be of src_ip's IP version"));
        }
        let min = ferry_wire::stamp_offset(self.version(), self.proto.into());
        if self.frame_len < min {
            return Err(TrafficError::bad("frame_len", self.frame_len, "too short for the headers (IPv6 TCP: 74)"));
        }
        if self.active_flows == 0 {
            return Err(TrafficError::bad("active_flows", 0, "need at least one active flow"));
        }
        if self.rate_pps == Some(0) {
            return Err(TrafficError::bad("rate_pps", 0, "use no rate for line rate"));
        }
        if self.burst == 0 {
            return Err(TrafficError::bad("burst", 0, "must be at least 1 packet"));
        }
        if let Some(d) = self.duration_secs {
            if !(d.is_finite() && d > 0.0) {
                return Err(TrafficError::bad("duration_secs", d, "must be a positive number of seconds"));
            }
        }
        self.flow_sizes.sampler()?;
        Ok(())
    }

    /// Whether frames are long enough to carry the 16-byte stamp. When they
    /// are not (e.g. 60-byte TCP frames) traffic is sent unstamped and the
    /// sink can only count packets and bytes.
    pub fn stamp_fits(&self) -> bool {
        ferry_wire::has_stamp_room(self.version(), self.proto.into(), self.frame_len)
    }

    /// The IP version of every frame: the source range's.
    pub fn version(&self) -> IpVersion {
        if self.src_ip.is_ipv6() {
            IpVersion::V6
        } else {
            IpVersion::V4
        }
    }

    /// The 5-tuple of the profile's first flow: the start of every range.
    pub fn first_tuple(&self) -> ferry_wire::FiveTuple {
        ferry_wire::FiveTuple {
            src_ip: self.src_ip.start(),
            dst_ip: self.dst_ip.start(),
            src_port: self.src_port.start(),
            dst_port: self.dst_port.start(),
            proto: self.proto.into(),
        }
    }

    /// The frame of the profile's first flow, without a stamp.
    pub fn first_frame(&self) -> crate::Result<Vec<u8>> {
        let mut frame = vec![0u8; self.frame_len];
        let n = ferry_wire::build_frame(&self.frame_spec(), &self.first_tuple(), None, &mut frame)?;
        frame.truncate(n);
        Ok(frame)
    }

    /// The Ethernet-level part of the frame, for `ferry_wire::build_frame`.
    pub fn frame_spec(&self) -> FrameSpec {
        FrameSpec { src_mac: self.src_mac.0, dst_mac: self.dst_mac.0, frame_len: self.frame_len }
    }

    /// `duration_secs` in nanoseconds.
    pub fn duration_ns(&self) -> Option<u64> {
        self.duration_secs.map(|d| (d * 1e9).round() as u64)
    }

    /// Applies one CLI-style override, e.g. `set("dst-port", "1000-2000")`.
    ///
    /// Keys are the field names, with `-` or `_`, plus the aliases `pps`
    /// and `rate` (for `rate_pps`, `none` = unlimited), `flows` (for
    /// `active_flows`), `size`/`frame_size` (for `frame_len`), `dist`
    /// (`flow_sizes`), `duration` (accepts `10`, `10s`, `500ms`, `2m`).
    /// The CLI keeps its own flag definitions and funnels values here, so
    /// file and flag syntax can never drift apart.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = key.trim().trim_start_matches('-').replace('-', "_");
        let v = value.trim();
        fn num<T: FromStr>(field: &'static str, v: &str) -> Result<T> {
            v.parse().map_err(|_| TrafficError::bad(field, v, "not a valid number"))
        }
        fn mac(field: &'static str, v: &str) -> Result<MacAddr> {
            v.parse().map_err(|_| TrafficError::bad(field, v, "expected six hex octets like 02:00:00:00:00:01"))
        }
        match key.as_str() {
            "proto" | "protocol" => self.proto = v.parse()?,
            "src_mac" => self.src_mac = mac("src_mac", v)?,
            "dst_mac" => self.dst_mac = mac("dst_mac", v)?,
            "src_ip" => self.src_ip = v.parse()?,
            "dst_ip" => self.dst_ip = v.parse()?,
            "src_port" => self.src_port = v.parse()?,
            "dst_port" => self.dst_port = v.parse()?,
            "frame_len" | "frame_size" | "size" => self.frame_len = num("frame_len", v)?,
            "flow_sizes" | "dist" => self.flow_sizes = v.parse()?,
            "active_flows" | "flows" => self.active_flows = num("active_flows", v)?,
            "rate_pps" | "rate" | "pps" => {
                self.rate_pps = match v {
                    "none" | "unlimited" | "max" => None,
                    _ => Some(num("rate_pps", v)?),
                }
            }
            "burst" => self.burst = num("burst", v)?,
            "duration_secs" | "duration" => self.duration_secs = Some(parse_duration_secs(v)?),
            "count" => self.count = Some(num("count", v)?),
            "seed" => self.seed = num("seed", v)?,
            _ => return Err(TrafficError::UnknownField(key)),
        }
        Ok(())
    }
}

/// `"10"`, `"10s"`, `"250ms"`, `"2m"` → seconds.
fn parse_duration_secs(v: &str) -> Result<f64> {
    let (n, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60.0)
    } else {
        (v, 1.0)
    };
    match n.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x * scale),
        _ => Err(TrafficError::bad("duration", v, "expected a positive duration like 10s or 500ms")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_stamped() {
        for name in BUILTIN_PROFILES {
            let p = TrafficProfile::builtin(name).unwrap();
            p.validate().unwrap();
            assert!(p.stamp_fits(), "{name}");
        }
        let v6 = TrafficProfile::builtin("ipv6").unwrap();
        assert_eq!((v6.version(), v6.first_frame().unwrap().len()), (IpVersion::V6, 78));
        let mut tcp = v6.clone();
        tcp.set("proto", "tcp").unwrap();
        tcp.validate().unwrap();
        assert!(!tcp.stamp_fits(), "74 bytes of headers leave 4, not the stamp's 16");
        tcp.set("size", "70").unwrap();
        assert!(tcp.validate().is_err(), "IPv6 TCP needs 74 bytes");
        let mut mixed = v6;
        mixed.set("dst_ip", "10.1.0.0/16").unwrap();
        assert!(mixed.validate().is_err(), "one IP version for both ends");
    }

    #[test]
    fn default_is_valid() {
        let p = TrafficProfile::default();
        p.validate().unwrap();
        assert!(p.stamp_fits(), "60-byte UDP frames must hold a stamp");
    }

    #[test]
    fn from_json_with_defaults() {
        let p: TrafficProfile = serde_json::from_str(
            r#"{"proto":"tcp","src_ip":"192.168.0.0/24","dst_port":"80-81","frame_len":128,
                "flow_sizes":"fixed:4","rate_pps":1000,"seed":9}"#,
        )
        .unwrap();
        assert_eq!(p.proto, Proto::Tcp);
        assert_eq!(p.src_ip.len(), 256);
        assert_eq!(p.dst_port, PortRange::new(80, 81).unwrap());
        assert_eq!(p.flow_sizes, FlowSizeDist::Fixed(4));
        assert_eq!(p.active_flows, 1024);
        p.validate().unwrap();
        // Round trip through JSON keeps everything.
        let back: TrafficProfile = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn json_errors_are_specific() {
        let e = serde_json::from_str::<TrafficProfile>(r#"{"dst_port":"9-1"}"#).unwrap_err();
        assert!(e.to_string().contains("start > end"), "{e}");
        let e = serde_json::from_str::<TrafficProfile>(r#"{"dstport":"9"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let e = serde_json::from_str::<TrafficProfile>(r#"{"flow_sizes":{"fixed":0}}"#).unwrap_err();
        assert!(e.to_string().contains("at least 1 packet"), "{e}");
    }

    #[test]
    fn validate_limits() {
        let mut p = TrafficProfile { frame_len: 59, ..Default::default() };
        assert!(matches!(p.validate(), Err(TrafficError::BadRange { field: "frame_len", .. })));
        p.frame_len = 9001;
        assert!(p.validate().is_err());
        p.frame_len = 9000;
        p.validate().unwrap();
        for bad in [
            TrafficProfile { active_flows: 0, ..Default::default() },
            TrafficProfile { rate_pps: Some(0), ..Default::default() },
            TrafficProfile { burst: 0, ..Default::default() },
            TrafficProfile { duration_secs: Some(-1.0), ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_from_flags() {
        let mut p = TrafficProfile::default();
        for (k, v) in [
            ("--proto", "icmp"),
            ("src-ip", "10.0.0.1-10.0.0.254"),
            ("dst_port", "1000-2000"),
            ("size", "1500"),
            ("flows", "10"),
            ("pps", "1000000"),
            ("duration", "250ms"),
            ("count", "5"),
            ("dist", "geometric:8"),
            ("seed", "42"),
            ("src-mac", "02:aa:00:00:00:01"),
        ] {
            p.set(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
        assert_eq!(p.proto, Proto::Icmp);
        assert_eq!(p.src_ip.len(), 254);
        assert_eq!(p.frame_len, 1500);
        assert_eq!(p.rate_pps, Some(1_000_000));
        assert_eq!(p.duration_ns(), Some(250_000_000));
        assert_eq!(p.src_mac.0[1], 0xaa);
        p.validate().unwrap();
        p.set("rate", "none").unwrap();
        assert_eq!(p.rate_pps, None);
        assert!(matches!(p.set("colour", "red"), Err(TrafficError::UnknownField(_))));
        assert!(p.set("duration", "soon").is_err());
        assert!(p.set("flows", "-1").is_err());
    }
}
