//! The YAML testbed description: types, parsing and validation.
//!
//! Parsing happens in two stages, both reporting `file:line:column: field:`:
//! 1. serde deserialization (unknown fields, types, and value validation via
//!    the constructors in [`crate::types`]); serde_path_to_error supplies the
//!    field path and serde_yaml the location;
//! 2. cross-reference checks ([`TestbedSpec::validate`]), which only know a
//!    field path; [`locate`] walks the YAML a second time to find its line.

use crate::error::TestbedError;
use crate::types::{IfName, IpCidr, MacAddr, Mtu, NsName, QueueCount, RouteDest, SpecName, SysctlKey};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::path::Path;

/// A whole testbed: namespaces and the veth pairs between them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestbedSpec {
    /// Optional name; defaults to the file stem. Names the state file of
    /// detached testbeds. Real namespace names are always made unique.
    #[serde(default)]
    pub name: Option<SpecName>,
    pub namespaces: Vec<NamespaceSpec>,
    #[serde(default)]
    pub links: Vec<LinkSpec>,
    /// Where the spec came from (file path), for error messages.
    #[serde(skip)]
    pub origin: String,
}

/// One network namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    pub name: NsName,
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    #[serde(default)]
    pub sysctls: BTreeMap<SysctlKey, String>,
}

/// A static route inside a namespace; needs `via`, `dev` or both.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub to: RouteDest,
    #[serde(default)]
    pub via: Option<IpAddr>,
    #[serde(default)]
    pub dev: Option<IfName>,
}

/// A veth pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub a: EndpointSpec,
    pub b: EndpointSpec,
    /// RX and TX queue count on both ends (multi-queue veth, for AF_XDP/RSS tests).
    #[serde(default)]
    pub queues: Option<QueueCount>,
    #[serde(default)]
    pub mtu: Option<Mtu>,
}

/// One end of a veth pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    pub ns: NsName,
    pub dev: IfName,
    #[serde(default)]
    pub mac: Option<MacAddr>,
    #[serde(default)]
    pub addrs: Vec<IpCidr>,
}

/// Reads and validates a spec file; errors name `path:line:column: field`.
pub fn parse(path: &Path) -> Result<TestbedSpec, TestbedError> {
    let text = std::fs::read_to_string(path).map_err(|e| TestbedError::io(path, e))?;
    TestbedSpec::from_yaml_str(&text, &path.display().to_string())
}

/// One step of a field path.
#[derive(Debug, Clone)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

