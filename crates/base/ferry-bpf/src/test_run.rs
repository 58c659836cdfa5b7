//! BPF_PROG_RUN (a.k.a. BPF_PROG_TEST_RUN) for XDP programs: single runs for
//! test tables, and live-frames mode for kernel-side traffic generation.

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::BpfError;

const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// Frames produced by the program are really transmitted or redirected.
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// The `test` member of `union bpf_attr` (the kernel accepts a prefix of
/// the union as long as the rest would be zero).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

/// Result of one test run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRunOutput {
    /// The XDP action the program returned.
    pub action: u32,
    /// The frame as the program left it.
    pub data: Vec<u8>,
    /// Average run time in nanoseconds, as measured by the kernel.
    pub duration_ns: u32,
}

fn bpf_test_run(attr: &mut TestRunAttr) -> std::io::Result<()> {
    // SAFETY: attr is a valid, initialised prefix of union bpf_attr and every
    // pointer in it refers to a live buffer of the stated size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            attr as *mut TestRunAttr,
            std::mem::size_of::<TestRunAttr>() as u32,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Runs an XDP program once (or `repeat` times) on `frame` and returns its
/// action and output frame. Nothing is transmitted.
pub fn test_run(prog: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> Result<TestRunOutput, BpfError> {
    // XDP may grow the frame at the head or tail; leave room for that.
    let mut out = vec![0u8; frame.len() + 512];
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat,
        ..Default::default()
    };
    bpf_test_run(&mut attr).map_err(|source| BpfError::Syscall { what: "BPF_PROG_TEST_RUN", source })?;
    out.truncate(attr.data_size_out as usize);
    Ok(TestRunOutput { action: attr.retval, data: out, duration_ns: attr.duration })
}

/// Runs an XDP program `repeat` times in live-frames mode: every frame it
/// returns XDP_TX/XDP_REDIRECT for is really sent. `batch` frames are
/// processed per kernel batch (0: kernel default of 64).
pub fn run_live_frames(prog: BorrowedFd<'_>, frame: &[u8], repeat: u32, batch: u32) -> Result<(), BpfError> {
    // No context: the kernel then runs the program as if received on the
    // loopback device of the caller's namespace, queue 0.
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch,
        ..Default::default()
    };
    bpf_test_run(&mut attr).map_err(|source| match source.raw_os_error() {
        Some(libc::EINVAL) => BpfError::NotSupported { need: "BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18+)", source },
        _ => BpfError::Syscall { what: "BPF_PROG_RUN live frames", source },
    })
}
