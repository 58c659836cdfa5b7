//! NFs written against the handler API ([`crate::runtime::ParallelNf`]):
//! sequential code that the runtime runs on one or many cores.

pub mod anti_ddos;
pub mod bridge;
pub mod firewall;
pub mod maglev;
pub mod nat;
pub mod policer;
