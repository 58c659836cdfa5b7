//! Chains over several hosts (RFC 7665 service function chaining with
//! NSH, RFC 8300).
//!
//! ```yaml
//! name: across
//! spi: 7                      # the service path's id (24 bits)
//! hosts:
//!   - name: h1
//!     control: 10.0.0.1:7443  # its ferryd, mutual TLS (or unix:PATH, this machine's admin socket)
//!     netns: h1               # where its devices live (default: the root namespace)
//!     fabric: { dev: f1, addr: 10.9.0.1 }   # to the other hosts; encap: vxlan-gpe (default) or ethernet
//! nfs:
//!   - { name: fw, domain: main, kind: firewall, args: [...], location: h1 }
//! ports:
//!   - { name: in, netdev: c0, location: h1 }
//! ```
//!
//! A chain over hosts is one path, from a port to a port (or a last NF).
//! Each time it crosses to another host it carries NSH with the chain's
//! SPI and an SI that starts at 255 and drops by one per crossing; a run
//! of NFs on one host is one hop of the path. Every host's ferryd gets
//! the whole file and takes its own part ([`ChainSpec::host_part`]): its
//! NFs and ports, a port per NSH attachment (a veth pair ferryd makes),
//! and its forwarding entries.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use ferry_config::Seg;
use serde::{Deserialize, Serialize};

use crate::spec::{valid_name, ChainSpec, LinkSpec, Node, PortSpec, XdpMode};

/// A host the chain runs on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub name: String,
    /// Its ferryd's control endpoint: `ADDR:PORT` (mutual TLS), or
    /// `unix:PATH` (the admin socket of a ferryd on this machine).
    #[serde(default)]
    pub control: Option<String>,
    /// The network namespace of its devices (root if absent); ports
    /// located on the host are in it.
    #[serde(default)]
    pub netns: Option<String>,
    pub fabric: FabricSpec,
}

/// The device a host reaches the other hosts by.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    pub dev: String,
    /// Its IPv4 address (VXLAN-GPE's outer address; also names the host to
    /// its peers' forwarders).
    pub addr: Ipv4Addr,
    #[serde(default)]
    pub encap: FabricEncap,
    /// The VXLAN-GPE network identifier.
    #[serde(default = "default_vni")]
    pub vni: u32,
    #[serde(default)]
    pub xdp_mode: XdpMode,
}

/// How NSH travels between hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FabricEncap {
    /// In IPv4/UDP 4790 (routable).
    #[default]
    VxlanGpe,
    /// Right after Ethernet, EtherType 0x894F (one L2 segment).
    Ethernet,
}

fn default_vni() -> u32 {
    1
}

/// The largest SPI and VNI (24 bits).
pub const MAX_24: u32 = 0x00ff_ffff;

/// What one host does for a chain over hosts.
#[derive(Debug, Clone)]
pub struct HostPart {
    pub host: HostSpec,
    pub spi: u32,
    /// Its NFs and ports, and a port per NSH attachment (netdev empty:
    /// ferryd makes the device and names it); None when only NSH
    /// forwarding happens here.
    pub chain: Option<ChainSpec>,
    pub hops: Vec<NshHop>,
}

