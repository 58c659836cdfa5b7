//! Ferry's ring layer: how NFs in separate processes hand frames to each
//! other without a kernel patch.
//!
//! NFs of one trust domain share a UMEM (a sealed memfd, see `ferry-xsk`).
//! A second sealed memfd, the [`ShmRegion`], holds the lock-free structures
//! they exchange frame addresses through:
//!
//! * one [`MpscRing`] of [`Desc`]s per consuming NF thread — many upstream
//!   NFs enqueue, the owner dequeues, with the partial-batch rule (see
//!   [`Producer::enqueue_batch`]) and recovery after a producer is killed
//!   mid-enqueue ([`MpscRing::repair_after_producer_death`]);
//! * one [`FramePool`] of free frame addresses per domain, fronted by a
//!   per-thread [`PoolCache`];
//! * wake-ups through eventfds ([`EventFd`], behind the [`Notify`] trait):
//!   a sleeping consumer is woken on enqueue, a producer blocked on a full
//!   ring is woken when the consumer drains it to its low watermark;
//! * one [`RecordRing`] of variable-length records per NF thread, for
//!   copies of frames a capture takes (never waited on: a full ring
//!   loses and counts the copy).
//!
//! All cross-process state is atomics at offsets in the region; handles
//! cache the validated geometry locally, so a misbehaving peer can garble
//! data but cannot make another process touch memory outside its mapping.
//!
//! Under `--cfg loom` the same ring and pool code runs on loom's atomics
//! over heap memory (`new_heap`); the memfd and eventfd parts are left out.

#[cfg(not(loom))]
mod bench;
mod desc;
mod error;
mod notify;
mod pool;
mod record;
#[cfg(not(loom))]
mod region;
mod repair;
mod ring;
mod sync;

#[cfg(not(loom))]
pub use bench::bench_spsc_cross_core;
pub use desc::Desc;
pub use error::RingError;
#[cfg(not(loom))]
pub use notify::EventFd;
pub use notify::Notify;
pub use pool::{FramePool, PoolCache, PoolConfig};
pub use record::{Record, RecordRing, META_WORDS, RECORD_HEADER_WORDS};
#[cfg(not(loom))]
pub use region::{RegionLayout, SharedWords, ShmRegion, MAX_OBJECTS, MAX_WORDS, REGION_MAGIC, REGION_VERSION};
pub use repair::RepairReport;
pub use ring::{Consumer, MpscRing, Producer, RingConfig};
