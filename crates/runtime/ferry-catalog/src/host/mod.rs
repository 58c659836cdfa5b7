//! Runs an NF of the catalog in the NF host process (`ferry-host`), the
//! process ferryd starts for each built-in NF of a chain, as the NF's
//! own unprivileged user, with `FERRY_SOCKET` and `FERRY_NF` set.
//!
//! Each catalog entry names the function that runs its kind ([`Serve`]);
//! [`serve`] checks a kind's arguments as the chain file was checked and
//! calls it. The functions by model:
//! * per-packet NFs, alone or several joined with `+` (`arp-responder+icmp-echo`,
//!   arguments of each separated by `--`): [`serve_packet`]; a responder's
//!   replies leave by the arrival port, the others forward on out-link 0;
//! * the flow monitor, which also exports to ferryd's flow table: [`flow_monitor`];
//! * the host's own loops (forwarders, `source`, `sink`, Maglev, the tenant
//!   router): [`loops`];
//! * NFs placement fused into one NF's threads: [`fused`];
//! * parallel NFs on worker threads: [`parallel`];
//! * a hybrid NF's control plane: [`hybrid`].
//!
//! NFs that read a file (a per-packet NF's rules, a hybrid NF's
//! configuration) read it again on SIGHUP: [`reload`].
//!
//! [`host`] runs several NFs of one chain as threads of one process.

mod alerts;
pub mod flow_monitor;
pub mod fused;
pub mod hybrid;
pub mod loops;
pub mod parallel;
pub mod reload;

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use ferry_nf::{PacketNf, Verdict};
use ferry_sdk::{Nf, NfThread, Packet};

use crate::{find, Runner};

pub use loops::maglev_table;

/// Exit status when ferryd closed the control socket.
pub const EXIT_STOPPED: i32 = 0;

/// Frames taken per receive.
const BURST: usize = 32;

/// What runs one NF kind: a catalog entry's own function.
pub type Serve = fn(&Launch) -> Result<()>;

/// An NF to run: its kind, its arguments (checked against the catalog),
/// and how it says hello to ferryd.
pub struct Launch<'a> {
    pub kind: &'a str,
    pub args: &'a [String],
    pub hello: &'a Hello<'a>,
}

/// How an NF says hello to ferryd: as its environment says (`ferry-host
/// serve`, one NF per process), or by name on a given socket (`ferry-host
/// host`, several NFs as threads of one process).
pub enum Hello<'a> {
    Env,
    Named { socket: &'a Path, name: &'a str },
}

impl Hello<'_> {
    /// Connects to ferryd, declaring the NF's own counters.
    pub fn connect(&self, counters: &[&str]) -> Result<Nf> {
        Ok(match self {
            Hello::Env => Nf::connect_from_env_with(counters)?,
            Hello::Named { socket, name } => Nf::connect(socket, name, counters)?,
        })
    }
}

/// Runs NF kind `kind` until ferryd stops it. Its kind and arguments are
/// checked against the catalog first, as the chain file was.
pub fn serve(kind: &str, args: &[String]) -> Result<()> {
    run(&Launch { kind, args, hello: &Hello::Env })
}

fn run(launch: &Launch) -> Result<()> {
    crate::check(launch.kind, launch.args)?;
    if launch.kind.contains('+') {
        return serve_packet(launch);
    }
    let t = find(launch.kind).ok_or_else(|| anyhow!("{}: not in the catalog", launch.kind))?;
    (t.serve)(launch)
}

