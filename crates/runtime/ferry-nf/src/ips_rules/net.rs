//! A rule header's addresses and ports: `any`, single values, CIDR
//! blocks and port ranges, lists (`[a,b]`, nested), negation (`!`) and
//! variables (`$HOME_NET`), as Snort and Suricata read them.
//!
//! A list means (the union of its positive entries, or everything when
//! it has none) minus (the union of its negated ones), whatever their
//! order, item by item down the nesting: `!$HOME_NET` is what the home
//! network is not, whatever it holds. Snort 3 and Suricata agree on
//! this, and both refuse `!any` and a negation that leaves nothing. A
//! pure negation of IPv4 blocks (`!10.0.0.0/8`) matches every IPv6
//! address, as in Snort 3 (Suricata would match no IPv6 packet).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

/// How deep lists and variables may nest: a loop of variables ends here.
const MAX_DEPTH: usize = 16;

/// One CIDR block in the 128-bit space (IPv4 mapped, as the flow parser
/// gives addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    base: u128,
    /// Prefix length in the 128-bit space.
    len: u8,
}

impl Block {
    fn contains(&self, addr: u128) -> bool {
        self.len == 0 || (addr ^ self.base) >> (128 - u32::from(self.len)) == 0
    }

    fn covers(&self, other: &Block) -> bool {
        self.len <= other.len && self.contains(other.base)
    }
}

/// A field as written: `any`, one value, or a list whose items may be
/// negated. A list holds what one of its positive items holds (anything,
/// when it has none) and none of its negated items holds, item by item
/// down the nesting, so `!$HOME_NET` is exactly what the home network is
/// not, whatever `$HOME_NET` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node<T> {
    Any,
    Leaf(T),
    List(Vec<(bool, Node<T>)>),
}

impl<T> Node<T> {
    fn holds(&self, leaf: &impl Fn(&T) -> bool) -> bool {
        match self {
            Node::Any => true,
            Node::Leaf(t) => leaf(t),
            Node::List(items) => {
                let (mut positive, mut inside) = (false, false);
                for (negated, item) in items {
                    if *negated {
                        if item.holds(leaf) {
                            return false;
                        }
                    } else {
                        positive = true;
                        inside = inside || item.holds(leaf);
                    }
                }
                !positive || inside
            }
        }
    }

    /// A list whose negated values cover each of its positive ones (or
    /// everything, with none): it holds nothing. Only values written in
    /// the list itself are compared.
    fn leaves_nothing(&self, covers: impl Fn(&T, Option<&T>) -> bool) -> bool {
        let Node::List(items) = self else { return false };
        let leaves = |neg: bool| {
            items.iter().filter(move |(n, _)| *n == neg).filter_map(|(_, i)| match i {
                Node::Leaf(t) => Some(t),
                _ => None,
            })
        };
        let positives = items.iter().filter(|(n, _)| !n).count();
        if positives == 0 {
            return leaves(true).any(|n| covers(n, None));
        }
        positives == leaves(false).count() && leaves(false).all(|p| leaves(true).any(|n| covers(n, Some(p))))
    }
}

/// The addresses one side of a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrSet(Node<Block>);

impl AddrSet {
    pub fn any() -> AddrSet {
        AddrSet(Node::Any)
    }

    pub fn is_any(&self) -> bool {
        self.0 == Node::Any
    }

    pub fn contains(&self, addr: Ipv6Addr) -> bool {
        let a = u128::from(addr);
        self.0.holds(&|b: &Block| b.contains(a))
    }
}

/// The ports one side of a rule names (ranges inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSet(Node<(u16, u16)>);

impl PortSet {
    pub fn any() -> PortSet {
        PortSet(Node::Any)
    }

    pub fn is_any(&self) -> bool {
        self.0 == Node::Any
    }

    pub fn contains(&self, port: u16) -> bool {
        self.0.holds(&|&(lo, hi): &(u16, u16)| (lo..=hi).contains(&port))
    }
}

/// Named address and port groups: `ipvar`/`portvar` lines of a rule
/// file, or the built-in defaults.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    addrs: BTreeMap<String, String>,
    ports: BTreeMap<String, String>,
}

