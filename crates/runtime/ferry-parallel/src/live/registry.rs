//! Parallel NFs by name, for hosts that pick one at run time (`ferry-host
//! serve --kind parallel-<name>`, benchmarks).
//!
//! An NF joins the table with an impl of [`RegisteredNf`] (how to build it
//! from `key=value` arguments, and its packet sets and timer), its name in
//! [`NAMES`] and one match arm in [`build`]. The table hands the built
//! NF to an [`NfVisitor`], which is generic over the NF type: that is how a
//! host runs NFs of different types (and set-state types) through one
//! table.
//!
//! The table: `counter` ([`super::counter`]) and the six NFs of
//! [`crate::nfs`] (`nat`, `bridge`, `firewall`, `maglev`, `policer`,
//! `anti_ddos`; their arguments and port mapping: [`super::nfs_args`]).

use ferry_nf::args::{ArgError, NfArgs};
use ferry_nf::model::Element;

use super::counter::DstCounter;
use crate::nfs::anti_ddos::AntiDdos;
use crate::nfs::bridge::Bridge;
use crate::nfs::firewall::Firewall;
use crate::nfs::maglev::Maglev;
use crate::nfs::nat::Nat;
use crate::nfs::policer::Policer;
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
    /// The argument keys it takes (all it accepts; the host adds its own).
    const ARGS: &'static [&'static str];
    /// The names [`ParallelNf::named_counters`] gives, in its order.
    const COUNTERS: &'static [&'static str] = &[];
    /// Its elements and their offloadability (see `ferry_nf::model`).
    const ELEMENTS: &'static [Element];

    /// Builds the NF, registering its data structures with `stm`.
    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError>;
}

/// What to do with the NF the table built (run it live, over a trace...).
pub trait NfVisitor {
    type Output;
    fn visit<N: ParallelNf>(self, nf: N, setup: NfSetup) -> Self::Output;
}

fn visit<N: RegisteredNf, V: NfVisitor>(
    stm: &Stm,
    env: &NfEnv,
    args: &NfArgs,
    visitor: V,
) -> Result<V::Output, ArgError> {
    let (nf, setup) = N::build(stm, env, args)?;
    Ok(visitor.visit(nf, setup))
}

/// Names of the NFs in the table.
pub const NAMES: &[&str] = &["counter", "nat", "bridge", "firewall", "maglev", "policer", "anti_ddos"];

/// Builds NF `name` with `args` and hands it to `visitor`. The table: one
/// match arm per NF (its type implements [`RegisteredNf`]).
pub fn build<V: NfVisitor>(
    name: &str,
    stm: &Stm,
    env: &NfEnv,
    args: &NfArgs,
    visitor: V,
) -> Result<V::Output, ArgError> {
    match name {
        "counter" => visit::<DstCounter, V>(stm, env, args, visitor),
        "nat" => visit::<Nat, V>(stm, env, args, visitor),
        "bridge" => visit::<Bridge, V>(stm, env, args, visitor),
        "firewall" => visit::<Firewall, V>(stm, env, args, visitor),
        "maglev" => visit::<Maglev, V>(stm, env, args, visitor),
        "policer" => visit::<Policer, V>(stm, env, args, visitor),
        "anti_ddos" => visit::<AntiDdos, V>(stm, env, args, visitor),
        _ => Err(ArgError::UnknownNf { name: name.to_string(), known: NAMES.join(", ") }),
    }
}

/// What an NF of the table is, known before it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfDescription {
    pub summary: &'static str,
    /// Its argument keys ([`RegisteredNf::ARGS`]).
    pub args: &'static [&'static str],
    /// Its own counters ([`RegisteredNf::COUNTERS`]).
    pub counters: &'static [&'static str],
    /// Its elements ([`RegisteredNf::ELEMENTS`]).
    pub elements: &'static [Element],
}

fn describe_nf<N: RegisteredNf>() -> NfDescription {
    NfDescription { summary: N::SUMMARY, args: N::ARGS, counters: N::COUNTERS, elements: N::ELEMENTS }
}

