//! Tenants: two customers on one ferryd, each running as its own uid with
//! its own memory; a chain across them through a copy link; isolation
//! checked in /proc, at hello, and under load.

mod common;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

use common::chain::*;
use common::*;
use ferry_chain::proto::Status;
use ferry_cli::chainctl;

/// acme floods its own slow NF; zeta runs a steady chain; a third path
/// starts in acme and ends in zeta (a copy link: frames cross tenants
/// only as copies).
const TWO_TENANTS: &str = r#"
name: tenants
tenants: [ { name: acme }, { name: zeta } ]
domains:
  - { name: a, frames: 1024, ring_size: 256, tenant: acme }
  - { name: b, frames: 1024, ring_size: 256, tenant: zeta }
nfs:
  - { name: flood, domain: a, kind: source }
  - { name: slowa, domain: a, kind: slow, args: ["work_ns=20000"] }
  - { name: snka, domain: a, kind: sink }
  - { name: srcb, domain: b, kind: source, args: ["rate=20000"] }
  - { name: fb, domain: b, kind: fwd }
  - { name: snkb, domain: b, kind: sink }
  - { name: srcx, domain: a, kind: source, args: ["rate=5000"] }
  - { name: fx, domain: b, kind: fwd }
  - { name: snkx, domain: b, kind: sink }
links:
  - { from: flood, to: slowa }
  - { from: slowa, to: snka }
  - { from: srcb, to: fb }
  - { from: fb, to: snkb }
  - { from: srcx, to: fx }
  - { from: fx, to: snkx }
"#;

const ACME: [&str; 4] = ["flood", "slowa", "snka", "srcx"];
const ZETA: [&str; 5] = ["srcb", "fb", "snkb", "fx", "snkx"];

fn uid(s: &Status, nf: &str) -> u32 {
    s.nfs.iter().find(|n| n.name == nf).and_then(|n| n.uid).expect("uid")
}

/// Inodes of the memfds process `pid` holds open (its UMEM and region).
fn memfd_inodes(pid: u32) -> HashSet<u64> {
    let mut out = HashSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("NF fds").flatten() {
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        if target.to_string_lossy().starts_with("/memfd:") {
            out.insert(std::fs::metadata(e.path()).expect("stat fd").ino());
        }
    }
    out
}

/// Inodes of everything process `pid` has mapped or open.
fn reachable_inodes(pid: u32) -> HashSet<u64> {
    let mut out: HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("NF fds")
        .flatten()
        .filter_map(|e| std::fs::metadata(e.path()).ok().map(|m| m.ino()))
        .collect();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("NF maps");
    out.extend(maps.lines().filter_map(|l| l.split_whitespace().nth(4)?.parse::<u64>().ok()).filter(|&i| i != 0));
    out
}

/// Framework drops of an NF (not its own verdicts: a sink's job is to
/// drop what it counted).
fn losses(s: &Status, nf: &str) -> u64 {
    let n = s.nfs.iter().find(|n| n.name == nf).expect("nf");
    n.threads.iter().flatten().filter(|(k, _)| k.starts_with("drop_") && k != "drop_nf").map(|(_, v)| v).sum()
}

#[test]
fn tenants_are_isolated_and_a_flooded_tenant_never_makes_another_drop() {
    if !privileged("tenants") {
        return;
    }
    let dir = TempDir::new("tenants");
    let (rc, _) = start(&dir, TWO_TENANTS);
    let st = rc.status().unwrap();
    // One uid per tenant, shared by all its NFs.
    let (a, b) = (uid(&st, "flood"), uid(&st, "srcb"));
    assert_ne!(a, b, "two tenants, two uids");
    assert!(ACME.iter().all(|nf| uid(&st, nf) == a) && ZETA.iter().all(|nf| uid(&st, nf) == b), "{st:?}");
    let tenant_of = |d: &str| st.domains.iter().find(|x| x.name == d).and_then(|x| x.tenant.clone());
    assert_eq!((tenant_of("a").as_deref(), tenant_of("b").as_deref()), (Some("acme"), Some("zeta")));

    // No acme NF holds or maps any of zeta's memfds.
    let zeta_memfds: HashSet<u64> = ZETA.iter().flat_map(|nf| memfd_inodes(pid_of(&st, nf))).collect();
    assert!(!zeta_memfds.is_empty(), "zeta's NFs hold their UMEM and region");
    for nf in ACME {
        let shared: Vec<u64> = reachable_inodes(pid_of(&st, nf)).intersection(&zeta_memfds).copied().collect();
        assert!(shared.is_empty(), "acme's {nf} reaches zeta's memfds {shared:?}");
    }

    // acme's uid cannot say hello as zeta's NF.
    let out = nf_process(&rc.socket, ("tenants", "fb"), a, &[]).finish(HANG_GUARD);
    assert!(!out.status.success() && out.stderr.contains("is not NF \"fb\"'s user"), "{}", out.stderr);

    // acme's flood fills its own pool and rings (its source is held back
    // by the slow NF); zeta, and the path across, keep flowing without a
    // single drop.
    wait_until("acme's flood held back by its full rings", || {
        rc.status().is_ok_and(|s| {
            chainctl::counter(&s, "flood", "bp_blocks") + chainctl::counter(&s, "flood", "bp_sleeps") > 0
        })
    });
    let before = rc.status().unwrap();
    let (b0, x0) = (c(&before, "snkb", "sunk"), c(&before, "snkx", "sunk"));
    wait_until("zeta and the cross-tenant path carrying traffic meanwhile", || {
        rc.status().is_ok_and(|s| c(&s, "snkb", "sunk") > b0 + 5000 && c(&s, "snkx", "sunk") > x0 + 1000)
    });
    let s = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&s));
    for nf in ZETA {
        assert_eq!(losses(&s, nf), 0, "zeta's {nf} dropped while acme was flooded");
    }
    assert!(c(&s, "snkx", "stamped") > 0, "frames crossed tenants as copies, stamps intact");
    assert!(c(&s, "srcx", "to_copy") > 0, "the cross-tenant link is a copy link");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}
