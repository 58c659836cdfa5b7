//! `parallel-<name>`: a parallel NF (NFOS-style, an impl of
//! `ferry_parallel::live::registry::RegisteredNf`) hosted in a ferryd chain in live mode
//! (`ferry_parallel::live`): the NF's one ferry thread receives and
//! dispatches, `workers` threads run the handlers as transactions.
//!
//! The chain file gives the NF `threads: 1`. Output port `p` of the NF is
//! its out-link `p`; a frame that arrived on the thread's `i`-th port is NF
//! port `i`, one from another NF is port `ring_port`.
//!
//! SIGTERM (what ferryd sends to stop an NF) and SIGINT stop it cleanly:
//! the packets inside the NF are processed and sent, then the NF's exit
//! handler runs. (ferryd exits right after its SIGTERM and its NFs die with
//! it, so on a chain shutdown that may be cut short; a SIGTERM on its own,
//! or ferryd going away from an NF it did not start, gets the whole drain.)
//!
//! Arguments (`--arg key=value`; these are the host's, the rest go to the
//! NF): `workers=N` (worker threads, default 1), `batch=N` (packets per
//! transaction, 32), `queue=N` (batches queued per worker, 8), `tick_us=N`
//! (tick of idle workers with timers, 10000), `ring_port=P` (0).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use ferry_nf::args::NfArgs;
use ferry_parallel::live::registry::{NfEnv, RegisteredNf};
use ferry_parallel::live::{self, LiveConfig, LiveReport};
use ferry_parallel::runtime::TraceConfig;
use ferry_parallel::stm::Stm;
use ferry_sdk::Waker;

use super::Launch;
use crate::KindError;

/// The host's arguments ([`crate::PARALLEL_HOST_ARGS`], checked, defaults
/// filled in) and the NF's own.
fn split_args(kind: &str, args: &[String]) -> Result<(crate::Values, NfArgs), KindError> {
    let is_host = |a: &String| {
        let key = ferry_nf::model::split_key_value(a).map_or(a.as_str(), |(k, _)| k);
        crate::PARALLEL_HOST_ARGS.iter().any(|h| h.key == key)
    };
    let (host_args, own): (Vec<String>, Vec<String>) = args.iter().cloned().partition(is_host);
    let host = crate::Values::of(kind, &host_args)?;
    let own = NfArgs::parse(&own).map_err(|e| KindError::Invalid {
        kind: kind.into(),
        message: e.to_string(),
        index: None,
    })?;
    Ok((host, own))
}

/// Checks parallel NF `N`'s own arguments by building it once, on one
/// worker, for an NF with `out_links` out-links (as the NF host would:
/// NF port `p` is out-link `p`); an error names the argument at fault.
pub fn check_built<N: RegisteredNf>(kind: &str, args: &[String], out_links: usize) -> Result<(), KindError> {
    let (_, own) = split_args(kind, args)?;
    let invalid = |message: String, index| KindError::Invalid { kind: kind.into(), message, index };
    let stm = Stm::new(1).map_err(|e| invalid(e.to_string(), None))?;
    let ports = u16::try_from(out_links.max(1)).map_err(|_| invalid("too many out-links".into(), None))?;
    match N::build(&stm, &NfEnv { ports, workers: 1 }, &own) {
        Ok(_) => Ok(()),
        Err(e) => {
            let index =
                e.key().and_then(|key| args.iter().position(|a| a.split_once('=').map(|(k, _)| k) == Some(key)));
            Err(invalid(e.to_string(), index))
        }
    }
}

/// Runs parallel NF `N` until ferryd stops it.
pub fn serve<N: RegisteredNf>(l: &Launch) -> Result<()> {
    // The catalog declares the host's arguments (types and defaults) and
    // knows the NF's keys; the NF checks its own values as it is built.
    let (kind, args) = (l.kind, l.args);
    let (host, nf_args) = split_args(kind, args)?;
    let workers = host.u64("workers")? as usize;
    let batch = host.u64("batch")? as usize;
    let queue = host.u64("queue")? as usize;
    let tick_ns = host.u64("tick_us")?.saturating_mul(1000);
    let ring_port = u16::try_from(host.u64("ring_port")?).map_err(|_| anyhow!("ring_port: not a port"))?;
    let stm = Stm::new(workers).with_context(|| format!("workers={workers}"))?;
    // Before any thread exists (connect starts one), so all inherit it.
    let signals = block_stop_signals()?;
    let names = live::counter_names(workers, N::COUNTERS);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let nf = l.hello.connect(&names)?;
    if nf.threads() != 1 {
        bail!("{kind}: give the NF `threads: 1` (it has {}); `workers=N` sets its cores", nf.threads());
    }
    let mut th = nf.thread(0)?;
    let stop = Arc::new(AtomicBool::new(false));
    watch_stop_signals(signals, stop.clone(), th.waker())?;
    let ports = u16::try_from(th.out_links().max(1)).map_err(|_| anyhow!("too many out-links"))?;
    let env = NfEnv { ports, workers };
    let (parallel_nf, setup) = N::build(&stm, &env, &nf_args)?;
    let config = LiveConfig {
        run: TraceConfig {
            workers,
            batch_size: batch,
            ports,
            periodic_ns: setup.periodic_ns,
            packet_sets: setup.packet_sets,
        },
        queued_batches: queue,
        tick_ns,
        ring_port,
    };
    let report = live::run_live_until(&stm, &parallel_nf, &config, &mut th, &stop)?;
    log_report(kind, nf.name(), &report);
    Ok(())
}

/// What the NF did, in the log, when it stops.
fn log_report(kind: &str, nf: &str, report: &LiveReport) {
    let c = &report.counters;
    tracing::info!(
        "{kind} ({nf}): stopped; received {} outputs {} sent {} no_frame {} bad_port {} commits {} aborts {} \
         per worker {:?}",
        c.received,
        c.outputs,
        c.sent,
        c.no_frame,
        c.bad_port,
        c.commits,
        c.aborts,
        c.per_worker
    );
    let own: Vec<String> = report.nf_counters.iter().map(|(name, v)| format!("{name} {v}")).collect();
    if !own.is_empty() {
        tracing::info!("{kind} ({nf}): {}", own.join(" "));
    }
}

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts
/// later), so that only the watcher thread takes them, with sigwait.
fn block_stop_signals() -> Result<libc::sigset_t> {
    // SAFETY: sigset calls on a set we own; pthread_sigmask on this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            bail!("pthread_sigmask: {}", std::io::Error::from_raw_os_error(rc));
        }
        Ok(set)
    }
}

/// A thread that waits for SIGTERM or SIGINT, then sets `stop` and wakes
/// the chain thread.
fn watch_stop_signals(set: libc::sigset_t, stop: Arc<AtomicBool>, waker: Waker) -> Result<()> {
    std::thread::Builder::new().name("ferry-signals".into()).spawn(move || {
        let mut sig = 0;
        // SAFETY: waits on a valid set; these signals are blocked in every thread.
        while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
        stop.store(true, Ordering::Release);
        waker.wake();
    })?;
    Ok(())
}
