//! `ferryd`, the monitor (FLASH §3's monitor, on a stock kernel).
//!
//! It alone holds privileges: it creates each trust domain's UMEM and
//! shared region (sealed memfds), the eventfds, the AF_XDP sockets (inside
//! the ports' network namespaces) and the XDP programs: the redirect
//! program, or the stage pipeline running the NFs the orchestrator
//! (`ferry-place`) placed in XDP on the port's device. NFs, which
//! run as unprivileged users with no capabilities, connect to its Unix
//! socket, prove who they are and receive their fds by SCM_RIGHTS. Who an
//! NF is: its uid (SO_PEERCRED) must be its domain's, and either its pid
//! is that of the process ferryd started for it (not yet reaped, so no
//! other process can have it) or, for an NF ferryd does not start, it
//! sends the key only its user can read. ferryd also runs the copy links
//! between domains and, when an NF dies, reclaims every frame it held.
//!
//! # When ferryd itself goes away
//! By default NFs treat the closed control socket as "stop": they leave
//! their data loop and exit (status 0 from `ferry-host`), and NFs
//! ferryd started die with it anyway (PR_SET_PDEATHSIG). A restarted
//! ferryd builds everything anew. With `--persist`, chains outlive
//! ferryd: the NFs keep forwarding and the next ferryd adopts them
//! (`chain::adopt`, `persist`).

mod capture;
mod chain;
mod classify;
pub mod cli;
mod copy_link;
mod devices;
mod domain;
mod fastpath;
mod hybrid;
mod keys;
mod loopdev;
pub mod metrics;
mod netdev;
mod nsh;
pub mod persist;
mod ports;
pub mod preflight;
mod process;
mod server;
mod spawn;
mod tap;
pub mod users;
mod waiting;

pub use server::{run, Daemon, Options};
