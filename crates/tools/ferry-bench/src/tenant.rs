//! `ferry bench tenant`: the SmartNIC paper's two tenant figures, on XDP.
//!
//! * **Fig. 5** (`classify`): two tenants' traffic mixed on one device
//!   (the live-frames generator alternates the destination port 1000 /
//!   1001: one tenant each), classified at the edge in XDP (`classify:
//!   xdp`: each frame redirected into its tenant's entry device and taken
//!   by that tenant's sink NF over its own UMEM) against the trusted
//!   router NF (`classify: router`: one NF receives everything into its
//!   own memory, classifies, and ferryd's copy links copy each frame
//!   into its tenant's). Throughput is what both tenants' sink NFs count
//!   over a flat-out window.
//! * **Fig. 6** (`scan`): latency of in -> payload scan -> out with the
//!   scan in XDP, with the scan as an NF process, and of forwarding only
//!   (an XDP redirect from d0 to d1): what the scan adds in each place.
//!
//! Generator on CPU 0; sinks, NF processes and the router on CPU 1.
//! Variants alternate their order run by run; medians over the runs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use ferry_bpf::{AttachMode, LoadedXdp, Object};
use ferry_chain::proto::Status;
use ferry_testbed::apps::CpuMeter;
use serde::Serialize;

use crate::offload::{self, BenchOffloadOptions, Medians, Sample};
use ferry_cli::chainctl::{self, counter};
use ferry_cli::demo::{DEMO_TESTBED, IN_MAC};
use ferry_cli::proc;

const GEN_CPU: usize = 0;
/// Classified frames counted after the generator has run this long.
const WARMUP: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct BenchTenantOptions {
    /// `classify` (Fig. 5), `scan` (Fig. 6).
    pub figures: Vec<String>,
    pub sizes: Vec<usize>,
    pub runs: usize,
    pub window: Duration,
    pub latency_pps: u64,
    pub latency_frames: u64,
}

