//! The kernel-chain baseline of `ferry bench chain` (FLASH, Fig. 10): a
//! chain of N l2fwd NFs that a user could build today from the stock
//! kernel alone, each NF in its own network namespace, the namespaces
//! connected by veth pairs:
//!
//! ```text
//!  gen (g0) -- (in) nf1 (out) -- (in) nf2 (out) -- ... -- (in) nfN (out) -- (s0) sink
//! ```
//!
//! Two ways of forwarding inside an NF namespace:
//! - [`KernelChainMode::XdpRedirect`]: `ferry_redirect` on `in` sends every
//!   frame out of `out` through a DEVMAP (XDP_REDIRECT, no skb). The frames
//!   are handed to `out`'s peer, which must run XDP for veth to accept
//!   them: the next NF's `in` does, and so does the sink's s0 (its AF_XDP
//!   program). `ferry_pass` sits on every `out` as well, as the usual
//!   recipes for veth redirect do; Linux 6.18 does not need it (the
//!   redirect test in crates/base/ferry-bpf redirects out of a veth without
//!   XDP), but it costs nothing on the forward path and counts whatever
//!   comes back the other way.
//! - [`KernelChainMode::Bridge`]: `in` and `out` are the two ports of a
//!   Linux bridge (`br0`); no XDP anywhere in the NF namespaces. Bridge
//!   netfilter calls (br_netfilter) are turned off where the module is
//!   loaded: the baseline is the kernel's plain forwarding path.
//!
//! Traffic: the live-frames generator (`ferry gen live`, stamped UDP) in
//! `gen`, pinned to CPU 0, and the AF_XDP sink (`ferry sink`, latency from
//! the stamps) in `sink`, pinned to CPU 1; both are `ferry` processes. The
//! generator redirects its frames out of g0 as XDP frames, so nf1's `in`
//! must have its veth NAPI running to accept them: in XdpRedirect mode the
//! program gives it one; in Bridge mode GRO is turned on for nf1's `in`
//! (veth then runs NAPI without XDP and turns the frames into skbs).
//!
//! The veths' receive processing (NAPI) runs by default in softirq context
//! on the CPU that raised it: the generator flushes its frames every 64 and
//! the whole chain, including the copy into the sink's AF_XDP ring, runs to
//! completion right there, on CPU 0. So the generator slows down to what
//! the chain can carry, and the sink process (CPU 1) only collects frames;
//! the offered rate of a flat-out run is then the chain's throughput on one
//! core. With `napi_cpu`, NAPI runs in kernel threads pinned to that CPU
//! instead and the generator is free-running; on one CPU, under overload,
//! an upstream NF's thread then starves the downstream ones, whose veth
//! rings overflow (most of the loss is there, see `hops`).
//!
//! The testbed is torn down on every path: after the run whether it
//! succeeded or failed (errors name its `fy??????` prefix), and by its
//! reaper process even if this process is killed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferry_bpf::{AttachMode, LoadedXdp, Object};
use serde::Serialize;
use serde_json::Value;

use ferry_cli::proc::{num, set_napi_thread, wait_for_xdp};

/// Most NFs in a chain.
pub const MAX_NFS: usize = 8;
/// Index of XDP_REDIRECT in the verdict counters.
const SLOT_REDIRECT: usize = 4;
/// MAC of the generator's g0 and of the sink's s0 (the frames' destination).
pub const GEN_MAC: &str = "02:00:00:00:00:01";
pub const SINK_MAC: &str = "02:00:00:00:00:fe";
const GEN_CPU: usize = 0;
const SINK_CPU: usize = 1;

/// How each NF namespace forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelChainMode {
    /// XDP_REDIRECT from the ingress veth to the egress veth (DEVMAP).
    XdpRedirect,
    /// A Linux bridge over the two veths.
    Bridge,
}

impl KernelChainMode {
    pub const ALL: [KernelChainMode; 2] = [KernelChainMode::XdpRedirect, KernelChainMode::Bridge];

    pub fn name(self) -> &'static str {
        match self {
            KernelChainMode::XdpRedirect => "xdp-redirect",
            KernelChainMode::Bridge => "bridge",
        }
    }
}

impl std::str::FromStr for KernelChainMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        KernelChainMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown kernel chain mode {s:?}: xdp-redirect or bridge"))
    }
}