impl Vars {
    /// The groups rulesets name, until a rule file says otherwise: the
    /// home and external networks are `any` (Snort 3's shipped
    /// configuration), each server and client group is the home network,
    /// and the port groups are `suricata.yaml`'s (`HTTP_PORTS` is 80).
    pub fn snort_defaults() -> Vars {
        let mut v = Vars::default();
        for (name, value) in [("HOME_NET", "any"), ("EXTERNAL_NET", "any")] {
            v.addrs.insert(name.into(), value.into());
        }
        for server in ["DNS", "SMTP", "HTTP", "SQL", "TELNET", "SSH", "FTP", "SIP", "ORACLE", "DC"] {
            v.addrs.insert(format!("{server}_SERVERS"), "$HOME_NET".into());
        }
        for end in ["DNP3_SERVER", "DNP3_CLIENT", "MODBUS_SERVER", "MODBUS_CLIENT", "ENIP_SERVER", "ENIP_CLIENT"] {
            v.addrs.insert(end.into(), "$HOME_NET".into());
        }
        v.addrs.insert("AIM_SERVERS".into(), "$EXTERNAL_NET".into());
        // suricata.yaml's port groups.
        for (name, value) in [
            ("HTTP_PORTS", "80"),
            ("SHELLCODE_PORTS", "!80"),
            ("ORACLE_PORTS", "1521"),
            ("SSH_PORTS", "22"),
            ("DNP3_PORTS", "20000"),
            ("MODBUS_PORTS", "502"),
            ("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]"),
            ("FTP_PORTS", "21"),
            // Not suricata.yaml's: Snort 3's snort_defaults.lua.
            ("SIP_PORTS", "[5060,5061,5600]"),
            ("GENEVE_PORTS", "6081"),
            ("VXLAN_PORTS", "4789"),
            ("TEREDO_PORTS", "3544"),
        ] {
            v.ports.insert(name.into(), value.into());
        }
        v
    }

    /// Defines (or redefines) an address group; its value is checked now.
    pub fn set_addr(&mut self, name: &str, value: &str) -> Result<(), String> {
        check_name(name)?;
        parse_addrs(value, self)?;
        self.addrs.insert(name.into(), value.into());
        Ok(())
    }

    /// Defines (or redefines) a port group; its value is checked now.
    pub fn set_port(&mut self, name: &str, value: &str) -> Result<(), String> {
        check_name(name)?;
        parse_ports(value, self)?;
        self.ports.insert(name.into(), value.into());
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("variable name {name:?}: letters, digits and _ only"))
    }
}

/// An address field of a rule header.
pub fn parse_addrs(text: &str, vars: &Vars) -> Result<AddrSet, String> {
    let node = parse_addrs_at(text, vars, 0)?.0;
    let full = Block { base: 0, len: 0 };
    if node.leaves_nothing(|n, p| n.covers(p.unwrap_or(&full))) {
        return Err(format!("{text:?}: the negations leave no address"));
    }
    Ok(AddrSet(node))
}

fn parse_addrs_at(text: &str, vars: &Vars, depth: usize) -> Result<AddrSet, String> {
    field(
        text,
        depth,
        &|name, depth| {
            let value = vars.addrs.get(name).ok_or_else(|| undefined("ipvar", name))?;
            Ok(parse_addrs_at(value, vars, depth)?.0)
        },
        &block,
    )
    .map(AddrSet)
}

fn block(item: &str) -> Result<Block, String> {
    let (addr, len) = match item.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| format!("{item:?}: a prefix length is a number"))?)),
        None => (item, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| format!("{item:?}: expected any, an address, a CIDR block or $VAR"))?;
    let (mapped, max, offset) = match ip {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped(), 32, 96),
        IpAddr::V6(v6) => (v6, 128, 0),
    };
    let len = len.unwrap_or(max);
    if len > max {
        return Err(format!("{item:?}: prefix length {len} is over {max}"));
    }
    let len = len + offset;
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
    Ok(Block { base: u128::from(mapped) & mask, len })
}

/// A port field of a rule header.
pub fn parse_ports(text: &str, vars: &Vars) -> Result<PortSet, String> {
    let node = parse_ports_at(text, vars, 0)?.0;
    let covers = |&(nl, nh): &(u16, u16), p: Option<&(u16, u16)>| {
        let &(lo, hi) = p.unwrap_or(&(0, u16::MAX));
        nl <= lo && hi <= nh
    };
    if node.leaves_nothing(covers) {
        return Err(format!("{text:?}: the negations leave no port"));
    }
    Ok(PortSet(node))
}

fn parse_ports_at(text: &str, vars: &Vars, depth: usize) -> Result<PortSet, String> {
    field(
        text,
        depth,
        &|name, depth| {
            let value = vars.ports.get(name).ok_or_else(|| undefined("portvar", name))?;
            Ok(parse_ports_at(value, vars, depth)?.0)
        },
        &port_range,
    )
    .map(PortSet)
}

