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

/// Pins the calling thread to the CPU it is on. Programs that keep state in
/// per-CPU maps (the generator's sequence, port index and pacing) see one
/// state only while every test run comes from one CPU; unpinned, a loaded
/// machine can move the test thread between runs, and the next run finds
/// the other CPU's fresh state (production pins its generator threads too).
pub fn pin_to_this_cpu() {
    // SAFETY: sched_getcpu has no arguments; the cpu_set_t is plain data
    // we own, passed with its size.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu: {}", std::io::Error::last_os_error());
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut one);
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
        assert_eq!(rc, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
    }
}
