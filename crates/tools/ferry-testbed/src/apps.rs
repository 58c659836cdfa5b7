//! Real applications inside testbed namespaces, started and measured for
//! the eVNF benchmarks and end-to-end tests.
//!
//! The service chain of `examples/testbeds/sfc.yaml` is built from these
//! pieces: HTTP clients ([`wrk()`], [`curl_get`], [`curl_many`]) and
//! [`iperf3_client`] flows in `client`, the firewall/LB/DPI under test in
//! `dut` ([`Haproxy`] and [`nft_apply`] as kernel baselines), and [`Nginx`]
//! or [`Iperf3Server`] backends in `b1`/`b2`. [`CpuMeter`] measures the CPU
//! the processes *and* softirq context use (XDP and nftables run in
//! softirq, in no process).
//!
//! Every program runs through [`TestbedNames::exec`] (`ip netns exec`,
//! which execs the program in place, so the child's pid is the program's)
//! in a process group of its own, optionally pinned to one CPU
//! (`sched_setaffinity` between fork and exec; children such as nginx
//! workers inherit it).
//!
//! Servers ([`Nginx`], [`Haproxy`], [`Iperf3Server`]) own their process
//! group and a temporary directory `/tmp/ferry-<app>-…` holding config and
//! logs. Dropping one sends SIGTERM to the group, SIGKILL after a grace
//! period, reaps the leader, waits until no member of the group is left
//! and removes the directory. A small guard process (`sh`, in its own
//! session) kills the group and removes the directory if this process dies
//! without dropping (e.g. SIGKILL), so no server outlives its owner and
//! keeps a deleted namespace alive. `start` returns only once the server listens (its own listening
//! socket, checked in `/proc/<pid>/net/tcp` and `/proc/<pid>/fd`); if it
//! exits first, or does not listen within 5 s, the error carries the tail
//! of its logs.
//!
//! Clients (wrk, iperf3, curl, nft) run to completion under a wall-clock
//! limit with `PR_SET_PDEATHSIG`, and their output is parsed into reports.
//!
//! [`TestbedNames::exec`]: crate::TestbedNames::exec

mod cpu;
mod curl;
mod error;
mod haproxy;
mod iperf;
mod nft;
mod nginx;
mod process;
mod wrk;

pub use cpu::{CpuMeter, CpuReport};
pub use curl::{curl_get, curl_many, curl_many_results, CurlOpts, CurlResult};
pub use error::AppError;
pub use haproxy::{Haproxy, HaproxyOpts};
pub use iperf::{iperf3_client, iperf3_clients, Iperf3Server, IperfJob, IperfOpts, IperfReport};
pub use nft::{nft_apply, nft_counter};
pub use nginx::{Nginx, NginxOpts};
pub use wrk::{parse_wrk_output, wrk, WrkOpts, WrkReport, WrkRun};
