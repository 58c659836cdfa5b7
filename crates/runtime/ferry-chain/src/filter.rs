//! Capture filters: the part of tcpdump's filter language (pcap-filter(7))
//! operators type most, evaluated on the frame's flow as the one flow
//! parser ([`ferry_wire::flow::parse`]) reads it, so VLAN tags and IPv6
//! extension headers are seen through as the NFs see through them.
//!
//! ```text
//! expr      := and ("or" and)*              ("||" too)
//! and       := not ("and" not)*             ("&&" too)
//! not       := ("not" | "!") not | "(" expr ")" | primitive
//! primitive := [src|dst] host ADDR | [src|dst] net PREFIX | [src|dst] port N
//!            | ip | ip6 | tcp | udp | icmp | icmp6 | arp | vlan [ID]
//! ```
//!
//! A frame the parser refuses matches no primitive (so `not tcp` takes it).

use std::net::IpAddr;

use ferry_wire::flow::Flow;
use ferry_wire::prefix::IpPrefix;

/// Which end of a flow a primitive looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Src,
    Dst,
    Either,
}

#[derive(Debug, Clone, PartialEq)]
enum Prim {
    Net(Dir, IpPrefix),
    Port(Dir, u16),
    Ip,
    Ip6,
    Proto(u8),
    Icmp,
    Icmp6,
    Arp,
    Vlan(Option<u16>),
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter(Node);

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// The empty filter: takes every frame.
    All,
    Prim(Box<Prim>),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
}

/// Why a filter does not parse: the word where it went wrong and what
/// was expected there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter {filter:?}: at word {word} ({found:?}): expected {expected}")]
pub struct FilterError {
    pub filter: String,
    pub word: usize,
    pub found: String,
    pub expected: String,
}

impl std::str::FromStr for Filter {
    type Err = FilterError;

    fn from_str(s: &str) -> Result<Filter, FilterError> {
        let spaced = s.replace('(', " ( ").replace(')', " ) ").replace('!', " ! ");
        let words: Vec<&str> = spaced.split_whitespace().collect();
        if words.is_empty() {
            return Ok(Filter(Node::All));
        }
        let mut p = Parser { words: &words, at: 0, text: s };
        let f = p.or()?;
        match p.peek() {
            None => Ok(Filter(f)),
            Some(_) => Err(p.error("\"and\", \"or\" or the end")),
        }
    }
}

