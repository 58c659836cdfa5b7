//! The parallel NFs by name, for the equivalence workloads, which run
//! each NF over a trace under several runtimes. The table hands the built
//! NF to an [`NfVisitor`], which is generic over the NF type: that is how
//! one workload runs NFs of different types (and set-state types).
//! (ferryd's chains reach the same NFs through the catalog's
//! `parallel-<name>` kinds.)

use ferry_nf::args::{ArgError, NfArgs};
use ferry_parallel::live::counter::DstCounter;
use ferry_parallel::live::registry::{NfEnv, NfSetup, RegisteredNf};
use ferry_parallel::nfs::anti_ddos::AntiDdos;
use ferry_parallel::nfs::bridge::Bridge;
use ferry_parallel::nfs::firewall::Firewall;
use ferry_parallel::nfs::maglev::Maglev;
use ferry_parallel::nfs::nat::Nat;
use ferry_parallel::nfs::policer::Policer;
use ferry_parallel::runtime::ParallelNf;
use ferry_parallel::stm::Stm;

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
        _ => Err(ArgError::Build {
            nf: "parallel",
            message: format!("no parallel NF {name} (known: {})", NAMES.join(", ")),
        }),
    }
}
