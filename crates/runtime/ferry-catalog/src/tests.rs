use super::*;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_kind_a_chain_can_name_is_in_the_catalog_once() {
    let kinds: Vec<&str> = catalog().iter().map(|t| t.kind.as_str()).collect();
    for k in ["l2fwd", "arp-responder", "icmp-echo", "fwd", "split", "source", "sink", "parallel-nat", "efw"] {
        assert_eq!(kinds.iter().filter(|&&x| x == k).count(), 1, "{k} in {kinds:?}");
    }
}

/// Every kind says what it does with IPv6 and with VLAN tag stacks, and
/// `ferry nf list` prints it.
#[test]
fn every_kind_says_what_it_does_with_ipv6_and_tags() {
    let listing = table();
    for t in catalog() {
        assert!(t.ip.len() > 8, "{}: no word on IPv6 and tags", t.kind);
        assert!(listing.contains(&format!("ip: {}", t.ip)), "{}: not in ferry nf list", t.kind);
    }
}

/// P4SFC Tables I and III, as the catalog declares them.
#[test]
fn offloadability_follows_p4sfc() {
    let want = [
        ("l2fwd", Offload::Full),
        ("fwd", Offload::Full),
        ("parallel-counter", Offload::Full),
        ("parallel-policer", Offload::Full),
        ("efw", Offload::Full),
        ("parallel-nat", Offload::Partial),
        ("parallel-maglev", Offload::Partial),
        ("elb", Offload::Partial),
        ("edpi", Offload::No),
        ("icmp-echo", Offload::No),
        ("slow", Offload::No),
        ("source", Offload::No),
    ];
    for (kind, offload) in want {
        assert_eq!(find(kind).unwrap().offload(), offload, "{kind}");
    }
}

