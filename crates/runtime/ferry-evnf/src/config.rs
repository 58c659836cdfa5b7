//! The hybrid NFs' configuration file (YAML): one section per NF type,
//! which a chain file's hybrid NFs name with `config=FILE`; the chain
//! file says where they run. Errors name the file, line and field
//! (`ferry_config`).
//!
//! ```yaml
//! firewall:
//!   rules:
//!     - { src: 10.10.66.0/24, action: deny }
//!     - { proto: tcp, port: 80, action: allow }
//!   nftables: |
//!     table inet ferry_fw { chain input { type filter hook input priority 0; policy drop; } }
//! balancer:
//!   vip: 10.10.9.9:80
//!   backends: [{ addr: 10.10.2.11:80, weight: 1 }, { addr: 10.10.3.12:80, weight: 1 }]
//! ```

use std::net::{Ipv4Addr, SocketAddr};

use ferry_wire::IpPrefix;
use std::path::{Path, PathBuf};

use ferry_config::{parse_located, Seg, YamlError};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvnfSpec {
    #[serde(default)]
    pub firewall: Option<FirewallSpec>,
    #[serde(default)]
    pub balancer: Option<BalancerSpec>,
    #[serde(default)]
    pub dpi: Option<DpiSpec>,
    #[serde(default)]
    pub nat: Option<NatSpec>,
    #[serde(skip)]
    pub origin: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FwAction {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    Tcp,
    Udp,
    Icmp,
}

impl Proto {
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Icmp => 1,
        }
    }
}

/// A fast firewall rule: a source subnet (`src`), or a protocol with an
/// optional destination port (`proto`, `port`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FwRuleSpec {
    #[serde(default)]
    pub src: Option<String>,
    #[serde(default)]
    pub proto: Option<Proto>,
    #[serde(default)]
    pub port: Option<u16>,
    pub action: FwAction,
}

