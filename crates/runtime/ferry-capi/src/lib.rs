//! The C API of the Ferry NF SDK: `include/ferry.h`, built as `libferry.so`
//! and `libferry.a`.
//!
//! Each exported function wraps one operation of [`ferry_sdk`]; the packet
//! path (rings, batching, backpressure, smart polling, frame accounting) is
//! the SDK's own code. What this layer adds is what a C caller cannot get
//! from the Rust compiler:
//!
//! * **Ownership checked at run time.** Packets stay in a per-thread slot
//!   table (see [`slots`]) and C holds handles; a verdict takes the packet
//!   out, so a second `ferry_send`/`ferry_drop`/`ferry_reply` of the same
//!   packet returns `-EALREADY` instead of handing one frame on twice.
//! * **Argument checks.** Null pointers and unknown handles return
//!   `-EINVAL`; a `len` beyond the frame returns `-EINVAL` and keeps the
//!   packet.
//! * **No unwinding across the boundary.** Every body runs under
//!   `catch_unwind`; a panic becomes `-EIO` (or NULL) and a message.
//! * **Error text.** `ferry_last_error()` describes the last failure on the
//!   calling thread.

pub mod slots;

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CStr, CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_chain::proto::{ENV_NF, ENV_SOCKET};
use ferry_sdk::{Nf, NfThread, Packet, SdkError};
use libc::{EALREADY, EBUSY, EINVAL, EIO, ENOBUFS, EPERM, ESHUTDOWN};

use crate::slots::{BadHandle, Slots};

/// A packet as C sees it (`ferry_pkt`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerryPkt {
    /// First byte of the packet; NULL once the packet is handed on.
    pub data: *mut u8,
    /// Length in bytes. C may change it; it is applied (and checked against
    /// the frame) by the next `ferry_send`/`ferry_reply`.
    pub len: u32,
    /// Slot handle; opaque to C.
    pub handle: u32,
}

impl FerryPkt {
    /// An all-zero packet: what C gets from `ferry_pkt p = {0}`.
    pub const EMPTY: FerryPkt = FerryPkt { data: ptr::null_mut(), len: 0, handle: 0 };
}

/// A connected NF (`ferry_nf`); shared by its threads, freed when the NF
/// and all its threads are closed.
pub struct FerryNf {
    nf: Nf,
    args: Vec<CString>,
    counters: usize,
    opened: Mutex<Vec<bool>>,
}

/// One NF thread (`ferry_thread`).
pub struct FerryThread {
    th: NfThread,
    slots: Slots<Packet>,
    burst: Vec<Packet>,
    counters: usize,
    owner: u64,
    /// Keeps the NF (its mappings and control socket) alive; declared last
    /// so that it is dropped after `th`.
    _nf: Arc<FerryNf>,
}

// The NF is shared by the C threads that open its threads.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<FerryNf>();
};

/// A failure: a negative errno for C, and a message for `ferry_last_error`.
struct Fail {
    code: c_int,
    msg: Cow<'static, str>,
}

impl Fail {
    fn new(errno: c_int, msg: impl Into<Cow<'static, str>>) -> Fail {
        Fail { code: -errno, msg: msg.into() }
    }
}

impl From<SdkError> for Fail {
    fn from(e: SdkError) -> Fail {
        let errno = match e {
            SdkError::Stopped { .. } => ESHUTDOWN,
            _ => EIO,
        };
        Fail::new(errno, e.to_string())
    }
}

fn bad_handle(b: BadHandle) -> Fail {
    match b {
        BadHandle::Unknown => Fail::new(EINVAL, "not a packet handle of this thread"),
        BadHandle::Used => Fail::new(EALREADY, "packet already sent, replied or dropped"),
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
}

fn set_error(msg: &str) {
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = msg);
}

/// A number for the calling OS thread, unique for the process's lifetime.
fn thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            id.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        id.get()
    })
}

