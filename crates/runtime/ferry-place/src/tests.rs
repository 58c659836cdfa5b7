//! Placement decisions on chain files, row by row.

use super::*;

/// A directory with a firewall rule file (`fw.rules`, `rules` rules) and
/// an IPS rule file (`ips.rules`), removed on drop.
struct Files(std::path::PathBuf);

impl Files {
    fn new(tag: &str, rules: usize) -> Files {
        let dir = std::env::temp_dir().join(format!("ferry-place-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fw: String = (0..rules).map(|i| format!("deny proto udp dport {}\n", 1000 + i)).collect();
        std::fs::write(dir.join("fw.rules"), fw + "default allow\n").unwrap();
        std::fs::write(dir.join("ips.rules"), "drop tcp any any -> any 80 (msg:\"x\"; content:\"attack\"; sid:1;)\n")
            .unwrap();
        Files(dir)
    }

    /// The P4SFC chain in -> fw -> mon -> ips -> out, with `extra` lines
    /// added to the NF named by each (name, line) pair.
    fn chain(&self, extra: &[(&str, &str)]) -> String {
        let more = |nf: &str| extra.iter().filter(|(n, _)| *n == nf).map(|(_, l)| format!(", {l}")).collect::<String>();
        let d = self.0.display();
        format!(
            "name: sfc
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netdev: a0 }}
  - {{ name: out, netdev: b0 }}
nfs:
  - {{ name: fw, domain: main, kind: firewall, args: [\"{d}/fw.rules\"]{} }}
  - {{ name: mon, domain: main, kind: flow-monitor{} }}
  - {{ name: ips, domain: main, kind: ips, args: [\"{d}/ips.rules\"]{} }}
links:
  - {{ from: in, to: fw }}
  - {{ from: fw, to: mon }}
  - {{ from: mon, to: ips }}
  - {{ from: ips, to: out }}
",
            more("fw"),
            more("mon"),
            more("ips")
        )
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn places(p: &Placement) -> Vec<(&str, Place)> {
    p.decisions.iter().map(|d| (d.nf.as_str(), d.place)).collect()
}

#[test]
fn the_p4sfc_chain_splits_before_the_ips() {
    let f = Files::new("split", 3);
    let (_, p) = load_str(&f.chain(&[]), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Xdp), ("ips", Place::Server)]);
    assert_eq!(p.xdp.len(), 1);
    assert_eq!(p.xdp[0].port, "in");
    assert_eq!(p.xdp[0].nfs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["fw", "mon"]);
    assert_eq!(p.xdp[0].then, Then::Nf("ips".into()));
    // The server part: the IPS alone, fed by the port.
    let names: Vec<&str> = p.server.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["ips"]);
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "out")]);
    let text = p.explain();
    assert!(text.contains("ips") && text.contains("not offloadable: payload-matcher"), "{text}");
    assert!(text.contains("xdp path on port in: fw -> mon -> AF_XDP socket of ips"), "{text}");
    assert!(text.contains("  fw: counter rx, acl (3 rules), counter pass\n"), "{text}");
    assert!(text.contains("  mon: counter rx, flow-monitor\n"), "{text}");
}

#[test]
fn never_keeps_an_nf_and_everything_after_it_in_processes() {
    let f = Files::new("never", 3);
    let (_, p) = load_str(&f.chain(&[("fw", "offload: never")]), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server)]);
    assert!(p.xdp.is_empty());
    assert_eq!(p.decisions[0].why, "offload: never");
    assert!(p.decisions[1].why.starts_with("between processes"), "{}", p.decisions[1].why);
    assert_eq!(p.server.links.len(), 4);
}

/// P4SFC's own order: in -> ips -> mon -> fw -> out.
fn ips_first(text: &str) -> String {
    text.replace(
        "  - { from: in, to: fw }\n  - { from: fw, to: mon }\n  - { from: mon, to: ips }\n  - { from: ips, to: out }\n",
        "  - { from: in, to: ips }\n  - { from: ips, to: mon }\n  - { from: mon, to: fw }\n  - { from: fw, to: out }\n",
    )
}

#[test]
fn nfs_after_the_last_process_run_in_xdp_in_front_of_their_port() {
    let f = Files::new("post", 3);
    let (_, p) = load_str(&ips_first(&f.chain(&[])), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Xdp), ("ips", Place::Server)]);
    assert!(p.xdp.is_empty(), "nothing before the IPS: {:?}", p.xdp);
    assert_eq!(p.post.len(), 1);
    let post = &p.post[0];
    assert_eq!((post.port.as_str(), post.after.as_str()), ("out", "ips"));
    assert_eq!(post.nfs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["mon", "fw"]);
    // The server part: the IPS alone, sending to the port (ferryd puts
    // the loop device in between).
    let names: Vec<&str> = p.server.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["ips"]);
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "out")]);
    assert!(p.decisions[0].why.contains("after the last process ips on the path to port out (post-server)"));
    let text = p.explain();
    assert!(
        text.contains("xdp path after ips to port out: mon -> fw -> redirected out of port out (by the loop device"),
        "{text}"
    );
    assert!(text.contains("  fw: counter rx, acl (3 rules), counter pass\n"), "{text}");
}

fn model(loop_crossing_ns: f64, xdp_stage_ns: f64, fused_stage_ns: f64, process_hop_ns: f64) -> CostModel {
    CostModel { loop_crossing_ns, xdp_stage_ns, fused_stage_ns, process_hop_ns, origin: "test model".into() }
}

