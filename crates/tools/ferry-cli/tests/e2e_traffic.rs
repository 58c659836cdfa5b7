//! End to end: the generators (`gen xsk`, `gen live`), the sink (counts,
//! loss, reordering, latency, pcap capture), pcap replay and l2fwd, as
//! separate `ferry` processes in testbed namespaces. Needs root.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// gen (g0) <-> sink (s0). IPv6 off: the kernel sends nothing on its own,
/// so the sink sees exactly the generator's frames.
const GEN_SINK: &str = r#"
name: e2e-gen-sink
namespaces:
  - name: tgen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: tsink
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: tgen, dev: g0 }
    b: { ns: tsink, dev: s0 }
"#;

/// gen (g0) <-> dut (d1), l2fwd on d1 sends everything back to g0.
const GEN_DUT: &str = r#"
name: e2e-l2fwd
namespaces:
  - name: lgen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: ldut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: lgen, dev: g0 }
    b: { ns: ldut, dev: d1 }
"#;

const GEN_TIMEOUT: Duration = Duration::from_secs(30);
const SINK_TIMEOUT: Duration = Duration::from_secs(25);

/// Starts `ferry sink --dev DEV --json --idle-exit 1s --duration 20s [extra]`
/// (see [`spawn_sink`]) and waits until it is attached.
fn start_sink(tb: &ferry_testbed::Testbed, ns: &str, dev: &str, extra: &[&str]) -> Ferry {
    let mut args = vec!["--idle-exit", "1s", "--duration", "20s"];
    args.extend_from_slice(extra);
    spawn_sink(tb, ns, dev, &args)
}

#[test]
fn gen_xsk_to_sink_counts_match() {
    if !privileged("gen_xsk_to_sink_counts_match") {
        return;
    }
    let tb = testbed(GEN_SINK, "e2e_traffic/gen-sink.yaml");
    let s0 = fmt_mac(mac(&tb, "tsink", "s0"));
    {
        let sink = start_sink(&tb, "tsink", "s0", &[]);
        let gen = Ferry::spawn(
            &tb,
            "tgen",
            &["gen", "xsk", "--dev", "g0", "--json", "--count", "20000", "--rate", "100000", "--dst-mac", &s0],
        );
        let g = gen.wait_json(GEN_TIMEOUT);
        let s = sink.wait_json(SINK_TIMEOUT);
        assert_eq!(u(&g, "/sent"), 20000, "generator report: {g:#}");
        assert_eq!(u(&s, "/packets"), 20000, "sink report: {s:#}");
        assert_eq!(u(&s, "/stamped"), 20000, "sink report: {s:#}");
        assert_eq!(u(&s, "/lost"), 0, "sink report: {s:#}");
        assert_eq!(u(&s, "/reordered"), 0, "sink report: {s:#}");
        assert_eq!(u(&s, "/duplicates"), 0, "sink report: {s:#}");
        assert_eq!(u(&s, "/bytes"), 20000 * 60, "60-byte frames: {s:#}");
        assert!(s["latency"].is_object(), "no latency in sink report: {s:#}");
        assert_eq!(u(&s, "/latency/samples"), 20000, "{s:#}");
        assert!(u(&s, "/latency/p50_ns") > 0, "latency p50 must be > 0: {s:#}");
        assert!(u(&s, "/latency/min_ns") <= u(&s, "/latency/p50_ns"), "{s:#}");
    }
    down_and_check(tb);
}

