//! Ferry's XDP programs and the Rust side that loads, attaches and runs them.
//!
//! The programs are written in C under `bpf/` and compiled by `build.rs`;
//! their objects are embedded here. Loading uses aya. The kernel is probed
//! only when something is loaded: failures name what is missing
//! ("not supported: needs ...").

pub mod abi;
pub mod alert_table;
mod attach;
pub mod batch;
pub mod capture;
pub mod classify;
pub mod flow_table;
pub mod hybrid;
pub mod hybrid_maps;
pub mod nsh;
pub mod pinned;
pub mod pipeline;
pub mod scan;
pub mod state;
mod test_run;
pub mod user_table;

pub use abi::{GenConfig, GenState, Verdicts, SLOT_MALFORMED, SLOT_NO_SOCKET, VERDICT_NAMES, VERDICT_SLOTS};
pub use attach::{AttachMode, Attachment, LoadedXdp};
pub use test_run::{run_live_frames, test_run, TestRunOutput};

/// An embedded BPF object file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// `xsk_redirect.bpf.c`: per-queue redirect into an XSKMAP.
    XskRedirect,
    /// `xdp_basic.bpf.c`: drop, pass and tx baselines.
    Basic,
    /// `xdp_gen.bpf.c`: the live-frames generator.
    Gen,
    /// `xdp_redirect.bpf.c`: forwards every frame out of one device (a
    /// DEVMAP entry), the kernel-only l2fwd of the kernel-chain baseline.
    Redirect,
    /// `pipeline.bpf.c`: the run-time programmable stage pipeline.
    Pipeline,
    /// `elements.bpf.c`: each pipeline element as a dedicated program.
    Elements,
    /// `classify.bpf.c`: tenant classification at the edge.
    Classify,
    /// `nsh_sff.bpf.c`: NSH classifier, forwarder and proxy.
    NshSff,
}

/// ELF parsing needs the bytes 8-byte aligned; `include_bytes!` alone only
/// guarantees 1.
#[repr(C, align(8))]
struct Aligned<B: ?Sized> {
    bytes: B,
}

static XSK_REDIRECT: &Aligned<[u8]> =
    &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/xsk_redirect.bpf.o")) };
static BASIC: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/xdp_basic.bpf.o")) };
static GEN: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/xdp_gen.bpf.o")) };
static PIPELINE: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/pipeline.bpf.o")) };
static ELEMENTS: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/elements.bpf.o")) };
static REDIRECT: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/xdp_redirect.bpf.o")) };
static CLASSIFY: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/classify.bpf.o")) };
static NSH_SFF: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/nsh_sff.bpf.o")) };

impl Object {
    /// The ELF bytes of the object.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            Object::XskRedirect => &XSK_REDIRECT.bytes,
            Object::Basic => &BASIC.bytes,
            Object::Gen => &GEN.bytes,
            Object::Redirect => &REDIRECT.bytes,
            Object::Pipeline => &PIPELINE.bytes,
            Object::Elements => &ELEMENTS.bytes,
            Object::Classify => &CLASSIFY.bytes,
            Object::NshSff => &NSH_SFF.bytes,
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("loading BPF object {object:?}: {source}")]
    Load {
        object: Object,
        #[source]
        source: aya::EbpfError,
    },
    #[error("BPF program {name} not found in {object:?}")]
    NoProgram { object: Object, name: String },
    #[error("BPF map {name} not found or of the wrong type")]
    NoMap { name: &'static str },
    #[error("program {name}: {source}")]
    Program {
        name: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("map {name}: {source}")]
    XdpMap {
        name: &'static str,
        #[source]
        source: aya::maps::xdp::XdpMapError,
    },
    #[error("not supported: needs {need} ({source})")]
    NotSupported {
        need: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("bpf syscall {what}: {source}")]
    Syscall {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("pin {path}: {reason}")]
    Pin { path: std::path::PathBuf, reason: String },
    #[error("no such device {0}")]
    NoDevice(String),
    #[error("bad configuration: {0}")]
    Config(String),
}