/// One (SPI, SI) entry of a host, or the device that puts frames on it.
#[derive(Debug, Clone, PartialEq)]
pub struct NshHop {
    pub si: u8,
    pub role: HopRole,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HopRole {
    /// Every frame arriving on device `dev` enters the path (SI 255).
    Classify { dev: String },
    /// What the NF sends into attachment port `port` gets NSH again.
    Return { port: String },
    /// On to host `to` over the fabric.
    Forward { to: String },
    /// Into attachment port `port`, to the NF behind it, NSH stripped.
    Proxy { port: String },
    /// The path ends: NSH popped, the frame out of device `dev`.
    End { dev: String },
}

type Invalid = (Vec<Seg>, String);

impl ChainSpec {
    /// Hosts, locations and the SPI: all or nothing, and a chain over
    /// hosts is one path.
    pub(crate) fn check_hosts(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        let located = |what: &'static str, i: usize| vec![Key(what), Index(i), Key("location")];
        if self.hosts.is_empty() {
            if let Some(i) = self.nfs.iter().position(|n| n.location.is_some()) {
                return Err((located("nfs", i), "`location` needs the chain's `hosts`".into()));
            }
            if let Some(i) = self.ports.iter().position(|p| p.location.is_some()) {
                return Err((located("ports", i), "`location` needs the chain's `hosts`".into()));
            }
            if self.spi.is_some() {
                return Err((vec![Key("spi")], "`spi` is for chains over `hosts`".into()));
            }
            return Ok(());
        }
        match self.spi {
            None => return Err((vec![Key("hosts")], "a chain over hosts needs `spi` (1 to 16777215)".into())),
            Some(s) if !(1..=MAX_24).contains(&s) => return Err((vec![Key("spi")], format!("{s}: 1 to 16777215"))),
            _ => {}
        }
        let (mut names, mut addrs) = (HashSet::new(), HashSet::new());
        for (i, h) in self.hosts.iter().enumerate() {
            let at = |f| vec![Key("hosts"), Index(i), Key(f)];
            // Certificates name hosts: a DNS label, so no '_'.
            if !valid_name(&h.name) || h.name.contains('_') || !names.insert(h.name.as_str()) {
                return Err((at("name"), format!("{:?}: not a host name (a-z, 0-9, '-'), or given twice", h.name)));
            }
            let fab = |f| vec![Key("hosts"), Index(i), Key("fabric"), Key(f)];
            if h.fabric.dev.is_empty() || h.fabric.dev.len() > 15 || h.fabric.dev.contains(['/', ' ']) {
                return Err((fab("dev"), format!("{:?} is not a device name", h.fabric.dev)));
            }
            if h.fabric.addr.is_unspecified() || !addrs.insert(h.fabric.addr) {
                return Err((fab("addr"), format!("{}: unspecified, or another host's", h.fabric.addr)));
            }
            if h.fabric.vni > MAX_24 {
                return Err((fab("vni"), format!("{} is more than 24 bits", h.fabric.vni)));
            }
            if let Some(c) = &h.control {
                if c.strip_prefix("unix:").is_none() && c.parse::<std::net::SocketAddr>().is_err() {
                    return Err((at("control"), format!("{c:?}: ADDR:PORT or unix:PATH")));
                }
            }
        }
        // A frame leaves in the sender's encapsulation: the receivers must
        // take the same.
        if let Some(i) = self.hosts.iter().position(|h| h.fabric.encap != self.hosts[0].fabric.encap) {
            let why = "every host of a chain uses the same encap (the first host's)".to_string();
            return Err((vec![Key("hosts"), Index(i), Key("fabric"), Key("encap")], why));
        }
        for (i, n) in self.nfs.iter().enumerate() {
            self.host_of(n.location.as_deref()).map_err(|m| (located("nfs", i), m))?;
        }
        for (i, p) in self.ports.iter().enumerate() {
            let h = self.host_of(p.location.as_deref()).map_err(|m| (located("ports", i), m))?;
            if p.netns.is_some() && p.netns != h.netns {
                let why =
                    format!("port {:?} is on host {:?}, whose devices are in netns {:?}", p.name, h.name, h.netns);
                return Err((vec![Key("ports"), Index(i), Key("netns")], why));
            }
            if p.name.starts_with("nsh-") {
                let why = "`nsh-` names the ports of NSH attachments ferryd makes".to_string();
                return Err((vec![Key("ports"), Index(i), Key("name")], why));
            }
            if p.classify.is_some() || p.via.is_some() {
                return Err((vec![Key("ports"), Index(i)], "tenant classification is for chains on one host".into()));
            }
        }
        if !self.kernel.is_empty() {
            return Err((vec![Key("kernel")], "kernel hops are for chains on one host".into()));
        }
        let path = self.path().map_err(|m| (vec![Key("links")], m))?;
        let crossings = path.windows(2).filter(|w| self.location(w[0]) != self.location(w[1])).count();
        if crossings > 254 {
            return Err((vec![Key("links")], format!("{crossings} host crossings: NSH's SI allows 254")));
        }
        Ok(())
    }

    fn host_of(&self, location: Option<&str>) -> Result<&HostSpec, String> {
        let l = location.ok_or("a chain over hosts puts every NF and port on one: `location` is missing")?;
        self.hosts.iter().find(|h| h.name == l).ok_or_else(|| format!("unknown host {l:?}"))
    }

    /// Where node `n` runs.
    fn location(&self, n: Node) -> Option<&str> {
        match n {
            Node::Nf(i) => self.nfs[i].location.as_deref(),
            Node::Port(i) => self.ports[i].location.as_deref(),
            Node::Kernel(_) => None,
        }
    }