/// With a cost model, the NFs after the last process go where they cost
/// least: XDP when the model says so, processes when XDP on the loop
/// device costs more; `offload: force` keeps XDP whatever the cost.
#[test]
fn a_cost_model_places_the_nfs_after_the_last_process() {
    let f = Files::new("cost", 3);
    let text = ips_first(&f.chain(&[]));
    let (spec, _) = load_str(&text, "sfc.yaml").unwrap();

    let cheap_xdp = model(10.0, 20.0, 30.0, 40.0);
    let p = place_with(&spec, Some(&cheap_xdp)).unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Xdp), ("ips", Place::Server)]);
    assert_eq!(p.costs.len(), 1);
    let c = &p.costs[0];
    assert_eq!((c.after.as_str(), c.port.as_str(), c.chosen), ("ips", "out", PostPlace::Xdp));
    assert_eq!((c.estimate.xdp_ns, c.estimate.fused_ns, c.estimate.processes_ns), (50.0, None, 140.0));

    let dear_xdp = model(100.0, 200.0, 30.0, 40.0);
    let p = place_with(&spec, Some(&dear_xdp)).unwrap();
    assert_eq!(places(&p), [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server)]);
    assert!(p.post.is_empty(), "{:?}", p.post);
    assert_eq!(p.costs[0].chosen, PostPlace::Processes);
    assert!(
        p.decisions[0].why.contains("processes cost less per frame than XDP on a loop device"),
        "{:?}",
        p.decisions
    );
    let text_out = p.explain();
    assert!(
        text_out.contains(
            "cost after ips to port out (mon -> fw): XDP on a loop device 500 ns, fused: cannot, processes 140 ns per \
             frame: processes of their own (cost model: test model)"
        ),
        "{text_out}"
    );

    let forced = ips_first(&f.chain(&[("mon", "offload: force"), ("fw", "offload: force")]));
    let (spec, _) = load_str(&forced, "sfc.yaml").unwrap();
    let p = place_with(&spec, Some(&dear_xdp)).unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Xdp), ("ips", Place::Server)]);
    assert!(p.costs.is_empty(), "forced: nothing weighed");
}

/// Where they may fuse with the last process, the model weighs that too.
#[test]
fn a_cost_model_weighs_fusing_after_the_last_process() {
    let f = Files::new("cost-fuse", 3);
    let text = ips_first(&f.chain(&[])).replace("{ name: main }", "{ name: main, fuse: auto }");
    let (spec, _) = load_str(&text, "sfc.yaml").unwrap();
    let p = place_with(&spec, Some(&model(100.0, 200.0, 30.0, 40.0))).unwrap();
    assert_eq!(p.costs[0].chosen, PostPlace::Fused);
    assert_eq!(p.costs[0].estimate.fused_ns, Some(60.0));
    assert_eq!(p.fused.len(), 1, "{:?}", p.fused);
    assert_eq!(p.fused[0].members, ["ips", "mon", "fw"]);
    let p = place_with(&spec, Some(&model(1.0, 2.0, 30.0, 40.0))).unwrap();
    assert_eq!(p.costs[0].chosen, PostPlace::Xdp, "5 ns in XDP against 60 fused");
    assert!(p.fused.is_empty());
}

/// P4SFC's whole chain: in -> ips -> mon -> fw -> nat -> out, the NAT an
/// eNAT with `extra` added to its line.
fn with_nat(f: &Files, extra: &str) -> String {
    let d = f.0.display();
    std::fs::write(f.0.join("nat.yaml"), "nat:\n  public_ip: 10.0.0.1\n  ports: 20000-20099\n").unwrap();
    ips_first(&f.chain(&[]))
        .replace("  - { from: fw, to: out }\n", "  - { from: fw, to: nat }\n  - { from: nat, to: out }\n")
        .replace(
            "links:",
            &format!("  - {{ name: nat, domain: main, kind: enat, args: [\"config={d}/nat.yaml\"]{extra} }}\nlinks:"),
        )
}