/// Runs `body`, turning a failure or a panic into `on_fail(-errno)` and a
/// message for `ferry_last_error`.
fn ffi<T>(on_fail: impl FnOnce(c_int) -> T, body: impl FnOnce() -> Result<T, Fail>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_error(&f.msg);
            on_fail(f.code)
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_error(&format!("internal error in libferry: {what}"));
            on_fail(-EIO)
        }
    }
}

fn int(code: c_int) -> c_int {
    code
}

fn null<T>(_: c_int) -> *mut T {
    ptr::null_mut()
}

fn nothing(_: c_int) {}

/// # Safety
/// `p` is NULL or points to a live object of type `T`.
unsafe fn deref<'a, T>(p: *const T, what: &'static str) -> Result<&'a T, Fail> {
    // SAFETY: per the contract.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::new(EINVAL, format!("{what} is NULL")))
}

/// # Safety
/// As `deref`, and nothing else uses `*p` meanwhile.
unsafe fn deref_mut<'a, T>(p: *mut T, what: &'static str) -> Result<&'a mut T, Fail> {
    // SAFETY: per the contract.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::new(EINVAL, format!("{what} is NULL")))
}

/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a CStr> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// # Safety
/// `names` points to `n` valid C strings when `n > 0`.
unsafe fn counter_names(names: *const *const c_char, n: c_int) -> Result<Vec<String>, Fail> {
    let n = usize::try_from(n).map_err(|_| Fail::new(EINVAL, "n_counters is negative"))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if names.is_null() {
        return Err(Fail::new(EINVAL, "counter_names is NULL but n_counters > 0"));
    }
    (0..n)
        .map(|i| {
            // SAFETY: names holds n pointers, each NULL or a C string.
            let name = unsafe { c_str(*names.add(i)) }
                .ok_or_else(|| Fail::new(EINVAL, format!("counter_names[{i}] is NULL")))?;
            name.to_str().map(str::to_owned).map_err(|_| Fail::new(EINVAL, format!("counter_names[{i}] is not UTF-8")))
        })
        .collect()
}

/// `arg`, or else environment variable `var` (as the SDK's own message
/// says when it is missing).
fn arg_or_env(arg: Option<&CStr>, var: &'static str) -> Result<OsString, Fail> {
    match arg {
        Some(s) => Ok(OsStr::from_bytes(s.to_bytes()).to_owned()),
        None => std::env::var_os(var).ok_or_else(|| SdkError::MissingEnv { var }.into()),
    }
}

impl FerryThread {
    fn check_owner(&self) -> Result<(), Fail> {
        if thread_id() == self.owner {
            Ok(())
        } else {
            Err(Fail::new(EPERM, "ferry_thread used from another OS thread than the one that opened it"))
        }
    }

    /// Takes the packet behind `pkt` for a verdict, first applying a changed
    /// `pkt->len` if `apply_len`; marks `pkt` as handed on.
    fn take(&mut self, pkt: &mut FerryPkt, apply_len: bool) -> Result<Packet, Fail> {
        let len = pkt.len as usize;
        let p = self.slots.take_if(pkt.handle, bad_handle, |p| {
            if apply_len && p.len() != len && !p.set_len(len) {
                return Err(too_long(len, p));
            }
            Ok(())
        })?;
        pkt.data = ptr::null_mut();
        Ok(p)
    }

    /// Stores `p` and describes it to C.
    fn give(&mut self, mut p: Packet) -> FerryPkt {
        let data = p.data_mut().as_mut_ptr();
        let len = p.len() as u32;
        match self.slots.put(p) {
            Ok(handle) => FerryPkt { data, len, handle },
            Err(p) => {
                // Callers check room first; never hand out an untracked frame.
                self.th.drop_packet(p);
                FerryPkt::EMPTY
            }
        }
    }

    fn room(&self) -> Result<usize, Fail> {
        match self.slots.room() {
            0 => Err(Fail::new(
                ENOBUFS,
                format!("this thread holds {} packets: send or drop some first", self.slots.held()),
            )),
            n => Ok(n),
        }
    }
}

