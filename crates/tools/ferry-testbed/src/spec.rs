//! The YAML testbed description: types, parsing and validation.
//!
//! Parsing happens in two stages, both reporting `file:line:column: field:`:
//! 1. serde deserialization (unknown fields, types, and value validation via
//!    the constructors in [`crate::types`]), through ferry-config, which
//!    reports the field path and the location;
//! 2. cross-reference checks ([`TestbedSpec::validate`]), which only know a
//!    field path; `ferry_config::locate` walks the YAML a second time to
//!    find its line.

use crate::error::TestbedError;
use ferry_wire::MacAddr;

use crate::types::{IfName, IpCidr, Mtu, NsName, QueueCount, RouteDest, SpecName, SysctlKey};
use ferry_config::{parse_located, Seg};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
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
    /// A unicast address: the kernel refuses others on a veth, so the
    /// file's line says so instead of `up`.
    #[serde(default, deserialize_with = "ferry_wire::mac::deserialize_unicast")]
    pub mac: Option<MacAddr>,
    #[serde(default)]
    pub addrs: Vec<IpCidr>,
}

/// Reads and validates a spec file; errors name `path:line:column: field`.
pub fn parse(path: &Path) -> Result<TestbedSpec, TestbedError> {
    let text = std::fs::read_to_string(path).map_err(|e| TestbedError::io(path, e))?;
    TestbedSpec::from_yaml_str(&text, &path.display().to_string())
}

impl TestbedSpec {
    /// Parses a spec from text; `origin` (usually the file path) prefixes errors.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<TestbedSpec, TestbedError> {
        let mut spec: TestbedSpec = parse_located(text, origin, TestbedSpec::validate).map_err(|e| {
            TestbedError::Spec { origin: e.origin, line: e.line, column: e.column, field: e.field, message: e.message }
        })?;
        spec.origin = origin.to_string();
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
        assert_eq!(
            e.to_string(),
            "x.yaml:9:36: links[0].a.mac: invalid MAC address \"zz:00:00:00:01:01\": expected six hex octets like 02:00:00:00:00:01"
        );
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
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/testbeds");
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
