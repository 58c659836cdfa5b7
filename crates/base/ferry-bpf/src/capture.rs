//! Captures in the stage pipeline (`bpf/include/ferry_capture.h`): the
//! tap entry that arms one, and the ring buffer its copies come through.
//! Both are held through their own map handles, so a capture never holds
//! the pipeline itself.

use std::sync::{Arc, Mutex};

use aya::maps::{Array, MapData, RingBuf};

use crate::abi::gen;
use crate::pipeline::Pipeline;
use crate::BpfError;

/// `struct ferry_pl_tap`.
pub type PlTap = gen::ferry_pl_tap;
const _: () = assert!(std::mem::size_of::<PlTap>() == 40);
/// `struct ferry_cap_hdr`.
pub type CapHdr = gen::ferry_cap_hdr;
const _: () = assert!(std::mem::size_of::<CapHdr>() == 24);

// SAFETY: plain C structs of integers, no padding the compiler adds (the
// header asserts their sizes).
unsafe impl aya::Pod for PlTap {}

/// Which side of an NF a tap copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum TapSide {
    /// The frames entering its first element.
    In = gen::FERRY_TAP_IN,
    /// The frames it sends on (to the next NF, a socket or a device).
    Out = gen::FERRY_TAP_OUT,
}

const TAPS: &str = "ferry_pl_tap";
/// A tap's side while its capture drains its ring: no side the program
/// copies, and not free for another capture.
const TAP_DRAINING: u32 = 0xff;
/// Captures a pipeline serves at once (`FERRY_TAP_SLOTS`).
pub const TAP_SLOTS: u32 = gen::FERRY_TAP_SLOTS;
const RINGS: [&str; TAP_SLOTS as usize] = ["ferry_pl_capture0", "ferry_pl_capture1"];

/// One copy the program took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpCopy {
    /// CLOCK_MONOTONIC, ns.
    pub ts_ns: u64,
    pub session: u32,
    pub orig_len: u32,
    pub bytes: Vec<u8>,
}

/// A pipeline's taps and capture rings, opened once with the pipeline
/// and shared by its captures. (One handle per ring for the pipeline's
/// life: aya 0.13's `RingBuf` starts its producer cache at 0, so a handle
/// opened on a ring that was read before takes its consumer position for
/// fresh data and never catches up.)
pub struct PipelineTaps {
    taps: Mutex<Array<MapData, PlTap>>,
    rings: Vec<Mutex<RingBuf<MapData>>>,
}

/// One capture's slot on a pipeline, armed; taken off by
/// [`ArmedTap::disarm`] or on drop.
pub struct ArmedTap {
    taps: Arc<PipelineTaps>,
    slot: u32,
    session: u32,
    disarmed: bool,
}

impl PipelineTaps {
    pub fn open(p: &Pipeline) -> Result<Arc<PipelineTaps>, BpfError> {
        let taps = Array::try_from(p.map_handle(TAPS)?).map_err(|source| BpfError::Map { name: TAPS, source })?;
        let rings = RINGS
            .iter()
            .map(|&name| {
                let ring = RingBuf::try_from(p.map_handle(name)?).map_err(|source| BpfError::Map { name, source })?;
                Ok(Mutex::new(ring))
            })
            .collect::<Result<_, BpfError>>()?;
        Ok(Arc::new(PipelineTaps { taps: Mutex::new(taps), rings }))
    }

    /// Arms a free slot on NF `nf` of chain `chain`; None if other
    /// captures hold every slot. Copies an earlier capture left in the
    /// slot's ring are dropped first.
    pub fn arm(
        self: &Arc<Self>,
        chain: u32,
        nf: u32,
        side: TapSide,
        snaplen: u32,
        session: u32,
    ) -> Result<Option<ArmedTap>, BpfError> {
        let mut taps = self.taps.lock().expect("taps lock");
        let free = (0..TAP_SLOTS).find(|&slot| taps.get(&slot, 0).is_ok_and(|t: PlTap| t.where_ == gen::FERRY_TAP_OFF));
        let Some(slot) = free else { return Ok(None) };
        {
            let mut ring = self.rings[slot as usize].lock().expect("ring lock");
            while ring.next().is_some() {}
        }
        let tap = PlTap { where_: side as u32, chain, nf, snaplen, session, ..Default::default() };
        taps.set(slot, tap, 0).map_err(|source| BpfError::Map { name: TAPS, source })?;
        Ok(Some(ArmedTap { taps: self.clone(), slot, session, disarmed: false }))
    }
}

impl ArmedTap {
    /// Stops the copies but keeps the slot (no other capture takes it, so
    /// this one can still drain the slot's ring alone); the copies taken
    /// and lost.
    pub fn stop(&mut self) -> Result<(u64, u64), BpfError> {
        let mut taps = self.taps.taps.lock().expect("taps lock");
        let mut tap: PlTap = taps.get(&self.slot, 0).map_err(|source| BpfError::Map { name: TAPS, source })?;
        if tap.session == self.session && tap.where_ != gen::FERRY_TAP_OFF {
            tap.where_ = TAP_DRAINING;
            taps.set(self.slot, tap, 0).map_err(|source| BpfError::Map { name: TAPS, source })?;
        }
        Ok((tap.taken, tap.lost))
    }

    /// Frees the slot (if it is still this capture's).
    pub fn release(&mut self) -> Result<(), BpfError> {
        let mut taps = self.taps.taps.lock().expect("taps lock");
        let tap: PlTap = taps.get(&self.slot, 0).map_err(|source| BpfError::Map { name: TAPS, source })?;
        if tap.session == self.session {
            taps.set(self.slot, PlTap::default(), 0).map_err(|source| BpfError::Map { name: TAPS, source })?;
        }
        self.disarmed = true;
        Ok(())
    }

    /// [`ArmedTap::stop`], then [`ArmedTap::release`].
    pub fn disarm(&mut self) -> Result<(u64, u64), BpfError> {
        let counts = self.stop()?;
        self.release()?;
        Ok(counts)
    }

    /// Hands every copy in the slot's ring to `f`; a record too short for
    /// its header is skipped.
    pub fn drain(&mut self, mut f: impl FnMut(XdpCopy)) -> usize {
        let mut ring = self.taps.rings[self.slot as usize].lock().expect("ring lock");
        let hdr_len = std::mem::size_of::<CapHdr>();
        let mut n = 0;
        while let Some(item) = ring.next() {
            if item.len() < hdr_len {
                continue;
            }
            let word = |at: usize| u32::from_ne_bytes(item[at..at + 4].try_into().expect("4 bytes"));
            let ts_ns = u64::from_ne_bytes(item[0..8].try_into().expect("8 bytes"));
            let (session, orig_len, len) = (word(8), word(12), word(16) as usize);
            let bytes = item[hdr_len..].get(..len).unwrap_or(&item[hdr_len..]).to_vec();
            f(XdpCopy { ts_ns, session, orig_len, bytes });
            n += 1;
        }
        n
    }
}

impl Drop for ArmedTap {
    fn drop(&mut self) {
        if !self.disarmed {
            let _ = self.stop();
            let _ = self.release();
        }
    }
}
