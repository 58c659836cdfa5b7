//! `ferry bench nsh`: what a host hop costs. The same chain, in -> a -> b
//! -> c -> out with its ports on h1, runs with its NFs on one host
//! (`one`), over two (`two`: a | b c, so the path leaves h1 and comes
//! back: two crossings) and over three (`three`: a | b | c, three
//! crossings). Each host is a network namespace with its own ferryd; the
//! crossings carry NSH in VXLAN-GPE over a bridged fabric, forwarded in
//! XDP. Each variant is deployed the way an operator does it (`ferry
//! chain deploy` of one file), and driven by `bench offload`'s driver:
//! throughput of a flat-out window, latency of a paced run. Variants
//! alternate their order run by run; medians over the runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::proto::{self, Msg};
use serde::Serialize;

use crate::offload::{self, BenchOffloadOptions, Medians, Sample};
use ferry_cli::hostctl;

/// gen (g0) -- (d0) h1 (d1) -- (s0) sink; h1, h2, h3 on a fabric.
const TESTBED: &str = r#"
name: bench-nsh
namespaces:
  - { name: gen, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: h1, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: h2, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: h3, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: fab, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: sink, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:01:01" }
    b: { ns: h1, dev: d0, mac: "02:00:00:00:01:02" }
  - a: { ns: h1, dev: d1, mac: "02:00:00:00:02:02" }
    b: { ns: sink, dev: s0, mac: "02:00:00:00:02:01" }
  - a: { ns: h1, dev: f1, mac: "02:00:00:00:09:01", addrs: ["10.9.0.1/24"] }
    b: { ns: fab, dev: p1 }
    mtu: 1600
  - a: { ns: h2, dev: f2, mac: "02:00:00:00:09:02", addrs: ["10.9.0.2/24"] }
    b: { ns: fab, dev: p2 }
    mtu: 1600
  - a: { ns: h3, dev: f3, mac: "02:00:00:00:09:03", addrs: ["10.9.0.3/24"] }
    b: { ns: fab, dev: p3 }
    mtu: 1600
"#;

const HOSTS: [&str; 3] = ["h1", "h2", "h3"];

/// Variants: where a, b and c run, and how many times the path crosses
/// between hosts.
const VARIANTS: [(&str, [&str; 3], u32); 3] =
    [("one", ["h1", "h1", "h1"], 0), ("two", ["h1", "h2", "h2"], 2), ("three", ["h1", "h2", "h3"], 3)];

#[derive(Debug, Clone)]
pub struct BenchNshOptions {
    pub sizes: Vec<usize>,
    pub runs: usize,
    pub window: Duration,
    pub latency_pps: u64,
    pub latency_frames: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NshRow {
    pub size: usize,
    pub one: Medians,
    pub two: Medians,
    pub three: Medians,
    /// Throughput over two and three hosts, as a share of one host's.
    pub two_vs_one: f64,
    pub three_vs_one: f64,
    /// p50 each crossing adds (µs): (p50 over hosts - p50 on one) / crossings.
    pub p50_per_crossing_two_us: Option<f64>,
    pub p50_per_crossing_three_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchNshReport {
    pub machine: String,
    pub rows: Vec<NshRow>,
    pub samples: Vec<Sample>,
}

/// The three hosts' ferryds, stopped when dropped.
struct Ferryds(Vec<(Child, PathBuf)>);

impl Ferryds {
    fn start(dir: &Path) -> Result<Ferryds> {
        let mut all = Ferryds(Vec::new());
        for host in HOSTS {
            let socket = dir.join(format!("{host}.sock"));
            let child = Command::new(ferry_cli::chainctl::ferryd_bin()?)
                .arg("--socket")
                .arg(&socket)
                .args(["--host", host, "--no-metrics"])
                .env("FERRY_HOST", ferry_cli::chainctl::host_bin()?)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting ferryd")?;
            let admin = proto::admin_socket(&socket);
            all.0.push((child, admin.clone()));
            let deadline = Instant::now() + Duration::from_secs(60);
            while proto::request(&admin, &Msg::List).is_err() {
                if Instant::now() > deadline {
                    bail!("ferryd of {host} did not serve {}", admin.display());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(all)
    }
}

impl Drop for Ferryds {
    fn drop(&mut self) {
        for (child, admin) in &mut self.0 {
            let _ = proto::request(admin, &Msg::Shutdown);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The chain file of `variant`, its NFs at `at`.
fn chain_yaml(tb: &ferry_testbed::Testbed, ferryds: &Ferryds, at: [&str; 3]) -> String {
    let cpus = offload::nf_cpu().map_or(String::new(), |c| format!(", cpus: [{c}]"));
    let mut hosts = String::new();
    for (i, host) in HOSTS.iter().enumerate() {
        hosts += &format!(
            "  - {{ name: {host}, control: \"unix:{}\", netns: {}, fabric: {{ dev: f{n}, addr: 10.9.0.{n} }} }}\n",
            ferryds.0[i].1.display(),
            tb.ns_name(host),
            n = i + 1
        );
    }
    let nf = |name: &str, host: &str| {
        format!("  - {{ name: {name}, domain: main, kind: fwd, offload: never, location: {host}{cpus} }}\n")
    };
    format!(
        "name: hop\nspi: 9\ndomains: [ {{ name: main, frames: 8192 }} ]\nhosts:\n{hosts}ports:\n  - {{ name: in, netdev: d0, \
         xdp_mode: driver, location: h1 }}\n  - {{ name: out, netdev: d1, xdp_mode: driver, location: h1 }}\nnfs:\n{}{}{}links:\n  - {{ from: in, to: a }}\n  - {{ \
         from: a, to: b }}\n  - {{ from: b, to: c }}\n  - {{ from: c, to: out }}\n",
        nf("a", at[0]),
        nf("b", at[1]),
        nf("c", at[2]),
    )
}

/// One variant: deployed over the hosts, driven, removed.
fn measure(
    tb: &ferry_testbed::Testbed,
    ferryds: &Ferryds,
    dir: &Path,
    o: &BenchOffloadOptions,
    key: (&str, [&str; 3], usize, usize),
) -> Result<Sample> {
    let (variant, at, size, run) = key;
    let file = dir.join(format!("hop-{variant}.yaml"));
    std::fs::write(&file, chain_yaml(tb, ferryds, at))?;
    hostctl::deploy(&file, None)?;
    // Removed whatever happens next: the next variant takes the same SPI.
    let driven = connected(&file, variant).and_then(|()| offload::drive(tb, o, size, &[]));
    hostctl::remove(&file, None)?;
    Ok(driven?.sample("nsh", variant, size, run))
}

/// Waits until every NF of the chain in `file` is connected on its host.
fn connected(file: &Path, variant: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let all_up = |h: &hostctl::HostStatus| h.status.as_ref().is_some_and(|s| s.nfs.iter().all(|n| n.connected));
    while !hostctl::status(file, None)?.iter().all(all_up) {
        if Instant::now() > deadline {
            bail!("the NFs of {variant} did not connect");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

pub fn run(o: &BenchNshOptions) -> Result<BenchNshReport> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(TESTBED, "bench-nsh.yaml")?;
    let tb = ferry_testbed::up(&spec).context("building the testbed")?;
    let dir = std::env::temp_dir().join(format!("ferry-bench-nsh-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let offload = BenchOffloadOptions {
        scenarios: vec!["nsh".into()],
        sizes: o.sizes.clone(),
        runs: o.runs,
        window: o.window,
        latency_pps: o.latency_pps,
        latency_frames: o.latency_frames,
        cost_model: None,
    };
    let mut samples = Vec::new();
    let result = (|| -> Result<()> {
        let macs: Vec<ferry_wire::MacAddr> = ["02:00:00:00:09:01", "02:00:00:00:09:02", "02:00:00:00:09:03"]
            .iter()
            .map(|m| m.parse().expect("a MAC"))
            .collect();
        tb.bridge("fab", "br0", &[("p1", macs[0]), ("p2", macs[1]), ("p3", macs[2])])?;
        let ferryds = Ferryds::start(&dir)?;
        for &size in &o.sizes {
            for run in 0..o.runs {
                let mut order = VARIANTS;
                order.rotate_left(run % VARIANTS.len());
                for (variant, at, _) in order {
                    let s = measure(&tb, &ferryds, &dir, &offload, (variant, at, size, run))
                        .with_context(|| format!("{variant} {size} B run {run}"))?;
                    eprintln!("[nsh] {variant:<5} {size:>4} B run {run}: {:.3} Mpps, p50 {:?} us", s.mpps, s.p50_us);
                    samples.push(s);
                }
            }
        }
        Ok(())
    })();
    let down = tb.down();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    down?;
    let rows = o
        .sizes
        .iter()
        .map(|&size| {
            let of = |v| offload::medians(&samples, "nsh", size, v);
            let (one, two, three) = (of("one"), of("two"), of("three"));
            let share = |m: &Medians| if one.mpps > 0.0 { m.mpps / one.mpps } else { 0.0 };
            let per = |m: &Medians, n: u32| Some((m.p50_us? - one.p50_us?) / f64::from(n));
            NshRow {
                size,
                two_vs_one: share(&two),
                three_vs_one: share(&three),
                p50_per_crossing_two_us: per(&two, VARIANTS[1].2),
                p50_per_crossing_three_us: per(&three, VARIANTS[2].2),
                one,
                two,
                three,
            }
        })
        .collect();
    Ok(BenchNshReport { machine: crate::io::machine_summary(), rows, samples })
}

/// The readable table.
pub fn table(r: &BenchNshReport) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let mut s = format!("ferry bench nsh — {} (medians)\n", r.machine);
    s += "in -> a -> b -> c -> out; NFs on one host, over two (2 crossings), over three (3 crossings)\n";
    s += "size  Mpps one / two / three   two/one  three/one  p50/p99 µs one | two | three     p50 per crossing two / three\n";
    for row in &r.rows {
        let pair = |m: &Medians| format!("{}/{}", f(m.p50_us), f(m.p99_us));
        s += &format!(
            "{:>4}  {:.3} / {:.3} / {:.3}   {:>7.2}  {:>9.2}  {} | {} | {}   {} / {}\n",
            row.size,
            row.one.mpps,
            row.two.mpps,
            row.three.mpps,
            row.two_vs_one,
            row.three_vs_one,
            pair(&row.one),
            pair(&row.two),
            pair(&row.three),
            f(row.p50_per_crossing_two_us),
            f(row.p50_per_crossing_three_us),
        );
    }
    s
}

/// Checks `sizes` fit the fabric with NSH in VXLAN-GPE (74 bytes more).
pub fn check_sizes(sizes: &[usize]) -> Result<()> {
    match sizes.iter().find(|&&s| !(64..=1500).contains(&s)) {
        Some(s) => Err(anyhow!("size {s}: 64 to 1500 bytes")),
        None => Ok(()),
    }
}