impl TestbedSpec {
    /// Parses a spec from text; `origin` (usually the file path) prefixes errors.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<TestbedSpec, TestbedError> {
        let de = serde_yaml::Deserializer::from_str(text);
        let mut spec: TestbedSpec = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = match e.path().to_string() {
                p if p == "." => String::new(),
                p => p,
            };
            let inner = e.into_inner();
            let loc = inner.location();
            let mut message = inner.to_string();
            // serde_yaml appends its own " at line L column C" and prefixes its
            // own path; we print both ourselves in a fixed format.
            if let Some(l) = &loc {
                let suffix = format!(" at line {} column {}", l.line(), l.column());
                if let Some(m) = message.strip_suffix(&suffix) {
                    message = m.to_string();
                }
            }
            // serde_yaml's path is the same as ours or a prefix of it.
            if let Some((prefix, rest)) = message.split_once(": ") {
                if !prefix.is_empty() && !prefix.contains(' ') && field.starts_with(prefix) {
                    message = rest.to_string();
                }
            }
            TestbedError::Spec {
                origin: origin.to_string(),
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                field,
                message,
            }
        })?;
        spec.origin = origin.to_string();
        if let Err((path, message)) = spec.validate() {
            let loc = locate(text, &path);
            return Err(TestbedError::Spec {
                origin: origin.to_string(),
                line: loc.map(|l| l.0),
                column: loc.map(|l| l.1),
                field: path_string(&path),
                message,
            });
        }
        Ok(spec)
    }

    /// The testbed's name: `name:` if given, else the origin's file stem.
    pub fn name(&self) -> String {
        if let Some(n) = &self.name {
            return n.to_string();
        }
        let stem = Path::new(&self.origin).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        stem.parse::<SpecName>().map(String::from).unwrap_or_else(|_| "testbed".to_string())
    }

    /// Cross-reference checks that serde cannot do field by field.
    fn validate(&self) -> Result<(), (Vec<Seg>, String)> {
        use Seg::{Index, Key};
        if self.namespaces.is_empty() {
            return Err((vec![Key("namespaces")], "at least one namespace is required".into()));
        }
        let mut names = HashSet::new();
        for (i, ns) in self.namespaces.iter().enumerate() {
            if !names.insert(ns.name.as_str()) {
                return Err((
                    vec![Key("namespaces"), Index(i), Key("name")],
                    format!("duplicate namespace {:?}", ns.name.as_str()),
                ));
            }
        }
        // (namespace, device) pairs created by links, for duplicate and route checks.
        let mut devs: HashSet<(&str, &str)> = HashSet::new();
        for (i, link) in self.links.iter().enumerate() {
            for (side, ep) in [("a", &link.a), ("b", &link.b)] {
                let at = |f| vec![Key("links"), Index(i), Key(side), Key(f)];
                if !names.contains(ep.ns.as_str()) {
                    return Err((at("ns"), format!("unknown namespace {:?}", ep.ns.as_str())));
                }
                if !devs.insert((ep.ns.as_str(), ep.dev.as_str())) {
                    return Err((
                        at("dev"),
                        format!("duplicate device {:?} in namespace {:?}", ep.dev.as_str(), ep.ns.as_str()),
                    ));
                }
            }
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            for (j, r) in ns.routes.iter().enumerate() {
                let at = |f| vec![Key("namespaces"), Index(i), Key("routes"), Index(j), Key(f)];
                if r.via.is_none() && r.dev.is_none() {
                    return Err((at("to"), "route needs `via`, `dev` or both".into()));
                }
                if let (RouteDest::Net(to), Some(via)) = (r.to, r.via) {
                    if to.addr().is_ipv4() != via.is_ipv4() {
                        return Err((at("via"), format!("gateway {via} is not in the family of {to}")));
                    }
                }
                if let Some(dev) = &r.dev {
                    if !devs.contains(&(ns.name.as_str(), dev.as_str())) {
                        return Err((
                            at("dev"),
                            format!("no device {:?} in namespace {:?}", dev.as_str(), ns.name.as_str()),
                        ));
                    }
                }
            }
            for v in ns.sysctls.values() {
                if v.contains('\n') {
                    let path = vec![Key("namespaces"), Index(i), Key("sysctls")];
                    return Err((path, "sysctl values must be single-line".into()));
                }
            }
        }
        Ok(())
    }
}

/// Finds the (line, column) of the value at `path` by deserializing `text`
/// again with a visitor that follows the path and fails on arrival: serde_yaml
/// stamps that failure with the position of the value being visited.
fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml::Deserializer::from_str(text);
    match Locate(path).deserialize(de) {
        Ok(()) => None,
        Err(e) => e.location().map(|l| (l.line(), l.column())),
    }
}

