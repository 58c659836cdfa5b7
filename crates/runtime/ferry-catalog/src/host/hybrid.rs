//! `efw`, `elb`, `edpi`, `enat`: a hybrid NF's control plane in a
//! ferryd chain. ferryd started it as the NF's unprivileged user and
//! attached its fast path; the welcome carries the fast path's maps as
//! fds. It re-applies the NF's configuration (so a restarted control
//! plane converges on the file), runs the NF's timers (connection and
//! bypass-rule expiry, feedback weights) and publishes the fast path's
//! counters, summed over CPUs, and its own as the NF's counters. Its one
//! NF thread wakes for the timers and answers ferryd's pauses; the eDPI's
//! and eNAT's also receive their slow path's frames (on the port's AF_XDP socket
//! ferryd registered in the fast path's socket map), handle them and
//! send them on out-link 0: their kernel hop, or a split NAT's miss port
//! (back through the loop device), or, for a NAT that runs whole as a
//! process, the next hop of its chain. SIGHUP (`ferry chain reload`)
//! makes it read its file again and write what changed into the tables.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Result};
use ferry_bpf::abi::{SlowMeta, SLOW_MISS};
use ferry_bpf::hybrid::HybridMaps;
use ferry_evnf::hybrid::{HybridNf, SlowVerdict};
use ferry_evnf::types::HybridType;
use ferry_evnf::EvnfError;
use ferry_sdk::{NfThread, Packet};
use ferry_sys::monotonic_ns;

use super::{Launch, BURST};

/// How often the thread wakes to run timers and publish counters.
const WAKE_EVERY: Duration = Duration::from_millis(100);

/// The control plane's configuration file and what became of its reloads.
struct Config<'a> {
    kind: &'a str,
    file: PathBuf,
    /// [`ferry_evnf::types::RELOAD_COUNTERS`]: applied, refused.
    reloads: [u64; 2],
}

impl Config<'_> {
    /// Reads the file again; the control plane takes what may change and
    /// writes it into the tables. A refused file changes nothing, or (if
    /// writing the tables failed midway) leaves the NF on a mix that the
    /// next good reload replaces.
    fn reload(&mut self, control: &mut dyn HybridNf, maps: &mut HybridMaps) {
        let result = ferry_evnf::chained::config(self.kind, &self.file)
            .map_err(EvnfError::Config)
            .and_then(|spec| control.reconfigure(&spec))
            .and_then(|()| control.install(maps));
        match result {
            Ok(()) => self.reloads[0] += 1,
            Err(e) => {
                tracing::warn!("{}: reloading {}: {e}", control.name(), self.file.display());
                self.reloads[1] += 1;
            }
        }
    }
}

pub fn serve(l: &Launch) -> Result<()> {
    let (kind, args) = (l.kind, l.args);
    super::reload::catch_hangups();
    let t = ferry_evnf::types::find(kind).ok_or_else(|| anyhow!("{kind}: not a hybrid NF type"))?;
    let values = crate::Values::of(kind, args)?;
    let file = values.text("config").unwrap_or_default();
    let spec = ferry_evnf::chained::config(kind, Path::new(file)).map_err(|e| anyhow!(e))?;
    let nf = l.hello.connect(&ferry_evnf::types::counters(t))?;
    let mut maps = HybridMaps::from_fds(nf.take_maps())?;
    let mut control = ferry_evnf::chained::control_plane(kind, &spec, &maps)?;
    control.install(&mut maps)?;
    let th = nf.thread(0)?;
    let config = Config { kind, file: PathBuf::from(file), reloads: [0; 2] };
    run(th, t, control.as_mut(), &mut maps, config)
}

/// Serves timers and reloads until ferryd stops the NF.
fn run(
    mut th: NfThread,
    t: &HybridType,
    control: &mut dyn HybridNf,
    maps: &mut HybridMaps,
    mut config: Config,
) -> Result<()> {
    let _ticker = th.waker().every(WAKE_EVERY);
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut next_tick = 0u64;
    // Only the slow path's socket feeds the thread.
    let meta = SlowMeta { reason: SLOW_MISS, ..Default::default() };
    let mut reloads = super::reload::Reloads::default();
    loop {
        if th.recv_burst(&mut burst, BURST).is_err() {
            return Ok(());
        }
        for mut pkt in burst.drain(..) {
            match control.on_slow_path(maps, pkt.data_mut(), meta) {
                // Out-link 0 (placement gives it exactly one).
                SlowVerdict::Reinject => th.send(pkt, 0),
                SlowVerdict::Drop => th.drop_packet(pkt),
            }
        }
        if reloads.due() {
            config.reload(control, maps);
        }
        let now = monotonic_ns();
        if now >= next_tick {
            control.on_tick(maps, now).map_err(|e| anyhow!("{}: {e}", control.name()))?;
            next_tick = now + control.tick_interval().as_nanos() as u64;
        }
        // Once per burst (or wake-up), so the counters are current as soon
        // as a burst is handled.
        publish(&th, t, control, maps, config.reloads);
    }
}

/// The fast paths' counters (packets, summed over CPUs; 0 for a counter
/// that could not be read), then the control plane's, in the order the
/// type declares them, then the reloads'.
fn publish(th: &NfThread, t: &HybridType, control: &dyn HybridNf, maps: &HybridMaps, reloads: [u64; 2]) {
    let mut values: Vec<u64> = Vec::new();
    for f in t.fast_paths {
        let counters = maps.counters(*f).unwrap_or_default();
        values.extend((0..f.counter_names().len()).map(|i| counters.get(i).map_or(0, |(_, c)| c.packets)));
    }
    values.extend(control.control_counters());
    values.extend(reloads);
    for (i, v) in values.into_iter().enumerate() {
        th.set_nf_counter(i, v);
    }
}
