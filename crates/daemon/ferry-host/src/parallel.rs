//! `ferry-host --kind parallel-<name>`: a parallel NF (NFOS-style, from
//! `ferry_parallel::live::registry`) hosted in a ferryd chain in live mode
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
use ferry_parallel::live::registry::{self, NfEnv, NfSetup, NfVisitor};
use ferry_parallel::live::{self, LiveConfig, LiveReport};
use ferry_parallel::runtime::{ParallelNf, RuntimeError, TraceConfig};
use ferry_parallel::stm::Stm;
use ferry_sdk::{Nf, NfThread, Waker};

/// Runs parallel NF `name` until ferryd stops it.
pub fn serve(name: &str, kind: &str, args: &[String]) -> Result<()> {
    // The catalog declares the host's arguments (types and defaults) and
    // knows the NF's keys; the NF checks its own values as it is built.
    ferry_catalog::check(kind, args)?;
    let is_host = |a: &String| {
        let key = ferry_nf::model::split_key_value(a).map_or(a.as_str(), |(k, _)| k);
        ferry_catalog::PARALLEL_HOST_ARGS.iter().any(|h| h.key == key)
    };
    let (host_args, own): (Vec<String>, Vec<String>) = args.iter().cloned().partition(is_host);
    let host = ferry_catalog::Values::of(kind, &host_args)?;
    let nf_args = NfArgs::parse(&own)?;
    let workers = host.u64("workers")? as usize;
    let batch = host.u64("batch")? as usize;
    let queue = host.u64("queue")? as usize;
    let tick_ns = host.u64("tick_us")?.saturating_mul(1000);
    let ring_port = u16::try_from(host.u64("ring_port")?).map_err(|_| anyhow!("ring_port: not a port"))?;
    let stm = Stm::new(workers).with_context(|| format!("workers={workers}"))?;
    // Before any thread exists (connect starts one), so all inherit it.
    let signals = block_stop_signals()?;
    let names = live::counter_names(workers, registry::counter_names(name)?);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let nf = Nf::connect_from_env_with(&names)?;
    if nf.threads() != 1 {
        bail!("parallel-{name}: give the NF `threads: 1` (it has {}); `workers=N` sets its cores", nf.threads());
    }
    let mut th = nf.thread(0)?;
    let stop = Arc::new(AtomicBool::new(false));
    watch_stop_signals(signals, stop.clone(), th.waker())?;
    let ports = u16::try_from(th.out_links().max(1)).map_err(|_| anyhow!("too many out-links"))?;
    let env = NfEnv { ports, workers };
    let host = Host { stm: &stm, th: &mut th, stop: &stop, workers, batch, queue, tick_ns, ring_port, ports };
    let report = registry::build(name, &stm, &env, &nf_args, host)??;
    let c = &report.counters;
    tracing::info!(
        "parallel-{name} ({}): stopped; received {} outputs {} sent {} no_frame {} bad_port {} commits {} aborts {} \
         per worker {:?}",
        nf.name(),
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
        tracing::info!("parallel-{name} ({}): {}", nf.name(), own.join(" "));
    }
    Ok(())
}

/// Runs the NF the table built on this thread.
struct Host<'h> {
    stm: &'h Stm,
    th: &'h mut NfThread,
    stop: &'h AtomicBool,
    workers: usize,
    batch: usize,
    queue: usize,
    tick_ns: u64,
    ring_port: u16,
    ports: u16,
}

impl NfVisitor for Host<'_> {
    type Output = Result<LiveReport, RuntimeError>;

    fn visit<N: ParallelNf>(self, nf: N, setup: NfSetup) -> Self::Output {
        let config = LiveConfig {
            run: TraceConfig {
                workers: self.workers,
                batch_size: self.batch,
                ports: self.ports,
                periodic_ns: setup.periodic_ns,
                packet_sets: setup.packet_sets,
            },
            queued_batches: self.queue,
            tick_ns: self.tick_ns,
            ring_port: self.ring_port,
        };
        live::run_live_until(self.stm, &nf, &config, self.th, self.stop)
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