#[test]
fn a_nat_last_in_the_chain_is_split_over_the_loop_device_and_its_process() {
    let f = Files::new("post-nat", 3);
    let (_, p) = load_str(&with_nat(&f, ""), "sfc.yaml").unwrap();
    let want = [("fw", Place::Xdp), ("mon", Place::Xdp), ("ips", Place::Server), ("nat", Place::Hybrid)];
    assert_eq!(places(&p), want);
    let post = &p.post[0];
    let names: Vec<&str> = post.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!((names, post.split.as_deref(), post.after.as_str()), (vec!["mon", "fw", "nat"], Some("nat"), "ips"));
    assert_eq!(post.nfs[2].lowering, Lowering::Split(ferry_bpf::hybrid::HybridElement::Nat));
    // The NAT keeps its process, which gets its misses on the miss port
    // and sends back through it.
    let nfs: Vec<&str> = p.server.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nfs, ["ips", "nat"]);
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "out"), ("nat", "out~nat"), ("out~nat", "nat")]);
    let miss = p.server.ports.iter().find(|q| q.name == "out~nat").expect("the miss port");
    assert_eq!(miss.netdev, "b0");
    assert!(p.whole.is_empty());
    assert!(
        p.explain().contains("xdp path after ips to port out: mon -> fw -> nat -> redirected out"),
        "{}",
        p.explain()
    );
    assert!(p.explain().contains("  nat: misses to its process"), "{}", p.explain());
    assert!(p.decisions[3].why.starts_with("partially offloadable"), "{}", p.decisions[3].why);

    // offload: never: the whole NAT is a process, and so are the NFs
    // between the two processes.
    let (_, p) = load_str(&with_nat(&f, ", offload: never"), "sfc.yaml").unwrap();
    let want = [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server), ("nat", Place::Server)];
    assert_eq!(places(&p), want);
    assert!(p.post.is_empty());
    assert_eq!(p.whole.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["nat"]);
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "mon"), ("mon", "fw"), ("fw", "nat"), ("nat", "out")]);
    assert!(p.decisions[3].why.contains("offload: never"), "{}", p.decisions[3].why);

    // No process before it: the firewall and the NAT's stateless part run
    // in XDP on port in's device, which redirects hits out of port out;
    // the misses go to the NAT's process on port in's sockets, which
    // sends them out of port out itself.
    let text = with_nat(&f, "")
        .replace(
            "  - { from: in, to: ips }\n  - { from: ips, to: mon }\n  - { from: mon, to: fw }\n",
            "  - { from: in, to: fw }\n",
        )
        .lines()
        .filter(|l| !l.contains("name: ips") && !l.contains("name: mon"))
        .collect::<Vec<_>>()
        .join("\n");
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("nat", Place::Hybrid)]);
    assert!(p.hybrid.is_empty() && p.post.is_empty() && p.whole.is_empty());
    assert_eq!((&p.xdp[0].then, p.xdp[0].split.as_deref()), (&Then::Port("out".into()), Some("nat")));
    assert_eq!(p.xdp[0].nfs[1].lowering, Lowering::Split(ferry_bpf::hybrid::HybridElement::Nat));
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "nat"), ("nat", "out")]);
    assert!(p.decisions[1].why.contains("before any process (pre-server)"), "{}", p.decisions[1].why);
    assert!(p.explain().contains("xdp path on port in: fw -> nat -> redirected out of port out"), "{}", p.explain());
    // The NAT alone between two ports: the same.
    let alone = text.replace("  - { from: in, to: fw }\n  - { from: fw, to: nat }\n", "  - { from: in, to: nat }\n");
    let alone = alone.lines().filter(|l| !l.contains("name: fw")).collect::<Vec<_>>().join("\n");
    let (_, p) = load_str(&alone, "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("nat", Place::Hybrid)]);
    assert_eq!(p.xdp[0].split.as_deref(), Some("nat"));

    // Reply ports are for an eNAT that starts a hybrid path.
    let e =
        load_str(&with_nat(&f, "").replace("nat.yaml\"]", "nat.yaml\", \"reply_ports=in\"]"), "sfc.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[3].args[1]");
    assert!(e.message.contains("translates its chain's direction only"), "{e}");
}

/// P4SFC lets a partially offloadable NF sit anywhere: between processes
/// (or before one) it runs whole on the server, and the NFs after the
/// last process still move to XDP.
#[test]
fn a_nat_followed_by_nfs_runs_whole_and_says_why() {
    let f = Files::new("mid-nat", 3);
    // in -> ips -> mon -> fw -> nat -> out, the NAT moved to the front.
    let text = with_nat(&f, "")
        .replace("  - { from: in, to: ips }\n", "  - { from: in, to: nat }\n  - { from: nat, to: ips }\n")
        .replace("  - { from: fw, to: nat }\n  - { from: nat, to: out }\n", "  - { from: fw, to: out }\n");
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    let want = [("fw", Place::Xdp), ("mon", Place::Xdp), ("ips", Place::Server), ("nat", Place::Server)];
    assert_eq!(places(&p), want);
    assert_eq!(p.whole.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["nat"]);
    let why = &p.decisions[3].why;
    assert!(why.contains("\"ips\" after it is a process") && why.contains("share port in's socket map"), "{why}");
    // Between two processes, the NAT after the IPS and a process after it.
    let text = with_nat(&f, "").replace(
        "  - { from: fw, to: nat }\n  - { from: nat, to: out }\n",
        "  - { from: fw, to: nat }\n  - { from: nat, to: tail }\n  - { from: tail, to: out }\n",
    );
    let text = text.replace("links:", "  - { name: tail, domain: main, kind: l2fwd, offload: never }\nlinks:");
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    let nat = p.decisions.iter().find(|d| d.nf == "nat").unwrap();
    assert_eq!(nat.place, Place::Server);
    assert!(nat.why.contains("between processes"), "{}", nat.why);
}

#[test]
fn the_last_process_keeps_its_out_links_in_order() {
    let f = Files::new("post-order", 3);
    let d = f.0.display();
    let text = format!(
        "name: sfc
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netdev: a0 }}
  - {{ name: out, netdev: b0 }}
  - {{ name: out2, netdev: c0 }}
nfs:
  - {{ name: ips, domain: main, kind: ips, args: [\"{d}/ips.rules\"] }}
  - {{ name: sp, domain: main, kind: split }}
  - {{ name: mon, domain: main, kind: flow-monitor }}
  - {{ name: ips2, domain: main, kind: ips, args: [\"{d}/ips.rules\"] }}
links:
  - {{ from: in, to: ips }}
  - {{ from: ips, to: sp }}
  - {{ from: sp, to: mon }}
  - {{ from: sp, to: ips2 }}
  - {{ from: mon, to: out }}
  - {{ from: ips2, to: out2 }}
"
    );
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    assert_eq!(p.post.len(), 1);
    assert_eq!((p.post[0].after.as_str(), p.post[0].port.as_str()), ("sp", "out"));
    // sp's out-link 0 still leads (through the loop device) to what mon
    // fed, out-link 1 to ips2.
    let outs: Vec<&str> = p.server.links.iter().filter(|l| l.from == "sp").map(|l| l.to.as_str()).collect();
    assert_eq!(outs, ["out", "ips2"]);
}

#[test]
fn a_last_process_with_more_threads_than_the_port_has_queues_keeps_the_nfs_after_it() {
    let f = Files::new("post-threads", 3);
    let text = ips_first(&f.chain(&[("ips", "threads: 2")]))
        .replace("{ name: in, netdev: a0 }", "{ name: in, netdev: a0, queues: 2 }");
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    assert!(p.post.is_empty());
    assert_eq!(places(&p), [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server)]);
    assert!(p.decisions[0].why.contains("ips, which has 2 threads for port out's 1 queues"), "{}", p.decisions[0].why);
}

#[test]
fn post_server_stops_at_the_last_nf_that_cannot_move() {
    let f = Files::new("post-never", 3);
    let (_, p) = load_str(&ips_first(&f.chain(&[("fw", "offload: never")])), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server)]);
    assert!(p.post.is_empty());
    assert!(p.decisions[1].why.starts_with("between processes"), "{}", p.decisions[1].why);
    let (_, p) = load_str(&ips_first(&f.chain(&[("mon", "offload: never")])), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Server), ("ips", Place::Server)]);
    assert_eq!(p.post[0].after, "mon");
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "mon"), ("mon", "out")]);
}

