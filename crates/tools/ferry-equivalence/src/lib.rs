//! The parallel runtime's test harness, kept out of the runtime itself.
//!
//! - [`equivalence`]: runs an NF over a generated trace on one worker and on
//!   several, and checks the runs equivalent per flow (NFOS's promise that
//!   a parallel NF behaves like its sequential program).
//! - [`workloads`]: the NFOS case-study NFs over their traces, with their
//!   control runs, for `ferry bench parallel` and the tests.

pub mod by_name;
pub mod equivalence;
pub mod workloads;
