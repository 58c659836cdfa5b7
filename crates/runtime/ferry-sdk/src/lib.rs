//! The Rust NF SDK.
//!
//! An NF process calls [`Nf::connect`] (ferryd's socket and the NF's name
//! come from `FERRY_SOCKET` / `FERRY_NF`, which ferryd sets when it starts
//! the NF), then runs one [`NfThread`] per data-path thread:
//!
//! ```no_run
//! let nf = ferry_sdk::Nf::connect_from_env()?;
//! nf.run(|mut th| {
//!     let mut burst = Vec::new();
//!     while th.recv_burst(&mut burst, 32).is_ok() {
//!         for pkt in burst.drain(..) {
//!             th.send(pkt, 0); // out-link 0; `pkt` is gone now
//!         }
//!     }
//! })?;
//! # Ok::<(), ferry_sdk::SdkError>(())
//! ```
//!
//! # Owned packets
//! A received [`Packet`] is a value that owns its UMEM frame. `send`,
//! `reply` and `drop_packet` take it by value, so once a frame is handed on
//! the NF cannot read or write it any more: the compiler enforces FLASH's
//! isolation inside a trust domain. A `Packet` is neither `Clone` nor
//! `Send`; dropping one without a verdict frees its frame and counts it as
//! `drop_nf`.
//!
//! # What the framework does around `recv_burst`
//! Flushes pending sends in batches (partial-batch rule: what does not fit
//! stays queued, nothing is lost), applies backpressure when a downstream
//! ring is over its threshold (sleep or block, per the chain file), returns
//! transmitted frames to the pool, keeps the fill rings topped up, and
//! smart-polls: busy while bursts are large, then (with `spin_us`) for a
//! window sized by the recent idle gaps, then blocks in poll() on the
//! ring's eventfd and the sockets, so an idle NF uses no CPU.

mod connect;
mod error;
mod packet;
mod spin;
mod thread;
mod wait;

pub use connect::Nf;
pub use error::SdkError;
pub use ferry_chain::flow_hash;
/// The most counters an NF may declare when it connects.
pub use ferry_chain::shm::MAX_NF_COUNTERS;
pub use packet::Packet;
pub use thread::{NfThread, Ticker, Waker};