/// One row: kind, arguments, the error's text (None: accepted), the
/// argument the error blames.
type CheckRow = (&'static str, &'static [&'static str], Option<&'static str>, Option<usize>);

#[test]
fn kinds_and_arguments_are_checked() {
    let table: [CheckRow; 23] = [
        ("fwd", &[], None, None),
        ("fwd", &["by_port=1"], None, None),
        ("fwd", &["by_port=2"], Some("by_port=2: expected 0 or 1"), Some(0)),
        ("fwd", &["colour=red"], Some("unknown argument colour= (it takes: by_port)"), Some(0)),
        ("fwd", &["by_port"], Some("\"by_port\" is not key=value"), Some(0)),
        ("source", &["rate=1000", "rate=2"], Some("rate= given twice"), Some(1)),
        ("slow", &[], Some("missing argument work_ns="), None),
        ("arp-icmp", &[], Some("unknown NF type \"arp-icmp\""), None),
        ("arp-responder", &["10.0.0.1=02:00:00:00:00:01"], None, None),
        ("arp-responder", &["10.0.0.1=zz"], Some("bad MAC"), Some(0)),
        ("arp-responder+icmp-echo", &["10.0.0.1=02:00:00:00:00:01", "--", "10.0.0.1"], None, None),
        ("arp-responder+icmp-echo", &["10.0.0.1=02:00:00:00:00:01", "--", "10.0.0.x"], Some("not an IPv4"), Some(2)),
        ("arp-responder+fwd", &[], Some("only per-packet NFs join with +, and fwd is threaded"), None),
        ("parallel-nat", &["workers=2"], None, None),
        ("parallel-nat", &["workers=0"], Some("workers=0: expected an integer in 1..=64"), Some(0)),
        ("efw", &[], Some("efw: missing argument config="), None),
        ("efw", &["config=fw.yaml"], Some("give an absolute path"), Some(0)),
        ("elb", &["config=/nonexistent/lb.yaml"], Some("missing argument reply_ports="), None),
        ("edpi", &["config=/nonexistent/x.yaml"], Some("cannot read"), Some(0)),
        (
            "firewall",
            &["fw.rules"],
            Some("\"fw.rules\" is a relative path, and the NF process reads it from `/`"),
            Some(0),
        ),
        ("ips", &["/nonexistent/ips.rules"], Some("ips: /nonexistent/ips.rules: No such file"), Some(0)),
        ("ips", &["/nonexistent/ips.rules", "eve=eve.json"], Some("give an absolute path"), Some(1)),
        ("ips", &["/nonexistent/ips.rules", "fast"], Some("expected skip-unsupported or eve=PATH"), Some(1)),
    ];
    for (kind, a, want, index) in table {
        match (check(kind, &args(a)), want) {
            (Ok(()), None) => {}
            (Err(e), Some(w)) => {
                assert!(e.to_string().contains(w), "{kind} {a:?}: {e} lacks {w:?}");
                assert_eq!(e.arg_index(), index, "{kind} {a:?}: {e}");
            }
            (got, _) => panic!("{kind} {a:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn values_fill_in_defaults() {
    let v = Values::of("source", &args(&["rate=5000"])).unwrap();
    assert_eq!((v.u64("size").unwrap(), v.u64("rate").unwrap(), v.u64("flows").unwrap()), (64, 5000, 64));
    assert!(Values::of("l2fwd", &[]).is_err(), "positional types have no key=value values");
}

/// The host defaults the catalog shows are the ones the runtime uses.
#[test]
fn parallel_host_defaults_are_the_runtimes() {
    let d = |k: &str| PARALLEL_HOST_ARGS.iter().find(|a| a.key == k).and_then(|a| a.default).unwrap();
    assert_eq!(d("queue"), ferry_parallel::live::DEFAULT_QUEUED_BATCHES.to_string());
    assert_eq!(d("tick_us"), (ferry_parallel::live::DEFAULT_TICK_NS / 1000).to_string());
}

#[test]
fn chain_files_name_the_line_of_a_bad_kind_or_argument() {
    let chain = |nf: &str| {
        format!("name: t\ndomains: [ {{ name: main }} ]\nnfs:\n  - {nf}\n  - {{ name: b, domain: main, kind: sink }}\nlinks:\n  - {{ from: a, to: b }}\n")
    };
    let e = parse_chain_str(&chain("{ name: a, domain: main, kind: arp-icmp }"), "c.yaml").unwrap_err().to_string();
    assert!(e.starts_with("c.yaml:4:") && e.contains("nfs[0].kind: unknown NF type \"arp-icmp\""), "{e}");
    let e =
        parse_chain_str(&chain("{ name: a, domain: main, kind: source, args: [\"rate=1\", \"speed=2\"] }"), "c.yaml")
            .unwrap_err()
            .to_string();
    assert!(e.contains("nfs[0].args[1]: source: unknown argument speed="), "{e}");
    assert!(parse_chain_str(&chain("{ name: a, domain: main, kind: source, args: [\"rate=1\"] }"), "c.yaml").is_ok());
}

/// A parallel NF's own arguments are checked by building it, for the
/// out-links the chain file gives it: at `chain check`, not when it starts.
#[test]
fn parallel_nfs_own_arguments_are_checked_by_building_for_their_out_links() {
    let nat = |a: &[&str], out_links| check_in_chain("parallel-nat", &args(a), out_links);
    assert!(nat(&["workers=2", "public_ip=203.0.113.7"], 2).is_ok());
    let e = nat(&["workers=2", "public_ip=nope"], 2).unwrap_err();
    assert_eq!(e.arg_index(), Some(1), "{e}");
    assert!(e.to_string().contains("public_ip=nope"), "{e}");
    let e = nat(&[], 1).unwrap_err();
    assert!(e.to_string().contains("needs 2 out-links"), "{e}");
    // The host's own arguments are checked by their specs, as before.
    assert_eq!(nat(&["workers=0"], 2).unwrap_err().arg_index(), Some(0));
    // In a chain file: the file, line and argument.
    let chain = "name: t\ndomains: [ { name: main } ]\nports: [ { name: i, netns: x, netdev: d0 }, { name: o, netns: x, netdev: d1 } ]\nnfs:\n  - { name: n, domain: main, kind: parallel-bridge, args: [\"ports=3\"] }\nlinks:\n  - { from: i, to: n }\n  - { from: n, to: i }\n  - { from: n, to: o }\n";
    let e = parse_chain_str(chain, "c.yaml").unwrap_err().to_string();
    assert!(e.starts_with("c.yaml:5:") && e.contains("nfs[0].args[0]") && e.contains("ports: port 2"), "{e}");
    assert!(parse_chain_str(&chain.replace("ports=3", "ports=2"), "c.yaml").is_ok());
}

#[test]
fn the_json_listing_has_every_type_with_its_offloadability() {
    let v = json();
    let types = v.as_array().unwrap();
    assert_eq!(types.len(), catalog().len());
    let nat = types.iter().find(|t| t["kind"] == "parallel-nat").unwrap();
    assert_eq!((nat["model"].as_str(), nat["offload"].as_str()), (Some("parallel"), Some("partially offloadable")));
    assert_eq!(nat["args"][0]["key"], "workers");
    assert_eq!(nat["args"][0]["type"]["u64"][1], 64);
    let ips = types.iter().find(|t| t["kind"] == "ips").unwrap();
    assert_eq!(ips["args"]["positional"], "RULE_FILE [skip-unsupported] [eve=PATH]");
}

/// An IPS raises alerts wherever it runs (alone, joined, fused), and
/// ferryd learns its EVE file from the catalog.
#[test]
fn alerting_nfs_and_their_eve_files_are_found_where_they_run() {
    let ips = args(&["/r.rules", "eve=/var/log/ferry/eve.json"]);
    let fw = args(&["/fw.rules"]);
    assert!(raises_alerts("ips", &ips) && raises_alerts("ips", &args(&["/r.rules"])));
    assert!(!raises_alerts("firewall", &fw));
    assert_eq!(eve_files("ips", &ips), ["/var/log/ferry/eve.json"]);
    assert!(eve_files("ips", &args(&["/r.rules"])).is_empty());
    let joined = [fw.clone(), args(&["--"]), ips.clone()].concat();
    assert!(raises_alerts("firewall+ips", &joined));
    assert_eq!(eve_files("firewall+ips", &joined), ["/var/log/ferry/eve.json"]);
    let stages = [
        crate::fused::Stage { name: "fw", kind: "firewall", args: &fw },
        crate::fused::Stage { name: "ips", kind: "ips", args: &ips },
    ];
    let fused = crate::fused::fused_args(&stages);
    assert!(raises_alerts(crate::fused::FUSED, &fused));
    assert_eq!(eve_files(crate::fused::FUSED, &fused), ["/var/log/ferry/eve.json"]);
}

/// A two-tenant edge: `mode` and the first rule's fields given.
fn edge_chain(mode: &str, first_rule: &str) -> String {
    format!(
        "name: t
tenants: [ {{ name: acme }}, {{ name: zeta }} ]
domains:
  - {{ name: a, tenant: acme }}
  - {{ name: z, tenant: zeta }}
ports:
  - name: edge
    netdev: d0
    classify:
      mode: {mode}
      rules:
        - {{ {first_rule} }}
        - {{ vlan: 200, to: zeta-in }}
  - {{ name: acme-in, via: edge, tenant: acme }}
  - {{ name: zeta-in, via: edge, tenant: zeta }}
nfs:
  - {{ name: fa, domain: a, kind: sink }}
  - {{ name: fz, domain: z, kind: sink }}
links:
  - {{ from: acme-in, to: fa }}
  - {{ from: zeta-in, to: fz }}
"
    )
}

#[test]
fn tenant_tables_name_the_file_line_and_field() {
    let ok = parse_chain_str(&edge_chain("xdp", "dst: 10.1.0.0/16, to: acme-in"), "c.yaml").unwrap();
    assert_eq!(ok.classify_table(0), ["out=0,dst=10.1.0.0/16", "out=1,vlan=200"]);
    let bad = |rule: &str| parse_chain_str(&edge_chain("xdp", rule), "c.yaml").unwrap_err().to_string();
    let e = bad("dst: 10.1.0.1/16, to: acme-in");
    assert!(e.starts_with("c.yaml:12:") && e.contains("ports[0].classify.rules[0].dst:"), "{e}");
    assert!(e.contains("did you mean 10.1.0.0/16"), "{e}");
    let e = bad("vlan: 5000, to: acme-in");
    assert!(e.contains("ports[0].classify.rules[0].vlan:") && e.contains("0..=4095"), "{e}");
    let e = bad("vlan: 7, inner_vlan: 4096, to: acme-in");
    assert!(e.contains("ports[0].classify.rules[0].inner_vlan:") && e.contains("0..=4095"), "{e}");
    let e = bad("src: \"2001:db8::1/32\", to: acme-in");
    assert!(e.contains("ports[0].classify.rules[0].src:") && e.contains("did you mean 2001:db8::/32"), "{e}");
    let e = bad("dport: 70000, to: acme-in");
    assert!(e.contains("ports[0].classify.rules[0].dport:"), "{e}");
    let e = bad("src: nowhere, to: acme-in");
    assert!(e.contains("ports[0].classify.rules[0].src:"), "{e}");
    let e = bad("dst: 10.1.0.0/16, to: fa");
    assert!(e.contains("ports[0].classify.rules[0].to:") && e.contains("not a tenant entry of \"edge\""), "{e}");
    let e = bad("dst: 10.1.0.0/16, proto: tcp, to: acme-in");
    assert!(e.starts_with("c.yaml:12:") && e.contains("unknown field `proto`"), "{e}");
    // acme's entry feeding zeta's NF; an entry no rule picks; a default
    // into the kernel in router mode.
    let text = edge_chain("xdp", "dst: 10.1.0.0/16, to: acme-in")
        .replace("{ from: acme-in, to: fa }", "{ from: acme-in, to: fz }");
    let e = parse_chain_str(&text, "c.yaml").unwrap_err().to_string();
    assert!(e.contains("links[0].to:") && e.contains("tenant \"acme\"'s entry"), "{e}");
    let e = bad("vlan: 7, to: zeta-in");
    assert!(e.contains("ports[1].via:") && e.contains("no rule of \"edge\" picks \"acme-in\""), "{e}");
    let text = edge_chain("router", "dst: 10.1.0.0/16, to: acme-in")
        .replace("mode: router", "mode: router\n      default: kernel");
    let e = parse_chain_str(&text, "c.yaml").unwrap_err().to_string();
    assert!(e.contains("ports[0].classify.default:"), "{e}");
    // A second field smuggled into one; an entry with a queue no thread
    // takes; an entry linked twice; a router name past 32 characters.
    let e = bad("src: \"10.9.0.0/16,dport=53\", to: acme-in");
    assert!(e.contains("ports[0].classify.rules[0].src:") && e.contains("without `,`"), "{e}");
    let text = edge_chain("xdp", "dst: 10.1.0.0/16, to: acme-in")
        .replace("via: edge, tenant: acme }", "via: edge, tenant: acme, queues: 2 }");
    let e = parse_chain_str(&text, "c.yaml").unwrap_err().to_string();
    assert!(e.contains("ports[1].queues:") && e.contains("NF \"fa\" has 1 threads"), "{e}");
    let text = edge_chain("xdp", "dst: 10.1.0.0/16, to: acme-in") + "  - { from: acme-in, to: fa }\n";
    let e = parse_chain_str(&text, "c.yaml").unwrap_err().to_string();
    assert!(e.contains("ports[1].via:") && e.contains("feeds 2 links"), "{e}");
    let long = "e".repeat(30);
    let text = edge_chain("router", "dst: 10.1.0.0/16, to: acme-in").replace("edge", &long);
    let e = parse_chain_str(&text, "c.yaml").unwrap_err().to_string();
    assert!(e.contains("ports[0].classify.mode:") && e.contains("shorten"), "{e}");
}

#[test]
fn entries_live_in_their_classifiers_namespace() {
    let text = edge_chain("xdp", "dst: 10.1.0.0/16, to: acme-in")
        .replace("netdev: d0", "netdev: d0\n    netns: dut\n    xdp_mode: driver");
    let spec = parse_chain_str(&text, "c.yaml").unwrap();
    for entry in &spec.ports[1..] {
        assert_eq!((entry.netns.as_deref(), entry.xdp_mode), (Some("dut"), ferry_chain::spec::XdpMode::Driver));
    }
    // A normalised file parses again; another namespace does not.
    assert!(parse_chain_str(&serde_yaml::to_string(&spec).unwrap(), "c.yaml").is_ok());
    let elsewhere = text.replace("via: edge, tenant: acme }", "via: edge, tenant: acme, netns: other }");
    let e = parse_chain_str(&elsewhere, "c.yaml").unwrap_err().to_string();
    assert!(e.contains("ports[1].netdev:") && e.contains("classifier's namespace"), "{e}");
}

#[test]
fn router_mode_becomes_a_router_nf_with_copy_links() {
    let spec = parse_chain_str(&edge_chain("router", "dst: 10.1.0.0/16, to: acme-in"), "c.yaml").unwrap();
    let ports: Vec<&str> = spec.ports.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(ports, ["edge"], "the entries are gone, and the edge classifies no more");
    assert!(spec.ports[0].classify.is_none());
    let router = spec.nfs.iter().find(|n| n.name == "edge-router").expect("the router NF");
    assert_eq!((router.kind.as_deref(), router.domain.as_str()), (Some(crate::TENANT_ROUTER), "edge-router"));
    assert_eq!(router.args, ["out=0,dst=10.1.0.0/16", "out=1,vlan=200"]);
    let links: Vec<(&str, &str)> = spec.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("edge", "edge-router"), ("edge-router", "fa"), ("edge-router", "fz")]);
    let domain = spec.domains.iter().find(|d| d.name == "edge-router").unwrap();
    assert_eq!(domain.tenant, None, "the router is the provider's, no tenant's");
}

#[test]
fn every_kind_says_how_the_host_runs_it_as_its_model_says() {
    for t in catalog() {
        let fits = match t.runner {
            Runner::Packet { .. } | Runner::FlowExport => t.model == ExecModel::PerPacket,
            Runner::HostLoop => t.model == ExecModel::Threaded,
            Runner::Parallel { name } => t.model == ExecModel::Parallel && t.kind == format!("parallel-{name}"),
            Runner::Hybrid => t.model == ExecModel::Hybrid,
        };
        assert!(fits, "{}: runner {:?}, model {:?}", t.kind, t.runner, t.model);
    }
    assert_eq!(runner("flow-monitor"), Ok(Runner::FlowExport));
    assert_eq!(runner("l2fwd"), Ok(Runner::Packet { replies: false }));
    assert_eq!(runner("arp-responder+icmp-echo"), Ok(Runner::Packet { replies: true }));
    assert_eq!(runner("firewall+l2fwd"), Ok(Runner::Packet { replies: false }));
    assert!(matches!(runner("l2fwd+nope"), Err(KindError::Unknown { .. })));
}
