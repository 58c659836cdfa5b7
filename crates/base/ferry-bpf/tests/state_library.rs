//! The state library against the pipeline's real maps: what the NF writes
//! through a StateTable is what the data path uses (checked with
//! BPF_PROG_TEST_RUN), in blocking and non-blocking mode; StateCounter reads
//! and sets what the data path counts.

mod common;

use common::privileged;
use ferry_bpf::pipeline::*;
use ferry_bpf::state::{StateCounter, StateTable, Update};
use ferry_bpf::test_run;
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const LO: u32 = 1;

fn frame() -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
    let t = FiveTuple {
        src_ip: [10, 0, 0, 1].into(),
        dst_ip: [10, 0, 1, 2].into(),
        src_port: 1,
        dst_port: 80,
        proto: L4Proto::Tcp,
    };
    let mut f = vec![0u8; 64];
    build_frame(&spec, &t, None, &mut f).unwrap();
    f
}

fn run(p: &Pipeline) -> (u32, Vec<u8>) {
    let o = test_run(p.program().program_fd().unwrap(), &frame(), 1).unwrap();
    (o.action, o.data)
}

fn rewrite_to(last_octet: u8) -> Rewrite {
    Rewrite { fields: RW_DST_IP, dst_ip: std::net::Ipv4Addr::new(10, 9, 9, last_octet).into(), ..Default::default() }
}

#[test]
fn table_updates_reach_the_data_path_in_both_modes() {
    if !privileged() {
        return;
    }
    let mut p = Pipeline::load().unwrap();
    p.set_forward(1, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    let chain = [
        Element { kind: ElementKind::Counter, config: 7, nf: 1 },
        Element { kind: ElementKind::Rewrite, config: 3, nf: 2 },
        Element { kind: ElementKind::Forward, config: 1, nf: 2 },
    ];
    p.deploy(1, LO, &chain).unwrap();
    let mut table: StateTable<u32, Rewrite> =
        StateTable::init(p.map_handle("ferry_pl_rewrites").unwrap(), "nat", &["config"], &["rewrite"]).unwrap();
    assert_eq!(table.field_names().0, ["config"]);
    // No rewrite config yet: the element drops.
    assert_eq!(run(&p).0, XDP_DROP);

    table.create(3, rewrite_to(1), Update::Blocking).unwrap();
    assert_eq!(table.get_in_kernel(&3).unwrap(), Some(rewrite_to(1)), "blocking: in the map on return");
    let (action, out) = run(&p);
    assert_eq!((action, out[33]), (XDP_PASS, 1));

    table.create(3, rewrite_to(2), Update::NonBlocking).unwrap();
    assert_eq!(table.get(&3), Some(rewrite_to(2)), "the NF reads its own write at once");
    table.flush().unwrap();
    assert_eq!(run(&p).1[33], 2, "non-blocking: in the map after flush");

    for i in 0..100u8 {
        table.create(3, rewrite_to(i), Update::NonBlocking).unwrap();
    }
    table.flush().unwrap();
    assert_eq!(run(&p).1[33], 99, "non-blocking updates apply in order");

    table.remove(&3, Update::Blocking).unwrap();
    assert_eq!(table.get(&3), None);
    assert_eq!(run(&p).0, XDP_DROP, "removed: the element drops again");
    // Removing what is not there (removed twice, or evicted by the data
    // path first) is no failure, in either mode.
    table.remove(&3, Update::Blocking).expect("a second remove");
    table.remove(&42, Update::NonBlocking).unwrap();
    table.flush().expect("a remove of a key never there");

    // Rows 6..9 read in one batch call: row 7 holds the five frames.
    let rows = p.map_handle("ferry_pl_counters").unwrap();
    let aya::maps::Map::PerCpuArray(data) = &rows else { panic!("ferry_pl_counters is a per-CPU array") };
    let add = |a: PlCount, c: PlCount| PlCount { packets: a.packets + c.packets, bytes: a.bytes + c.bytes };
    let fd = std::os::fd::AsFd::as_fd(data.fd());
    let batched = ferry_bpf::batch::PerCpuRows::new(fd).and_then(|r| r.read(6, 3, add)).unwrap();
    assert_eq!(batched.iter().map(|c| c.packets).collect::<Vec<_>>(), [0, 5, 0]);
    // A map of another layout is refused, not overrun.
    assert!(ferry_bpf::batch::PerCpuRows::<[u64; 4]>::new(fd).is_err());
    assert!(ferry_bpf::batch::lookup_all::<u32, PlCount>(fd).is_err());
    let mut counter = StateCounter::init(rows, "seen", 7).unwrap();
    let seen = counter.get().unwrap();
    assert_eq!(seen, 5, "the data path counted five frames");
    counter.set(1000).unwrap();
    run(&p);
    assert_eq!(counter.get().unwrap(), 1001);
    counter.set(0).unwrap();
    assert_eq!(counter.get_full().unwrap(), PlCount::default());
}

#[test]
fn entries_already_in_the_map_are_the_starting_view() {
    if !privileged() {
        return;
    }
    let mut p = Pipeline::load().unwrap();
    p.set_rewrite(5, rewrite_to(5)).unwrap();
    let table: StateTable<u32, Rewrite> =
        StateTable::init(p.map_handle("ferry_pl_rewrites").unwrap(), "nat", &["config"], &["rewrite"]).unwrap();
    assert_eq!(table.get(&5), Some(rewrite_to(5)));
    assert!(StateTable::<u32, Rewrite>::init(p.map_handle("ferry_pl_counters").unwrap(), "x", &[], &[]).is_err());
}

/// A table read back whole returns every entry once, over more than one
/// batch (the batch read asks for 4096 entries per call), as the data
/// path holds it.
#[test]
fn a_table_reads_back_every_entry_once_over_several_batches() {
    if !privileged() {
        return;
    }
    use ferry_bpf::flow_table::FlowTable;
    const N: u32 = 10_000;
    let mut flows = FlowTable::create(16_384).unwrap();
    let key = |i: u32| FlowKey { config: i, ..FlowKey::default() };
    for i in 0..N {
        flows.set(key(i), PlCount { packets: u64::from(i) * 3, ..PlCount::default() }).unwrap();
    }
    let map = aya::maps::Map::HashMap(aya::maps::MapData::from_fd(flows.fd().unwrap()).unwrap());
    let table: StateTable<FlowKey, PlCount> = StateTable::init(map, "flows", &["flow"], &["count"]).unwrap();
    let mut read = table.entries_in_kernel();
    read.sort_by_key(|(k, _)| k.config);
    assert_eq!(read.len(), N as usize);
    for (i, (k, v)) in read.iter().enumerate() {
        assert_eq!((k.config, v.packets), (i as u32, i as u64 * 3));
    }
    assert_eq!(flows.flows().len(), N as usize);
    // Read by the batch command itself, not by the walk it falls back to.
    let fd = flows.fd().unwrap();
    let batched = ferry_bpf::batch::lookup_all::<FlowKey, PlCount>(std::os::fd::AsFd::as_fd(&fd)).unwrap();
    assert_eq!(batched.len(), N as usize);
}