struct Locate<'a>(&'a [Seg]);

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Locate<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom("found"))
        } else {
            Ok(())
        }
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(de::Error::custom("found"));
        };
        while let Some(key) = map.next_key::<String>()? {
            match first {
                Seg::Key(k) if *k == key => map.next_value_seed(Locate(rest))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(de::Error::custom("found"));
        };
        let mut i = 0;
        loop {
            let found = match first {
                Seg::Index(want) if *want == i => seq.next_element_seed(Locate(rest))?,
                _ => seq.next_element::<IgnoredAny>()?.map(|_| ()),
            };
            if found.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
name: demo
namespaces:
  - name: client
    routes:
      - { to: 10.0.2.0/24, via: 10.0.1.2 }
    sysctls: { net.ipv4.ip_forward: \"1\" }
  - name: dut
links:
  - a: { ns: client, dev: c0, mac: \"02:00:00:00:01:01\", addrs: [\"10.0.1.1/24\"] }
    b: { ns: dut,    dev: d0, mac: \"02:00:00:00:01:02\", addrs: [] }
    queues: 2
    mtu: 1500
";

    /// Replaces the first occurrence of `from` in GOOD and parses the result.
    fn bad(from: &str, to: &str) -> TestbedError {
        assert!(GOOD.contains(from), "test bug: {from:?} not in GOOD");
        let text = GOOD.replacen(from, to, 1);
        TestbedSpec::from_yaml_str(&text, "x.yaml").expect_err("should fail")
    }

    /// Asserts that the error is a spec error at `line` naming `field`,
    /// whose message contains `msg`.
    fn assert_spec_err(e: TestbedError, line: usize, field: &str, msg: &str) {
        let shown = e.to_string();
        match e {
            TestbedError::Spec { origin, line: l, field: f, message, .. } => {
                assert_eq!(origin, "x.yaml");
                assert_eq!(l, Some(line), "line in {shown}");
                assert_eq!(f, field, "field in {shown}");
                assert!(message.contains(msg), "message {message:?} lacks {msg:?}");
                assert!(shown.starts_with(&format!("x.yaml:{line}:")), "{shown}");
                assert!(shown.contains(&format!(": {field}: ")), "{shown}");
            }
            other => panic!("not a spec error: {other:?}"),
        }
    }

    #[test]
    fn good_file_parses() {
        let s = TestbedSpec::from_yaml_str(GOOD, "x.yaml").unwrap();
        assert_eq!(s.name(), "demo");
        assert_eq!(s.namespaces.len(), 2);
        assert_eq!(s.namespaces[0].routes[0].via, Some("10.0.1.2".parse().unwrap()));
        let l = &s.links[0];
        assert_eq!(l.queues.unwrap().get(), 2);
        assert_eq!(l.mtu.unwrap().get(), 1500);
        assert_eq!(l.a.mac.unwrap().to_string(), "02:00:00:00:01:01");
        assert_eq!(l.a.addrs[0].to_string(), "10.0.1.1/24");
        assert!(l.b.addrs.is_empty());
    }

    #[test]
    fn name_defaults_to_file_stem() {
        let text = GOOD.replacen("name: demo\n", "", 1);
        let s = TestbedSpec::from_yaml_str(&text, "examples/testbeds/two-hosts.yaml").unwrap();
        assert_eq!(s.name(), "two-hosts");
    }

    #[test]
    fn bad_mac() {
        let e = bad("02:00:00:00:01:01", "zz:00:00:00:01:01");
        assert_spec_err(e, 9, "links[0].a.mac", "invalid MAC address \"zz:00:00:00:01:01\"");
    }

    #[test]
    fn error_format_matches_brief() {
        let e = bad("02:00:00:00:01:01", "zz:00:00:00:01:01");
        assert_eq!(e.to_string(), "x.yaml:9:36: links[0].a.mac: invalid MAC address \"zz:00:00:00:01:01\"");
    }

    #[test]
    fn unknown_field() {
        let e = bad("    mtu: 1500", "    mtux: 1500");
        assert_spec_err(e, 12, "links[0].mtux", "unknown field `mtux`");
    }

    #[test]
    fn unknown_nested_field() {
        let e = bad("dev: d0,", "dev: d0, colour: red,");
        assert_spec_err(e, 10, "links[0].b.colour", "unknown field `colour`");
    }

    #[test]
    fn bad_cidr() {
        let e = bad("10.0.1.1/24", "10.0.1.1/40");
        assert_spec_err(e, 9, "links[0].a.addrs[0]", "invalid CIDR");
    }

    #[test]
    fn bad_route() {
        let e = bad("to: 10.0.2.0/24", "to: 10.0.2.0");
        assert_spec_err(e, 5, "namespaces[0].routes[0].to", "invalid CIDR");
        let e = bad("via: 10.0.1.2", "via: 10.0.1.x");
        assert_spec_err(e, 5, "namespaces[0].routes[0].via", "invalid IP address");
    }

    #[test]
    fn route_family_mismatch() {
        let e = bad("via: 10.0.1.2", "via: fd00::1");
        assert_spec_err(e, 5, "namespaces[0].routes[0].via", "not in the family");
    }

    #[test]
    fn route_without_gateway_or_dev() {
        let e = bad(", via: 10.0.1.2", "");
        assert_spec_err(e, 5, "namespaces[0].routes[0].to", "needs `via`");
    }

    #[test]
    fn route_dev_must_exist() {
        let e = bad("via: 10.0.1.2", "via: 10.0.1.2, dev: c9");
        assert_spec_err(e, 5, "namespaces[0].routes[0].dev", "no device \"c9\"");
    }

    #[test]
    fn queues_range() {
        let e = bad("queues: 2", "queues: 65");
        assert_spec_err(e, 11, "links[0].queues", "1..=64");
        let e = bad("queues: 2", "queues: 0");
        assert_spec_err(e, 11, "links[0].queues", "1..=64");
    }

    #[test]
    fn unknown_namespace() {
        let e = bad("ns: dut,", "ns: router,");
        assert_spec_err(e, 10, "links[0].b.ns", "unknown namespace \"router\"");
    }

    #[test]
    fn duplicate_dev_in_namespace() {
        let e = bad("ns: dut,    dev: d0", "ns: client, dev: c0");
        assert_spec_err(e, 10, "links[0].b.dev", "duplicate device \"c0\"");
    }

    #[test]
    fn duplicate_namespace() {
        let e = bad("  - name: dut", "  - name: client");
        assert_spec_err(e, 7, "namespaces[1].name", "duplicate namespace");
    }

    #[test]
    fn dev_name_too_long() {
        let e = bad("dev: c0", "dev: c0123456789abcdef");
        assert_spec_err(e, 9, "links[0].a.dev", "1..=15");
    }

    #[test]
    fn non_net_sysctl_rejected() {
        let e = bad("net.ipv4.ip_forward", "kernel.panic");
        assert_spec_err(e, 6, "namespaces[0].sysctls.kernel.panic", "only net.*");
    }

    #[test]
    fn wrong_type() {
        let e = bad("mtu: 1500", "mtu: big");
        assert_spec_err(e, 12, "links[0].mtu", "invalid type");
    }

    #[test]
    fn missing_namespaces() {
        let e = TestbedSpec::from_yaml_str("name: x\n", "x.yaml").unwrap_err();
        assert!(e.to_string().contains("missing field `namespaces`"), "{e}");
        let e = TestbedSpec::from_yaml_str("namespaces: []\n", "x.yaml").unwrap_err();
        assert_spec_err(e, 1, "namespaces", "at least one");
    }

    #[test]
    fn shipped_examples_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/testbeds");
        for (file, namespaces, links) in [("two-hosts.yaml", 2, 1), ("chain.yaml", 3, 2)] {
            let s = parse(&dir.join(file)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((s.namespaces.len(), s.links.len()), (namespaces, links), "{file}");
        }
    }

    #[test]
    fn missing_file_names_path() {
        let e = parse(Path::new("/nonexistent/tb.yaml")).unwrap_err();
        assert!(matches!(e, TestbedError::Io { .. }));
        assert!(e.to_string().starts_with("/nonexistent/tb.yaml: "), "{e}");
    }

    #[test]
    fn syntax_error_has_location() {
        let e = TestbedSpec::from_yaml_str("namespaces:\n  - name: [a\n", "x.yaml").unwrap_err();
        assert!(matches!(e, TestbedError::Spec { line: Some(_), .. }), "{e}");
    }
}