/// NF `name`'s description.
pub fn describe(name: &str) -> Result<NfDescription, ArgError> {
    Ok(match name {
        "counter" => describe_nf::<DstCounter>(),
        "nat" => describe_nf::<Nat>(),
        "bridge" => describe_nf::<Bridge>(),
        "firewall" => describe_nf::<Firewall>(),
        "maglev" => describe_nf::<Maglev>(),
        "policer" => describe_nf::<Policer>(),
        "anti_ddos" => describe_nf::<AntiDdos>(),
        _ => return Err(ArgError::UnknownNf { name: name.to_string(), known: NAMES.join(", ") }),
    })
}

/// The names of NF `name`'s own counters: a live host declares them when
/// it connects, before the NF is built.
pub fn counter_names(name: &str) -> Result<&'static [&'static str], ArgError> {
    describe(name).map(|d| d.counters)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Names;

    impl NfVisitor for Names {
        type Output = (usize, Option<u64>);
        fn visit<N: ParallelNf>(self, _nf: N, setup: NfSetup) -> (usize, Option<u64>) {
            (setup.packet_sets.rules().len(), setup.periodic_ns)
        }
    }

    #[test]
    fn the_table_builds_by_name_and_rejects_unknown_names_and_arguments() {
        let stm = Stm::new(2).unwrap();
        let env = NfEnv { ports: 2, workers: 2 };
        let args = NfArgs::parse(&["buckets=64"]).unwrap();
        let (rules, periodic) = build("counter", &stm, &env, &args, Names).unwrap();
        assert!(rules > 0);
        assert_eq!(periodic, None);
        assert!(matches!(build("nope", &stm, &env, &args, Names), Err(ArgError::UnknownNf { .. })));
        let bad = NfArgs::parse(&["colour=red"]).unwrap();
        assert!(matches!(build("counter", &stm, &env, &bad, Names), Err(ArgError::Unknown { .. })));
        assert!(matches!(NfArgs::parse(&["novalue"]), Err(ArgError::NotKeyValue { .. })));
    }

    struct CounterNames;

    impl NfVisitor for CounterNames {
        type Output = Vec<&'static str>;
        fn visit<N: ParallelNf>(self, nf: N, _setup: NfSetup) -> Vec<&'static str> {
            nf.named_counters().into_iter().map(|(name, _)| name).collect()
        }
    }

    #[test]
    fn every_nf_names_the_counters_it_declares_in_order() {
        let env = NfEnv { ports: 2, workers: 1 };
        for name in NAMES {
            let stm = Stm::new(1).unwrap();
            let args = NfArgs::parse(&if *name == "maglev" { vec!["vip=198.18.0.1"] } else { vec![] }).unwrap();
            let named = build(name, &stm, &env, &args, CounterNames).unwrap();
            assert_eq!(named, counter_names(name).unwrap(), "{name}");
            if *name != "counter" {
                assert!(named.len() >= 6, "{name} publishes its counters: {named:?}");
            }
            // Declared next to the live mode's own and per-worker counters:
            // no name twice, within ferry's limit, room for 2 workers.
            let declared = super::super::counter_names(64, &named);
            assert!(declared.len() <= ferry_sdk::MAX_NF_COUNTERS, "{name}: {declared:?}");
            assert!(declared.contains(&"w1_packets".to_string()), "{name}: {declared:?}");
            let unique: std::collections::HashSet<&String> = declared.iter().collect();
            assert_eq!(unique.len(), declared.len(), "{name}: a name twice in {declared:?}");
        }
        assert!(matches!(counter_names("nope"), Err(ArgError::UnknownNf { .. })));
    }

    #[test]
    fn a_host_takes_its_keys_and_leaves_the_rest() {
        let mut args = NfArgs::parse(&["workers=2", "buckets=8", "batch=16"]).unwrap();
        let host = args.take(&["workers", "batch"]);
        assert_eq!(host.u64_or("workers", 1), Ok(2));
        assert_eq!(host.u64_or("batch", 32), Ok(16));
        assert_eq!(args.get("buckets"), Some("8"));
        assert_eq!(args.get("workers"), None);
        assert!(args.u64_or("buckets", 0).is_ok());
        assert!(NfArgs::parse(&["n=x"]).unwrap().u64_or("n", 0).is_err());
    }
}