fn too_long(len: usize, p: &Packet) -> Fail {
    Fail::new(EINVAL, format!("length {len} does not fit the frame ({} bytes from the packet's start)", p.capacity()))
}

/// Connects to ferryd. See `ferry.h`.
///
/// # Safety
/// The strings are NULL or NUL-terminated; `counter_names` holds
/// `n_counters` strings.
#[no_mangle]
pub unsafe extern "C" fn ferry_connect(
    socket: *const c_char,
    nf: *const c_char,
    counter_names: *const *const c_char,
    n_counters: c_int,
) -> *mut FerryNf {
    ffi(null, || {
        // SAFETY: per this function's contract.
        let names = unsafe { self::counter_names(counter_names, n_counters) }?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // SAFETY: as above.
        let (socket, name) = unsafe { (c_str(socket), c_str(nf)) };
        let connected = if socket.is_none() && name.is_none() {
            Nf::connect_from_env_with(&names)?
        } else {
            let path = arg_or_env(socket, ENV_SOCKET)?;
            let name =
                arg_or_env(name, ENV_NF)?.into_string().map_err(|_| Fail::new(EINVAL, "the NF name is not UTF-8"))?;
            Nf::connect(Path::new(&path), &name, &names)?
        };
        let args = connected
            .args()
            .iter()
            .map(|a| CString::new(a.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Fail::new(EINVAL, "an NF argument contains a NUL byte"))?;
        let opened = Mutex::new(vec![false; connected.threads()]);
        let shared = FerryNf { nf: connected, args, counters: names.len(), opened };
        Ok(Arc::into_raw(Arc::new(shared)).cast_mut())
    })
}

/// Number of threads the chain file gives this NF.
///
/// # Safety
/// `nf` is NULL or from `ferry_connect` and not closed.
#[no_mangle]
pub unsafe extern "C" fn ferry_nf_threads(nf: *const FerryNf) -> c_int {
    // SAFETY: per the contract.
    ffi(int, || Ok(unsafe { deref(nf, "nf") }?.nf.threads() as c_int))
}

/// Number of out-links (valid hops are `0 .. n-1`).
///
/// # Safety
/// As `ferry_nf_threads`.
#[no_mangle]
pub unsafe extern "C" fn ferry_nf_out_links(nf: *const FerryNf) -> c_int {
    // SAFETY: per the contract.
    ffi(int, || Ok(unsafe { deref(nf, "nf") }?.nf.out_links().len() as c_int))
}

/// Argument `i` from the chain file's `args:`, or NULL past the end.
///
/// # Safety
/// As `ferry_nf_threads`.
#[no_mangle]
pub unsafe extern "C" fn ferry_nf_arg(nf: *const FerryNf, i: c_int) -> *const c_char {
    ffi(
        |_| ptr::null(),
        || {
            // SAFETY: per the contract.
            let nf = unsafe { deref(nf, "nf") }?;
            Ok(usize::try_from(i).ok().and_then(|i| nf.args.get(i)).map_or(ptr::null(), |a| a.as_ptr()))
        },
    )
}

/// Drops the caller's reference to the NF; it disconnects once its open
/// threads are closed too.
///
/// # Safety
/// `nf` is NULL or from `ferry_connect`, and is not used after this.
#[no_mangle]
pub unsafe extern "C" fn ferry_nf_close(nf: *mut FerryNf) {
    ffi(nothing, || {
        if !nf.is_null() {
            // SAFETY: from Arc::into_raw in ferry_connect, released once.
            drop(unsafe { Arc::from_raw(nf.cast_const()) });
        }
        Ok(())
    })
}

/// Opens NF thread `index` for the calling OS thread.
///
/// # Safety
/// As `ferry_nf_threads`.
#[no_mangle]
pub unsafe extern "C" fn ferry_thread_open(nf: *mut FerryNf, index: c_int) -> *mut FerryThread {
    ffi(null, || {
        // SAFETY: per the contract.
        unsafe { deref(nf, "nf") }?;
        // SAFETY: a live Arc from ferry_connect: take one more reference.
        let shared = unsafe {
            Arc::increment_strong_count(nf.cast_const());
            Arc::from_raw(nf.cast_const())
        };
        let threads = shared.nf.threads();
        let i = usize::try_from(index)
            .ok()
            .filter(|&i| i < threads)
            .ok_or_else(|| Fail::new(EINVAL, format!("no thread {index}: the NF has {threads}")))?;
        let th = {
            let mut opened = shared.opened.lock().unwrap_or_else(|e| e.into_inner());
            if opened[i] {
                return Err(Fail::new(EBUSY, format!("thread {i} is already open")));
            }
            let th = shared.nf.thread(i)?;
            opened[i] = true;
            th
        };
        let t = FerryThread {
            th,
            slots: Slots::default(),
            burst: Vec::with_capacity(64),
            counters: shared.counters,
            owner: thread_id(),
            _nf: shared,
        };
        Ok(Box::into_raw(Box::new(t)))
    })
}

/// Drops the packets the thread still holds (counted as `drop_nf`), sends
/// what is queued, and frees the thread.
///
/// # Safety
/// `th` is NULL or from `ferry_thread_open`, not in use by another thread,
/// and not used after this.
#[no_mangle]
pub unsafe extern "C" fn ferry_thread_close(th: *mut FerryThread) {
    ffi(nothing, || {
        if th.is_null() {
            return Ok(());
        }
        // SAFETY: from Box::into_raw in ferry_thread_open, released once.
        let mut t = unsafe { Box::from_raw(th) };
        for p in t.slots.drain().into_iter().chain(std::mem::take(&mut t.burst)) {
            t.th.drop_packet(p);
        }
        t.th.flush();
        Ok(())
    })
}

/// Index of the thread within its NF.
///
/// # Safety
/// `th` is NULL or an open thread.
#[no_mangle]
pub unsafe extern "C" fn ferry_thread_index(th: *const FerryThread) -> c_int {
    // SAFETY: per the contract.
    ffi(int, || Ok(unsafe { deref(th, "th") }?.th.index() as c_int))
}

/// Receives up to `max` packets (blocking while idle).
///
/// # Safety
/// `th` is NULL or an open thread; `pkts` is NULL or has room for `max`.
#[no_mangle]
pub unsafe extern "C" fn ferry_recv(th: *mut FerryThread, pkts: *mut FerryPkt, max: c_int) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let t = unsafe { deref_mut(th, "th") }?;
        if pkts.is_null() {
            return Err(Fail::new(EINVAL, "pkts is NULL"));
        }
        let max = usize::try_from(max).ok().filter(|&m| m > 0).ok_or_else(|| Fail::new(EINVAL, "max must be > 0"))?;
        t.check_owner()?;
        let want = max.min(t.room()?);
        let mut burst = std::mem::take(&mut t.burst);
        let got = t.th.recv_burst(&mut burst, want);
        let mut n = 0;
        for p in burst.drain(..) {
            if n < want {
                // SAFETY: pkts has room for max >= want entries.
                unsafe { pkts.add(n).write(t.give(p)) };
                n += 1;
            } else {
                t.th.drop_packet(p);
            }
        }
        t.burst = burst;
        got?;
        Ok(n as c_int)
    })
}

