//! `ferry nf serve --kind efw|elb|edpi|enat`: a hybrid NF's control plane in a
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
//! process, the next hop of its chain.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Result};
use ferry_bpf::abi::{SlowMeta, SLOW_MISS};
use ferry_bpf::evnf::EvnfMaps;
use ferry_evnf::hybrid::{monotonic_ns, HybridNf, SlowVerdict};
use ferry_evnf::types::HybridType;
use ferry_sdk::{Nf, NfThread, Packet};

/// How often the thread wakes to run timers and publish counters.
const WAKE_EVERY: Duration = Duration::from_millis(100);

const BURST: usize = 32;

pub fn serve(kind: &str, args: &[String]) -> Result<()> {
    let t = ferry_evnf::types::find(kind).ok_or_else(|| anyhow!("{kind}: not a hybrid NF type"))?;
    let values = ferry_catalog::Values::of(kind, args)?;
    let file = values.text("config").unwrap_or_default();
    let spec = ferry_evnf::chained::config(kind, Path::new(file)).map_err(|e| anyhow!(e))?;
    let nf = Nf::connect_from_env_with(&ferry_evnf::types::counters(t))?;
    let mut maps = EvnfMaps::from_fds(nf.take_maps())?;
    let mut control = ferry_evnf::chained::control_plane(kind, &spec, &maps)?;
    control.install(&mut maps)?;
    let th = nf.thread(0)?;
    run(th, t, control.as_mut(), &mut maps)
}

/// Serves timers until ferryd stops the NF.
fn run(mut th: NfThread, t: &HybridType, control: &mut dyn HybridNf, maps: &mut EvnfMaps) -> Result<()> {
    let _ticker = th.waker().every(WAKE_EVERY);
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut next_tick = 0u64;
    // Only the slow path's socket feeds the thread.
    let meta = SlowMeta { reason: SLOW_MISS, ..Default::default() };
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
        let now = monotonic_ns();
        if now >= next_tick {
            control.on_tick(maps, now).map_err(|e| anyhow!("{}: {e}", control.name()))?;
            next_tick = now + control.tick_interval().as_nanos() as u64;
        }
        // Once per burst (or wake-up), so the counters are current as soon
        // as a burst is handled.
        publish(&th, t, control, maps);
    }
}

/// The fast paths' counters (packets, summed over CPUs; 0 for a counter
/// that could not be read), then the control plane's, in the order the
/// type declares them.
fn publish(th: &NfThread, t: &HybridType, control: &dyn HybridNf, maps: &EvnfMaps) {
    let mut values: Vec<u64> = Vec::new();
    for f in t.fast_paths {
        let counters = maps.counters(*f).unwrap_or_default();
        values.extend((0..f.counter_names().len()).map(|i| counters.get(i).map_or(0, |(_, c)| c.packets)));
    }
    values.extend(control.control_counters());
    for (i, v) in values.into_iter().enumerate() {
        th.set_nf_counter(i, v);
    }
}
