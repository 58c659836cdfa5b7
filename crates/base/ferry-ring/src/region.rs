//! The shared region: a sealed memfd holding a header, then rings and pools
//! at offsets. Each process maps it wherever mmap puts it; nothing inside is
//! a pointer.
//!
//! Layout: `[RegionHeader, padded to 4 KiB] [ring 0: header | slots] ...
//! [pool 0: header | slots] ...`, each object 128-byte aligned, total
//! rounded up to a page. The header's object table records each object's
//! kind, geometry and offset; `from_fd` recomputes the offsets from the
//! geometry and rejects any disagreement, then uses only its local copy, so
//! a peer rewriting the header later cannot make us address outside the map.

use std::ffi::CString;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::pool::{FramePool, PoolConfig, PoolHeader, PoolSlot};
use crate::ring::{MpscRing, RingConfig, RingHeader, Slot};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::RingError;

/// "FERRYRNG", little-endian.
pub const REGION_MAGIC: u64 = u64::from_le_bytes(*b"FERRYRNG");
/// Bumped whenever the in-memory layout changes.
pub const REGION_VERSION: u32 = 2;
/// Rings plus pools one region can describe.
pub const MAX_OBJECTS: usize = 64;

const HEADER_SIZE: u64 = 4096;
const PAGE: u64 = 4096;
const OBJ_ALIGN: u64 = 128;
/// Upper bound accepted from a foreign fd before mapping it.
const MAX_REGION: u64 = 1 << 34;

const KIND_RING: u32 = 1;
const KIND_POOL: u32 = 2;
const KIND_WORDS: u32 = 3;
/// Largest word array one region can hold (16 Mi words, 128 MiB).
pub const MAX_WORDS: u32 = 1 << 24;

#[repr(C)]
struct Entry {
    kind: AtomicU32,
    capacity: AtomicU32,
    /// Rings: max_producers.
    param: AtomicU32,
    /// Rings: low watermark.
    param2: AtomicU32,
    offset: AtomicU64,
    _pad: AtomicU64,
}

#[repr(C)]
struct RegionHeader {
    /// Written last by the creator, so its presence means "initialised".
    magic: AtomicU64,
    version: AtomicU32,
    n_rings: AtomicU32,
    n_pools: AtomicU32,
    n_words: AtomicU32,
    total_size: AtomicU64,
    entries: [Entry; MAX_OBJECTS],
}

const _: () = assert!(size_of::<RegionHeader>() as u64 <= HEADER_SIZE);

/// What a region holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionLayout {
    rings: Vec<RingConfig>,
    pools: Vec<PoolConfig>,
    words: Vec<u32>,
}

/// Where a layout puts its objects.
struct Placement {
    rings: Vec<u64>,
    pools: Vec<u64>,
    words: Vec<u64>,
    total: u64,
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

impl RegionLayout {
    pub fn new() -> RegionLayout {
        RegionLayout::default()
    }

    /// Adds a ring; its index is the order of `ring` calls.
    pub fn ring(mut self, cfg: RingConfig) -> RegionLayout {
        self.rings.push(cfg);
        self
    }

    /// Adds a pool; its index is the order of `pool` calls.
    pub fn pool(mut self, cfg: PoolConfig) -> RegionLayout {
        self.pools.push(cfg);
        self
    }

    /// Adds an array of `count` atomic words (counters, control blocks,
    /// tables); its index is the order of `words` calls.
    pub fn words(mut self, count: u32) -> RegionLayout {
        self.words.push(count);
        self
    }

    pub fn rings(&self) -> &[RingConfig] {
        &self.rings
    }

    pub fn pools(&self) -> &[PoolConfig] {
        &self.pools
    }

