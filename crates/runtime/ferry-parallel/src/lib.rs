//! Ferry's parallel runtime (NFOS-style): NF authors write sequential
//! handlers; the runtime spreads packet sets over worker cores and keeps
//! aggregate state consistent with software transactions.
//!
//! * [`stm`]: the transaction engine (multi-version, object granularity,
//!   readers never abort writers; the algorithm is documented there).
//! * [`ds`]: the built-in data structures on top of it: `Vector`, `Map`,
//!   `Allocator`, `DistributedObj`.
//! * [`packet_set`]: packet-set definitions (fields per port, symmetric
//!   form) and their keys; [`rss_check`]: whether a NIC's RSS can serve one.
//! * [`runtime`]: the handler trait, batches as transactions, and the
//!   trace-driven runner with its Toeplitz software dispatcher.
//! * [`heap`]: heap bytes per thread, for memory per core.

pub mod ds;
pub mod heap;
#[cfg(not(loom))]
pub mod live;
pub mod nfs;
pub mod packet_set;
pub mod profiler;
pub mod rss_check;
pub mod runtime;
pub mod stm;
mod sync;
