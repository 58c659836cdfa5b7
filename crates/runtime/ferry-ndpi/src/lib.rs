//! Safe wrapper over libndpi 4.2 (Debian 12's `libndpi-dev`): the slow path
//! of eDPI, which classifies flows in user space and, for flows of
//! configured "elephant" protocols, installs XDP bypass rules.
//!
//! nDPI's ABI (its structs, `ndpi_protocol` returned by value) is confined
//! to a C shim, `csrc/shim.c`; this crate sees opaque pointers and integers.
//!
//! # Contract
//!
//! - [`Ndpi`] owns one nDPI detection module. It is `Send` but not `Sync`:
//!   nDPI keeps per-packet scratch state in the module, so one thread uses
//!   it at a time (the `&mut self` methods enforce that). Modules are
//!   created under a process-wide lock because nDPI forbids concurrent
//!   initialisation.
//! - A [`Flow`] is the per-connection state of one module. It binds to the
//!   first [`Ndpi`] that processes it; passing it to a different one
//!   **panics** (protocol ids differ between modules with different custom
//!   protocols, so its result would be meaningless).
//! - Once a [`Classification`] is `done`, the flow keeps it: later
//!   `process` and `giveup` calls return it without calling nDPI.
//! - [`Ndpi::process`] takes an IPv4 or IPv6 packet starting at the IP
//!   header. Any bytes are accepted: short or malformed packets are simply
//!   not classified. Only the first 65535 bytes are inspected.
//! - [`Flow::new`] panics only if nDPI cannot allocate the flow (like
//!   `Box::new` on out-of-memory). Nothing else panics.

mod rules;

use std::ffi::{c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// nDPI's id for "no protocol found".
pub const UNKNOWN: u16 = 0;

/// nDPI's verdict on a flow so far.
///
/// `app` is the most specific protocol (for plain HTTP, HTTP; for a Google
/// site over TLS, Google) and `master` the carrier when there is one (TLS
/// in that example), otherwise [`UNKNOWN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub master: u16,
    pub app: u16,
    /// The result is final: a protocol was found, or nDPI stopped
    /// dissecting this flow (then `master`/`app` are its guess, possibly
    /// [`UNKNOWN`]).
    pub done: bool,
}