/// `N`, `A:B`, `:B` or `A:` (inclusive).
fn port_range(item: &str) -> Result<(u16, u16), String> {
    let num = |s: &str, default: u16| {
        if s.is_empty() {
            Ok(default)
        } else {
            s.parse::<u16>().map_err(|_| format!("port {item:?}: expected any, N, A:B, [list] or $VAR (0..=65535)"))
        }
    };
    let (lo, hi) = match item.split_once(':') {
        Some((a, b)) if !(a.is_empty() && b.is_empty()) => (num(a, 0)?, num(b, u16::MAX)?),
        Some(_) => return Err(format!("port {item:?}: a range needs a bound")),
        None => {
            let p = num(item, 0)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err(format!("port range {item:?}: {lo} is above {hi}"));
    }
    Ok((lo, hi))
}

fn undefined(kind: &str, name: &str) -> String {
    format!("${name} is not defined: add a line `{kind} {name} …` to the rule file, above its first use")
}

/// Resolves a variable's name, one nesting level deeper, to its tree.
type VarLookup<'a, T> = dyn Fn(&str, usize) -> Result<Node<T>, String> + 'a;

/// A field's tree: `[…]` lists, `!` negations, `any`, `$VAR` (through
/// `var`, one level deeper) and leaves (through `leaf`).
fn field<T>(
    text: &str,
    depth: usize,
    var: &VarLookup<'_, T>,
    leaf: &dyn Fn(&str) -> Result<T, String>,
) -> Result<Node<T>, String> {
    if depth > MAX_DEPTH {
        return Err(format!("lists or variables nest more than {MAX_DEPTH} deep"));
    }
    let (negated, node) = item(text, depth, var, leaf)?;
    Ok(if negated { Node::List(vec![(true, node)]) } else { node })
}

/// One item: whether it is negated, and what it names.
fn item<T>(
    text: &str,
    depth: usize,
    var: &VarLookup<'_, T>,
    leaf: &dyn Fn(&str) -> Result<T, String>,
) -> Result<(bool, Node<T>), String> {
    if depth > MAX_DEPTH {
        return Err(format!("lists or variables nest more than {MAX_DEPTH} deep"));
    }
    let text = text.trim();
    // `a,b` without brackets: a list all the same, as Suricata reads
    // (and as Emerging Threats rules write ports: `!5800,!445`).
    if !text.starts_with('[') && !text.starts_with("![") {
        let items = split_top(text)?;
        if items.len() > 1 {
            let items = items.into_iter().map(|i| item(i, depth + 1, var, leaf));
            return Ok((false, Node::List(items.collect::<Result<_, _>>()?)));
        }
    }
    if let Some(rest) = text.strip_prefix('!') {
        let inner = field(rest, depth + 1, var, leaf)?;
        if matches!(inner, Node::Any) {
            return Err(format!("{text}: !any matches nothing"));
        }
        return Ok((true, inner));
    }
    if text.is_empty() {
        return Err("an empty address or port".into());
    }
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| format!("{text:?}: a list ends with ]"))?;
        let items = split_top(inner)?.into_iter().map(|i| item(i, depth + 1, var, leaf));
        return Ok((false, Node::List(items.collect::<Result<_, _>>()?)));
    }
    if text.contains([']', ',']) {
        return Err(format!("{text:?}: a list is written [a,b]"));
    }
    let node = match text {
        "any" => Node::Any,
        _ => match text.strip_prefix('$') {
            Some(name) => var(name, depth + 1)?,
            None => Node::Leaf(leaf(text)?),
        },
    };
    Ok((false, node))
}

