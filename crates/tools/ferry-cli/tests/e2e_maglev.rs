//! Maglev in a ferryd chain: a counted run of 64 flows fans out over two
//! backends exactly as the lookup table says, flow by flow.

mod common;

use common::chain::*;
use common::*;
use ferry_cli::chainctl;
use ferry_parallel::nfs::maglev::flow_hash;

const FLOWS: u64 = 64;
const SENT: u64 = 64 * 125;

const CHAIN: &str = r#"
name: lb
domains: [ { name: main, frames: 4096, ring_size: 512 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["rate=50000", "flows=64", "count=8000"] }
  - { name: lb, domain: main, kind: maglev, threads: 2, args: ["table_size=251"] }
  - { name: b1, domain: main, kind: sink }
  - { name: b2, domain: main, kind: sink }
links:
  - { from: src, to: lb }
  - { from: lb, to: b1 }
  - { from: lb, to: b2 }
"#;

#[test]
fn maglev_sends_each_flow_to_the_backend_its_table_names() {
    if !privileged("maglev") {
        return;
    }
    // The source's flows: 10.0.0.1:1024+f -> 10.0.1.1:9, UDP, each sent
    // SENT/FLOWS times (it cycles over them frame by frame).
    let table = ferry_catalog::host::maglev_table(&["b1".into(), "b2".into()], 251).unwrap();
    let mut want = [0u64; 2];
    for f in 0..FLOWS {
        let h = flow_hash([10, 0, 0, 1].into(), [10, 0, 1, 1].into(), 17, 1024 + f as u16, 9);
        want[table.lookup(h).unwrap() as usize] += SENT / FLOWS;
    }
    assert!(want[0] > 0 && want[1] > 0, "both backends get flows: {want:?}");
    let dir = TempDir::new("maglev");
    let (rc, _) = start(&dir, CHAIN);
    let st = wait_for("every frame at a backend", || {
        let s = rc.status().ok()?;
        (c(&s, "b1", "sunk") + c(&s, "b2", "sunk") == SENT).then_some(s)
    });
    eprintln!("{}", chainctl::status_table(&st));
    assert_eq!([c(&st, "b1", "sunk"), c(&st, "b2", "sunk")], want, "each flow went where the table says");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}