impl FwRuleSpec {
    /// `src` as a prefix (IPv4 or IPv6), once validated.
    pub fn subnet(&self) -> Option<IpPrefix> {
        self.src.as_deref().and_then(|s| s.parse().ok())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallSpec {
    #[serde(default)]
    pub rules: Vec<FwRuleSpec>,
    /// The kernel half (offloading mode): an nftables ruleset applied with
    /// `nft -f` when the NF starts; it sees only what no fast rule decided.
    /// Its tables are deleted when the NF stops.
    #[serde(default)]
    pub nftables: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    pub addr: SocketAddr,
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackSpec {
    /// How often weights are recomputed from measured load.
    pub interval_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalancerSpec {
    /// IPv4 or IPv6; every backend is of its IP version.
    pub vip: SocketAddr,
    #[serde(default = "tcp")]
    pub proto: Proto,
    pub backends: Vec<BackendSpec>,
    /// Dynamic feedback; without it the configured weights stay.
    #[serde(default)]
    pub feedback: Option<FeedbackSpec>,
    /// Connection-tracking entries idle this long are removed.
    #[serde(default = "lb_idle")]
    pub idle_timeout_s: f64,
}

fn tcp() -> Proto {
    Proto::Tcp
}
fn lb_idle() -> f64 {
    120.0
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpiSpec {
    /// nDPI protocol names whose flows get a bypass rule once classified.
    pub elephants: Vec<String>,
    /// nDPI custom protocols file (e.g. `tcp:5201@Iperf`).
    #[serde(default)]
    pub protocols_file: Option<PathBuf>,
    /// Bypass rules idle this long age out.
    #[serde(default = "dpi_idle")]
    pub idle_timeout_s: f64,
    /// false: classify only, never bypass (nDPI alone, the baseline).
    #[serde(default = "yes")]
    pub bypass: bool,
}

fn dpi_idle() -> f64 {
    10.0
}
fn yes() -> bool {
    true
}

/// The eNAT: endpoint-independent mapping and filtering (RFC 4787).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatSpec {
    /// The address inside endpoints appear under outside.
    pub public_ip: Ipv4Addr,
    /// Public ports handed out, per protocol: `first-last`.
    pub ports: String,
    /// A mapping without outbound traffic for this long expires (RFC 4787
    /// REQ-5: at least 120 s, 300 s recommended).
    #[serde(default = "nat_idle")]
    pub idle_timeout_s: f64,
}

impl NatSpec {
    /// `ports` as (first, last), once validated.
    pub fn port_range(&self) -> Result<(u16, u16), String> {
        let bad = || format!("{:?}: expected first-last, two ports with first <= last", self.ports);
        let (a, b) = self.ports.split_once('-').ok_or_else(bad)?;
        let (a, b): (u16, u16) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        if a == 0 || a > b {
            return Err(bad());
        }
        Ok((a, b))
    }
}

fn nat_idle() -> f64 {
    300.0
}

type Invalid = (Vec<Seg>, String);

/// Largest backend weight (weights are relative; the array has 1024 slots).
pub const MAX_WEIGHT: u32 = 10_000;

fn check_timeout(seconds: f64) -> Result<(), String> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 {
        Ok(())
    } else {
        Err(format!("{seconds}: seconds, more than 0 and at most 86400"))
    }
}

/// Reads and validates a hybrid NFs' configuration file.
pub fn parse(path: &Path) -> Result<EvnfSpec, YamlError> {
    let (text, origin) = ferry_config::read_file(path)?;
    let mut spec = EvnfSpec::from_yaml_str(&text, &origin)?;
    spec.resolve_files(path);
    Ok(spec)
}

impl EvnfSpec {
    /// Files named in the spec are relative to the spec's directory.
    fn resolve_files(&mut self, path: &Path) {
        if let Some(f) = self.dpi.as_mut().and_then(|d| d.protocols_file.as_mut()) {
            if f.is_relative() {
                *f = path.parent().unwrap_or(Path::new(".")).join(&*f);
            }
        }
    }

    pub fn from_yaml_str(text: &str, origin: &str) -> Result<EvnfSpec, YamlError> {
        let mut spec: EvnfSpec = parse_located(text, origin, EvnfSpec::validate)?;
        spec.origin = origin.to_string();
        Ok(spec)
    }

    /// The error for an NF whose section the file lacks.
    pub fn missing(&self, section: &str) -> crate::EvnfError {
        crate::EvnfError::Config(format!("{}: no `{section}:` section", self.origin))
    }

    /// The NFs' own sections: rules, backends, weights, timeouts.
    fn validate(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        if let Some(fw) = &self.firewall {
            if fw.rules.len() >= ferry_bpf::hybrid::FW_MAX_RULES as usize {
                return Err((
                    vec![Key("firewall"), Key("rules")],
                    format!("at most {} rules", ferry_bpf::hybrid::FW_MAX_RULES - 1),
                ));
            }
            for (i, r) in fw.rules.iter().enumerate() {
                let at = |k: &'static str| vec![Key("firewall"), Key("rules"), Index(i), Key(k)];
                match (&r.src, r.proto) {
                    (Some(src), None) => {
                        src.parse::<IpPrefix>().map_err(|e| (at("src"), e))?;
                        if r.port.is_some() {
                            return Err((at("port"), "a port rule needs proto, not src".into()));
                        }
                    }
                    (None, Some(_)) => {}
                    (Some(_), Some(_)) => {
                        return Err((at("src"), "a rule matches a source subnet or a protocol/port, not both".into()))
                    }
                    (None, None) => return Err((at("action"), "a rule needs src, or proto (and port)".into())),
                }
            }
        }
        if let Some(lb) = &self.balancer {
            if lb.backends.is_empty() {
                return Err((vec![Key("balancer"), Key("backends")], "at least one backend is required".into()));
            }
            if lb.backends.len() > ferry_bpf::hybrid::LB_MAX_BACKENDS as usize {
                return Err((vec![Key("balancer"), Key("backends")], "too many backends".into()));
            }
            if lb.proto == Proto::Icmp {
                return Err((vec![Key("balancer"), Key("proto")], "tcp or udp".into()));
            }
            for (i, b) in lb.backends.iter().enumerate() {
                if b.weight > MAX_WEIGHT {
                    let at = vec![Key("balancer"), Key("backends"), Index(i), Key("weight")];
                    return Err((at, format!("at most {MAX_WEIGHT}")));
                }
                if b.addr.is_ipv4() != lb.vip.is_ipv4() {
                    let at = vec![Key("balancer"), Key("backends"), Index(i), Key("addr")];
                    return Err((at, format!("{}: of another IP version than the VIP {}", b.addr, lb.vip)));
                }
                if lb.backends[..i].iter().any(|o| o.addr == b.addr) {
                    return Err((vec![Key("balancer"), Key("backends"), Index(i), Key("addr")], "listed twice".into()));
                }
            }
            if let Some(f) = &lb.feedback {
                if !(10..=3_600_000).contains(&f.interval_ms) {
                    let at = vec![Key("balancer"), Key("feedback"), Key("interval_ms")];
                    return Err((at, "10 to 3600000".into()));
                }
            }
            check_timeout(lb.idle_timeout_s).map_err(|e| (vec![Key("balancer"), Key("idle_timeout_s")], e))?;
        }
        if let Some(dpi) = &self.dpi {
            check_timeout(dpi.idle_timeout_s).map_err(|e| (vec![Key("dpi"), Key("idle_timeout_s")], e))?;
        }
        if let Some(nat) = &self.nat {
            nat.port_range().map_err(|e| (vec![Key("nat"), Key("ports")], e))?;
            check_timeout(nat.idle_timeout_s).map_err(|e| (vec![Key("nat"), Key("idle_timeout_s")], e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "firewall:\n  rules:\n    - { src: 10.10.66.0/24, action: deny }\n    - { proto: tcp, port: 80, action: allow }\nbalancer:\n  vip: 10.10.9.9:80\n  backends:\n    - { addr: 10.10.2.11:80, weight: 2 }\n    - { addr: 10.10.3.12:80 }\n";

    #[test]
    fn parses_the_sections() {
        let s = EvnfSpec::from_yaml_str(GOOD, "sfc.yaml").unwrap();
        assert_eq!(s.firewall.as_ref().unwrap().rules[0].subnet(), Some("10.10.66.0/24".parse().unwrap()));
        assert_eq!(s.balancer.as_ref().unwrap().backends[1].weight, 1);
        assert!(s.dpi.is_none() && s.nat.is_none());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = GOOD.replace("10.10.66.0/24", "10.10.66.0/40");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.starts_with("sfc.yaml:3:") && e.contains("firewall.rules[0].src") && e.contains("prefix"), "{e}");
        let bad = GOOD.replace("10.10.9.9:80", "10.10.9.9");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("balancer.vip"), "{e}");
        let bad = GOOD.replace("balancer:\n", "balancr:\n");
        assert!(EvnfSpec::from_yaml_str(&bad, "sfc.yaml").is_err());
        let bad = GOOD.replace("  vip:", "  idle_timeout_s: .nan\n  vip:");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("balancer.idle_timeout_s"), "{e}");
        let bad = GOOD.replace("weight: 2", "weight: 20000");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("backends[0].weight"), "{e}");
        // Where the NFs run is the chain file's business.
        let bad = format!("ports:\n  - {{ dev: d0, chain: [firewall] }}\n{GOOD}");
        let e = EvnfSpec::from_yaml_str(&bad, "x.yaml").unwrap_err().to_string();
        assert!(e.contains("ports"), "{e}");
    }
}
