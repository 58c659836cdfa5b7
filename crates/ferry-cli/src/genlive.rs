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
    /// Offset of the UDP source port and the range to cycle, if any.
    pub sport: Option<(u16, u16, u16)>,
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

/// Frames per BPF_PROG_RUN call when not rate limited. Each call sets up
/// and tears down a page pool, which costs tens of milliseconds here, so
/// calls must be long: about a second at this machine's rate.
const CHUNK: u64 = 1 << 22;
const MIN_CHUNK: u64 = 1024;
/// Frames the kernel runs per batch before flushing redirects (its maximum).
const LIVE_BATCH: u32 = 256;
const CALL_SECONDS: f64 = 0.5;

pub fn run(opts: &LiveGenOptions) -> Result<LiveGenReport> {
    if let Some(cpu) = opts.cpu {
        crate::util::pin_to_cpu(cpu)?;
    }
    let ifindex = crate::util::ifindex(&opts.dev)?;
    let mut prog = LoadedXdp::load(Object::Gen, "ferry_gen")?;
    let (sport_offset, sport_min, sport_count) = opts.sport.unwrap_or((0, 0, 0));
    prog.set_gen_config(GenConfig {
        ifindex,
        stream: opts.stream,
        stamp_offset: opts.stamp_offset.unwrap_or(0),
        sport_offset,
        sport_min,
        sport_count,
        clock_shift: opts.clock_shift,
    })?;
    let fd = prog.program_fd()?;
    let limit = RunLimit::new(opts.duration);
    let start = Instant::now();
    let mut sent = 0u64;
    // Calls are sized from the rate the previous call achieved, so that
    // one lasts about CALL_SECONDS (or what is left of the duration).
    let mut measured_pps = 1e6;
    while !limit.done() {
        let mut chunk = CHUNK;
        let left = opts.duration.map(|d| d.saturating_sub(start.elapsed()).as_secs_f64()).unwrap_or(CALL_SECONDS);
        chunk = chunk.min((measured_pps * left.min(CALL_SECONDS)) as u64).max(MIN_CHUNK);
        if let Some(count) = opts.count {
            if sent >= count {
                break;
            }
            chunk = chunk.min(count - sent);
        }
        if let Some(pps) = opts.rate_pps {
            // Sleep until the schedule allows this chunk.
            let due = Duration::from_secs_f64(sent as f64 / pps as f64);
            let now = start.elapsed();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(5)));
                continue;
            }
            // Rate-limited runs send in bursts of 10 ms worth of traffic:
            // the per-call cost forbids finer pacing. Use `gen xsk` for
            // smooth rates.
            chunk = chunk.min((pps / 100).max(1));
        }
        let call = Instant::now();
        match run_live_frames(fd, &opts.template, chunk as u32, LIVE_BATCH) {
            Ok(()) => {}
            // A stop signal interrupts a long call; what it sent is counted
            // by the program itself.
            Err(_) if crate::util::stop_requested() => break,
            Err(e) => return Err(e).context("BPF_PROG_RUN live frames"),
        }
        sent += chunk;
        measured_pps = chunk as f64 / call.elapsed().as_secs_f64().max(1e-6);
    }
    let seconds = start.elapsed().as_secs_f64();
    let redirected = prog.verdicts()?.packets[4];
    Ok(LiveGenReport {
        dev: opts.dev.clone(),
        frame_len: opts.template.len(),
        sent: redirected,
        seconds,
        pps: redirected as f64 / seconds,
    })
}

impl LiveGenOptions {
    /// Live-generator options from a traffic profile. The BPF generator
    /// varies only the UDP source port (over the profile's source-port
    /// range); all other fields come from the profile's first flow. TCP and
    /// ICMP templates are sent unchanged (no stamp: their checksums would
    /// need rewriting per packet).
    pub fn from_profile(dev: &str, p: &ferry_traffic::TrafficProfile, stream: u16, cpu: Option<usize>) -> Result<Self> {
        use ferry_wire::{build_frame, stamp_offset, FiveTuple, L4Proto};
        let proto: L4Proto = p.proto.into();
        let tuple = FiveTuple {
            src_ip: p.src_ip.start(),
            dst_ip: p.dst_ip.start(),
            src_port: p.src_port.start(),
            dst_port: p.dst_port.start(),
            proto,
        };
        let mut template = vec![0u8; p.frame_len];
        build_frame(&p.frame_spec(), &tuple, None, &mut template)?;
        let udp = proto == L4Proto::Udp;
        let stamp_at = stamp_offset(proto);
        let stamp_offset = (udp && stamp_at + ferry_wire::STAMP_LEN <= p.frame_len).then_some(stamp_at as u16);
        // The UDP source port sits right after a 20-byte IPv4 header.
        let sport = (udp && p.src_port.len() > 1)
            .then(|| (34u16, p.src_port.start(), p.src_port.len().min(u16::MAX as u32) as u16));
        Ok(LiveGenOptions {
            dev: dev.to_string(),
            template,
            stamp_offset,
            sport,
            stream,
            count: p.count,
            duration: p.duration_ns().map(Duration::from_nanos),
            rate_pps: p.rate_pps,
            cpu,
            clock_shift: 0,
        })
    }
}