#[test]
fn a_firewall_too_big_for_the_acl_element_stays_a_process() {
    let f = Files::new("big", 40);
    let (_, p) = load_str(&f.chain(&[]), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server)]);
    assert!(p.decisions[0].why.contains("40 rules"), "{}", p.decisions[0].why);
}

#[test]
fn a_payload_scan_runs_in_xdp_while_its_patterns_fit_the_element() {
    let f = Files::new("scan", 1);
    let text = |patterns: Vec<String>| {
        let args: Vec<String> = std::iter::once("drop".to_string()).chain(patterns).collect();
        let d = f.0.display().to_string();
        f.chain(&[]).replace(
            &format!("kind: firewall, args: [\"{d}/fw.rules\"]"),
            &format!("kind: payload-scan, args: {args:?}"),
        )
    };
    let (_, p) = load_str(&text(vec!["attack".into(), "hex:deadbeef".into()]), "sfc.yaml").unwrap();
    assert_eq!(places(&p)[0], ("fw", Place::Xdp));
    assert!(p.explain().contains("payload-scan (2 patterns, drop on a match)"), "{}", p.explain());
    let many: Vec<String> = (0..17).map(|i| format!("p{i}")).collect();
    let (_, p) = load_str(&text(many), "sfc.yaml").unwrap();
    assert_eq!(places(&p)[0], ("fw", Place::Server));
    assert!(p.decisions[0].why.contains("17 patterns, the XDP element takes at most 16"), "{}", p.decisions[0].why);
    let (_, p) = load_str(&text(vec!["x".repeat(40)]), "sfc.yaml").unwrap();
    assert!(p.decisions[0].why.contains("pattern 0 has 40 bytes"), "{}", p.decisions[0].why);
}

/// The chain without its IPS: in -> fw -> mon -> out.
fn without_ips(text: &str) -> String {
    let text = text.replace("  - { from: mon, to: ips }\n  - { from: ips, to: out }\n", "  - { from: mon, to: out }\n");
    text.lines().filter(|l| !l.contains("name: ips")).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_path_of_offloadable_nfs_to_a_port_runs_in_xdp_entirely() {
    let f = Files::new("all", 3);
    let (_, p) = load_str(&without_ips(&f.chain(&[])), "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Xdp)]);
    assert_eq!(p.xdp[0].then, Then::Port("out".into()));
    assert!(p.server.nfs.is_empty() && p.server.links.is_empty() && p.server.domains.is_empty());
    assert!(p.explain().contains("xdp path on port in: fw -> mon -> redirected out of port out"), "{}", p.explain());
}

#[test]
fn a_port_in_another_namespace_keeps_the_last_nf_a_process() {
    let f = Files::new("netns", 3);
    let text =
        without_ips(&f.chain(&[])).replace("{ name: out, netdev: b0 }", "{ name: out, netns: other, netdev: b0 }");
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Xdp), ("mon", Place::Server)]);
    assert!(p.decisions[1].why.contains("cannot send to"), "{}", p.decisions[1].why);
    assert_eq!(p.xdp[0].then, Then::Nf("mon".into()));
}

#[test]
fn force_on_what_cannot_move_names_the_field() {
    let f = Files::new("force", 3);
    let text = f.chain(&[("ips", "offload: force")]);
    let e = load_str(&text, "sfc.yaml").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (Some(9), "nfs[2].offload"));
    assert!(e.to_string().contains("ips: offload: force, but not offloadable"), "{e}");
    // Forced where it can move: fine.
    assert!(load_str(&f.chain(&[("fw", "offload: force")]), "sfc.yaml").is_ok());
}

#[test]
fn a_bad_offload_value_names_the_field() {
    let f = Files::new("bad", 3);
    let e = load_str(&f.chain(&[("mon", "offload: always")]), "sfc.yaml").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (Some(8), "nfs[1].offload"));
    assert!(e.message.contains("unknown variant `always`"), "{e}");
}