    fn validate(&self) -> Result<(), RingError> {
        let n = self.rings.len() + self.pools.len() + self.words.len();
        if n == 0 || n > MAX_OBJECTS {
            return Err(RingError::config("region object count", n as u64, "must be in 1..=64"));
        }
        if let Some(&w) = self.words.iter().find(|&&w| w == 0 || w > MAX_WORDS) {
            return Err(RingError::config("word array length", w as u64, "must be in 1..=2^24"));
        }
        Ok(())
    }

    fn place(&self) -> Placement {
        let mut off = HEADER_SIZE;
        let mut rings = Vec::with_capacity(self.rings.len());
        for r in &self.rings {
            off = align_up(off, OBJ_ALIGN);
            rings.push(off);
            off += size_of::<RingHeader>() as u64 + r.capacity() as u64 * size_of::<Slot>() as u64;
        }
        let mut pools = Vec::with_capacity(self.pools.len());
        for p in &self.pools {
            off = align_up(off, OBJ_ALIGN);
            pools.push(off);
            off += size_of::<PoolHeader>() as u64 + p.capacity() as u64 * size_of::<PoolSlot>() as u64;
        }
        let mut words = Vec::with_capacity(self.words.len());
        for &w in &self.words {
            off = align_up(off, OBJ_ALIGN);
            words.push(off);
            off += w as u64 * size_of::<AtomicU64>() as u64;
        }
        Placement { rings, pools, words, total: align_up(off, PAGE) }
    }
}

/// A mapping of the memfd; unmapped when the last handle goes.
struct Mapping {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

// SAFETY: plain shared memory accessed through atomics only.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; every handle that could
        // still point in holds an Arc to this mapping, so none is left.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

fn map(fd: OwnedFd, len: u64) -> Result<Mapping, RingError> {
    // SAFETY: maps `len` bytes of a memfd we hold; the seals checked by the
    // callers guarantee it cannot shrink under us later (no SIGBUS).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(RingError::sys("mmap region"));
    }
    Ok(Mapping { fd, base: base as *mut u8, len: len as usize })
}

/// One mapped region of rings and pools.
pub struct ShmRegion {
    map: Arc<Mapping>,
    layout: RegionLayout,
    place: Placement,
}

impl ShmRegion {
    /// Creates, sizes, seals and initialises a new region. The fd is
    /// close-on-exec; the monitor passes it on explicitly.
    pub fn create(layout: &RegionLayout) -> Result<ShmRegion, RingError> {
        layout.validate()?;
        let place = layout.place();
        let name = CString::new("ferry-ring").expect("no NUL");
        // SAFETY: plain syscall; result checked.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(RingError::sys("memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate/fcntl on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), place.total as libc::off_t) } < 0 {
            return Err(RingError::sys("ftruncate region"));
        }
        // Fixing the size stops any peer from shrinking it under the others.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(RingError::sys("seal region"));
        }
        let region = ShmRegion { map: Arc::new(map(fd, place.total)?), layout: layout.clone(), place };
        region.initialise();
        Ok(region)
    }

    fn header(&self) -> &RegionHeader {
        // SAFETY: the map starts with a page-aligned RegionHeader made only
        // of atomics (valid for any bytes); the map is >= HEADER_SIZE.
        unsafe { &*(self.map.base as *const RegionHeader) }
    }

    fn initialise(&self) {
        let h = self.header();
        let mut i = 0;
        for (cfg, &off) in self.layout.rings.iter().zip(&self.place.rings) {
            let e = &h.entries[i];
            e.kind.store(KIND_RING, Ordering::Relaxed);
            e.capacity.store(cfg.capacity(), Ordering::Relaxed);
            e.param.store(cfg.max_producers() as u32, Ordering::Relaxed);
            e.param2.store(cfg.low_watermark(), Ordering::Relaxed);
            e.offset.store(off, Ordering::Relaxed);
            i += 1;
        }
        for (cfg, &off) in self.layout.pools.iter().zip(&self.place.pools) {
            let e = &h.entries[i];
            e.kind.store(KIND_POOL, Ordering::Relaxed);
            e.capacity.store(cfg.capacity(), Ordering::Relaxed);
            e.offset.store(off, Ordering::Relaxed);
            i += 1;
        }
        for (&count, &off) in self.layout.words.iter().zip(&self.place.words) {
            let e = &h.entries[i];
            e.kind.store(KIND_WORDS, Ordering::Relaxed);
            e.capacity.store(count, Ordering::Relaxed);
            e.offset.store(off, Ordering::Relaxed);
            i += 1;
        }
        for r in 0..self.layout.rings.len() {
            self.ring(r).expect("index in range").init_fresh();
        }
        for p in 0..self.layout.pools.len() {
            self.pool(p).expect("index in range").init_fresh();
        }
        h.version.store(REGION_VERSION, Ordering::Relaxed);
        h.n_rings.store(self.layout.rings.len() as u32, Ordering::Relaxed);
        h.n_pools.store(self.layout.pools.len() as u32, Ordering::Relaxed);
        h.n_words.store(self.layout.words.len() as u32, Ordering::Relaxed);
        h.total_size.store(self.place.total, Ordering::Relaxed);
        // Release: whoever reads the magic with Acquire sees all the above.
        h.magic.store(REGION_MAGIC, Ordering::Release);
    }

    /// Maps a region received from another process, after checking it is a
    /// sealed memfd of a sane size whose header is a layout this build would
    /// have produced itself. Anything else is an error.
    pub fn from_fd(fd: OwnedFd) -> Result<ShmRegion, RingError> {
        // SAFETY: fcntl/fstat on an fd we own, into a zeroed stat.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & need != need {
            return Err(RingError::NotSealed { seals });
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return Err(RingError::sys("fstat region"));
        }
        let size = st.st_size as u64;
        if !(HEADER_SIZE..=MAX_REGION).contains(&size) || size & (PAGE - 1) != 0 {
            return Err(RingError::BadSize { expected: HEADER_SIZE, actual: size });
        }
        let map = Arc::new(map(fd, size)?);
        // SAFETY: as in `header`: the map is >= HEADER_SIZE, page-aligned.
        let h = unsafe { &*(map.base as *const RegionHeader) };
        let magic = h.magic.load(Ordering::Acquire);
        if magic != REGION_MAGIC {
            return Err(RingError::BadMagic { found: magic });
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != REGION_VERSION {
            return Err(RingError::BadVersion { found: version, expected: REGION_VERSION });
        }
        let total = h.total_size.load(Ordering::Relaxed);
        if total != size {
            return Err(RingError::BadSize { expected: total, actual: size });
        }
        let (nr, np) = (h.n_rings.load(Ordering::Relaxed) as usize, h.n_pools.load(Ordering::Relaxed) as usize);
        let nw = h.n_words.load(Ordering::Relaxed) as usize;
        if nr + np + nw == 0 || nr + np + nw > MAX_OBJECTS {
            return Err(RingError::Corrupt { reason: "object count out of range" });
        }
        let mut layout = RegionLayout::new();
        let mut offsets = Vec::with_capacity(nr + np);
        for (i, e) in h.entries[..nr + np + nw].iter().enumerate() {
            let kind = e.kind.load(Ordering::Relaxed);
            let cap = e.capacity.load(Ordering::Relaxed);
            offsets.push(e.offset.load(Ordering::Relaxed));
            if i < nr {
                if kind != KIND_RING {
                    return Err(RingError::Corrupt { reason: "ring entry has the wrong kind" });
                }
                let producers = u16::try_from(e.param.load(Ordering::Relaxed))
                    .map_err(|_| RingError::Corrupt { reason: "max_producers out of range" })?;
                let cfg = RingConfig::new(cap, producers)?.with_low_watermark(e.param2.load(Ordering::Relaxed))?;
                layout = layout.ring(cfg);
            } else if i < nr + np {
                if kind != KIND_POOL {
                    return Err(RingError::Corrupt { reason: "pool entry has the wrong kind" });
                }
                layout = layout.pool(PoolConfig::new(cap)?);
            } else {
                if kind != KIND_WORDS || cap == 0 || cap > MAX_WORDS {
                    return Err(RingError::Corrupt { reason: "word-array entry has the wrong kind or length" });
                }
                layout = layout.words(cap);
            }
        }
        let place = layout.place();
        if place.total != size {
            return Err(RingError::BadSize { expected: place.total, actual: size });
        }
        if place.rings.iter().chain(&place.pools).chain(&place.words).ne(offsets.iter()) {
            return Err(RingError::Corrupt { reason: "object offsets disagree with their sizes" });
        }
        Ok(ShmRegion { map, layout, place })
    }

    /// The memfd, to pass to other processes.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.map.fd.as_fd()
    }

    pub fn layout(&self) -> &RegionLayout {
        &self.layout
    }

    /// Mapped size in bytes.
    pub fn size(&self) -> u64 {
        self.place.total
    }

    /// Handle to ring `index` (order of `RegionLayout::ring`).
    pub fn ring(&self, index: usize) -> Result<MpscRing, RingError> {
        let (Some(&cfg), Some(&off)) = (self.layout.rings.get(index), self.place.rings.get(index)) else {
            return Err(RingError::NoSuchObject { kind: "ring", index, count: self.layout.rings.len() });
        };
        // SAFETY: `place` was computed (and, for a foreign fd, checked
        // against the file size) by us, so header and `capacity` slots lie
        // inside the map at 128-byte-aligned offsets; the Arc keeps it.
        unsafe {
            let hdr = self.map.base.add(off as usize) as *const RingHeader;
            let slots = self.map.base.add(off as usize + size_of::<RingHeader>()) as *const Slot;
            Ok(MpscRing::from_raw(hdr, slots, cfg, self.map.clone()))
        }
    }

    /// Handle to pool `index` (order of `RegionLayout::pool`).
    pub fn pool(&self, index: usize) -> Result<FramePool, RingError> {
        let (Some(&cfg), Some(&off)) = (self.layout.pools.get(index), self.place.pools.get(index)) else {
            return Err(RingError::NoSuchObject { kind: "pool", index, count: self.layout.pools.len() });
        };
        // SAFETY: as in `ring`.
        unsafe {
            let hdr = self.map.base.add(off as usize) as *const PoolHeader;
            let slots = self.map.base.add(off as usize + size_of::<PoolHeader>()) as *const PoolSlot;
            Ok(FramePool::from_raw(hdr, slots, cfg, self.map.clone()))
        }
    }
}

