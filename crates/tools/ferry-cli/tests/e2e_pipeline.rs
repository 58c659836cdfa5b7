//! The XDP stage pipeline under live traffic: deploying and removing other
//! chains (map updates only) while one chain forwards costs it nothing.

mod common;

use common::*;
use ferry_bpf::pipeline::{Element, ElementKind, Forward, Pipeline, FWD_DROP, FWD_TX};
use ferry_bpf::{AttachMode, LoadedXdp, Object};

#[test]
fn deploying_and_removing_chains_loses_nothing_on_a_running_chain() {
    if !privileged("pipeline_reconfiguration_under_load") {
        return;
    }
    let tb = testbed(GEN_DUT_TESTBED, "pipeline-e2e.yaml");
    let (gen_ns, dut_ns) = (tb.ns_name("gen").to_string(), tb.ns_name("dut").to_string());
    // The far end counts what comes back.
    let returned = ferry_sys::in_netns(Some(&gen_ns), || {
        let ifindex = ferry_xsk::ifindex("g0").expect("g0");
        LoadedXdp::attach(Object::Basic, "ferry_drop", ifindex, AttachMode::Driver).expect("attach the counting drop")
    })
    .unwrap();
    let (mut pl, d0) = ferry_sys::in_netns(Some(&dut_ns), || {
        let ifindex = ferry_xsk::ifindex("d0").expect("d0");
        let mut pl = Pipeline::load().expect("load the pipeline");
        pl.attach(ifindex, AttachMode::Driver).expect("attach the pipeline");
        (pl, ifindex)
    })
    .unwrap();
    // Chain 1 on d0: count, send back.
    pl.set_forward(1, Forward { action: FWD_TX, ifindex: 0 }).unwrap();
    let a = [
        Element { kind: ElementKind::Counter, config: 1, nf: 1 },
        Element { kind: ElementKind::Forward, config: 1, nf: 2 },
    ];
    pl.deploy(1, d0, &a).unwrap();
    pl.set_forward(2, Forward { action: FWD_DROP, ifindex: 0 }).unwrap();
    let b: Vec<Element> = (0..6)
        .map(|i| Element { kind: ElementKind::Counter, config: 10 + i, nf: i + 1 })
        .chain([Element { kind: ElementKind::Forward, config: 2, nf: 7 }])
        .collect();

    // More frames than the test needs: it is stopped once chain 2 has been
    // reconfigured CYCLES times while they flowed.
    const CYCLES: u32 = 200;
    let gen = Ferry::spawn(
        &tb,
        "gen",
        &["gen", "live", "--dev", "g0", "--count", "100000000", "--rate", "150000", "--dst-mac", "02:00:00:00:01:02"],
    );
    // While chain 1 carries traffic, deploy and remove chain 2 (entering on
    // other ifindexes, sharing stages, NF ids and element tables) again and
    // again: from its first counted frame until the generator stops.
    wait_until("traffic on chain 1", || pl.counter(1).unwrap().packets > 0);
    for cycle in 0..CYCLES {
        let ingress = 1000 + cycle % 7;
        pl.deploy(2, ingress, &b).unwrap();
        pl.remove(2, ingress, &b).unwrap();
    }
    let report = gen.stop_json();
    let sent = u(&report, "/sent");
    assert!(sent > 0, "{report:#}");
    // Every frame sent crosses chain 1 and comes back (a lost one shows as
    // this wait timing out).
    wait_until("every frame counted by chain 1 and back at the generator", || {
        pl.counter(1).unwrap().packets == sent && returned.verdicts().unwrap().packets[1] == sent
    });
    eprintln!("sent {sent}, all counted by chain 1 and back, over {CYCLES} deploy/remove cycles of chain 2");
    drop(pl);
    drop(returned);
    down_and_check(tb);
}
