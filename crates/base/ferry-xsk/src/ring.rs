//! The four single-producer/single-consumer rings the kernel shares with an
//! AF_XDP socket. The kernel owns one end of each; this side caches the other
//! end's index and re-reads it only when the cache says the ring is full or
//! empty, so a batch costs one atomic load and one store.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::{XdpRingOffset, XDP_RING_NEED_WAKEUP};
use crate::XskError;

/// A mapping of one ring's pages.
struct RingMap {
    area: *mut libc::c_void,
    len: usize,
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: unmapping what `RawRing::map` mapped.
        unsafe { libc::munmap(self.area, self.len) };
    }
}

struct RawRing<T> {
    _map: RingMap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
}

impl<T> RawRing<T> {
    fn map(fd: libc::c_int, off: &XdpRingOffset, size: u32, pgoff: libc::off_t) -> Result<Self, XskError> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: mapping the ring region the kernel exposes for this socket.
        let area = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if area == libc::MAP_FAILED {
            return Err(XskError::sys("mmap ring"));
        }
        let base = area as *mut u8;
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this mapping.
        unsafe {
            Ok(RawRing {
                _map: RingMap { area, len },
                producer: base.add(off.producer as usize) as *const AtomicU32,
                consumer: base.add(off.consumer as usize) as *const AtomicU32,
                flags: base.add(off.flags as usize) as *const AtomicU32,
                descs: base.add(off.desc as usize) as *mut T,
                mask: size - 1,
                size,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping.
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping.
        unsafe { &*self.consumer }
    }
    fn needs_wakeup(&self) -> bool {
        // SAFETY: points into our live mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0 }
    }
}

/// The side of a ring where this process produces (fill and TX rings).
pub struct ProducerRing<T: Copy> {
    raw: RawRing<T>,
    cached_prod: u32,
    cached_cons: u32,
    _t: PhantomData<T>,
}

// SAFETY: the ring is used from one thread at a time (it is &mut for writes).
unsafe impl<T: Copy> Send for ProducerRing<T> {}

impl<T: Copy> ProducerRing<T> {
    pub(crate) fn map(fd: libc::c_int, off: &XdpRingOffset, size: u32, pgoff: libc::off_t) -> Result<Self, XskError> {
        let raw = RawRing::<T>::map(fd, off, size, pgoff)?;
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_cons = raw.consumer().load(Ordering::Relaxed).wrapping_add(size);
        Ok(ProducerRing { raw, cached_prod, cached_cons, _t: PhantomData })
    }

    /// Number of free slots, re-reading the consumer only when the cached
    /// value cannot satisfy `want`.
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self.raw.consumer().load(Ordering::Acquire).wrapping_add(self.raw.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Writes as many of `items` as fit and publishes them; returns how many.
    pub fn produce(&mut self, items: &[T]) -> usize {
        let n = (self.free(items.len() as u32) as usize).min(items.len());
        for (i, item) in items[..n].iter().enumerate() {
            let idx = self.cached_prod.wrapping_add(i as u32) & self.raw.mask;
            // SAFETY: idx is within the ring and the slot is free.
            unsafe { self.raw.descs.add(idx as usize).write(*item) };
        }
        self.cached_prod = self.cached_prod.wrapping_add(n as u32);
        // Release: the descriptors must be visible before the new index.
        self.raw.producer().store(self.cached_prod, Ordering::Release);
        n
    }

    /// True when the kernel asked to be woken up for this ring.
    pub fn needs_wakeup(&self) -> bool {
        self.raw.needs_wakeup()
    }

    /// Entries produced but not yet consumed by the kernel.
    pub fn pending(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.raw.consumer().load(Ordering::Acquire))
    }

    pub fn size(&self) -> u32 {
        self.raw.size
    }
}

/// The side of a ring where this process consumes (RX and completion rings).
pub struct ConsumerRing<T: Copy> {
    raw: RawRing<T>,
    cached_prod: u32,
    cached_cons: u32,
    _t: PhantomData<T>,
}

// SAFETY: as for ProducerRing.
unsafe impl<T: Copy> Send for ConsumerRing<T> {}

impl<T: Copy> ConsumerRing<T> {
    pub(crate) fn map(fd: libc::c_int, off: &XdpRingOffset, size: u32, pgoff: libc::off_t) -> Result<Self, XskError> {
        let raw = RawRing::<T>::map(fd, off, size, pgoff)?;
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_cons = raw.consumer().load(Ordering::Relaxed);
        Ok(ConsumerRing { raw, cached_prod, cached_cons, _t: PhantomData })
    }

    /// Entries ready to consume.
    pub fn available(&mut self) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            // Acquire: pairs with the kernel's release of the producer index.
            self.cached_prod = self.raw.producer().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n
    }

    /// Moves up to `max` entries into `out` and releases their slots.
    pub fn consume(&mut self, max: usize, out: &mut Vec<T>) -> usize {
        let n = (self.available() as usize).min(max);
        for i in 0..n {
            let idx = self.cached_cons.wrapping_add(i as u32) & self.raw.mask;
            // SAFETY: idx is within the ring and was published by the kernel.
            out.push(unsafe { self.raw.descs.add(idx as usize).read() });
        }
        self.cached_cons = self.cached_cons.wrapping_add(n as u32);
        // Release: our reads of the slots happen before the kernel reuses them.
        self.raw.consumer().store(self.cached_cons, Ordering::Release);
        n
    }

    pub fn needs_wakeup(&self) -> bool {
        self.raw.needs_wakeup()
    }

    pub fn size(&self) -> u32 {
        self.raw.size
    }
}
