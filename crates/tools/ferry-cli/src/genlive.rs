//! `ferry gen live`: kernel-side generation. A template frame is run through
//! the `ferry_gen` XDP program with BPF_PROG_RUN in live-frames mode; the
//! program stamps it and redirects it out of the device. This is the
//! fastest source this machine has (no copy to user space and back).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_bpf::{run_live_frames, GenConfig, LoadedXdp, Object};
use serde::Serialize;

use crate::util::RunLimit;

/// What the live generator was asked to do.
pub struct LiveGenOptions {
    pub dev: String,
    /// The frame sent (built by the caller from a traffic profile).
    pub template: Vec<u8>,
    /// Offset of the stamp in the template, if it has room for one.
    pub stamp_offset: Option<u16>,
    /// Offset of the UDP port to cycle (the source port, or the
    /// destination port) and its range, if any.
    pub cycled_port: Option<(u16, u16, u16)>,
    pub stream: u16,
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    pub rate_pps: Option<u64>,
    pub cpu: Option<usize>,
    /// Read the clock for the stamp every 2^clock_shift frames.
    pub clock_shift: u16,
}

#[derive(Debug, Serialize)]
pub struct LiveGenReport {
    pub dev: String,
    pub frame_len: usize,
    /// Frames the program redirected (the kernel may still drop some at
    /// the device; the receiver's counters are the truth).
    pub sent: u64,
    pub seconds: f64,
    pub pps: f64,
}

/// Most program runs per BPF_PROG_RUN call. Each call sets up and tears
/// down a page pool, which costs tens of milliseconds here, so calls must
/// be long; pacing and the frame limit are enforced inside the program.
const CHUNK: u64 = 1 << 24;
/// Index of XDP_REDIRECT in the verdict counters: frames really sent.
const XDP_REDIRECT: usize = 4;
const MIN_CHUNK: u64 = 1024;
/// Frames the kernel runs per batch before flushing redirects. A veth
/// peer's XDP receive ring holds 256 frames: a paced or counted run uses 64
/// so that no frame is lost at the device; a flat-out run uses the kernel's
/// maximum, 256, because fewer flushes mean fewer wake-ups of the receiver
/// (at overload the receiver's rate is what is measured anyway).
const PACED_BATCH: u32 = 64;
const FLAT_OUT_BATCH: u32 = 256;
const CALL_SECONDS: f64 = 0.5;

/// How much of `template` the program writes back into every frame: the
/// Ethernet and IPv4 headers, and the UDP or TCP header after them (a
/// device under test that rewrites them would otherwise get its own output
/// back from the recycled page). A template the generator cannot restore
/// (VLAN, IP options) is said so once.
fn headers_len(template: &[u8]) -> u32 {
    use ferry_bpf::abi::{GEN_HEADERS_IP, GEN_HEADERS_TCP, GEN_HEADERS_UDP};
    let plain = |f: &ferry_wire::flow::Flow| f.is_ipv4() && f.l4_offset == Some(GEN_HEADERS_IP as usize);
    let len = match ferry_wire::flow::parse(template) {
        Ok(f) if plain(&f) && f.proto == 17 => GEN_HEADERS_UDP,
        Ok(f) if plain(&f) && f.proto == 6 && template.len() >= GEN_HEADERS_TCP as usize => GEN_HEADERS_TCP,
        Ok(f) if plain(&f) => GEN_HEADERS_IP,
        _ => 0,
    };
    if len == 0 {
        eprintln!("ferry: gen live: this template's headers are not written back into each frame");
    }
    len
}

