//! The hybrid-NF file (YAML): where chains start, and each NF's rules.
//! Errors name the file, line and field (`ferry_testbed::yamlloc`).
//!
//! ```yaml
//! ports:
//!   - { dev: d0, chain: [firewall, balancer] }
//!   - { dev: d1, chain: [balancer_reply] }
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

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use ferry_testbed::yamlloc::{parse_located, Seg, YamlError};
use serde::Deserialize;

/// One of the fast-path programs, as named in `chain:` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NfName {
    Firewall,
    Balancer,
    BalancerReply,
    Dpi,
}

impl NfName {
    pub fn fast_path(self) -> ferry_bpf::evnf::EvNf {
        use ferry_bpf::evnf::EvNf;
        match self {
            NfName::Firewall => EvNf::Firewall,
            NfName::Balancer => EvNf::Balancer,
            NfName::BalancerReply => EvNf::BalancerReply,
            NfName::Dpi => EvNf::Dpi,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvnfSpec {
    /// Where `ferry evnf run` starts chains. A chain file places hybrid
    /// NFs by its own links, and reads only their sections
    /// ([`parse_sections`]).
    #[serde(default)]
    pub ports: Vec<PortSpec>,
    /// `driver` (default) or `generic`.
    #[serde(default)]
    pub xdp_mode: Option<String>,
    #[serde(default)]
    pub firewall: Option<FirewallSpec>,
    #[serde(default)]
    pub balancer: Option<BalancerSpec>,
    #[serde(default)]
    pub dpi: Option<DpiSpec>,
    /// The eNAT: only in chains (`ferry evnf run` does not run it).
    #[serde(default)]
    pub nat: Option<NatSpec>,
    #[serde(skip)]
    pub origin: String,
}

/// A device where frames enter a chain of fast paths.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    pub dev: String,
    pub chain: Vec<NfName>,
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
    /// `src` as (address, prefix length), once validated.
    pub fn subnet(&self) -> Option<(Ipv4Addr, u8)> {
        self.src.as_deref().and_then(|s| parse_cidr(s).ok())
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
    pub addr: SocketAddrV4,
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
    pub vip: SocketAddrV4,
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
    /// The TUN device the slow path hands inspected packets back to the
    /// kernel through.
    #[serde(default = "reinject_dev")]
    pub reinject_dev: String,
}

fn dpi_idle() -> f64 {
    10.0
}
fn yes() -> bool {
    true
}
fn reinject_dev() -> String {
    "fy-dpi0".into()
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

/// `a.b.c.d/len`.
pub fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (addr, len) = s.split_once('/').ok_or_else(|| format!("{s:?}: expected address/prefix"))?;
    let addr: Ipv4Addr = addr.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let len: u8 = len.parse().map_err(|e| format!("{s:?}: prefix: {e}"))?;
    if len > 32 {
        return Err(format!("{s:?}: prefix longer than 32"));
    }
    Ok((addr, len))
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

/// Reads and validates a hybrid-NF file.
pub fn parse(path: &Path) -> Result<EvnfSpec, YamlError> {
    let (text, origin) = ferry_testbed::yamlloc::read_file(path)?;
    let mut spec = EvnfSpec::from_yaml_str(&text, &origin)?;
    spec.resolve_files(path);
    Ok(spec)
}

/// Reads and validates the NF sections of a hybrid-NF file, for NFs a
/// chain file places: its `ports:` may be absent, and are not checked.
pub fn parse_sections(path: &Path) -> Result<EvnfSpec, YamlError> {
    let (text, origin) = ferry_testbed::yamlloc::read_file(path)?;
    let mut spec: EvnfSpec = parse_located(&text, &origin, EvnfSpec::validate_sections)?;
    spec.origin = origin;
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

    /// Which NF follows which, over all chains (each NF has one successor).
    pub fn successors(&self) -> Vec<(NfName, Option<NfName>)> {
        let mut out: Vec<(NfName, Option<NfName>)> = Vec::new();
        for p in &self.ports {
            for (i, nf) in p.chain.iter().enumerate() {
                if !out.iter().any(|(n, _)| n == nf) {
                    out.push((*nf, p.chain.get(i + 1).copied()));
                }
            }
        }
        out
    }

    pub fn uses(&self, nf: NfName) -> bool {
        self.ports.iter().any(|p| p.chain.contains(&nf))
    }

    fn validate(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        if self.ports.is_empty() {
            return Err((vec![Key("ports")], "at least one port is required".into()));
        }
        if let Some(m) = &self.xdp_mode {
            if let Err(e) = m.parse::<ferry_bpf::AttachMode>() {
                return Err((vec![Key("xdp_mode")], e));
            }
        }
        let mut next: Vec<(NfName, Option<NfName>)> = Vec::new();
        for (pi, p) in self.ports.iter().enumerate() {
            let at = |k: &'static str| vec![Key("ports"), Index(pi), Key(k)];
            if p.dev.is_empty() || p.dev.len() > 15 {
                return Err((at("dev"), format!("{:?}: device names have 1 to 15 bytes", p.dev)));
            }
            if self.ports[..pi].iter().any(|q| q.dev == p.dev) {
                return Err((at("dev"), format!("{:?} has a chain already", p.dev)));
            }
            // The slow path hands frames back to the kernel, not to the NFs
            // after it, and its sockets are keyed by queue in one map.
            if let Some(i) = p.chain.iter().position(|n| *n == NfName::Dpi) {
                if i + 1 != p.chain.len() {
                    return Err((at("chain"), "dpi must be the last NF of its chain".into()));
                }
                if self.ports[..pi].iter().any(|q| q.chain.contains(&NfName::Dpi)) {
                    return Err((at("chain"), "dpi may start on one port only".into()));
                }
            }
            if p.chain.is_empty() {
                return Err((at("chain"), "a chain needs at least one NF".into()));
            }
            for (i, nf) in p.chain.iter().enumerate() {
                let mut path = at("chain");
                path.push(Index(i));
                if p.chain[..i].contains(nf) {
                    return Err((path, format!("{nf:?} appears twice in one chain")));
                }
                let succ = p.chain.get(i + 1).copied();
                match next.iter().find(|(n, _)| n == nf) {
                    Some((_, s)) if *s != succ => {
                        return Err((
                            path,
                            format!("{nf:?} is followed by {s:?} in another chain; an NF has one successor"),
                        ))
                    }
                    Some(_) => {}
                    None => next.push((*nf, succ)),
                }
                let configured = match nf {
                    NfName::Firewall => self.firewall.is_some(),
                    NfName::Balancer | NfName::BalancerReply => self.balancer.is_some(),
                    NfName::Dpi => self.dpi.is_some(),
                };
                if !configured {
                    return Err((path, format!("{nf:?} is used but has no section of its own")));
                }
            }
        }
        if self.uses(NfName::Balancer) && !self.uses(NfName::BalancerReply) {
            return Err((vec![Key("ports")], "balancer needs balancer_reply on the backend-facing ports".into()));
        }
        self.validate_sections()
    }

    /// The NFs' own sections: rules, backends, weights, timeouts.
    fn validate_sections(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        if let Some(fw) = &self.firewall {
            if fw.rules.len() >= ferry_bpf::evnf::FW_MAX_RULES as usize {
                return Err((
                    vec![Key("firewall"), Key("rules")],
                    format!("at most {} rules", ferry_bpf::evnf::FW_MAX_RULES - 1),
                ));
            }
            for (i, r) in fw.rules.iter().enumerate() {
                let at = |k: &'static str| vec![Key("firewall"), Key("rules"), Index(i), Key(k)];
                match (&r.src, r.proto) {
                    (Some(src), None) => {
                        parse_cidr(src).map_err(|e| (at("src"), e))?;
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
            if lb.backends.len() > ferry_bpf::evnf::LB_MAX_BACKENDS as usize {
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

    const GOOD: &str = "ports:\n  - { dev: d0, chain: [firewall, balancer] }\n  - { dev: d1, chain: [balancer_reply] }\nfirewall:\n  rules:\n    - { src: 10.10.66.0/24, action: deny }\n    - { proto: tcp, port: 80, action: allow }\nbalancer:\n  vip: 10.10.9.9:80\n  backends:\n    - { addr: 10.10.2.11:80, weight: 2 }\n    - { addr: 10.10.3.12:80 }\n";

    #[test]
    fn parses_a_chain_file() {
        let s = EvnfSpec::from_yaml_str(GOOD, "sfc.yaml").unwrap();
        assert_eq!(s.firewall.as_ref().unwrap().rules[0].subnet(), Some((Ipv4Addr::new(10, 10, 66, 0), 24)));
        assert_eq!(s.balancer.as_ref().unwrap().backends[1].weight, 1);
        assert_eq!(
            s.successors(),
            vec![(NfName::Firewall, Some(NfName::Balancer)), (NfName::Balancer, None), (NfName::BalancerReply, None)]
        );
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = GOOD.replace("10.10.66.0/24", "10.10.66.0/40");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.starts_with("sfc.yaml:6:") && e.contains("firewall.rules[0].src") && e.contains("prefix"), "{e}");
        let bad = GOOD.replace("10.10.9.9:80", "10.10.9.9");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("balancer.vip"), "{e}");
        let bad = GOOD.replace("chain: [balancer_reply]", "chain: [firewall]");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("ports[1].chain[0]") && e.contains("one successor"), "{e}");
        let bad = GOOD.replace("balancer:\n", "balancr:\n");
        assert!(EvnfSpec::from_yaml_str(&bad, "sfc.yaml").is_err());
        let bad = GOOD.replace("idle_timeout_s", "x").replace("  vip:", "  idle_timeout_s: .nan\n  vip:");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("balancer.idle_timeout_s"), "{e}");
        let bad = GOOD.replace("chain: [balancer_reply]", "chain: [balancer]");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("balancer_reply"), "{e}");
        let bad = GOOD.replace("weight: 2", "weight: 20000");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("backends[0].weight"), "{e}");
        let bad = GOOD.replace("dev: d1", "dev: d0");
        let e = EvnfSpec::from_yaml_str(&bad, "sfc.yaml").unwrap_err().to_string();
        assert!(e.contains("ports[1].dev"), "{e}");
        let bad = "ports:\n  - { dev: d0, chain: [dpi] }\n";
        let e = EvnfSpec::from_yaml_str(bad, "x.yaml").unwrap_err().to_string();
        assert!(e.contains("ports[0].chain[0]") && e.contains("no section"), "{e}");
    }
}
