//! Helpers shared by the BPF test files.
#![allow(dead_code)]

/// Loading BPF needs root; without it the test is skipped, except in CI.
pub fn privileged() -> bool {
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "BPF tests need root (CAP_BPF, CAP_NET_ADMIN) in CI");
    eprintln!("skipping: BPF tests need root");
    false
}

/// A 60-byte UDP frame: dst 02:..:02, src 02:..:01, 10.0.0.1:1000 → 10.0.0.2:2000.
pub fn udp_frame() -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // ethernet
        0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // ipv4 (csum unchecked here)
        0x03, 0xe8, 0x07, 0xd0, 0, 26, 0, 0, // udp
    ];
    f.resize(60, 0);
    f
}