impl Classification {
    /// The most specific id found: `app`, else `master`, else [`UNKNOWN`].
    pub fn protocol(&self) -> u16 {
        if self.app != UNKNOWN {
            self.app
        } else {
            self.master
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NdpiError {
    #[error("nDPI could not initialise a detection module (out of memory?)")]
    Init,
    #[error("cannot read protocols file {}: {source}", path.display())]
    ProtocolsFileIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A rule nDPI 4.2 would skip silently or misread.
    #[error("{}:{line}: {reason}: {text:?}", path.display())]
    ProtocolsRule { path: PathBuf, line: usize, text: String, reason: &'static str },
    #[error("nDPI could not load protocols file {}", path.display())]
    ProtocolsFileRejected { path: PathBuf },
}

mod ffi {
    use std::ffi::{c_char, c_int};

    #[repr(C)]
    pub struct FyNdpi {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct NdpiFlow {
        _opaque: [u8; 0],
    }

    /// fy_ndpi_new's error for a file nDPI cannot open; the only other
    /// code, FY_ERR_INIT, means the module could not be allocated.
    pub const ERR_PROTOCOLS_FILE: c_int = 2;

    extern "C" {
        pub fn fy_ndpi_new(custom_protocols_path: *const c_char, err: *mut c_int) -> *mut FyNdpi;
        pub fn fy_ndpi_free(n: *mut FyNdpi);
        pub fn fy_flow_new() -> *mut NdpiFlow;
        pub fn fy_flow_free(f: *mut NdpiFlow);
        pub fn fy_ndpi_process(
            n: *mut FyNdpi,
            f: *mut NdpiFlow,
            ip_packet: *const u8,
            len: u16,
            time_ms: u64,
            master: *mut u16,
            app: *mut u16,
        ) -> c_int;
        pub fn fy_ndpi_giveup(n: *mut FyNdpi, f: *mut NdpiFlow, master: *mut u16, app: *mut u16);
        pub fn fy_ndpi_proto_name(n: *mut FyNdpi, id: u16) -> *const c_char;
        pub fn fy_ndpi_proto_id(n: *mut FyNdpi, name: *const c_char) -> c_int;
    }
}

/// nDPI: "ndpi_init_detection_module ... calls MUST NOT run in parallel".
static INIT_LOCK: Mutex<()> = Mutex::new(());
/// Identifies modules so a [`Flow`] can refuse a second one. Starts at 1:
/// 0 marks an unbound flow.
static NEXT_MODULE_ID: AtomicU64 = AtomicU64::new(1);

/// One nDPI detection module with every protocol enabled.
pub struct Ndpi {
    raw: NonNull<ffi::FyNdpi>,
    id: u64,
}

// SAFETY: nDPI has no thread-local state; the module is used by one thread
// at a time (`NonNull` keeps `Ndpi` `!Sync`, methods take `&mut self`).
unsafe impl Send for Ndpi {}

impl Ndpi {
    /// Builds a module, adding the custom protocols of a protocols file
    /// (nDPI's `<tcp|udp>:<port>,...@<Name>` syntax) when given. The file is
    /// checked first, because nDPI 4.2 ignores rules it cannot use.
    pub fn new(custom_protocols: Option<&Path>) -> Result<Ndpi, NdpiError> {
        let path_c = match custom_protocols {
            Some(path) => {
                let io_err = |source| NdpiError::ProtocolsFileIo { path: path.to_path_buf(), source };
                let text = std::fs::read_to_string(path).map_err(io_err)?;
                rules::check(path, &text)?;
                let bytes = path.as_os_str().as_encoded_bytes().to_vec();
                Some(CString::new(bytes).map_err(|e| io_err(e.into()))?)
            }
            None => None,
        };
        let mut err: c_int = 0;
        let raw = {
            let _guard = INIT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            let path_ptr = path_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
            // SAFETY: path_ptr is null or a NUL-terminated string that
            // outlives the call; err is a valid out-pointer.
            unsafe { ffi::fy_ndpi_new(path_ptr, &mut err) }
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Ndpi { raw, id: NEXT_MODULE_ID.fetch_add(1, Ordering::Relaxed) }),
            None if err == ffi::ERR_PROTOCOLS_FILE => Err(NdpiError::ProtocolsFileRejected {
                path: custom_protocols.map(Path::to_path_buf).unwrap_or_default(),
            }),
            None => Err(NdpiError::Init),
        }
    }

    /// Feeds one packet of `flow` (IP header first) to nDPI.
    pub fn process(&mut self, flow: &mut Flow, ip_packet: &[u8], time_ms: u64) -> Classification {
        self.bind(flow);
        if let Some(done) = flow.result {
            return done;
        }
        let len = ip_packet.len().min(u16::MAX as usize) as u16;
        let (mut master, mut app) = (UNKNOWN, UNKNOWN);
        // SAFETY: both handles are live and exclusively borrowed; the
        // pointer/length pair describes readable memory.
        let done = unsafe {
            ffi::fy_ndpi_process(
                self.raw.as_ptr(),
                flow.raw.as_ptr(),
                ip_packet.as_ptr(),
                len,
                time_ms,
                &mut master,
                &mut app,
            )
        } != 0;
        let c = Classification { master, app, done };
        if done {
            flow.result = Some(c);
        }
        c
    }

    /// Ends detection for `flow` (e.g. on idle timeout): returns what was
    /// found, else nDPI's guess by port and address, else [`UNKNOWN`].
    pub fn giveup(&mut self, flow: &mut Flow) -> Classification {
        self.bind(flow);
        if let Some(done) = flow.result {
            return done;
        }
        let (mut master, mut app) = (UNKNOWN, UNKNOWN);
        // SAFETY: both handles are live and exclusively borrowed.
        unsafe { ffi::fy_ndpi_giveup(self.raw.as_ptr(), flow.raw.as_ptr(), &mut master, &mut app) };
        let c = Classification { master, app, done: true };
        flow.result = Some(c);
        c
    }

    /// nDPI's name for `id` ("HTTP", a custom protocol's name); "Unknown"
    /// for ids it does not know.
    pub fn protocol_name(&self, id: u16) -> String {
        // SAFETY: the shim returns a static or module-owned NUL-terminated
        // string (never null); it is copied before `self` can change.
        unsafe { CStr::from_ptr(ffi::fy_ndpi_proto_name(self.raw.as_ptr(), id)) }.to_string_lossy().into_owned()
    }

    /// The id of a built-in or custom protocol, by case-insensitive name.
    pub fn protocol_id(&self, name: &str) -> Option<u16> {
        let name = CString::new(name).ok()?;
        // SAFETY: the module is live; name is NUL-terminated.
        let id = unsafe { ffi::fy_ndpi_proto_id(self.raw.as_ptr(), name.as_ptr()) };
        u16::try_from(id).ok()
    }

    fn bind(&self, flow: &mut Flow) {
        if flow.owner == 0 {
            flow.owner = self.id;
        }
        assert_eq!(flow.owner, self.id, "ferry-ndpi: a Flow was passed to a second Ndpi module");
    }
}

impl Drop for Ndpi {
    fn drop(&mut self) {
        // SAFETY: raw came from fy_ndpi_new and is freed once. Flows hold no
        // pointer into the module, so they may outlive it.
        unsafe { ffi::fy_ndpi_free(self.raw.as_ptr()) }
    }
}

/// nDPI's state for one flow (both directions of a connection).
pub struct Flow {
    raw: NonNull<ffi::NdpiFlow>,
    /// Id of the module that processed it; 0 until then.
    owner: u64,
    /// The final classification, once there is one. Kept here because nDPI
    /// reports a port-matched custom protocol only in the return value of
    /// the packet that matched, not in the flow state: the next packet of a
    /// `tcp:5201@Iperf` flow comes back as TargusDataspeed (port 5201).
    result: Option<Classification>,
}

// SAFETY: the flow state is plain heap memory owned by this value.
unsafe impl Send for Flow {}

impl Flow {
    pub fn new() -> Flow {
        // SAFETY: no preconditions; returns a zeroed flow or null.
        let raw = NonNull::new(unsafe { ffi::fy_flow_new() }).expect("ferry-ndpi: out of memory allocating a flow");
        Flow { raw, owner: 0, result: None }
    }
}

impl Default for Flow {
    fn default() -> Flow {
        Flow::new()
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        // SAFETY: raw came from fy_flow_new and is freed once.
        unsafe { ffi::fy_flow_free(self.raw.as_ptr()) }
    }
}
