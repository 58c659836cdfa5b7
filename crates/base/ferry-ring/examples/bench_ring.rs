//! Prints the cross-core ring throughput for a few batch sizes:
//! `cargo run --release -p ferry-ring --example bench_ring [n]`.

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50_000_000);
    for batch in [1, 8, 32, 256] {
        let rate = ferry_ring::bench_spsc_cross_core(batch, n);
        println!("batch {batch:>3}: {:>7.1} M desc/s", rate / 1e6);
    }
}
