//! What a parallel NF declares so that a host can build it from `key=value`
//! arguments: an impl of [`RegisteredNf`] (its summary, argument keys,
//! counters and elements, and how to build it with its packet sets and
//! timer). The catalog (`ferry-catalog`) makes each impl an NF type,
//! `parallel-<name>`, and runs it in the NF host.
//!
//! The NFs that declare it: `counter` ([`super::counter`]) and the six NFs
//! of [`crate::nfs`] (`nat`, `bridge`, `firewall`, `maglev`, `policer`,
//! `anti_ddos`; their arguments and port mapping: [`super::nfs_args`]).

use ferry_nf::args::{ArgError, NfArgs};
use ferry_nf::model::Element;

use crate::packet_set::PacketSetDef;
use crate::runtime::ParallelNf;
use crate::stm::Stm;

/// What a host knows when it builds an NF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfEnv {
    /// The NF's ports (in live mode: output port `p` is out-link `p`).
    pub ports: u16,
    pub workers: usize,
}

/// An NF's run-time setup besides its state: which packets form sets, and
/// the period of its periodic handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfSetup {
    pub packet_sets: PacketSetDef,
    pub periodic_ns: Option<u64>,
}

/// An NF the table can build.
pub trait RegisteredNf: ParallelNf + Sized {
    /// One line for `ferry nf list`.
    const SUMMARY: &'static str;
    /// What it does with IPv6 and with VLAN tag stacks.
    const IP: &'static str;
    /// The argument keys it takes (all it accepts; the host adds its own).
    const ARGS: &'static [&'static str];
    /// The names [`ParallelNf::named_counters`] gives, in its order.
    const COUNTERS: &'static [&'static str] = &[];
    /// Its elements and their offloadability (see `ferry_nf::model`).
    const ELEMENTS: &'static [Element];

    /// Builds the NF, registering its data structures with `stm`.
    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError>;
}
