//! Ferry's benchmarks, one module per `ferry bench` subcommand, each
//! measuring Ferry beside what users would run instead, in one run.
//!
//! - [`io`]: the machine's packet-I/O baselines (XDP and AF_XDP);
//! - [`chain`] and [`load`]: chains over ferryd against the kernel's own
//!   ([`kchain`]) and the in-process bound ([`inproc`]);
//! - [`cost`]: the per-frame costs placement weighs, as a cost model;
//! - [`offload`], [`tenant`], [`nsh`], [`firewall`], [`pipeline`], [`evnf`],
//!   [`parallel`], [`realworld`]: the papers' experiments.

pub mod chain;
pub mod cost;
pub mod evnf;
pub mod firewall;
pub mod inproc;
pub mod io;
pub mod ips;
pub mod kchain;
pub mod load;
pub mod nsh;
pub mod offload;
pub mod parallel;
pub mod peers;
pub mod pipeline;
pub mod realworld;
pub mod roundtrip;
pub mod soak;
pub mod tenant;
