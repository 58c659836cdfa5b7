//! Memory per core: with the counting allocator installed, a benchmark
//! run reports the heap building the NF took and each worker's growth
//! over its packets, and the figures cover what the NF and runtime hold.

use ferry_equivalence::workloads::{run_named, workload};
use ferry_parallel::heap::{self, CountingAlloc};
use ferry_parallel::packet_set::SetKey;

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

#[test]
fn this_binary_counts_heap_bytes() {
    let mark = heap::mark().expect("CountingAlloc is this binary's allocator");
    let block = std::hint::black_box(vec![0u8; 10_000]);
    let with_block = mark.usage();
    drop(block);
    let after = mark.usage();
    assert_eq!(with_block.net_bytes, 10_000);
    assert_eq!(after.net_bytes, 0);
    assert_eq!(after.peak_bytes, 10_000, "the peak remembers the block");
}

#[test]
fn each_workers_growth_holds_at_least_its_live_sets() {
    let (args, trace) = workload("firewall", 20_000).unwrap();
    for workers in [1, 2] {
        let run = run_named("firewall", &args, &trace, workers).unwrap();
        assert_eq!(run.report.workers.len(), workers);
        for (index, worker) in run.report.workers.iter().enumerate() {
            let used = worker.heap.expect("a presplit run measures each worker");
            assert!(worker.live_sets > 100, "worker {index} of {workers}: {} sets", worker.live_sets);
            // A set table holds at least each live set's key.
            let floor = (worker.live_sets * std::mem::size_of::<SetKey>()) as i64;
            assert!(
                used.peak_bytes >= floor,
                "worker {index} of {workers}: peak {} B for {} sets (at least {floor} B)",
                used.peak_bytes,
                worker.live_sets
            );
        }
    }
}

#[test]
fn building_maglev_counts_its_lookup_table() {
    let (args, trace) = workload("maglev", 1_000).unwrap();
    let run = run_named("maglev", &args, &trace, 1).unwrap();
    let built = run.build_heap.expect("run_named measures the build");
    // 65537 entries of at least a two-byte backend index each.
    assert!(built.net_bytes >= 65_537 * 2, "maglev built with {} B", built.net_bytes);
}
