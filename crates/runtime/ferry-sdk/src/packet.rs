//! The owned packet.

use std::cell::RefCell;
use std::marker::PhantomData;

thread_local! {
    /// Frames of packets dropped without a verdict; the owning `NfThread`
    /// frees them on its next call. A `Packet` never leaves its thread
    /// (`!Send`), so the thread-local is the right one.
    pub(crate) static ORPHANS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Where a packet came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Socket `i` of the thread (index into its ports).
    Port(u16),
    Ring,
    Alloc,
}

/// One packet in a UMEM frame, owned by the NF thread that holds it.
///
/// The bytes are `data()`; `data_mut()` rewrites them in place and
/// `set_len` grows or shrinks the packet within its frame.
pub struct Packet {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    /// Bytes from `addr` to the end of the frame.
    pub(crate) room: u32,
    pub(crate) base: *mut u8,
    pub(crate) origin: Origin,
    /// Not Send, not Sync: a frame never leaves its thread.
    _thread: PhantomData<*mut ()>,
}

impl Packet {
    /// # Safety
    /// `base + addr .. base + addr + room` lies inside a UMEM mapping that
    /// outlives the packet, and no one else uses that frame until the packet
    /// is sent or dropped.
    pub(crate) unsafe fn new(base: *mut u8, addr: u64, len: u32, room: u32, origin: Origin) -> Packet {
        Packet { addr, len: len.min(room), room, base, origin, _thread: PhantomData }
    }

    pub fn data(&self) -> &[u8] {
        // SAFETY: see `new`; we own the frame and len <= room.
        unsafe { std::slice::from_raw_parts(self.base.add(self.addr as usize), self.len as usize) }
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(self.addr as usize), self.len as usize) }
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room in the frame from the packet's start.
    pub fn capacity(&self) -> usize {
        self.room as usize
    }

    /// Sets the length (new bytes keep whatever the frame held). False if it
    /// does not fit the frame.
    pub fn set_len(&mut self, len: usize) -> bool {
        if len > self.room as usize {
            return false;
        }
        self.len = len as u32;
        true
    }

    /// The port index (within this thread's ports) the packet arrived on.
    pub fn arrived_on_port(&self) -> Option<u16> {
        match self.origin {
            Origin::Port(i) => Some(i),
            _ => None,
        }
    }

    /// Gives up the frame without dropping (the caller takes it over).
    pub(crate) fn into_raw(self) -> (u64, u32, Origin) {
        let me = std::mem::ManuallyDrop::new(self);
        (me.addr, me.len, me.origin)
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        let addr = self.addr;
        // try_with: during thread teardown the thread-local may be gone; the
        // frame is then reclaimed by ferryd when the NF exits.
        let _ = ORPHANS.try_with(|o| o.borrow_mut().push(addr));
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet").field("addr", &self.addr).field("len", &self.len).finish()
    }
}