#[test]
fn a_path_is_kept_in_processes_when_the_next_process_has_other_threads() {
    let f = Files::new("threads", 3);
    let text = f
        .chain(&[("fw", "threads: 2"), ("mon", "threads: 2")])
        .replace("{ name: in, netdev: a0 }", "{ name: in, netdev: a0, queues: 2 }");
    let (_, p) = load_str(&text, "sfc.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Server), ("mon", Place::Server), ("ips", Place::Server)]);
    assert!(p.decisions[0].why.contains("2 threads on port in and ips after it has 1"), "{}", p.decisions[0].why);
    assert!(p.xdp.is_empty());
}

#[test]
fn nfs_that_connect_by_themselves_stay_processes() {
    let f = Files::new("spawn", 3);
    let (_, p) = load_str(&f.chain(&[("fw", "spawn: false")]), "sfc.yaml").unwrap();
    assert_eq!(p.decisions[0].place, Place::Server);
    assert!(p.decisions[0].why.starts_with("spawn: false"), "{}", p.decisions[0].why);
}

/// in -> fw (efw) -> lb (elb), replies on b1; an eVNF file for both.
fn hybrid_chain(f: &Files, fw_extra: &str, tail: &str) -> String {
    let cfg = f.0.join("evnf.yaml");
    std::fs::write(
        &cfg,
        "firewall:\n  rules:\n    - { src: 10.10.66.0/24, action: deny }\nbalancer:\n  vip: 10.10.9.9:80\n  backends:\n    - \
         { addr: 10.10.2.11:80 }\n",
    )
    .unwrap();
    let c = cfg.display();
    format!(
        "name: edge
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netdev: d0 }}
  - {{ name: b1, netdev: d1 }}
nfs:
  - {{ name: fw, domain: main, kind: efw, args: [\"config={c}\"]{fw_extra} }}
  - {{ name: lb, domain: main, kind: elb, args: [\"config={c}\", \"reply_ports=b1\"] }}
links:
  - {{ from: in, to: fw }}
  - {{ from: fw, to: lb }}
{tail}"
    )
}

#[test]
fn hybrid_nfs_run_on_their_ports_path_and_keep_their_control_planes() {
    let f = Files::new("hybrid", 1);
    let (_, p) = load_str(&hybrid_chain(&f, "", ""), "edge.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Hybrid), ("lb", Place::Hybrid)]);
    assert_eq!(p.hybrid.len(), 1);
    let h = &p.hybrid[0];
    assert_eq!((h.port.as_str(), h.nfs.len()), ("in", 2));
    assert_eq!((h.nfs[0].kind.as_str(), h.nfs[1].reply_ports.clone()), ("efw", vec!["b1".to_string()]));
    assert!(p.xdp.is_empty());
    // The control planes stay, unlinked: no frame reaches their processes.
    let names: Vec<&str> = p.server.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["fw", "lb"]);
    assert!(p.server.links.is_empty(), "{:?}", p.server.links);
    let text = p.explain();
    assert!(text.contains("hybrid path on port in: fw -> lb -> the kernel's routing"), "{text}");
    assert!(text.contains("  lb: replies rewritten on port b1"), "{text}");
}

#[test]
fn nfs_that_can_move_ahead_of_a_hybrid_path_join_its_pipeline() {
    let f = Files::new("hybrid-ahead", 3);
    let d = f.0.display();
    let text = hybrid_chain(&f, "", "")
        .replace(
            "nfs:\n",
            &format!(
                "nfs:\n  - {{ name: acl, domain: main, kind: firewall, args: [\"{d}/fw.rules\"] }}\n  - {{ name: mon, \
                 domain: main, kind: flow-monitor }}\n"
            ),
        )
        .replace(
            "  - { from: in, to: fw }\n",
            "  - { from: in, to: acl }\n  - { from: acl, to: mon }\n  - { from: mon, to: fw }\n",
        );
    let (_, p) = load_str(&text, "edge.yaml").unwrap();
    let chain = text;
    assert_eq!(places(&p), [("acl", Place::Xdp), ("mon", Place::Xdp), ("fw", Place::Hybrid), ("lb", Place::Hybrid)]);
    let h = &p.hybrid[0];
    let ahead: Vec<&str> = h.before.iter().map(|n| n.name.as_str()).collect();
    assert_eq!((h.port.as_str(), ahead, h.nfs.len()), ("in", vec!["acl", "mon"], 2));
    assert!(p.xdp.is_empty(), "no pre-server part of its own: {:?}", p.xdp);
    let names: Vec<&str> = p.server.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["fw", "lb"], "the two ahead leave no process");
    assert!(p.server.links.is_empty(), "{:?}", p.server.links);
    let text = p.explain();
    assert!(text.contains("hybrid path on port in: acl -> mon -> fw -> lb -> the kernel's routing"), "{text}");
    assert!(text.contains("  acl: counter rx, acl (3 rules), counter pass"), "{text}");
    assert!(p.decisions[1].why.contains("before the hybrid NFs of port in's path"), "{}", p.decisions[1].why);
    // One that cannot move ends the walk: the hybrid NFs after it have no
    // port to start at.
    let never = chain.replace("kind: flow-monitor }", "kind: flow-monitor, offload: never }");
    let e = load_str(&never, "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[2].name");
    assert!(e.message.contains("NFs that run in XDP ahead of them"), "{e}");
}

#[test]
fn a_process_after_a_hybrid_path_gets_what_passes_on_the_ports_sockets() {
    let f = Files::new("hybrid-then", 3);
    let d = f.0.display();
    let text = hybrid_chain(&f, "", "  - { from: lb, to: ips }\n  - { from: ips, to: out }\n")
        .replace("  - { name: b1, netdev: d1 }\n", "  - { name: b1, netdev: d1 }\n  - { name: out, netdev: d3 }\n")
        .replace("links:", &format!("  - {{ name: ips, domain: main, kind: ips, args: [\"{d}/ips.rules\"] }}\nlinks:"));
    let (_, p) = load_str(&text, "edge.yaml").unwrap();
    assert_eq!(places(&p), [("fw", Place::Hybrid), ("lb", Place::Hybrid), ("ips", Place::Server)]);
    assert_eq!(p.hybrid[0].then.as_deref(), Some("ips"));
    // The port links to the process, which owns its sockets.
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "out")]);
    assert!(p.explain().contains("hybrid path on port in: fw -> lb -> AF_XDP socket of ips"), "{}", p.explain());
    // Thread i owns queue i.
    let two = text.replace("ips.rules\"] }", "ips.rules\"], threads: 2 }").replace("d3 }", "d3, queues: 2 }");
    let e = load_str(&two, "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[2].threads");
    assert!(e.message.contains("one thread per queue"), "{e}");
}

#[test]
fn misplaced_hybrid_nfs_are_refused_with_their_field() {
    let f = Files::new("hybrid-bad", 1);
    let bad = |extra: &str, tail: &str| load_str(&hybrid_chain(&f, extra, tail), "edge.yaml").unwrap_err();
    let e = bad("", "  - { from: lb, to: b1 }\n");
    assert_eq!(e.field, "links[2].to");
    assert!(e.message.contains("ends in the kernel's routing"), "{e}");
    let text = hybrid_chain(&f, "", "").replace("[ { name: main } ]", "[ { name: main }, { name: other } ]");
    let e = load_str(&text.replace("name: lb, domain: main", "name: lb, domain: other"), "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[1].domain");
    assert!(e.message.contains("share one pipeline"), "{e}");
    let e = bad(", offload: never", "");
    assert_eq!((e.line, e.field.as_str()), (Some(7), "nfs[0].offload"));
    let text = hybrid_chain(&f, ", threads: 2", "").replace("netdev: d0 }", "netdev: d0, queues: 2 }");
    let e = load_str(&text, "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[0].threads");
    let text = hybrid_chain(&f, "", "").replace("reply_ports=b1", "reply_ports=in");
    let e = load_str(&text, "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[1].args[1]");
    assert!(e.message.contains("reply port \"in\""), "{e}");
    let text = hybrid_chain(&f, "", "")
        .replace("  - { from: in, to: fw }\n  - { from: fw, to: lb }\n", "  - { from: in, to: fw }\n");
    let e = load_str(&text, "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[1].name");
    assert!(e.message.contains("no port leads to it"), "{e}");
    let text = hybrid_chain(&f, "", "").replace("kind: elb", "kind: efw").replace(", \"reply_ports=b1\"", "");
    let e = load_str(&text, "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[1].kind");
    assert!(e.message.contains("a second efw"), "{e}");
}

#[test]
fn the_edpi_ends_its_path_at_a_kernel_hop_and_owns_the_ports_sockets() {
    let f = Files::new("hybrid-dpi", 1);
    let cfg = f.0.join("dpi.yaml");
    std::fs::write(&cfg, "dpi:\n  elephants: [HTTP]\n").unwrap();
    let text = |dpi_link: &str| {
        format!(
            "name: sfc2
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netdev: d0 }}
kernel:
  - {{ name: stack, dev: fy-dpi0, mac: \"02:00:00:0a:01:01\" }}
nfs:
  - {{ name: dpi, domain: main, kind: edpi, args: [\"config={}\"] }}
links:
  - {{ from: in, to: dpi }}
{dpi_link}",
            cfg.display()
        )
    };
    let (_, p) = load_str(&text("  - { from: dpi, to: stack }\n"), "sfc2.yaml").unwrap();
    assert_eq!(places(&p), [("dpi", Place::Hybrid)]);
    assert!(p.hybrid[0].nfs[0].slow_path);
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "dpi"), ("dpi", "stack")], "its thread owns the port's socket and sends to the hop");
    assert!(p.explain().contains("  dpi: its slow path on port in's AF_XDP sockets, back into the kernel"));
    let e = load_str(&text(""), "sfc2.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[0].name");
    assert!(e.message.contains("link it to one kernel hop"), "{e}");
    let linked = text("  - { from: dpi, to: stack }\n");
    let e = load_str(&linked.replace("02:00:00:0a:01:01", "02:00:00:0a:01"), "sfc2.yaml").unwrap_err();
    assert_eq!(e.field, "kernel[0].mac");
    let e = load_str(&linked.replace(", mac: \"02:00:00:0a:01:01\"", ""), "sfc2.yaml").unwrap_err();
    assert_eq!(e.field, "kernel[0].name");
    assert!(e.message.contains("needs `mac:`"), "{e}");
    let e = load_str(&linked.replace("dev: fy-dpi0", "netns: other, dev: fy-dpi0"), "sfc2.yaml").unwrap_err();
    assert!(e.message.contains("must be in port in's namespace"), "{e}");
    let e = load_str(&linked.replace("netdev: d0 }", "netdev: d0, queues: 2 }"), "sfc2.yaml").unwrap_err();
    assert_eq!(e.field, "ports[0].queues");
    assert!(e.message.contains("serves one receive queue"), "{e}");
}

#[test]
fn reply_ports_are_named_once_and_at_least_once() {
    let f = Files::new("hybrid-replies", 1);
    let text = hybrid_chain(&f, "", "");
    let e = load_str(&text.replace("reply_ports=b1", "reply_ports="), "edge.yaml").unwrap_err();
    assert_eq!(e.field, "nfs[1].args[1]");
    assert!(e.message.contains("elb: name at least one reply port"), "{e}");
    let e = load_str(&text.replace("reply_ports=b1", "reply_ports=b1,b1"), "edge.yaml").unwrap_err();
    assert!(e.message.contains("reply port \"b1\" is named twice"), "{e}");
}

/// The demo chain, `in -> resp -> l2fwd -> fwd -> out`, with `fuse` on
/// its domain and `extra` on the NF named by each pair; l2fwd and fwd
/// kept processes (`offload: never`), for what fusion does with them.
fn demo(fuse: &str, extra: &[(&str, &str)]) -> String {
    let more = |nf: &str| extra.iter().filter(|(n, _)| *n == nf).map(|(_, l)| format!(", {l}")).collect::<String>();
    format!(
        "name: demo
domains: [ {{ name: main, fuse: {fuse} }} ]
ports:
  - {{ name: in, netdev: a0 }}
  - {{ name: out, netdev: b0 }}
nfs:
  - {{ name: resp, domain: main, kind: arp-responder+icmp-echo, args: [\"10.0.1.2=02:00:00:00:01:02\", \"--\", \"10.0.1.2\"]{} }}
  - {{ name: l2fwd, domain: main, kind: l2fwd, offload: never{} }}
  - {{ name: fwd, domain: main, kind: fwd, offload: never{} }}
links:
  - {{ from: in, to: resp }}
  - {{ from: resp, to: l2fwd }}
  - {{ from: l2fwd, to: fwd }}
  - {{ from: fwd, to: out }}
",
        more("resp"),
        more("l2fwd"),
        more("fwd")
    )
}

#[test]
fn fuse_auto_runs_a_domains_adjacent_nfs_in_one_nf() {
    let (_, p) = load_str(&demo("auto", &[]), "demo.yaml").unwrap();
    assert_eq!(
        p.fused,
        [FusedGroup { name: "resp".into(), members: vec!["resp".into(), "l2fwd".into(), "fwd".into()] }]
    );
    assert_eq!(p.server.nfs.len(), 1);
    let nf = &p.server.nfs[0];
    assert_eq!((nf.name.as_str(), nf.kind.as_deref()), ("resp", Some("fused")));
    assert_eq!(nf.args[0], "@stage=resp:arp-responder+icmp-echo:3");
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "resp"), ("resp", "out")]);
    // The server part is a valid chain of its own.
    ferry_catalog::parse_chain_str(&serde_yaml::to_string(&p.server).unwrap(), "server.yaml").unwrap();
    let explain = p.explain();
    assert!(explain.contains("fused in resp's threads: resp -> l2fwd -> fwd"), "{explain}");
    assert!(p.decisions.iter().all(|d| d.place == Place::Server && d.why.contains("fused: runs in resp's threads")));
    // By default, nothing fuses.
    let (_, p) = load_str(&demo("never", &[]), "demo.yaml").unwrap();
    assert!(p.fused.is_empty());
    assert_eq!(p.server.nfs.len(), 3);
}

#[test]
fn fusion_stops_where_a_thread_would_differ_and_says_why() {
    // l2fwd on its own CPU: resp fuses with nothing, l2fwd and fwd differ.
    let (_, p) = load_str(&demo("auto", &[("l2fwd", "cpus: [1]")]), "demo.yaml").unwrap();
    assert!(p.fused.is_empty(), "{:?}", p.fused);
    let why = |nf: &str| p.decisions.iter().find(|d| d.nf == nf).unwrap().why.clone();
    assert!(why("resp").contains("not fused with l2fwd: their cpus differ"), "{}", why("resp"));
    // An NF that says never splits the run.
    let (_, p) = load_str(&demo("auto", &[("fwd", "fuse: never")]), "demo.yaml").unwrap();
    assert_eq!(p.fused.len(), 1);
    assert_eq!(p.fused[0].members, ["resp", "l2fwd"]);
    assert_eq!(p.server.nfs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["resp", "fwd"]);
    let why = |nf: &str| p.decisions.iter().find(|d| d.nf == nf).unwrap().why.clone();
    assert!(why("l2fwd").contains("fused"), "{}", why("l2fwd"));
    // A forwarder that routes by arrival port does not fuse.
    let (_, p) = load_str(&demo("auto", &[("fwd", "args: [\"by_port=1\"]")]), "demo.yaml").unwrap();
    assert_eq!(p.fused[0].members, ["resp", "l2fwd"]);
}

#[test]
fn the_p4sfc_chain_kept_in_processes_fuses_its_monitor_too() {
    let f = Files::new("fuse-sfc", 3);
    let auto = "fuse: auto";
    let pinned = [("fw", "offload: never, fuse: auto"), ("mon", "offload: never, fuse: auto"), ("ips", auto)];
    let (_, p) = load_str(&f.chain(&pinned), "sfc.yaml").unwrap();
    assert_eq!(p.fused.len(), 1, "{}", p.explain());
    assert_eq!(p.fused[0].members, ["fw", "mon", "ips"]);
    assert!(ferry_catalog::fused::exports_flows("fused", &p.server.nfs[0].args));
    // Placed as P4SFC places it, the firewall and monitor go to XDP and
    // the IPS has nothing to fuse with.
    let (_, p) = load_str(&f.chain(&[("fw", auto), ("mon", auto), ("ips", auto)]), "sfc.yaml").unwrap();
    assert!(p.fused.is_empty(), "{}", p.explain());
}

#[test]
fn with_fuse_auto_p4sfcs_chain_fuses_after_the_ips_instead_of_crossing_a_loop_device() {
    let f = Files::new("post-fuse", 3);
    // in -> ips -> mon -> fw -> nat -> out, every NF with fuse: auto.
    let p4sfc = with_nat(&f, "").replace("domains: [ { name: main } ]", "domains: [ { name: main, fuse: auto } ]");
    let (_, p) = load_str(&p4sfc, "sfc.yaml").unwrap();
    assert!(p.post.is_empty(), "{}", p.explain());
    assert_eq!(p.fused.len(), 1, "{}", p.explain());
    assert_eq!(p.fused[0].members, ["ips", "mon", "fw"]);
    assert_eq!(p.whole.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["nat"]);
    let why = |nf: &str| p.decisions.iter().find(|d| d.nf == nf).unwrap().why.clone();
    assert!(why("mon").contains("rather than in XDP on a loop device"), "{}", why("mon"));
    assert!(why("nat").contains("after ips's fused run (fuse: auto), whole as a process"), "{}", why("nat"));
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "ips"), ("ips", "nat"), ("nat", "out")]);
}