/// `ferry-host host`: NFs given as `NAME=KIND[:ARG,ARG...]`, each connecting to
/// ferryd at `socket` as NF NAME and running as threads of this process.
/// The one-process bound of `bench chain` on the SDK's own code: the same
/// NF code, rings and frame pool as `ferry-host serve`, without the processes.
/// Per-packet NFs and the host's own loops run so; the others need a
/// process of their own.
pub fn host(socket: &Path, nfs: &[String]) -> Result<()> {
    let parsed = nfs.iter().map(|spec| hosted_nf(spec)).collect::<Result<Vec<_>>>()?;
    for (name, kind, _) in &parsed {
        match crate::runner(kind)? {
            Runner::Packet { .. } | Runner::HostLoop => {}
            other => bail!("{name}={kind}: runs as a process of its own ({other:?}), not as a thread"),
        }
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = parsed
            .iter()
            .map(|(name, kind, args)| {
                s.spawn(move || {
                    let hello = Hello::Named { socket, name };
                    run(&Launch { kind, args, hello: &hello }).map_err(|e| e.context(name.clone()))
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow!("an NF thread panicked"))?)
    })
}

/// `NAME=KIND[:ARG,ARG...]` as (name, kind, arguments).
fn hosted_nf(spec: &str) -> Result<(String, String, Vec<String>)> {
    let (name, rest) = spec.split_once('=').ok_or_else(|| anyhow!("{spec:?}: NAME=KIND[:ARG,ARG...]"))?;
    if name.is_empty() || rest.is_empty() {
        bail!("{spec:?}: NAME=KIND[:ARG,ARG...]");
    }
    let (kind, args) = rest.split_once(':').unwrap_or((rest, ""));
    let args = args.split(',').filter(|a| !a.is_empty()).map(str::to_string).collect();
    Ok((name.to_string(), kind.to_string(), args))
}

/// A per-packet NF (or several joined with `+`) on each thread. One that
/// reads a file ([`crate::reloads_file`]) builds itself anew from it on
/// SIGHUP, its counters carried over.
pub fn serve_packet(launch: &Launch) -> Result<()> {
    let Runner::Packet { replies } = crate::runner(launch.kind)? else {
        bail!("{}: not a per-packet NF", launch.kind);
    };
    let reloads = crate::reloads_file(launch.kind);
    if reloads {
        reload::catch_hangups();
    }
    let build = || crate::build_packet(launch.kind, launch.args);
    let first = build()?;
    let mut names: Vec<&str> = first.spec().counters.to_vec();
    if reloads {
        names.extend(ferry_evnf::types::RELOAD_COUNTERS);
    }
    for line in crate::loaded(launch.kind, launch.args) {
        tracing::info!("{}: {line}", launch.kind);
    }
    let nf = launch.hello.connect(&names)?;
    let sinks = crate::raises_alerts(launch.kind, launch.args).then(|| alerts::AlertSinks::take(&nf));
    let outs = sinks.map(|s| s.per_thread(nf.threads())).transpose()?.unwrap_or_default();
    nf.run(|th| {
        let pnf = build().expect("built once already");
        let alerts = outs.get(th.index() as usize).and_then(|o| o.lock().expect("alerts lock").take());
        let rebuild = || crate::build_packet(launch.kind, launch.args).map_err(|e| e.to_string());
        packet_nf(th, pnf, replies, reloads.then_some(&rebuild as &dyn Fn() -> _), alerts)
    })?;
    Ok(())
}

/// What a reload builds: the NF anew, or why not.
type Rebuild<'a> = &'a dyn Fn() -> std::result::Result<Box<dyn PacketNf>, String>;

/// How often a reloading or alerting NF's idle thread wakes, to see a
/// SIGHUP or export its alert counts.
const RELOAD_WAKE: std::time::Duration = std::time::Duration::from_millis(100);

fn packet_nf(
    mut th: NfThread,
    mut nf: Box<dyn PacketNf>,
    reply: bool,
    rebuild: Option<Rebuild>,
    mut alerts: Option<alerts::AlertOut>,
) {
    let _ticker = (rebuild.is_some() || alerts.is_some()).then(|| th.waker().every(RELOAD_WAKE));
    let mut reloads = reload::Reloads::default();
    // Counts of the NFs a reload replaced, and the reloads' own.
    let mut carried = vec![0u64; nf.counters().len()];
    let mut outcomes = [0u64; 2];
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for mut pkt in burst.drain(..) {
            match nf.process(pkt.data_mut()) {
                Verdict::Tx if reply => th.reply(pkt),
                Verdict::Tx | Verdict::Pass if th.out_links() > 0 => th.send(pkt, 0),
                Verdict::Tx => th.reply(pkt),
                Verdict::Pass | Verdict::Drop => th.drop_packet(pkt),
            }
        }
        if let Some(out) = &mut alerts {
            out.collect(nf.as_mut());
        }
        if let Some(rebuild) = rebuild.filter(|_| reloads.due()) {
            match rebuild() {
                Ok(new) => {
                    carried.iter_mut().zip(nf.counters()).for_each(|(c, v)| *c += v);
                    nf = new;
                    outcomes[0] += 1;
                }
                Err(e) => {
                    tracing::warn!("{}: reloading: {e}", nf.spec().name);
                    outcomes[1] += 1;
                }
            }
        }
        let counters = nf.counters().iter().zip(&carried).map(|(v, c)| v + c);
        let extra = if rebuild.is_some() { &outcomes[..] } else { &[] };
        for (i, v) in counters.chain(extra.iter().copied()).enumerate() {
            th.set_nf_counter(i, v);
        }
    }
    if let Some(out) = &mut alerts {
        out.export();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosted_nfs_are_name_kind_and_arguments() {
        let nf = |spec: &str| hosted_nf(spec).unwrap();
        assert_eq!(
            nf("src=source:rate=1000,size=64"),
            ("src".into(), "source".into(), vec!["rate=1000".into(), "size=64".into()])
        );
        assert_eq!(nf("nf1=fwd"), ("nf1".into(), "fwd".into(), vec![]));
        assert_eq!(nf("nf1=fwd:"), ("nf1".into(), "fwd".into(), vec![]));
        for bad in ["fwd", "=fwd", "nf1="] {
            assert!(hosted_nf(bad).is_err(), "{bad}");
        }
    }
}