/// One Fig. 5 measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ClassifySample {
    pub mode: String,
    pub size: usize,
    pub run: usize,
    pub mpps: f64,
    /// acme's share of what both tenants got.
    pub acme_share: f64,
    /// Busy time of all CPUs over the window (100 = one CPU).
    pub cpu_percent: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassifyRow {
    pub size: usize,
    pub xdp_mpps: f64,
    pub router_mpps: f64,
    /// xdp / router.
    pub ratio: f64,
    pub xdp_cpu_percent: f64,
    pub router_cpu_percent: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScanRow {
    pub size: usize,
    pub xdp_scan: Medians,
    pub nf_scan: Medians,
    pub forward: Medians,
    /// p50 each scan adds to forwarding only, µs.
    pub xdp_scan_adds_us: Option<f64>,
    pub nf_scan_adds_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchTenantReport {
    pub machine: String,
    pub classify: Vec<ClassifyRow>,
    pub scan: Vec<ScanRow>,
    pub classify_samples: Vec<ClassifySample>,
    pub scan_samples: Vec<Sample>,
}

/// Two tenants behind one edge, each a sink NF; `mode` xdp or router.
fn classify_chain(dut: &str, mode: &str, nf_cpu: Option<usize>) -> String {
    let cpus = nf_cpu.map_or(String::new(), |c| format!(", cpus: [{c}]"));
    let router_cpus = match (mode, nf_cpu) {
        ("router", Some(c)) => format!("\n      cpus: [{c}]"),
        _ => String::new(),
    };
    format!(
        "name: tenants
tenants: [ {{ name: acme }}, {{ name: zeta }} ]
domains:
  - {{ name: a, frames: 8192, tenant: acme }}
  - {{ name: z, frames: 8192, tenant: zeta }}
ports:
  - name: edge
    netns: \"{dut}\"
    netdev: d0
    xdp_mode: driver
    classify:
      mode: {mode}
      rules:
        - {{ dst: 10.1.0.0/16, dport: 1000, to: acme-in }}
        - {{ dport: 1001, to: zeta-in }}{router_cpus}
  - {{ name: acme-in, via: edge, tenant: acme }}
  - {{ name: zeta-in, via: edge, tenant: zeta }}
nfs:
  - {{ name: acme-sink, domain: a, kind: sink{cpus} }}
  - {{ name: zeta-sink, domain: z, kind: sink{cpus} }}
links:
  - {{ from: acme-in, to: acme-sink }}
  - {{ from: zeta-in, to: zeta-sink }}
"
    )
}

fn sunk(s: &Status) -> (u64, u64) {
    (counter(s, "acme-sink", "sunk"), counter(s, "zeta-sink", "sunk"))
}

/// Fig. 5, one variant: ferryd up, the generator flat out, both sinks'
/// counts over the window, ferryd down.
fn measure_classify(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    o: &BenchTenantOptions,
    key: (&str, usize, usize),
) -> Result<ClassifySample> {
    let (mode, size, run) = key;
    let chain = dir.join(format!("classify-{mode}.yaml"));
    std::fs::write(&chain, classify_chain(tb.ns_name("dut"), mode, offload::nf_cpu()))?;
    let rc = chainctl::start(&chain, &dir.join("ferryd.sock"), true).context("starting ferryd")?;
    let duration = format!("{}ms", (WARMUP + o.window + Duration::from_millis(500)).as_millis());
    let size_arg = size.to_string();
    let gen_args = [
        "gen",
        "live",
        "--dev",
        "g0",
        "--dst-mac",
        IN_MAC,
        "--size",
        &size_arg,
        "--duration",
        &duration,
        "--set",
        "src-port=4000",
        "--set",
        "dst-port=1000-1001",
    ]
    .map(String::from);
    let gen = proc::spawn(tb.ns_name("gen"), &gen_args, Some(GEN_CPU))?;
    std::thread::sleep(WARMUP);
    let (before, t0) = (sunk(&rc.status()?), Instant::now());
    let meter = CpuMeter::start(&[]).context("CPU meter")?;
    std::thread::sleep(o.window);
    let (after, seconds) = (sunk(&rc.status()?), t0.elapsed().as_secs_f64());
    let cpu = meter.stop().context("CPU meter")?;
    gen.wait(o.window + Duration::from_secs(30)).context("generator")?;
    rc.shutdown()?;
    let (acme, zeta) = (after.0 - before.0, after.1 - before.1);
    let total = (acme + zeta) as f64;
    Ok(ClassifySample {
        mode: mode.into(),
        size,
        run,
        mpps: total / seconds / 1e6,
        acme_share: if total > 0.0 { acme as f64 / total } else { 0.0 },
        cpu_percent: cpu.total_busy_percent,
    })
}

/// Fig. 6, one case: the scan placed in XDP or run as a process under
/// ferryd, or forwarding only (an XDP redirect, no ferryd).
fn measure_scan(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    o: &BenchOffloadOptions,
    key: (&str, usize, usize),
) -> Result<Sample> {
    let (case, size, run) = key;
    let driven = match case {
        "forward" => {
            let dut = tb.ns_name("dut");
            // Attached, and its target written, inside dut: the kernel
            // resolves ifindexes in the caller's namespace.
            let redirect = ferry_sys::in_netns(Some(dut), || -> Result<LoadedXdp> {
                let d0 = ferry_cli::util::ifindex("d0")?;
                let mut prog = LoadedXdp::attach(Object::Redirect, "ferry_redirect", d0, AttachMode::Driver)?;
                prog.set_redirect_target(ferry_cli::util::ifindex("d1")?)?;
                Ok(prog)
            })??;
            let d = offload::drive(tb, o, size, &[]);
            drop(redirect);
            d?
        }
        _ => {
            let offload = if case == "xdp-scan" { "auto" } else { "never" };
            let chain = dir.join(format!("scan-{case}.yaml"));
            let yaml = offload::chain_yaml("scan", tb.ns_name("dut"), dir, offload, offload::nf_cpu());
            std::fs::write(&chain, yaml)?;
            let rc = chainctl::start(&chain, &dir.join("ferryd.sock"), true).context("starting ferryd")?;
            let d = offload::drive(tb, o, size, &[])?;
            rc.shutdown()?;
            d
        }
    };
    Ok(driven.sample("scan", case, size, run))
}

pub fn run(o: &BenchTenantOptions) -> Result<BenchTenantReport> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(DEMO_TESTBED, "examples/testbeds/demo.yaml")?;
    let tb = ferry_testbed::up(&spec).context("building the testbed")?;
    let dir = std::env::temp_dir().join(format!("ferry-bench-tenant-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let offload = BenchOffloadOptions {
        scenarios: vec!["scan".into()],
        sizes: o.sizes.clone(),
        runs: o.runs,
        window: o.window,
        latency_pps: o.latency_pps,
        latency_frames: o.latency_frames,
        cost_model: None,
    };
    let (mut classify_samples, mut scan_samples) = (Vec::new(), Vec::new());
    let result = (|| -> Result<()> {
        for &size in &o.sizes {
            for run in 0..o.runs {
                if o.figures.iter().any(|f| f == "classify") {
                    let order = if run % 2 == 0 { ["xdp", "router"] } else { ["router", "xdp"] };
                    for mode in order {
                        let s = measure_classify(&tb, &dir, o, (mode, size, run))
                            .with_context(|| format!("classify {mode} {size} B run {run}"))?;
                        eprintln!("[tenant] classify {mode:<6} {size:>4} B run {run}: {:.3} Mpps", s.mpps);
                        classify_samples.push(s);
                    }
                }
                if o.figures.iter().any(|f| f == "scan") {
                    let mut order = ["xdp-scan", "nf-scan", "forward"];
                    order.rotate_left(run % 3);
                    for case in order {
                        let s = measure_scan(&tb, &dir, &offload, (case, size, run))
                            .with_context(|| format!("scan {case} {size} B run {run}"))?;
                        eprintln!("[tenant] scan {case:<8} {size:>4} B run {run}: p50 {:?} us", s.p50_us);
                        scan_samples.push(s);
                    }
                }
            }
        }
        Ok(())
    })();
    let down = tb.down();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    down?;
    let classify = rows_classify(o, &classify_samples);
    let scan = if scan_samples.is_empty() { Vec::new() } else { rows_scan(o, &scan_samples) };
    Ok(BenchTenantReport { machine: crate::io::machine_summary(), classify, scan, classify_samples, scan_samples })
}

fn rows_classify(o: &BenchTenantOptions, samples: &[ClassifySample]) -> Vec<ClassifyRow> {
    let median = |size: usize, mode: &str, f: fn(&ClassifySample) -> f64| {
        let mut v: Vec<f64> = samples.iter().filter(|s| s.size == size && s.mode == mode).map(f).collect();
        (!v.is_empty()).then(|| crate::io::median(&mut v))
    };
    o.sizes
        .iter()
        .filter_map(|&size| {
            let (xdp, router) = (median(size, "xdp", |s| s.mpps)?, median(size, "router", |s| s.mpps)?);
            Some(ClassifyRow {
                size,
                xdp_mpps: xdp,
                router_mpps: router,
                ratio: if router > 0.0 { xdp / router } else { 0.0 },
                xdp_cpu_percent: median(size, "xdp", |s| s.cpu_percent)?,
                router_cpu_percent: median(size, "router", |s| s.cpu_percent)?,
            })
        })
        .collect()
}

fn rows_scan(o: &BenchTenantOptions, samples: &[Sample]) -> Vec<ScanRow> {
    o.sizes
        .iter()
        .map(|&size| {
            let of = |case| offload::medians(samples, "scan", size, case);
            let (xdp_scan, nf_scan, forward) = (of("xdp-scan"), of("nf-scan"), of("forward"));
            let adds = |m: &Medians| Some(m.p50_us? - forward.p50_us?);
            ScanRow {
                size,
                xdp_scan_adds_us: adds(&xdp_scan),
                nf_scan_adds_us: adds(&nf_scan),
                xdp_scan,
                nf_scan,
                forward,
            }
        })
        .collect()
}

/// The readable tables.
pub fn table(r: &BenchTenantReport) -> String {
    let mut s = format!("ferry bench tenant — {} (medians)\n", r.machine);
    if !r.classify.is_empty() {
        s += "SmartNIC Fig. 5: two tenants, classification in XDP vs the trusted router NF\n";
        s += "size  xdp Mpps  router Mpps  xdp/router  CPU% xdp / router\n";
        for row in &r.classify {
            s += &format!(
                "{:>4}  {:>8.3}  {:>11.3}  {:>10.2}  {:>8.0} / {:<6.0}\n",
                row.size, row.xdp_mpps, row.router_mpps, row.ratio, row.xdp_cpu_percent, row.router_cpu_percent
            );
        }
    }
    if !r.scan.is_empty() {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
        s += "SmartNIC Fig. 6: latency p50/p99 µs of payload scan + forward, and what the scan adds to forwarding\n";
        s += "size  XDP scan      NF scan       forward only  XDP adds  NF adds  Mpps XDP / NF / fwd\n";
        for row in &r.scan {
            let pair = |m: &Medians| format!("{}/{}", f(m.p50_us), f(m.p99_us));
            s += &format!(
                "{:>4}  {:<12}  {:<12}  {:<12}  {:>8}  {:>7}  {:.2} / {:.2} / {:.2}\n",
                row.size,
                pair(&row.xdp_scan),
                pair(&row.nf_scan),
                pair(&row.forward),
                f(row.xdp_scan_adds_us),
                f(row.nf_scan_adds_us),
                row.xdp_scan.mpps,
                row.nf_scan.mpps,
                row.forward.mpps,
            );
        }
    }
    s
}

/// The figures `ferry bench tenant` knows.
pub fn check_figures(figures: &[String]) -> Result<()> {
    match figures.iter().find(|f| !["classify", "scan"].contains(&f.as_str())) {
        Some(f) => Err(anyhow!("unknown figure {f:?} (classify, scan)")),
        None => Ok(()),
    }
}