/// Sends on out-link `hop`.
///
/// # Safety
/// `th` is NULL or an open thread; `pkt` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn ferry_send(th: *mut FerryThread, pkt: *mut FerryPkt, hop: c_int) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let (t, pkt) = unsafe { (deref_mut(th, "th")?, deref_mut(pkt, "pkt")?) };
        let p = t.take(pkt, true)?;
        // A hop with no out-link (negative ones too) is the SDK's bad hop.
        t.th.send(p, usize::try_from(hop).unwrap_or(usize::MAX));
        Ok(0)
    })
}

/// Sends back out of the arrival port (or on out-link 0).
///
/// # Safety
/// As `ferry_send`.
#[no_mangle]
pub unsafe extern "C" fn ferry_reply(th: *mut FerryThread, pkt: *mut FerryPkt) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let (t, pkt) = unsafe { (deref_mut(th, "th")?, deref_mut(pkt, "pkt")?) };
        let p = t.take(pkt, true)?;
        t.th.reply(p);
        Ok(0)
    })
}

/// Drops a packet (counted as `drop_nf`).
///
/// # Safety
/// As `ferry_send`.
#[no_mangle]
pub unsafe extern "C" fn ferry_drop(th: *mut FerryThread, pkt: *mut FerryPkt) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let (t, pkt) = unsafe { (deref_mut(th, "th")?, deref_mut(pkt, "pkt")?) };
        let p = t.take(pkt, false)?;
        t.th.drop_packet(p);
        Ok(0)
    })
}