/// A shared array of atomic words inside a region (control blocks,
/// counters, the frame-owner table). Cheap to clone.
#[derive(Clone)]
pub struct SharedWords {
    base: *const AtomicU64,
    len: usize,
    _keep: Arc<Mapping>,
}

// SAFETY: points to atomics inside a mapping the handle keeps alive.
unsafe impl Send for SharedWords {}
unsafe impl Sync for SharedWords {}

impl SharedWords {
    /// The words as a slice: every access is bounds-checked by the slice.
    pub fn as_slice(&self) -> &[AtomicU64] {
        // SAFETY: `len` words at `base` lie inside the mapping (placement
        // computed and checked by us), and atomics are valid for any bytes.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for SharedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWords").field("len", &self.len).finish()
    }
}

impl ShmRegion {
    /// Handle to word array `index` (order of `RegionLayout::words`).
    pub fn words(&self, index: usize) -> Result<SharedWords, RingError> {
        let (Some(&count), Some(&off)) = (self.layout.words.get(index), self.place.words.get(index)) else {
            return Err(RingError::NoSuchObject { kind: "word array", index, count: self.layout.words.len() });
        };
        // SAFETY: as in `ring`: inside the map, 128-byte aligned.
        let base = unsafe { self.map.base.add(off as usize) as *const AtomicU64 };
        Ok(SharedWords { base, len: count as usize, _keep: self.map.clone() })
    }
}
