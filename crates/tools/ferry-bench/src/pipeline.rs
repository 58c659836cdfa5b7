//! `ferry bench pipeline`: what the run-time programmable stage pipeline
//! costs per element (P4SFC Fig. 6). Each element runs twice on the same
//! 64-byte TCP frame with BPF_PROG_TEST_RUN (the kernel times `repeat`
//! runs): alone in a dedicated XDP program (parse, element, drop), and as
//! a chain [element, forward-drop] through the pipeline (parse, chain and
//! element-control lookups per stage, element, forward). Both use the same
//! element code (`bpf/include/ferry_elements.h`). Also a nine-element
//! chain, which recirculates twice by tail call, and two NFs as placed
//! (the firewall lowered to XDP, the eLB's fast path) on an IPv4 frame
//! beside the same frame in IPv6.

use anyhow::{Context, Result};
use std::net::IpAddr;

use ferry_bpf::hybrid::{HybridElement, HybridPipeline, LB_RING};
use ferry_bpf::pipeline::*;
use ferry_bpf::test_run;
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};
use serde::Serialize;

/// Test runs see the frame arrive on the loopback device.
const LO: u32 = 1;
const DROP_CONFIG: u32 = 9;

#[derive(Debug, Clone, Serialize)]
pub struct ElementCost {
    pub element: String,
    /// Nanoseconds per packet, median of the runs.
    pub dedicated_ns: f64,
    pub pipeline_ns: f64,
    pub overhead_ns: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchPipelineReport {
    pub machine: String,
    pub repeat: u32,
    pub runs: usize,
    pub elements: Vec<ElementCost>,
    /// Nine elements (eight counters and a drop) through four stages.
    pub long_chain_ns: f64,
    /// The same NFs on an IPv4 and an IPv6 frame.
    pub by_ip_version: Vec<VersionCost>,
}

/// One placed NF's cost per packet in each IP version.
#[derive(Debug, Clone, Serialize)]
pub struct VersionCost {
    pub nf: String,
    pub ipv4_ns: f64,
    pub ipv6_ns: f64,
    /// IPv6 over IPv4.
    pub ratio: f64,
}

fn frame() -> Vec<u8> {
    tcp_frame([10, 0, 0, 1].into(), [10, 0, 1, 2].into(), 64)
}

/// A TCP frame from `src`:1000 to `dst`:80 of `len` bytes.
fn tcp_frame(src_ip: IpAddr, dst_ip: IpAddr, len: usize) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: len };
    let t = FiveTuple { src_ip, dst_ip, src_port: 1000, dst_port: 80, proto: L4Proto::Tcp };
    let mut f = vec![0u8; len];
    build_frame(&spec, &t, None, &mut f).expect("a TCP frame");
    f
}

/// The IPv4 and the IPv6 frame the by-version rows compare: the same TCP
/// segment, 64 and 84 bytes (the IPv6 header is 20 bytes longer).
fn frames_by_version() -> [Vec<u8>; 2] {
    let v6 = |s: &str| s.parse::<IpAddr>().expect("valid literal");
    [tcp_frame(v6("10.0.0.1"), v6("10.0.1.2"), 64), tcp_frame(v6("2001:db8::1"), v6("2001:db8:1::2"), 84)]
}

/// The firewall as placement lowers it (counter, ACL, counter) then the
/// hand-off to the next NF's socket (none here: counted and dropped),
/// with 8 rules of each version, none matching: every frame scans all 16
/// to the default, allow.
fn placed_firewall() -> Result<Pipeline> {
    let mut p = Pipeline::load()?;
    let mut text: String =
        (0..8).map(|i| format!("deny src 10.99.{i}.0/24 dport 80\ndeny src 2001:db8:99:{i}::/64 dport 80\n")).collect();
    text += "default allow\n";
    let file = std::env::temp_dir().join(format!("ferry-bench-fw-{}.rules", std::process::id()));
    std::fs::write(&file, text)?;
    let lowering = ferry_place::lower("firewall", &[file.display().to_string()]).map_err(anyhow::Error::msg);
    std::fs::remove_file(&file)?;
    let path = [ferry_place::OffloadedNf { name: "fw".into(), kind: "firewall".into(), lowering: lowering? }];
    ferry_place::install(&mut p, 1, LO, &path, &[2], ferry_place::Target::Xsk { nf: 3 })?;
    Ok(p)
}

