//! The runtime: NFOS's programming model over the transaction engine.
//!
//! An NF implements [`ParallelNf`] (handlers for NF init and exit, the
//! first packet of a set, a packet of a live set, a set's expiry, orphan
//! packets and a periodic timer) and keeps its aggregate state in the
//! built-in data structures ([`crate::ds`]). The runtime spreads packet
//! sets over workers by the Toeplitz hash of their fields ([`worker_of`]),
//! so all packets of a set run on one worker, in order, against that
//! worker's copy of the set's state; orphans go round-robin. Each receive
//! batch runs as one transaction: expiries and the timer due at the batch's
//! first packet, then every packet's handler at its own time; a packet
//! whose set was idle for its whole timeout by then first expires the set
//! and then starts a new one (so a set's life does not depend on where
//! batches begin). An abort re-runs the batch from copies of the set
//! states and the packets, and output leaves only after the commit.
//!
//! [`run_trace`] drives it from packets in memory with a software
//! dispatcher ([`run_trace_lockstep`] the same in a fixed interleaving of
//! the workers' transactions, for reproducible conflicts); [`crate::live`] drives the same worker machinery from a
//! ferryd chain (AF_XDP ports and rings).

mod batch;
mod nf;
mod pinned;
mod set_table;
mod trace;

#[cfg(not(loom))]
pub(crate) use batch::{BatchItem, PeriodicTimer, WorkerLoop};
pub use batch::{OutputMode, WorkerReport};
pub use nf::{Ctx, NewSet, OutputPacket, Packet, ParallelNf};
pub use pinned::{run_control_presplit, ControlReport, ControlWork};
#[cfg(not(loom))]
pub(crate) use trace::{run_alone, validate};
pub use trace::{run_trace, run_trace_lockstep, run_trace_presplit, worker_of, TraceConfig, TraceReport};

use crate::stm::StmError;

/// Errors starting or running the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid {field}: {reason}")]
    Config { field: &'static str, reason: &'static str },
    #[error("the run asks for {config} workers but the engine has {engine}")]
    WorkerCount { config: usize, engine: usize },
    #[error(transparent)]
    Stm(#[from] StmError),
    #[error("worker {worker} panicked")]
    WorkerPanicked { worker: usize },
}