pub fn run(opts: &LiveGenOptions) -> Result<LiveGenReport> {
    // The program keeps its sequence, pacing and limit state per CPU, so
    // the thread must stay on one CPU for the whole run.
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = opts.cpu.unwrap_or_else(|| unsafe { libc::sched_getcpu() }.max(0) as usize);
    ferry_sys::pin_thread(cpu)?;
    let ifindex = crate::util::ifindex(&opts.dev)?;
    let mut prog = LoadedXdp::load(Object::Gen, "ferry_gen")?;
    let (sport_offset, sport_min, sport_count) = opts.cycled_port.unwrap_or((0, 0, 0));
    prog.set_gen_config(
        GenConfig {
            ifindex,
            stream: opts.stream,
            stamp_offset: opts.stamp_offset.unwrap_or(0),
            sport_offset,
            sport_min,
            sport_count,
            clock_shift: opts.clock_shift,
            interval_ns: opts.rate_pps.map_or(0, |pps| (1e9 / pps.max(1) as f64) as u64),
            limit: opts.count.unwrap_or(0),
            ..GenConfig::default()
        }
        .with_headers(&opts.template, headers_len(&opts.template)),
    )?;
    let fd = prog.program_fd()?;
    let batch = if opts.rate_pps.is_some() || opts.count.is_some() { PACED_BATCH } else { FLAT_OUT_BATCH };
    let limit = RunLimit::new(opts.duration);
    let start = Instant::now();
    // Calls are sized from the run rate the previous call achieved, so that
    // one lasts about CALL_SECONDS (or what is left of the duration).
    let mut runs_per_sec = 1e6;
    loop {
        let left = opts.duration.map(|d| d.saturating_sub(start.elapsed()).as_secs_f64()).unwrap_or(CALL_SECONDS);
        let chunk = ((runs_per_sec * left.min(CALL_SECONDS)) as u64).clamp(MIN_CHUNK, CHUNK);
        let call = Instant::now();
        match run_live_frames(fd, &opts.template, chunk as u32, batch) {
            Ok(()) => {}
            // A stop signal interrupts a long call; what it sent is counted
            // by the program itself.
            Err(_) if crate::util::stop_requested() => break,
            Err(e) => return Err(e).context("BPF_PROG_RUN live frames"),
        }
        runs_per_sec = chunk as f64 / call.elapsed().as_secs_f64().max(1e-6);
        if limit.done() {
            break;
        }
        if let Some(count) = opts.count {
            if prog.verdicts()?.packets[XDP_REDIRECT] >= count {
                break;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let sent = prog.verdicts()?.packets[XDP_REDIRECT];
    Ok(LiveGenReport {
        dev: opts.dev.clone(),
        frame_len: opts.template.len(),
        sent,
        seconds,
        pps: sent as f64 / seconds,
    })
}

impl LiveGenOptions {
    /// Live-generator options from a traffic profile. The BPF generator
    /// varies one UDP port: the source port over the profile's source-port
    /// range, or, when that is one port, the destination port over its
    /// range (to spread frames over rules that match on it); all other
    /// fields come from the profile's first flow. TCP, ICMP and IPv6
    /// templates are sent unchanged (no stamp: their checksums, IPv6 UDP's
    /// included, would need rewriting per packet; `ferry gen` over
    /// AF_XDP stamps them).
    pub fn from_profile(dev: &str, p: &ferry_traffic::TrafficProfile, stream: u16, cpu: Option<usize>) -> Result<Self> {
        use ferry_wire::flow::IpVersion;
        use ferry_wire::{stamp_offset, L4Proto};
        let proto: L4Proto = p.proto.into();
        let template = p.first_frame()?;
        let udp = proto == L4Proto::Udp && p.version() == IpVersion::V4;
        let stamp_at = stamp_offset(p.version(), proto);
        let stamp_offset = (udp && stamp_at + ferry_wire::STAMP_LEN <= p.frame_len).then_some(stamp_at as u16);
        // build_frame writes a 20-byte IPv4 header; the UDP source port is
        // the first field after it.
        let sport_at = (ferry_wire::ethernet::ETH_HEADER_LEN + ferry_wire::ipv4::IPV4_MIN_HEADER_LEN) as u16;
        let range = |at: u16, r: &ferry_traffic::PortRange| (at, r.start(), r.len().min(u16::MAX as u32) as u16);
        let cycled_port = match (udp, p.src_port.len() > 1, p.dst_port.len() > 1) {
            (false, _, _) | (true, false, false) => None,
            (true, true, false) => Some(range(sport_at, &p.src_port)),
            (true, false, true) => Some(range(sport_at + 2, &p.dst_port)),
            (true, true, true) => {
                anyhow::bail!("gen live varies one port: give a range of source or of destination ports")
            }
        };
        Ok(LiveGenOptions {
            dev: dev.to_string(),
            template,
            stamp_offset,
            cycled_port,
            stream,
            count: p.count,
            duration: p.duration_ns().map(Duration::from_nanos),
            rate_pps: p.rate_pps,
            cpu,
            clock_shift: 0,
        })
    }
}