/// Allocates a packet of `len` bytes in a free frame.
///
/// # Safety
/// As `ferry_send`.
#[no_mangle]
pub unsafe extern "C" fn ferry_alloc(th: *mut FerryThread, pkt: *mut FerryPkt, len: u32) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let (t, pkt) = unsafe { (deref_mut(th, "th")?, deref_mut(pkt, "pkt")?) };
        t.check_owner()?;
        t.room()?;
        let p = t.th.alloc(len as usize).ok_or_else(|| {
            Fail::new(ENOBUFS, format!("no packet of {len} bytes: no free frame, or longer than a frame"))
        })?;
        *pkt = t.give(p);
        Ok(0)
    })
}

/// Sets a packet's length (within its frame) and `pkt->len`.
///
/// # Safety
/// As `ferry_send`.
#[no_mangle]
pub unsafe extern "C" fn ferry_set_len(th: *mut FerryThread, pkt: *mut FerryPkt, len: u32) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let (t, pkt) = unsafe { (deref_mut(th, "th")?, deref_mut(pkt, "pkt")?) };
        let p = t.slots.get(pkt.handle).map_err(bad_handle)?;
        if !p.set_len(len as usize) {
            return Err(too_long(len as usize, p));
        }
        pkt.len = len;
        Ok(0)
    })
}

/// Sends everything queued now.
///
/// # Safety
/// `th` is NULL or an open thread.
#[no_mangle]
pub unsafe extern "C" fn ferry_flush(th: *mut FerryThread) {
    ffi(nothing, || {
        // SAFETY: per the contract.
        let t = unsafe { deref_mut(th, "th") }?;
        t.check_owner()?;
        t.th.flush();
        Ok(())
    })
}

/// The framework's work without receiving, for NFs that only produce.
///
/// # Safety
/// `th` is NULL or an open thread.
#[no_mangle]
pub unsafe extern "C" fn ferry_service(th: *mut FerryThread) -> c_int {
    ffi(int, || {
        // SAFETY: per the contract.
        let t = unsafe { deref_mut(th, "th") }?;
        t.check_owner()?;
        t.th.service()?;
        Ok(0)
    })
}

/// Publishes NF counter `i` (declared at connect).
///
/// # Safety
/// `th` is NULL or an open thread.
#[no_mangle]
pub unsafe extern "C" fn ferry_set_counter(th: *mut FerryThread, i: c_int, value: u64) {
    ffi(nothing, || {
        // SAFETY: per the contract.
        let t = unsafe { deref(th, "th") }?;
        let declared = t.counters;
        let i = usize::try_from(i)
            .ok()
            .filter(|&i| i < declared)
            .ok_or_else(|| Fail::new(EINVAL, format!("no counter {i}: {declared} declared at connect")))?;
        t.th.set_nf_counter(i, value);
        Ok(())
    })
}

/// The last failure on the calling thread, or "".
#[no_mangle]
pub extern "C" fn ferry_last_error() -> *const c_char {
    LAST_ERROR.try_with(|e| e.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}