/// The eLB's fast path with a VIP of each version on port 80, one backend
/// each; the timed frames hit a tracked connection (the first run made it).
fn elb() -> Result<HybridPipeline> {
    let mut ev = HybridPipeline::load()?;
    for (vip_id, vip, backend) in [(0, "10.0.1.2", "10.9.0.2"), (1, "2001:db8:1::2", "2001:db8:9::2")] {
        ev.maps_mut().lb_set_vip(vip.parse()?, 80, 6, vip_id)?;
        ev.maps_mut().lb_set_backend(vip_id, backend.parse()?, 8080)?;
        ev.maps_mut().lb_set_ring(vip_id, &[vip_id; LB_RING])?;
    }
    ev.deploy(0, LO, &[], &[HybridElement::Balancer], None)?;
    Ok(ev)
}

fn by_ip_version(repeat: u32, runs: usize) -> Result<Vec<VersionCost>> {
    let frames = frames_by_version();
    let fw = placed_firewall()?;
    let elb = elb()?;
    let programs =
        [("firewall (placed, 16 rules)", fw.program().program_fd()?), ("eLB (tracked flow)", elb.program_fd()?)];
    programs
        .into_iter()
        .map(|(nf, fd)| {
            let [v4, v6] = [0, 1].map(|i| median_ns(fd, &frames[i], repeat, runs));
            let (ipv4_ns, ipv6_ns) = (v4?, v6?);
            Ok(VersionCost {
                nf: nf.into(),
                ipv4_ns,
                ipv6_ns,
                ratio: if ipv4_ns > 0.0 { ipv6_ns / ipv4_ns } else { 0.0 },
            })
        })
        .collect()
}

/// Gives config 1 of `kind` a realistic setting in `p`'s tables.
fn configure(p: &mut Pipeline, kind: ElementKind) -> Result<()> {
    match kind {
        ElementKind::Acl => {
            // Eight rules that do not match, then the default: a full scan.
            let rules: Vec<AclRule> = (0..8)
                .map(|i| AclRule { proto: 17, dport_lo: 1000 + i, dport_hi: 1000 + i, ..AclRule::any(ACL_DENY) })
                .collect();
            p.set_acl(1, &rules, ACL_ALLOW, ACL_ALLOW)?;
        }
        ElementKind::Rewrite => p.set_rewrite(
            1,
            Rewrite {
                fields: RW_DST_IP | RW_DPORT,
                dst_ip: std::net::Ipv4Addr::new(10, 9, 9, 9).into(),
                dport: 8080u16.to_be(),
                ..Default::default()
            },
        )?,
        ElementKind::Policer => p.set_policer(1, u64::MAX / 4_000_000, u64::MAX / 4000)?,
        ElementKind::Counter | ElementKind::FlowMonitor | ElementKind::Forward => {}
        // Not among the measured elements (`ELEMENTS`): the hybrid NFs'
        // tables are filled by their control planes.
        _ => {}
    }
    Ok(())
}

fn ns_per_packet(p: &Pipeline, f: &[u8], repeat: u32, runs: usize) -> Result<f64> {
    median_ns(p.program().program_fd()?, f, repeat, runs)
}

