//! The per-thread packet table behind the C handles.
//!
//! Rust's `Packet` is owned: `send` takes it by value and the compiler
//! rejects any later use. C cannot express that, so the C API keeps every
//! packet it has handed out in a slot and gives C a handle instead. A
//! verdict (send, reply, drop) takes the packet out of its slot; a second
//! verdict on the same handle finds the slot empty and fails instead of
//! handing one frame on twice.
//!
//! A handle is `generation << SLOT_BITS | index`. The generation of a slot
//! changes every time its packet is taken, so a stale handle (one whose
//! packet was already handed on, even if the slot now holds another packet)
//! is refused too, until the generation wraps after `GEN_MAX` reuses of
//! that slot. Freed slots are reused oldest first, which spreads reuse over
//! all slots and makes such a wrap take many bursts. Generation 0 is never
//! issued, so a zeroed `ferry_pkt` is never a valid packet.

use std::collections::VecDeque;

/// Bits of a handle that index the slot table.
pub const SLOT_BITS: u32 = 20;
/// Most packets one thread can hold at once.
pub const MAX_SLOTS: usize = 1 << SLOT_BITS;
const INDEX_MASK: u32 = (1 << SLOT_BITS) - 1;
const GEN_MAX: u32 = u32::MAX >> SLOT_BITS;

/// Why a handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadHandle {
    /// Never issued by this table (zero generation or index out of range).
    Unknown,
    /// Issued, but its packet was already sent, replied or dropped.
    Used,
}

struct Slot<P> {
    generation: u32,
    item: Option<P>,
}

/// Packets (`P`) by handle.
pub struct Slots<P> {
    table: Vec<Slot<P>>,
    free: VecDeque<u32>,
    held: usize,
}

impl<P> Default for Slots<P> {
    fn default() -> Self {
        Slots { table: Vec::new(), free: VecDeque::new(), held: 0 }
    }
}

impl<P> Slots<P> {
    /// How many more packets fit.
    pub fn room(&self) -> usize {
        MAX_SLOTS - self.held
    }

    /// Packets held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Stores `item` and returns its handle. The caller checks `room()`
    /// first; with no room the item comes back.
    pub fn put(&mut self, item: P) -> Result<u32, P> {
        if self.held >= MAX_SLOTS {
            return Err(item);
        }
        let index = match self.free.pop_front() {
            Some(i) => i,
            None => {
                self.table.push(Slot { generation: 1, item: None });
                (self.table.len() - 1) as u32
            }
        };
        let slot = &mut self.table[index as usize];
        slot.item = Some(item);
        self.held += 1;
        Ok(slot.generation << SLOT_BITS | index)
    }

    fn slot(&mut self, handle: u32) -> Result<&mut Slot<P>, BadHandle> {
        let (generation, index) = (handle >> SLOT_BITS, handle & INDEX_MASK);
        if generation == 0 {
            return Err(BadHandle::Unknown);
        }
        let slot = self.table.get_mut(index as usize).ok_or(BadHandle::Unknown)?;
        if slot.generation != generation || slot.item.is_none() {
            return Err(BadHandle::Used);
        }
        Ok(slot)
    }

    /// The packet behind `handle`, left in place.
    pub fn get(&mut self, handle: u32) -> Result<&mut P, BadHandle> {
        Ok(self.slot(handle)?.item.as_mut().expect("checked by slot()"))
    }

    /// Takes the packet behind `handle` out if `check` accepts it; on `Err`
    /// the packet stays where it is.
    pub fn take_if<E>(
        &mut self,
        handle: u32,
        bad: impl FnOnce(BadHandle) -> E,
        check: impl FnOnce(&mut P) -> Result<(), E>,
    ) -> Result<P, E> {
        let slot = self.slot(handle).map_err(bad)?;
        check(slot.item.as_mut().expect("checked by slot()"))?;
        let item = slot.item.take().expect("checked by slot()");
        slot.generation = if slot.generation == GEN_MAX { 1 } else { slot.generation + 1 };
        self.free.push_back(handle & INDEX_MASK);
        self.held -= 1;
        Ok(item)
    }

    /// Takes every packet still held.
    pub fn drain(&mut self) -> Vec<P> {
        let items: Vec<P> = self.table.iter_mut().filter_map(|s| s.item.take()).collect();
        self.table.clear();
        self.free.clear();
        self.held = 0;
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(s: &mut Slots<u32>, h: u32) -> Result<u32, BadHandle> {
        s.take_if(h, |b| b, |_| Ok(()))
    }

    #[test]
    fn a_handle_works_once() {
        let mut s = Slots::default();
        let h = s.put(7).unwrap();
        assert_eq!(*s.get(h).unwrap(), 7);
        assert_eq!(take(&mut s, h), Ok(7));
        assert_eq!(take(&mut s, h), Err(BadHandle::Used));
        assert_eq!(s.get(h).err(), Some(BadHandle::Used));
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn stale_handle_of_a_reused_slot_is_refused() {
        let mut s = Slots::default();
        let old = s.put(1).unwrap();
        take(&mut s, old).unwrap();
        let new = s.put(2).unwrap();
        assert_eq!(old & INDEX_MASK, new & INDEX_MASK, "the slot is reused");
        assert_ne!(old, new);
        assert_eq!(take(&mut s, old), Err(BadHandle::Used));
        assert_eq!(take(&mut s, new), Ok(2));
    }

    #[test]
    fn unknown_handles_are_refused() {
        let mut s: Slots<u32> = Slots::default();
        assert_eq!(take(&mut s, 0), Err(BadHandle::Unknown));
        let h = s.put(1).unwrap();
        assert_eq!(take(&mut s, h & INDEX_MASK), Err(BadHandle::Unknown), "generation 0");
        assert_eq!(take(&mut s, h + 5), Err(BadHandle::Unknown), "index never issued");
        assert_eq!(take(&mut s, u32::MAX), Err(BadHandle::Unknown));
        assert_eq!(take(&mut s, h), Ok(1));
    }

    #[test]
    fn a_refused_check_keeps_the_packet() {
        let mut s = Slots::default();
        let h = s.put(9u32).unwrap();
        assert_eq!(s.take_if(h, |_| "bad", |_| Err("too long")), Err("too long"));
        assert_eq!(s.take_if(h, |_| "bad", |p| if *p == 9 { Ok(()) } else { Err("no") }), Ok(9));
    }

    #[test]
    fn free_slots_are_reused_oldest_first_and_generations_wrap_past_zero() {
        let mut s = Slots::default();
        let a = s.put(0u32).unwrap();
        let b = s.put(1).unwrap();
        take(&mut s, a).unwrap();
        take(&mut s, b).unwrap();
        assert_eq!(s.put(2).unwrap() & INDEX_MASK, a & INDEX_MASK);
        let mut h = s.put(3).unwrap();
        assert_eq!(h & INDEX_MASK, b & INDEX_MASK);
        for _ in 0..2 * GEN_MAX {
            take(&mut s, h).unwrap();
            // Slot a is now oldest in the queue; cycle through both.
            h = s.put(4).unwrap();
            assert_ne!(h >> SLOT_BITS, 0);
        }
        assert_eq!(s.held(), 2);
        assert_eq!(s.drain().len(), 2);
        assert_eq!(s.room(), MAX_SLOTS);
    }
}
