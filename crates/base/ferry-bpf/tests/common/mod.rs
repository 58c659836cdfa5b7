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
    // SAFETY: sched_getcpu has no arguments.
    let cpu = unsafe { libc::sched_getcpu() };
    assert!(cpu >= 0, "sched_getcpu: {}", std::io::Error::last_os_error());
    ferry_sys::pin_thread(cpu as usize).expect("sched_setaffinity");
}

/// Runs `agree` on 3000 frames made from `templates`: one of them, with up
/// to 3 bytes within the first `span` replaced or nudged by up to 8, and
/// maybe cut short within `span` bytes. Panics with proptest's minimal
/// failing case.
pub fn mutated_frames_agree(
    templates: impl Fn() -> Vec<Vec<u8>>,
    span: usize,
    agree: impl Fn(&[u8]) -> Result<(), proptest::test_runner::TestCaseError>,
) {
    use proptest::prelude::*;
    let n = templates().len();
    let frames = (
        0usize..n,
        proptest::collection::vec((0usize..span, any::<u8>(), any::<bool>()), 0..4),
        proptest::option::of(0usize..span),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(3000));
    let result = runner.run(&frames, |(which, edits, cut)| {
        let mut f = templates().swap_remove(which);
        for (pos, byte, nudge) in edits {
            if pos < f.len() {
                f[pos] = if nudge { f[pos].wrapping_add(byte % 16).wrapping_sub(8) } else { byte };
            }
        }
        if let Some(len) = cut {
            f.truncate(len);
        }
        agree(&f)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
