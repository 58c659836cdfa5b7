//! The NF host: the process ferryd starts for each built-in NF of a chain,
//! as the NF's own unprivileged user, with `FERRY_SOCKET` and `FERRY_NF`
//! set. It links the runtime's NFs and the SDK, and nothing of the tools.
//!
//! - [`serve`]: one NF kind, checked against the catalog as the chain file
//!   was; the per-packet NFs, the measurement NFs (`source`, `sink`) and the
//!   forwarding kinds run here;
//! - [`hybrid`]: a hybrid NF's control plane;
//! - [`parallel`]: a parallel NF on worker threads;
//! - [`flow_monitor`]: the flow monitor, exporting to ferryd's flow table;
//! - [`host`]: several `spawn: false` NFs of one chain as threads.

pub mod flow_monitor;
pub mod hybrid;
pub mod parallel;
mod serve;

pub use serve::{host, maglev_table, run_threaded, serve, Hello, EXIT_STOPPED, THREADED};