/// One kernel-chain run.
#[derive(Debug, Clone)]
pub struct KernelChainOptions {
    /// NFs in the chain, 1..=8.
    pub nfs: usize,
    pub mode: KernelChainMode,
    /// Frame length without FCS (64 in the paper's figure).
    pub frame_len: usize,
    /// Offered load; None: as fast as the generator goes.
    pub rate_pps: Option<u64>,
    /// Frames to send; None: until `duration` ends.
    pub count: Option<u64>,
    /// How long the generator runs at most.
    pub duration: Duration,
    /// Run the NF namespaces' veth NAPI in kernel threads pinned to this
    /// CPU; None: softirq on whichever CPU raised it.
    pub napi_cpu: Option<usize>,
    /// The `ferry` binary run in the namespaces; None: this executable
    /// (right when called from `ferry` itself, not from a test binary).
    pub ferry_exe: Option<PathBuf>,
}

impl Default for KernelChainOptions {
    fn default() -> Self {
        KernelChainOptions {
            nfs: 1,
            mode: KernelChainMode::XdpRedirect,
            frame_len: 64,
            rate_pps: None,
            count: None,
            duration: Duration::from_secs(2),
            napi_cpu: None,
            ferry_exe: None,
        }
    }
}

/// Counters of one NF namespace after the run.
#[derive(Debug, Clone, Serialize)]
pub struct NfHop {
    /// 1-based position in the chain.
    pub nf: usize,
    /// Packets its ingress veth received (`ip -s link`).
    pub in_rx_packets: u64,
    /// Packets its egress veth sent (`ip -s link`; redirected XDP frames
    /// included).
    pub out_tx_packets: u64,
    /// XdpRedirect mode: frames `ferry_redirect` redirected.
    pub xdp_redirected: Option<u64>,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct KernelChainResult {
    pub mode: KernelChainMode,
    pub nfs: usize,
    pub frame_len: usize,
    /// Frames the generator sent into the chain.
    pub sent: u64,
    /// The generator's rate (sent over its run time, which includes a few
    /// tens of milliseconds of start-up), packets per second.
    pub offered_pps: f64,
    /// Distinct stamped frames that reached the sink.
    pub received: u64,
    /// The sink's receive rate (first to last frame), Mpps.
    pub rx_mpps: f64,
    pub lost: u64,
    /// `lost / sent`, 0..=1.
    pub loss_ratio: f64,
    /// Latency generator to sink, from the stamps (None without samples).
    pub latency_p50_us: Option<f64>,
    pub latency_p99_us: Option<f64>,
    pub latency_p999_us: Option<f64>,
    pub hops: Vec<NfHop>,
    /// The `fy??????` prefix the testbed's namespaces had (all deleted by
    /// the time the result is returned).
    pub testbed_instance: String,
    /// The generator's and the sink's own reports.
    pub generator: Value,
    pub sink: Value,
}

/// Logical namespace of NF `i` (1-based).
fn nf_ns(i: usize) -> String {
    format!("nf{i}")
}

/// The testbed: gen, nf1..nfN, sink, one veth pair between neighbours.
/// IPv6 is off everywhere so that the kernel sends nothing on its own.
pub fn testbed_yaml(nfs: usize) -> String {
    let mut names = vec!["gen".to_string()];
    names.extend((1..=nfs).map(nf_ns));
    names.push("sink".to_string());
    let mut y = format!("name: kchain-{nfs}\nnamespaces:\n");
    for n in &names {
        y += &format!("  - name: {n}\n    sysctls: {{ net.ipv6.conf.all.disable_ipv6: \"1\" }}\n");
    }
    y += "links:\n";
    for w in 0..=nfs {
        let (a_ns, a_dev, a_mac) = match w {
            0 => ("gen".to_string(), "g0", GEN_MAC.to_string()),
            _ => (nf_ns(w), "out", format!("02:00:00:00:{w:02x}:02")),
        };
        let (b_ns, b_dev, b_mac) = match w {
            _ if w == nfs => ("sink".to_string(), "s0", SINK_MAC.to_string()),
            _ => (nf_ns(w + 1), "in", format!("02:00:00:00:{:02x}:01", w + 1)),
        };
        y += &format!("  - a: {{ ns: {a_ns}, dev: {a_dev}, mac: \"{a_mac}\" }}\n");
        y += &format!("    b: {{ ns: {b_ns}, dev: {b_dev}, mac: \"{b_mac}\" }}\n");
    }
    y
}

/// Runs one kernel chain: builds the testbed, wires the NFs, sends the
/// generator's traffic through them into the sink, tears everything down.
pub fn run_kernel_chain(o: &KernelChainOptions) -> Result<KernelChainResult> {
    if !(1..=MAX_NFS).contains(&o.nfs) {
        bail!("a kernel chain has 1..={MAX_NFS} NFs, not {}", o.nfs);
    }
    let exe = match &o.ferry_exe {
        Some(p) => p.clone(),
        None => ferry_cli::chainctl::ferry_bin().context("locating the ferry binary")?,
    };
    let yaml = testbed_yaml(o.nfs);
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(&yaml, "kernel chain (generated)")?;
    let tb = ferry_testbed::up(&spec).context("building the kernel-chain testbed")?;
    let testbed_instance = tb.instance().to_string();
    let measured = measure(&tb, &exe, o);
    // Torn down whatever happened (dropping `tb` would too, but could only
    // log a failure); errors name the testbed so leftovers can be traced.
    let down = tb.down();
    let (result_gen, result_sink, hops) =
        measured.with_context(|| format!("kernel chain on testbed {testbed_instance}"))?;
    down.with_context(|| format!("tearing down the kernel-chain testbed {testbed_instance}"))?;

    let sent = num(&result_gen, "/sent") as u64;
    // Distinct stamped frames (duplicates and strays not counted).
    let received: u64 = match result_sink.pointer("/streams").and_then(Value::as_array) {
        Some(streams) => streams.iter().map(|s| num(s, "/received") as u64).sum(),
        None => 0,
    };
    let lost = sent.saturating_sub(received);
    let latency_us = |p: &str| result_sink.pointer(p).and_then(Value::as_f64).map(|ns| ns / 1e3);
    Ok(KernelChainResult {
        mode: o.mode,
        nfs: o.nfs,
        frame_len: o.frame_len,
        sent,
        offered_pps: num(&result_gen, "/pps"),
        received,
        rx_mpps: num(&result_sink, "/pps") / 1e6,
        lost,
        loss_ratio: if sent > 0 { lost as f64 / sent as f64 } else { 0.0 },
        latency_p50_us: latency_us("/latency/p50_ns"),
        latency_p99_us: latency_us("/latency/p99_ns"),
        latency_p999_us: latency_us("/latency/p999_ns"),
        hops,
        testbed_instance,
        generator: result_gen,
        sink: result_sink,
    })
}

/// Wires the NFs on a testbed that is up, runs the traffic, reads the NF
/// counters; returns the generator's and the sink's reports and the hops.
fn measure(tb: &ferry_testbed::Testbed, exe: &Path, o: &KernelChainOptions) -> Result<(Value, Value, Vec<NfHop>)> {
    let programs = match o.mode {
        KernelChainMode::XdpRedirect => attach_redirects(tb, o.nfs)?,
        KernelChainMode::Bridge => {
            build_bridges(tb, o.nfs)?;
            Vec::new()
        }
    };
    if let Some(cpu) = o.napi_cpu {
        for i in 1..=o.nfs {
            let ns = tb.ns_name(&nf_ns(i));
            let devs: &[&str] = match o.mode {
                KernelChainMode::XdpRedirect => &["in", "out"],
                // Only nf1's `in` runs NAPI (for the generator's frames).
                KernelChainMode::Bridge if i == 1 => &["in"],
                KernelChainMode::Bridge => &[],
            };
            for dev in devs {
                set_napi_thread(ns, dev, Some(cpu))?;
            }
        }
    }
    let (result_gen, result_sink) = run_traffic(tb, exe, o)?;
    let mut hops = Vec::new();
    for i in 1..=o.nfs {
        let ns = tb.ns_name(&nf_ns(i));
        let (in_rx, _) = link_packets(ns, "in")?;
        let (_, out_tx) = link_packets(ns, "out")?;
        let xdp_redirected =
            programs.get(i - 1).map(|p| p.redirect.verdicts().map(|v| v.packets[SLOT_REDIRECT])).transpose()?;
        hops.push(NfHop { nf: i, in_rx_packets: in_rx, out_tx_packets: out_tx, xdp_redirected });
    }
    Ok((result_gen, result_sink, hops))
}

/// Starts the sink, then the generator; waits for the generator to finish
/// and for the chain to drain, stops the sink. Returns both reports.
fn run_traffic(tb: &ferry_testbed::Testbed, exe: &Path, o: &KernelChainOptions) -> Result<(Value, Value)> {
    let (gen_ns, sink_ns) = (tb.ns_name("gen"), tb.ns_name("sink"));
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    // The sink ends by itself once all frames are in (with a count) or
    // after a second without traffic; its own time limit only guards
    // against a run that never ends.
    let sink_cap = ms(o.duration + Duration::from_secs(60));
    let count = o.count.map(|c| c.to_string());
    let mut sink_args = vec!["sink", "--dev", "s0", "--idle-exit", "1s", "--duration", &sink_cap];
    // With a count, the sink's receive and fill rings hold every frame of
    // the run: frames it has not collected yet wait in its ring, so a sink
    // kept off its CPU by other load loses none (a run without a count
    // measures the sink as it is).
    let ring = o.count.map(|c| c.next_power_of_two().max(2048).to_string());
    let frames = o.count.map(|c| (2 * c.next_power_of_two()).max(8192).to_string());
    if let (Some(c), Some(ring), Some(frames)) = (&count, &ring, &frames) {
        sink_args.extend(["--count", c.as_str(), "--ring", ring.as_str(), "--frames", frames.as_str()]);
    }
    let sink = ferry_cli::proc::spawn_exe(exe, sink_ns, &sink_args, Some(SINK_CPU))?;
    wait_for_xdp(sink_ns, "s0", Duration::from_secs(60))?;
    let size = o.frame_len.to_string();
    let mut args = vec!["gen", "live", "--dev", "g0", "--dst-mac", SINK_MAC, "--size", &size];
    let rate = o.rate_pps.map(|r| r.to_string());
    if let Some(r) = &rate {
        args.extend(["--rate", r.as_str()]);
    }
    if let Some(c) = &count {
        args.extend(["--count", c.as_str()]);
    }
    let duration = ms(o.duration);
    args.extend(["--duration", &duration]);
    let gen = ferry_cli::proc::spawn_exe(exe, gen_ns, &args, Some(GEN_CPU))?;
    let gen_report = gen.wait(o.duration + Duration::from_secs(30)).context("generator")?;
    // Frames still in flight sit in kernel queues a few hundred deep and
    // in the sink's socket; it stops once it has drained them.
    let sink_report = sink.finish(Duration::from_secs(10)).context("sink")?;
    Ok((gen_report, sink_report))
}

/// The programs of one NF namespace (detached when dropped).
struct NfPrograms {
    redirect: LoadedXdp,
    _pass: LoadedXdp,
}

/// XdpRedirect mode: in each NF namespace, `ferry_redirect` on `in` with
/// `out` as its target, `ferry_pass` on `out`. Attaching and writing the
/// DEVMAP happen inside the namespace (the kernel resolves interface
/// indexes in the caller's namespace), on a thread of their own so that
/// this thread never changes namespace.
fn attach_redirects(tb: &ferry_testbed::Testbed, nfs: usize) -> Result<Vec<NfPrograms>> {
    let mut all = Vec::new();
    for i in 1..=nfs {
        let ns = tb.ns_name(&nf_ns(i));
        let progs = ferry_sys::in_netns(Some(ns), || -> Result<NfPrograms> {
            let (ifin, ifout) = (ferry_cli::util::ifindex("in")?, ferry_cli::util::ifindex("out")?);
            let mut redirect = LoadedXdp::attach(Object::Redirect, "ferry_redirect", ifin, AttachMode::Driver)
                .context("attaching ferry_redirect")?;
            redirect.set_redirect_target(ifout).context("setting the redirect target")?;
            let pass = LoadedXdp::attach(Object::Basic, "ferry_pass", ifout, AttachMode::Driver)
                .context("attaching ferry_pass")?;
            Ok(NfPrograms { redirect, _pass: pass })
        })
        .with_context(|| format!("entering netns {ns}"))?
        .with_context(|| format!("NF {i} (netns {ns})"))?;
        all.push(progs);
    }
    Ok(all)
}

/// Bridge mode: `br0` over `in` and `out` in each NF namespace; GRO on
/// nf1's `in` so that veth accepts the generator's XDP frames.
fn build_bridges(tb: &ferry_testbed::Testbed, nfs: usize) -> Result<()> {
    for i in 1..=nfs {
        let ns = tb.ns_name(&nf_ns(i));
        ip(&["-n", ns, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", ns, "link", "set", "in", "master", "br0"])?;
        ip(&["-n", ns, "link", "set", "out", "master", "br0"])?;
        ip(&["-n", ns, "link", "set", "br0", "up"])?;
        // br_netfilter (if loaded) would send bridged frames through
        // iptables; its switches are per namespace.
        run(Command::new("ip").args([
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            "for f in /proc/sys/net/bridge/bridge-nf-call-*; do [ -e \"$f\" ] && echo 0 > \"$f\"; done; true",
        ]))?;
    }
    let first = tb.ns_name(&nf_ns(1));
    run(Command::new("ip").args(["netns", "exec", first, "ethtool", "-K", "in", "gro", "on"]))
        .context("not supported: needs ethtool (GRO on nf1's veth lets it accept the generator's XDP frames)")?;
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args))
}

fn run(cmd: &mut Command) -> Result<()> {
    let what = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// (rx, tx) packets of `dev` in namespace `ns`.
fn link_packets(ns: &str, dev: &str) -> Result<(u64, u64)> {
    let out = Command::new("ip").args(["-j", "-s", "-n", ns, "link", "show", "dev", dev]).output()?;
    let v: Value =
        serde_json::from_slice(&out.stdout).with_context(|| format!("ip -j -s link show {dev} (netns {ns})"))?;
    let stats = &v[0]["stats64"];
    Ok((num(stats, "/rx/packets") as u64, num(stats, "/tx/packets") as u64))
}

/// The readable table of several runs.
pub fn table(results: &[KernelChainResult]) -> String {
    let mut s = format!(
        "{:<13} {:>3} {:>6} {:>12} {:>10} {:>8} {:>9} {:>9}\n",
        "mode", "nfs", "bytes", "offered Mpps", "rx Mpps", "loss %", "p50 us", "p99 us"
    );
    let us = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
    for r in results {
        s += &format!(
            "{:<13} {:>3} {:>6} {:>12.3} {:>10.3} {:>8.2} {:>9} {:>9}\n",
            r.mode.name(),
            r.nfs,
            r.frame_len,
            r.offered_pps / 1e6,
            r.rx_mpps,
            r.loss_ratio * 100.0,
            us(r.latency_p50_us),
            us(r.latency_p99_us)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testbed_yaml_is_a_valid_chain() {
        for nfs in 1..=MAX_NFS {
            let spec = ferry_testbed::TestbedSpec::from_yaml_str(&testbed_yaml(nfs), "t").unwrap();
            assert_eq!(spec.namespaces.len(), nfs + 2);
            assert_eq!(spec.links.len(), nfs + 1);
            assert_eq!(spec.links[0].a.dev.as_str(), "g0");
            assert_eq!(spec.links[nfs].b.dev.as_str(), "s0");
            assert_eq!(spec.links[nfs].b.ns.as_str(), "sink");
            for w in 1..nfs {
                assert_eq!(spec.links[w].a.ns.as_str(), nf_ns(w));
                assert_eq!(spec.links[w].b.ns.as_str(), nf_ns(w + 1));
            }
        }
    }

    #[test]
    fn modes_parse_by_name() {
        for m in KernelChainMode::ALL {
            assert_eq!(m.name().parse::<KernelChainMode>().unwrap(), m);
        }
        assert!("kernel".parse::<KernelChainMode>().is_err());
    }

    #[test]
    fn chain_length_is_checked_before_anything_is_built() {
        for nfs in [0, MAX_NFS + 1] {
            let e = run_kernel_chain(&KernelChainOptions { nfs, ..Default::default() }).unwrap_err();
            assert!(e.to_string().contains("1..=8"), "{e}");
        }
    }
}