    /// The chain as one path from a port: each node has at most one link
    /// in and one out.
    fn path(&self) -> Result<Vec<Node>, String> {
        let ends = |l: &LinkSpec| (self.node(&l.from), self.node(&l.to));
        let mut next = std::collections::HashMap::new();
        let mut has_in = HashSet::new();
        for l in &self.links {
            let (Some(a), Some(b)) = ends(l) else { continue };
            if next.insert(a, b).is_some() {
                return Err(format!("a chain over hosts is one path, but {:?} has two links out", l.from));
            }
            if !has_in.insert(b) {
                return Err(format!("a chain over hosts is one path, but {:?} has two links in", l.to));
            }
        }
        let starts: Vec<Node> = (0..self.ports.len()).map(Node::Port).filter(|p| !has_in.contains(p)).collect();
        let [start] = starts[..] else {
            return Err(format!("a chain over hosts starts at one port; {} ports have no link in", starts.len()));
        };
        let mut path = vec![start];
        while let Some(&n) = next.get(path.last().expect("one at least")) {
            path.push(n);
        }
        if path.len() != self.ports.len() + self.nfs.len() {
            return Err("a chain over hosts is one path through every NF and port".into());
        }
        Ok(path)
    }

    /// Host `host`'s part (see the module's text).
    pub fn host_part(&self, host: &str) -> Result<HostPart, String> {
        let me = self.hosts.iter().find(|h| h.name == host).ok_or_else(|| format!("no host {host:?} in the chain"))?;
        let spi = self.spi.ok_or("the chain names no spi")?;
        let path = self.path()?;
        let here = |n: Node| self.location(n) == Some(host);
        let mut local =
            ChainSpec { hosts: Vec::new(), spi: None, links: Vec::new(), ports: Vec::new(), ..self.clone() };
        local.nfs.retain(|n| n.location.as_deref() == Some(host));
        let name = |n: Node| match n {
            Node::Nf(i) => self.nfs[i].name.clone(),
            Node::Port(i) => self.ports[i].name.clone(),
            Node::Kernel(i) => self.kernel[i].name.clone(),
        };
        let mut hops = Vec::new();
        let mut crossing = 0u8;
        for w in path.windows(2) {
            let (a, b) = (w[0], w[1]);
            let link = || LinkSpec { from: name(a), to: name(b), mode: None };
            if self.location(a) == self.location(b) {
                if here(a) {
                    local.links.push(link());
                    for n in [a, b] {
                        if let Node::Port(i) = n {
                            local.ports.push(self.ports[i].clone());
                        }
                    }
                }
                continue;
            }
            let si = 255 - crossing;
            crossing += 1;
            let attach = |side: &str, nf: usize| PortSpec {
                name: format!("nsh-{side}-{si}"),
                netns: me.netns.clone(),
                netdev: String::new(),
                queues: self.nfs[nf].threads,
                xdp_mode: XdpMode::Generic,
                classify: None,
                via: None,
                tenant: None,
                location: Some(host.to_string()),
                rings: Default::default(),
                unowned_queues: Default::default(),
            };
            if here(a) {
                let role = match a {
                    Node::Port(i) => HopRole::Classify { dev: self.ports[i].netdev.clone() },
                    Node::Nf(i) => {
                        let port = attach("out", i);
                        local.links.push(LinkSpec { from: name(a), to: port.name.clone(), mode: None });
                        let role = HopRole::Return { port: port.name.clone() };
                        local.ports.push(port);
                        role
                    }
                    Node::Kernel(_) => return Err("kernel hops are for chains on one host".into()),
                };
                hops.push(NshHop { si, role });
                let to = self.location(b).unwrap_or_default().to_string();
                hops.push(NshHop { si, role: HopRole::Forward { to } });
            }
            if here(b) {
                let role = match b {
                    Node::Port(i) => HopRole::End { dev: self.ports[i].netdev.clone() },
                    Node::Nf(i) => {
                        let port = attach("in", i);
                        local.links.push(LinkSpec { from: port.name.clone(), to: name(b), mode: None });
                        let role = HopRole::Proxy { port: port.name.clone() };
                        local.ports.push(port);
                        role
                    }
                    Node::Kernel(_) => return Err("kernel hops are for chains on one host".into()),
                };
                hops.push(NshHop { si, role });
            }
        }
        let mut seen = HashSet::new();
        local.ports.retain(|p| seen.insert(p.name.clone()));
        let used: HashSet<&str> = local.nfs.iter().map(|n| n.domain.as_str()).collect();
        let domains = local.domains.iter().filter(|d| used.contains(d.name.as_str())).cloned().collect();
        local.domains = domains;
        let chain = (!local.nfs.is_empty()).then_some(local);
        Ok(HostPart { host: me.clone(), spi, chain, hops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct AnyKind;
    impl crate::spec::KindCheck for AnyKind {
        fn check(&self, _: &str, _: &[String], _: usize) -> Result<(), (Option<usize>, String)> {
            Ok(())
        }
        fn needs_out_link(&self, _: &str) -> bool {
            false
        }
    }

    const ACROSS: &str = r#"
name: across
spi: 7
domains: [ { name: main } ]
hosts:
  - { name: h1, netns: n1, fabric: { dev: f1, addr: 10.9.0.1 } }
  - { name: h2, netns: n2, fabric: { dev: f2, addr: 10.9.0.2 } }
  - { name: h3, netns: n3, fabric: { dev: f3, addr: 10.9.0.3 } }
ports:
  - { name: in, netdev: c0, location: h1 }
  - { name: out, netdev: s0, location: h3 }
nfs:
  - { name: a, domain: main, kind: fwd, location: h1 }
  - { name: b, domain: main, kind: fwd, location: h2 }
  - { name: c, domain: main, kind: fwd, location: h2 }
links:
  - { from: in, to: a }
  - { from: a, to: b }
  - { from: b, to: c }
  - { from: c, to: out }
"#;

    fn spec(text: &str) -> ChainSpec {
        ChainSpec::from_yaml_str(text, "across.yaml", &AnyKind).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Each host gets its NFs, an attachment port per crossing and the
    /// entries of the crossings it sends and receives; SI drops by one per
    /// crossing; ports take their host's namespace.
    #[test]
    fn each_host_takes_its_part() {
        let s = spec(ACROSS);
        let h1 = s.host_part("h1").unwrap();
        let c1 = h1.chain.as_ref().expect("a runs on h1");
        assert_eq!(c1.nfs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(c1.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["in", "nsh-out-255"]);
        assert_eq!(c1.ports[0].netns.as_deref(), Some("n1"));
        assert_eq!(
            h1.hops,
            [
                NshHop { si: 255, role: HopRole::Return { port: "nsh-out-255".into() } },
                NshHop { si: 255, role: HopRole::Forward { to: "h2".into() } },
            ]
        );
        let h2 = s.host_part("h2").unwrap();
        let c2 = h2.chain.as_ref().unwrap();
        assert_eq!(c2.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["nsh-in-255", "nsh-out-254"]);
        assert_eq!(c2.links.len(), 3, "{:?}", c2.links);
        assert_eq!(h2.hops[0], NshHop { si: 255, role: HopRole::Proxy { port: "nsh-in-255".into() } });
        assert_eq!(h2.hops[2], NshHop { si: 254, role: HopRole::Forward { to: "h3".into() } });
        let h3 = s.host_part("h3").unwrap();
        assert!(h3.chain.is_none(), "only the path's end on h3");
        assert_eq!(h3.hops, [NshHop { si: 254, role: HopRole::End { dev: "s0".into() } }]);
    }

    /// A port right before another host pushes NSH itself (the classifier).
    #[test]
    fn a_port_before_a_crossing_is_the_classifier() {
        let s = spec(&ACROSS.replace(
            "name: a, domain: main, kind: fwd, location: h1",
            "name: a, domain: main, kind: fwd, location: h2",
        ));
        let h1 = s.host_part("h1").unwrap();
        assert!(h1.chain.is_none());
        assert_eq!(h1.hops[0], NshHop { si: 255, role: HopRole::Classify { dev: "c0".into() } });
    }

    #[test]
    fn bad_host_files_name_the_field() {
        let bad = [
            (ACROSS.replace("spi: 7\n", ""), "hosts: a chain over hosts needs `spi`"),
            (ACROSS.replace(", location: h3", ""), "ports[1].location"),
            (ACROSS.replace("location: h2 }\n  - { name: c", "location: h9 }\n  - { name: c"), "unknown host \"h9\""),
            (ACROSS.replace("addr: 10.9.0.2", "addr: 10.9.0.1"), "hosts[1].fabric.addr"),
            (
                ACROSS.replace("  - { from: b, to: c }\n", "  - { from: b, to: c }\n  - { from: a, to: c }\n"),
                "one path",
            ),
            (
                ACROSS.replace(
                    "{ name: in, netdev: c0, location: h1 }",
                    "{ name: in, netns: n2, netdev: c0, location: h1 }",
                ),
                "ports[0].netns",
            ),
            (ACROSS.replace("addr: 10.9.0.3 }", "addr: 10.9.0.3, encap: ethernet }"), "hosts[2].fabric.encap"),
            (ACROSS.replace("name: out,", "name: nsh-out-1,").replace("to: out", "to: nsh-out-1"), "ports[1].name"),
        ];
        for (text, want) in bad {
            let e = ChainSpec::from_yaml_str(&text, "across.yaml", &AnyKind).expect_err(want).to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
        let one_host = "name: x\ndomains: [ { name: m } ]\nnfs: [ { name: a, domain: m, kind: fwd, location: h1 } ]\n";
        let e = ChainSpec::from_yaml_str(one_host, "x.yaml", &AnyKind).unwrap_err().to_string();
        assert!(e.contains("nfs[0].location") && e.contains("needs the chain's `hosts`"), "{e}");
    }
}