/// in -> a (l2fwd) -> b (fwd) -> in: a round trip through two NFs kept
/// processes, which may share port `in` only as one fused NF.
fn round_trip(fuse: &str, b_extra: &str) -> String {
    format!(
        "name: rt
domains: [ {{ name: main, fuse: {fuse} }} ]
ports: [ {{ name: in, netdev: a0 }} ]
nfs:
  - {{ name: a, domain: main, kind: l2fwd, offload: never }}
  - {{ name: b, domain: main, kind: fwd, offload: never{b_extra} }}
links:
  - {{ from: in, to: a }}
  - {{ from: a, to: b }}
  - {{ from: b, to: in }}
"
    )
}

#[test]
fn a_round_trip_through_several_nfs_shares_its_port_only_fused() {
    let (_, p) = load_str(&round_trip("auto", ""), "rt.yaml").unwrap();
    assert_eq!(p.fused[0].members, ["a", "b"]);
    let links: Vec<(&str, &str)> = p.server.links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
    assert_eq!(links, [("in", "a"), ("a", "in")]);
    // Without fuse: auto the parser refuses the second user of the port.
    let e = load_str(&round_trip("never", ""), "rt.yaml").unwrap_err().to_string();
    assert!(e.contains("links[2].to: port \"in\" is already used by NF \"a\"") && e.contains("fuse: auto"), "{e}");
    // With it, but NFs that do not fuse: placement refuses the link, and says why.
    let e = load_str(&round_trip("auto", ", cpus: [1]"), "rt.yaml").unwrap_err().to_string();
    assert!(e.starts_with("rt.yaml:10:") && e.contains("links[2]"), "{e}");
    assert!(e.contains("did not fuse into one (not fused with b: their cpus differ)"), "{e}");
}