#[test]
fn gen_live_to_sink_counts_match() {
    if !privileged("gen_live_to_sink_counts_match") {
        return;
    }
    let tb = testbed(GEN_SINK, "e2e_traffic/gen-sink.yaml");
    let s0 = fmt_mac(mac(&tb, "tsink", "s0"));
    let pcap_dir = TempDir::new("live");
    let pcap = pcap_dir.path("live.pcap");
    {
        let sink = start_sink(&tb, "tsink", "s0", &["--pcap", pcap.to_str().unwrap()]);
        let gen = Ferry::spawn(
            &tb,
            "tgen",
            &[
                "gen",
                "live",
                "--dev",
                "g0",
                "--json",
                "--count",
                "20000",
                "--rate",
                "100000",
                "--set",
                "src-port=1000-1015",
                "--dst-mac",
                &s0,
            ],
        );
        let g = gen.wait_json(GEN_TIMEOUT);
        let s = sink.wait_json(SINK_TIMEOUT);
        let sent = u(&g, "/sent");
        assert_eq!(sent, 20000, "generator report: {g:#}");
        assert_eq!(u(&s, "/packets"), sent, "sink vs generator; sink report: {s:#}");
        assert_eq!(u(&s, "/lost"), 0, "sink report: {s:#}");
        assert_eq!(u(&s, "/duplicates"), 0, "sink report: {s:#}");
    }
    // The source port cycles over exactly 1000..=1015, everything else is
    // the template: check on the captured frames.
    let frames = read_pcap_frames(&pcap);
    assert_eq!(frames.len(), 20000);
    let mut ports = std::collections::BTreeSet::new();
    for f in &frames {
        let p = etherparse::SlicedPacket::from_ethernet(f).expect("generated frame parses");
        match p.transport {
            Some(etherparse::TransportSlice::Udp(udp)) => {
                ports.insert(udp.source_port());
            }
            other => panic!("not UDP: {other:?}"),
        }
        assert_eq!(&f[..6], &parse_mac(&s0), "destination MAC");
    }
    assert_eq!(ports, (1000..=1015).collect(), "UDP source ports");
    down_and_check(tb);
}

/// Frames of a classic pcap file (either byte order, µs or ns), parsed here
/// independently of ferry-traffic.
fn read_pcap_frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(data.len() >= 24, "pcap too short");
    let magic = u32::from_le_bytes(data[..4].try_into().unwrap());
    let le = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => true,
        0xd4c3b2a1 | 0x4d3cb2a1 => false,
        m => panic!("{}: not a classic pcap (magic {m:#x})", path.display()),
    };
    let rd = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    assert_eq!(rd(&data[20..24]), 1, "link type Ethernet");
    let mut frames = Vec::new();
    let mut at = 24;
    while at < data.len() {
        assert!(at + 16 <= data.len(), "truncated record header");
        let incl = rd(&data[at + 8..at + 12]) as usize;
        let orig = rd(&data[at + 12..at + 16]) as usize;
        assert_eq!(incl, orig, "frame not truncated");
        at += 16;
        assert!(at + incl <= data.len(), "truncated record");
        frames.push(data[at..at + incl].to_vec());
        at += incl;
    }
    frames
}

#[test]
fn pcap_capture_and_replay() {
    if !privileged("pcap_capture_and_replay") {
        return;
    }
    let dir = TempDir::new("pcap");
    let (first, second) = (dir.path("first.pcap"), dir.path("replayed.pcap"));
    let tb = testbed(GEN_SINK, "e2e_traffic/gen-sink.yaml");
    let s0 = fmt_mac(mac(&tb, "tsink", "s0"));
    {
        let sink = start_sink(&tb, "tsink", "s0", &["--pcap", first.to_str().unwrap()]);
        let gen = Ferry::spawn(
            &tb,
            "tgen",
            &["gen", "xsk", "--dev", "g0", "--json", "--count", "1000", "--rate", "100000", "--dst-mac", &s0],
        );
        assert_eq!(u(&gen.wait_json(GEN_TIMEOUT), "/sent"), 1000);
        let s = sink.wait_json(SINK_TIMEOUT);
        assert_eq!(u(&s, "/packets"), 1000, "{s:#}");
    }

    // tshark reads the capture: 1000 frames of 60 bytes.
    let out = Command::new("tshark").arg("-r").arg(&first).args(["-T", "fields", "-e", "frame.len"]).output();
    match out {
        Ok(out) => {
            assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            let lens: Vec<&str> = text.lines().collect();
            assert_eq!(lens.len(), 1000, "tshark frame count");
            assert!(lens.iter().all(|l| l.trim() == "60"), "tshark frame lengths: {:?}", &lens[..5]);
        }
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => panic!("tshark is needed under CI=true: {e}"),
        Err(e) => eprintln!("tshark not available ({e}): skipping the tshark check"),
    }
    let captured = read_pcap_frames(&first);
    assert_eq!(captured.len(), 1000);
    assert!(captured.iter().all(|f| f.len() == 60 && f[..6] == parse_mac(&s0)[..]));

    // Replay the file (once: no --count) to a second sink capturing again.
    {
        let sink = start_sink(&tb, "tsink", "s0", &["--pcap", second.to_str().unwrap()]);
        let gen = Ferry::spawn(
            &tb,
            "tgen",
            &["gen", "xsk", "--dev", "g0", "--json", "--pcap", first.to_str().unwrap(), "--rate", "100000"],
        );
        let g = gen.wait_json(GEN_TIMEOUT);
        assert_eq!(u(&g, "/sent"), 1000, "replay sends the file once: {g:#}");
        let s = sink.wait_json(SINK_TIMEOUT);
        assert_eq!(u(&s, "/packets"), 1000, "{s:#}");
        assert_eq!(u(&s, "/duplicates"), 0, "{s:#}");
    }
    let replayed = read_pcap_frames(&second);
    assert_eq!(replayed.len(), 1000);
    for (i, (a, b)) in captured.iter().zip(&replayed).enumerate() {
        assert_eq!(a, b, "frame {i} differs after replay");
    }
    down_and_check(tb);
}