struct Parser<'a> {
    words: &'a [&'a str],
    at: usize,
    text: &'a str,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).copied()
    }

    fn next(&mut self) -> Option<&'a str> {
        let w = self.peek();
        self.at += 1;
        w
    }

    fn error(&self, expected: &str) -> FilterError {
        FilterError {
            filter: self.text.to_string(),
            word: self.at.min(self.words.len()) + 1,
            found: self.peek().unwrap_or("end").to_string(),
            expected: expected.to_string(),
        }
    }

    fn or(&mut self) -> Result<Node, FilterError> {
        let mut left = self.and()?;
        while matches!(self.peek(), Some("or" | "||")) {
            self.at += 1;
            left = Node::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, FilterError> {
        let mut left = self.not()?;
        while matches!(self.peek(), Some("and" | "&&")) {
            self.at += 1;
            left = Node::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Node, FilterError> {
        match self.peek() {
            Some("not" | "!") => {
                self.at += 1;
                Ok(Node::Not(Box::new(self.not()?)))
            }
            Some("(") => {
                self.at += 1;
                let f = self.or()?;
                if self.next() != Some(")") {
                    self.at -= 1;
                    return Err(self.error("\")\""));
                }
                Ok(f)
            }
            _ => Ok(Node::Prim(Box::new(self.primitive()?))),
        }
    }

    fn primitive(&mut self) -> Result<Prim, FilterError> {
        let dir = match self.peek() {
            Some("src") => Dir::Src,
            Some("dst") => Dir::Dst,
            _ => Dir::Either,
        };
        if dir != Dir::Either {
            self.at += 1;
        }
        let word = self.peek().ok_or_else(|| self.error("a primitive (host, net, port, tcp, udp, ...)"))?;
        let simple = match word {
            "ip" => Some(Prim::Ip),
            "ip6" => Some(Prim::Ip6),
            "tcp" => Some(Prim::Proto(6)),
            "udp" => Some(Prim::Proto(17)),
            "icmp" => Some(Prim::Icmp),
            "icmp6" => Some(Prim::Icmp6),
            "arp" => Some(Prim::Arp),
            _ => None,
        };
        match (word, simple) {
            (_, Some(p)) if dir == Dir::Either => {
                self.at += 1;
                Ok(p)
            }
            ("vlan", None) if dir == Dir::Either => {
                self.at += 1;
                let id = self.peek().and_then(|w| w.parse::<u16>().ok()).filter(|&id| id < 4096);
                if id.is_some() {
                    self.at += 1;
                }
                Ok(Prim::Vlan(id))
            }
            ("host" | "net" | "port", None) => {
                self.at += 1;
                let arg = self.peek().ok_or_else(|| self.error(&format!("the {word}'s value")))?;
                let prim = match word {
                    "host" => arg.parse::<IpAddr>().ok().map(|a| Prim::Net(dir, IpPrefix::host(a))),
                    "net" => arg.parse::<IpPrefix>().ok().map(|p| Prim::Net(dir, p)),
                    _ => arg.parse::<u16>().ok().map(|p| Prim::Port(dir, p)),
                };
                let expected = match word {
                    "host" => "an IPv4 or IPv6 address",
                    "net" => "a prefix such as 10.0.0.0/8 or 2001:db8::/32",
                    _ => "a port number (0-65535)",
                };
                let prim = prim.ok_or_else(|| self.error(expected))?;
                self.at += 1;
                Ok(prim)
            }
            _ if dir != Dir::Either => Err(self.error("host, net or port after src/dst")),
            _ => Err(self.error("a primitive: [src|dst] host|net|port, ip, ip6, tcp, udp, icmp, icmp6, arp, vlan")),
        }
    }
}

impl Filter {
    /// Whether the filter takes `frame`.
    pub fn matches(&self, frame: &[u8]) -> bool {
        match &self.0 {
            Node::All => true,
            node => node.eval(ferry_wire::flow::parse(frame).ok().as_ref()),
        }
    }
}

impl Node {
    fn eval(&self, flow: Option<&Flow>) -> bool {
        match self {
            Node::All => true,
            Node::Not(f) => !f.eval(flow),
            Node::And(a, b) => a.eval(flow) && b.eval(flow),
            Node::Or(a, b) => a.eval(flow) || b.eval(flow),
            Node::Prim(p) => flow.is_some_and(|f| p.eval(f)),
        }
    }
}

impl Prim {
    fn eval(&self, f: &Flow) -> bool {
        let pick = |dir: Dir, test: &dyn Fn(bool) -> bool| match dir {
            Dir::Src => test(true),
            Dir::Dst => test(false),
            Dir::Either => test(true) || test(false),
        };
        let l4_ports = f.proto == 6 || f.proto == 17;
        match self {
            Prim::Net(dir, prefix) => {
                f.ip.is_some()
                    && prefix.is_ipv4() == f.is_ipv4()
                    && pick(*dir, &|src| prefix.contains(if src { f.src } else { f.dst }))
            }
            Prim::Port(dir, port) => {
                l4_ports && !f.later_fragment && pick(*dir, &|src| *port == if src { f.sport } else { f.dport })
            }
            Prim::Ip => f.is_ipv4(),
            Prim::Ip6 => f.is_ipv6(),
            Prim::Proto(p) => f.ip.is_some() && f.proto == *p,
            Prim::Icmp => f.is_ipv4() && f.proto == 1,
            Prim::Icmp6 => f.is_ipv6() && f.proto == 58,
            Prim::Arp => f.ethertype == 0x0806,
            Prim::Vlan(id) => f.outer_vlan.is_some() && id.map_or(true, |id| f.outer_vlan == Some(id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &str) -> Filter {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn host_port_and_protocol_pick_their_frames() {
        let udp = udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 53);
        assert!(f("").matches(&udp));
        assert!(f("host 10.0.0.1").matches(&udp));
        assert!(f("src host 10.0.0.1 and dst port 53").matches(&udp));
        assert!(!f("dst host 10.0.0.1").matches(&udp));
        assert!(f("udp and port 1000").matches(&udp));
        assert!(!f("tcp or icmp").matches(&udp));
        assert!(f("not tcp").matches(&udp));
        assert!(f("net 10.0.0.0/8 and !(port 22 or port 80)").matches(&udp));
        assert!(!f("ip6").matches(&udp) && f("ip").matches(&udp));
        assert!(!f("host 2001:db8::1").matches(&udp), "an IPv6 host never matches IPv4");
        assert!(!f("vlan").matches(&udp));
    }

    #[test]
    fn a_malformed_frame_matches_only_negations() {
        assert!(!f("udp").matches(&[0u8; 10]));
        assert!(f("not udp").matches(&[0u8; 10]));
    }

    #[test]
    fn bad_filters_say_where_and_what() {
        let e = "host 10.0.0.300".parse::<Filter>().unwrap_err();
        assert_eq!((e.word, e.found.as_str()), (2, "10.0.0.300"));
        assert!(e.expected.contains("address"), "{e}");
        let e = "tcp and".parse::<Filter>().unwrap_err();
        assert_eq!(e.found, "end");
        let e = "(udp".parse::<Filter>().unwrap_err();
        assert!(e.expected.contains(')'), "{e}");
        let e = "src tcp".parse::<Filter>().unwrap_err();
        assert!(e.expected.contains("after src/dst"), "{e}");
        assert!("tcp udp".parse::<Filter>().is_err());
    }

    /// A minimal Ethernet + IPv4 + UDP frame (checksums left 0: RFC 768
    /// allows an unset UDP checksum over IPv4; the parser does not check
    /// the IPv4 one).
    fn udp_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut v = vec![0u8; 14 + 20 + 8 + 4];
        v[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        v[14] = 0x45;
        v[16..18].copy_from_slice(&(20u16 + 8 + 4).to_be_bytes());
        v[22] = 64;
        v[23] = 17;
        v[26..30].copy_from_slice(&src);
        v[30..34].copy_from_slice(&dst);
        v[34..36].copy_from_slice(&sport.to_be_bytes());
        v[36..38].copy_from_slice(&dport.to_be_bytes());
        v[38..40].copy_from_slice(&12u16.to_be_bytes());
        v
    }
}