#[test]
fn the_refused_round_trip_link_is_the_one_in_the_file() {
    // c does not fuse with a (its CPUs differ); a and b fuse, and their
    // fused NF sends to the port c receives from: the file's b -> in.
    let text = round_trip("auto", "")
        .replace(
            "  - { name: a,",
            "  - { name: c, domain: main, kind: fwd, offload: never, cpus: [1] }\n  - { name: a,",
        )
        .replace("  - { from: in, to: a }", "  - { from: in, to: c }\n  - { from: c, to: a }");
    let e = load_str(&text, "rt.yaml").unwrap_err().to_string();
    assert!(e.contains("links[3]") && e.contains("\"c\" and \"a\""), "{e}");
}

#[test]
fn after_the_last_process_fusion_yields_to_offload_force_and_to_what_one_nf_holds() {
    let f = Files::new("post-limits", 3);
    let auto = with_nat(&f, "").replace("domains: [ { name: main } ]", "domains: [ { name: main, fuse: auto } ]");
    // The monitor must run in XDP: the post-server part stays.
    let forced = auto.replace("kind: flow-monitor", "kind: flow-monitor, offload: force");
    let (_, p) = load_str(&forced, "sfc.yaml").unwrap();
    assert_eq!(p.post.len(), 1, "{}", p.explain());
    // A second flow monitor before the IPS: ips, mon and fw would not fit
    // one fused NF, so the post-server part stays too.
    let two = auto
        .replace(
            "  - { name: fw,",
            "  - { name: mon0, domain: main, kind: flow-monitor, offload: never }\n  - { name: fw,",
        )
        .replace("  - { from: in, to: ips }", "  - { from: in, to: mon0 }\n  - { from: mon0, to: ips }");
    let (_, p) = load_str(&two, "sfc.yaml").unwrap();
    assert_eq!(p.post.len(), 1, "{}", p.explain());
}

