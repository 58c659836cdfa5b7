//! The shared region: creation, reopening from an fd, and rejection of
//! foreign or malformed fds.
#![cfg(not(loom))]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use ferry_ring::{Desc, PoolConfig, RegionLayout, RingConfig, RingError, ShmRegion, REGION_MAGIC, REGION_VERSION};

fn layout() -> RegionLayout {
    RegionLayout::new()
        .ring(RingConfig::new(64, 4).unwrap())
        .ring(RingConfig::new(8, 1).unwrap().with_low_watermark(1).unwrap())
        .pool(PoolConfig::new(256).unwrap())
}

fn dup(region: &ShmRegion) -> OwnedFd {
    region.fd().try_clone_to_owned().unwrap()
}

/// Writes `bytes` at `off` of the region's memfd through a fresh mapping,
/// as a buggy or hostile peer could.
fn poke(region: &ShmRegion, off: usize, bytes: &[u8]) {
    let len = region.size() as usize;
    // SAFETY: test-only mapping of a memfd of `len` bytes.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            region.fd().as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (p as *mut u8).add(off), bytes.len());
        libc::munmap(p, len);
    }
}

fn memfd(size: i64, seals: i32) -> OwnedFd {
    // SAFETY: test-only syscalls, results checked.
    unsafe {
        let fd = libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, size), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0);
        }
        OwnedFd::from_raw_fd(fd)
    }
}

const SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

#[test]
fn create_and_reopen_share_state() {
    let a = ShmRegion::create(&layout()).unwrap();
    let b = ShmRegion::from_fd(dup(&a)).unwrap();
    assert_eq!(a.layout(), b.layout());
    assert_eq!(a.size(), b.size());
    // Different mappings, same memory: enqueue through one, dequeue through the other.
    let p = a.ring(0).unwrap().producer(2).unwrap();
    let mut c = b.ring(0).unwrap().consumer().unwrap();
    assert_eq!(p.enqueue_batch(&[Desc::new(4096, 60), Desc::new(8192, 64)]), 2);
    let mut out = Vec::new();
    assert_eq!(c.dequeue_batch(8, &mut out), 2);
    assert_eq!(out[1], Desc::new(8192, 64));
    assert!(matches!(a.ring(0).unwrap().consumer(), Err(RingError::ConsumerBusy)), "guard is shared");
    assert_eq!(b.ring(1).unwrap().config().low_watermark(), 1);
    let pool = b.pool(0).unwrap();
    pool.seed(&[0, 2048, 4096]).unwrap();
    assert_eq!((a.pool(0).unwrap().frames_total(), a.pool(0).unwrap().available()), (3, 3));
    assert!(matches!(a.ring(2), Err(RingError::NoSuchObject { kind: "ring", index: 2, count: 2 })));
    assert!(matches!(a.pool(1), Err(RingError::NoSuchObject { kind: "pool", .. })));
}

#[test]
fn empty_layout_rejected() {
    assert!(matches!(ShmRegion::create(&RegionLayout::new()), Err(RingError::Config { .. })));
}

#[test]
fn rejects_fd_that_is_not_a_memfd() {
    let f = std::fs::File::open("/dev/null").unwrap();
    assert!(matches!(ShmRegion::from_fd(f.into()), Err(RingError::NotSealed { .. })));
}

#[test]
fn rejects_unsealed_memfd() {
    assert!(matches!(ShmRegion::from_fd(memfd(8192, 0)), Err(RingError::NotSealed { .. })));
}

#[test]
fn rejects_bad_sizes() {
    assert!(matches!(ShmRegion::from_fd(memfd(100, SEALS)), Err(RingError::BadSize { actual: 100, .. })));
    assert!(matches!(ShmRegion::from_fd(memfd(4096 + 8, SEALS)), Err(RingError::BadSize { .. })));
}

#[test]
fn rejects_foreign_magic() {
    assert!(matches!(ShmRegion::from_fd(memfd(8192, SEALS)), Err(RingError::BadMagic { found: 0 })));
    let a = ShmRegion::create(&layout()).unwrap();
    poke(&a, 0, b"NOTFERRY");
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::BadMagic { .. })));
    poke(&a, 0, &REGION_MAGIC.to_le_bytes());
    assert!(ShmRegion::from_fd(dup(&a)).is_ok());
}

#[test]
fn rejects_other_version() {
    let a = ShmRegion::create(&layout()).unwrap();
    poke(&a, 8, &7u32.to_le_bytes());
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::BadVersion { found: 7, expected: REGION_VERSION })));
}

#[test]
fn rejects_header_size_mismatch() {
    let a = ShmRegion::create(&layout()).unwrap();
    poke(&a, 24, &(a.size() * 2).to_le_bytes());
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::BadSize { .. })));
}

#[test]
fn rejects_inconsistent_object_table() {
    // Entry 0 starts at byte 32: kind, capacity, param, param2, offset.
    let a = ShmRegion::create(&layout()).unwrap();
    poke(&a, 32 + 4, &(1u32 << 20).to_le_bytes()); // capacity grows past the file
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::BadSize { .. })));
    poke(&a, 32 + 4, &63u32.to_le_bytes()); // not a power of two
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::Config { .. })));
    poke(&a, 32 + 4, &64u32.to_le_bytes());
    poke(&a, 32 + 16, &0u64.to_le_bytes()); // ring placed over the header
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::Corrupt { .. })));
    poke(&a, 32 + 16, &4096u64.to_le_bytes());
    poke(&a, 32, &2u32.to_le_bytes()); // ring entry claims to be a pool
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::Corrupt { .. })));
    poke(&a, 32, &1u32.to_le_bytes());
    poke(&a, 12, &1000u32.to_le_bytes()); // absurd object count
    assert!(matches!(ShmRegion::from_fd(dup(&a)), Err(RingError::Corrupt { .. })));
    poke(&a, 12, &2u32.to_le_bytes());
    assert!(ShmRegion::from_fd(dup(&a)).is_ok(), "restored header is accepted again");
}

#[test]
fn word_arrays_are_shared_and_checked() {
    use std::sync::atomic::Ordering;
    let layout = layout().words(3).words(1000);
    let a = ShmRegion::create(&layout).unwrap();
    a.words(1).unwrap().as_slice()[999].store(42, Ordering::Relaxed);
    let b = ShmRegion::from_fd(dup(&a)).unwrap();
    assert_eq!(b.words(0).unwrap().len(), 3);
    assert_eq!(b.words(1).unwrap().as_slice()[999].load(Ordering::Relaxed), 42);
    assert!(matches!(b.words(2), Err(RingError::NoSuchObject { .. })));
    assert!(ShmRegion::create(&ferry_ring::RegionLayout::new().words(0)).is_err());
}