#[test]
fn l2fwd_returns_every_frame_with_macs_swapped() {
    if !privileged("l2fwd_returns_every_frame_with_macs_swapped") {
        return;
    }
    let dir = TempDir::new("l2fwd");
    let pcap = dir.path("back.pcap");
    let tb = testbed(GEN_DUT, "e2e_traffic/l2fwd.yaml");
    let (g0, d1) = (mac(&tb, "lgen", "g0"), mac(&tb, "ldut", "d1"));
    let (l2, s, g) = {
        // Rings that hold the whole run, as the sink's: an l2fwd kept off
        // its CPU by other load loses no frame.
        let mut l2fwd = Ferry::spawn(
            &tb,
            "ldut",
            &["nf", "run", "--dev", "d1", "--json", "--ring", "32768", "--frames", "65536", "l2fwd"],
        );
        wait_attached(&tb, "ldut", "d1", &mut l2fwd);
        let sink = start_sink(&tb, "lgen", "g0", &["--pcap", pcap.to_str().unwrap()]);
        let gen = Ferry::spawn(
            &tb,
            "lgen",
            &[
                "gen",
                "live",
                "--dev",
                "g0",
                "--json",
                "--count",
                "20000",
                "--rate",
                "100000",
                "--dst-mac",
                &fmt_mac(d1),
            ],
        );
        let g = gen.wait_json(GEN_TIMEOUT);
        let s = sink.wait_json(SINK_TIMEOUT);
        (l2fwd.stop_json(), s, g)
    };
    let sent = u(&g, "/sent");
    assert_eq!(sent, 20000, "generator: {g:#}");
    assert_eq!(u(&s, "/packets"), sent, "sink: {s:#}");
    assert_eq!(u(&s, "/lost"), 0, "sink: {s:#}");
    let c = nf_counters(&l2, "l2fwd");
    assert_partition("l2fwd", &c);
    assert_eq!(counter(&c, "rx"), sent, "l2fwd: {l2:#}");
    assert_eq!(counter(&c, "tx"), sent, "l2fwd: {l2:#}");
    assert_eq!(counter(&c, "drop_malformed"), 0);
    assert_eq!(u(&l2, "/tx_packets"), sent, "l2fwd port: {l2:#}");
    assert_eq!(u(&l2, "/drop_tx_full"), 0);
    assert_eq!(u(&l2, "/drop_unclaimed"), 0);

    let frames = read_pcap_frames(&pcap);
    assert_eq!(frames.len() as u64, sent);
    for f in frames.iter().step_by(997) {
        assert_eq!(f[..6], g0, "returned frame's destination is the generator's (original source) MAC");
        assert_eq!(f[6..12], d1, "returned frame's source is d1's (original destination) MAC");
        assert_eq!(f[12..14], [0x08, 0x00], "IPv4 untouched");
    }
    down_and_check(tb);
}