#[test]
fn l2fwd_and_fwd_run_in_xdp_where_a_path_allows() {
    let plain = |text: String| text.replace(", offload: never", "");
    // Between two ports, both in XDP: no process at all.
    let straight = plain(round_trip("never", ""))
        .replace(
            "ports: [ { name: in, netdev: a0 } ]",
            "ports: [ { name: in, netdev: a0 }, { name: out, netdev: a1 } ]",
        )
        .replace("{ from: b, to: in }", "{ from: b, to: out }");
    let (_, p) = load_str(&straight, "rt.yaml").unwrap();
    assert!(p.server.nfs.is_empty(), "{}", p.explain());
    assert_eq!(p.xdp[0].nfs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(p.xdp[0].then, Then::Port("out".into()));
    assert_eq!(p.xdp[0].nfs[0].lowering.elements(), "counter rx, ether-swap");
    // After the responder's process: the post-server part.
    let (_, p) = load_str(&plain(demo("never", &[])), "demo.yaml").unwrap();
    assert_eq!(p.post[0].nfs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["l2fwd", "fwd"]);
    // A forwarder that routes by arrival port, and an l2fwd that sends
    // frames back, stay processes and say why.
    let (_, p) = load_str(&plain(demo("never", &[("fwd", "args: [\"by_port=1\"]")])), "demo.yaml").unwrap();
    let why = |p: &Placement, nf: &str| p.decisions.iter().find(|d| d.nf == nf).unwrap().why.clone();
    assert!(why(&p, "fwd").contains("routes by arrival port"), "{}", why(&p, "fwd"));
    let back = "name: back\ndomains: [ { name: main } ]\nports: [ { name: in, netdev: a0 } ]\nnfs: [ { name: a, domain: main, kind: l2fwd } ]\nlinks: [ { from: in, to: a } ]\n";
    let (_, p) = load_str(back, "back.yaml").unwrap();
    assert!(why(&p, "a").contains("no out-link"), "{}", why(&p, "a"));
}

#[test]
fn nfs_after_a_tenant_entry_stay_processes_and_say_why() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/chains/tenants.yaml"))
        .unwrap()
        .replace("{dut}", "x");
    let (_, p) = load_str(&text, "tenants.yaml").unwrap();
    assert!(p.xdp.is_empty() && p.post.is_empty(), "{}", p.explain());
    let why = &p.decisions.iter().find(|d| d.nf == "acme-fw").unwrap().why;
    assert!(why.contains("tenant entry of edge"), "{why}");
}