/// The median of `runs` test runs of program `fd` on `f`, each timing
/// `repeat` runs in the kernel: ns per packet.
fn median_ns(fd: std::os::fd::BorrowedFd<'_>, f: &[u8], repeat: u32, runs: usize) -> Result<f64> {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| test_run(fd, f, repeat).map(|o| o.duration_ns as f64))
        .collect::<Result<_, _>>()
        .context("BPF_PROG_TEST_RUN")?;
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

fn pipeline_with(elements: &[Element], kind: Option<ElementKind>) -> Result<Pipeline> {
    let mut p = Pipeline::load()?;
    if let Some(k) = kind {
        configure(&mut p, k)?;
    }
    p.set_forward(DROP_CONFIG, Forward { action: FWD_DROP, ifindex: 0 })?;
    p.deploy(1, LO, elements)?;
    Ok(p)
}

pub fn run(repeat: u32, runs: usize) -> Result<BenchPipelineReport> {
    let f = frame();
    let drop = Element { kind: ElementKind::Forward, config: DROP_CONFIG, nf: 2 };
    let kinds: [(&str, Option<ElementKind>, &str); 6] = [
        ("none (parse + drop)", None, "ferry_only_drop"),
        ("counter", Some(ElementKind::Counter), "ferry_only_counter"),
        ("acl (8 rules)", Some(ElementKind::Acl), "ferry_only_acl"),
        ("flow monitor", Some(ElementKind::FlowMonitor), "ferry_only_flowmon"),
        ("rewrite (IP + port)", Some(ElementKind::Rewrite), "ferry_only_rewrite"),
        ("policer", Some(ElementKind::Policer), "ferry_only_policer"),
    ];
    let mut elements = Vec::new();
    for (name, kind, program) in kinds {
        let mut dedicated = Pipeline::load_dedicated(program)?;
        if let Some(k) = kind {
            configure(&mut dedicated, k)?;
        }
        let chain: Vec<Element> = match kind {
            Some(k) => vec![Element { kind: k, config: 1, nf: 1 }, drop],
            None => vec![drop],
        };
        let pipeline = pipeline_with(&chain, kind)?;
        let d = ns_per_packet(&dedicated, &f, repeat, runs)?;
        let pl = ns_per_packet(&pipeline, &f, repeat, runs)?;
        elements.push(ElementCost {
            element: name.to_string(),
            dedicated_ns: d,
            pipeline_ns: pl,
            overhead_ns: pl - d,
            ratio: if d > 0.0 { pl / d } else { 0.0 },
        });
    }
    let mut long: Vec<Element> =
        (0..8).map(|i| Element { kind: ElementKind::Counter, config: 20 + i, nf: 10 + i }).collect();
    long.push(Element { kind: ElementKind::Forward, config: DROP_CONFIG, nf: 30 });
    let long_chain_ns = ns_per_packet(&pipeline_with(&long, None)?, &f, repeat, runs)?;
    let by_ip_version = by_ip_version(repeat, runs)?;
    Ok(BenchPipelineReport {
        machine: crate::io::machine_summary(),
        repeat,
        runs,
        elements,
        long_chain_ns,
        by_ip_version,
    })
}

pub fn table(r: &BenchPipelineReport) -> String {
    let mut s = format!(
        "machine: {}\nBPF_PROG_TEST_RUN, 64 B TCP frame, {} runs x {} repeats, median ns per packet\n",
        r.machine, r.runs, r.repeat
    );
    s += &format!("{:<22} {:>10} {:>10} {:>10} {:>7}\n", "element", "dedicated", "pipeline", "overhead", "ratio");
    for e in &r.elements {
        s += &format!(
            "{:<22} {:>10.1} {:>10.1} {:>10.1} {:>7.2}\n",
            e.element, e.dedicated_ns, e.pipeline_ns, e.overhead_ns, e.ratio
        );
    }
    s += &format!("9-element chain (2 recirculations): {:.1} ns per packet\n", r.long_chain_ns);
    s += &format!(
        "\nby IP version (64 B IPv4, 84 B IPv6 TCP), median ns per packet\n{:<28} {:>8} {:>8} {:>9}\n",
        "NF", "IPv4", "IPv6", "v6/v4"
    );
    for v in &r.by_ip_version {
        s += &format!("{:<28} {:>8.1} {:>8.1} {:>9.2}\n", v.nf, v.ipv4_ns, v.ipv6_ns, v.ratio);
    }
    s
}