/// The items of a list body, split at the commas outside nested lists.
fn split_top(body: &str) -> Result<Vec<&str>, String> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, ch) in body.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or_else(|| format!("[{body}]: unbalanced ]"))?,
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("[{body}]: unbalanced ["));
    }
    items.push(&body[start..]);
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv6Addr {
        match s.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        }
    }

    fn vars() -> Vars {
        let mut v = Vars::snort_defaults();
        v.set_addr("DNS_SERVERS", "any").unwrap();
        v.set_addr("HOME_NET", "[10.0.0.0/8,192.168.0.0/16]").unwrap();
        v.set_addr("EXTERNAL_NET", "!$HOME_NET").unwrap();
        v.set_port("HTTP_PORTS", "[80,8000:8099]").unwrap();
        v
    }

    /// Each address form, with addresses inside and outside it.
    #[test]
    fn addresses_as_snort_reads_them() {
        let v = vars();
        let table: &[(&str, &[&str], &[&str])] = &[
            ("any", &["1.2.3.4", "::1"], &[]),
            ("10.1.2.3", &["10.1.2.3"], &["10.1.2.4", "::ffff:10.1.2.4"]),
            ("10.0.0.0/8", &["10.255.0.1"], &["11.0.0.1"]),
            ("2001:db8::/32", &["2001:db8::1"], &["2001:db9::1", "32.1.13.184"]),
            ("[1.1.1.1, 2.2.2.0/24]", &["1.1.1.1", "2.2.2.9"], &["1.1.1.2"]),
            ("[2.2.2.0/24,![2.2.2.2,2.2.2.3]]", &["2.2.2.1", "2.2.2.4"], &["2.2.2.2", "2.2.2.3", "3.3.3.3"]),
            ("!1.1.1.1", &["1.1.1.2", "::1"], &["1.1.1.1"]),
            ("![1.1.1.0/24,1.1.1.7]", &["9.9.9.9"], &["1.1.1.1", "1.1.1.7"]),
            ("$HOME_NET", &["10.9.9.9", "192.168.1.1"], &["172.16.0.1"]),
            ("$EXTERNAL_NET", &["172.16.0.1", "8.8.8.8"], &["10.9.9.9"]),
            ("$HTTP_SERVERS", &["10.9.9.9"], &["8.8.8.8"]),
            ("[$HOME_NET,!10.0.0.1]", &["10.0.0.2"], &["10.0.0.1", "8.8.8.8"]),
            ("1.1.1.1,2.2.2.2", &["1.1.1.1", "2.2.2.2"], &["3.3.3.3"]),
            // A group of every address, listed with others, is still every address.
            ("[$DNS_SERVERS,1.2.3.4]", &["8.8.8.8", "::1"], &[]),
        ];
        for (text, inside, outside) in table {
            let set = parse_addrs(text, &v).unwrap_or_else(|e| panic!("{text}: {e}"));
            for a in *inside {
                assert!(set.contains(ip(a)), "{text} should hold {a}");
            }
            for a in *outside {
                assert!(!set.contains(ip(a)), "{text} should not hold {a}");
            }
        }
    }

    #[test]
    fn ports_as_snort_reads_them() {
        let v = vars();
        let table: &[(&str, &[u16], &[u16])] = &[
            ("any", &[0, 80, 65535], &[]),
            ("80", &[80], &[81]),
            ("1024:", &[1024, 65535], &[1023]),
            (":1023", &[0, 1023], &[1024]),
            ("[1:80,![2,4]]", &[1, 3, 80], &[0, 2, 4, 81]),
            ("!80", &[79, 81], &[80]),
            ("$HTTP_PORTS", &[80, 8050], &[8100, 443]),
            ("[$HTTP_PORTS,443]", &[443, 8000], &[22]),
            // Unbracketed, as Emerging Threats writes some.
            ("!5800,!445", &[80, 5801], &[5800, 445]),
        ];
        for (text, inside, outside) in table {
            let set = parse_ports(text, &v).unwrap_or_else(|e| panic!("{text}: {e}"));
            for p in *inside {
                assert!(set.contains(*p), "{text} should hold {p}");
            }
            for p in *outside {
                assert!(!set.contains(*p), "{text} should not hold {p}");
            }
        }
    }

    #[test]
    fn bad_fields_say_what_is_wrong() {
        let v = vars();
        let addr = [
            ("!any", "!any matches nothing"),
            ("$NOPE", "$NOPE is not defined: add a line `ipvar NOPE …`"),
            ("[1.1.1.1,!1.1.1.1]", "the negations leave no address"),
            ("10.0.0.0/33", "prefix length 33 is over 32"),
            ("[1.1.1.1", "a list ends with ]"),
            ("10.0.0.x", "expected any, an address"),
            ("[]", "an empty address"),
        ];
        for (text, want) in addr {
            let e = parse_addrs(text, &v).unwrap_err();
            assert!(e.contains(want), "{text}: {e:?} lacks {want:?}");
        }
        let port = [
            ("!any", "!any matches nothing"),
            ("90:80", "90 is above 80"),
            ("http", "expected any, N, A:B"),
            ("[1:65535,!:65535]", "the negations leave no port"),
            ("!:65535", "the negations leave no port"),
            ("$WEB_PORTS", "add a line `portvar WEB_PORTS …`"),
        ];
        for (text, want) in port {
            let e = parse_ports(text, &v).unwrap_err();
            assert!(e.contains(want), "{text}: {e:?} lacks {want:?}");
        }
        let mut looped = Vars::default();
        looped.addrs.insert("A".into(), "$B".into());
        looped.addrs.insert("B".into(), "[$A]".into());
        assert!(parse_addrs("$A", &looped).unwrap_err().contains("nest more than"));
    }
}
