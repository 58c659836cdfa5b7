//! End-to-end tests of `ferry_testbed::apps` on `examples/testbeds/sfc.yaml`:
//! real nginx, HAProxy, wrk, iperf3, nft and curl in namespaces.
//!
//! They need root and the tools; without them they print SKIP, except
//! under `CI=true`, where they fail (see `common::privileged`).

mod common;

use ferry_testbed::apps::{
    curl_get, curl_many, iperf3_client, iperf3_clients, nft_apply, nft_counter, wrk, AppError, CpuMeter, CurlOpts,
    Haproxy, HaproxyOpts, Iperf3Server, IperfJob, IperfOpts, Nginx, NginxOpts, WrkOpts,
};
use ferry_testbed::Testbed;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const B1: Ipv4Addr = Ipv4Addr::new(10, 10, 2, 11);
const B2: Ipv4Addr = Ipv4Addr::new(10, 10, 3, 12);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 10, 9, 9);

/// True if `tool` is an executable on PATH (which `ip netns exec` uses).
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p)
            .any(|d| std::fs::metadata(d.join(tool)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    })
}

/// The sfc testbed, or `None` (after a SKIP notice) when the test cannot
/// run here. Under `CI=true` a missing privilege or tool is a failure.
fn sfc(tools: &[&str]) -> Option<Testbed> {
    if !common::privileged() {
        return None;
    }
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if !missing.is_empty() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but app tests need {missing:?} on PATH");
        }
        eprintln!("SKIP: app test needs {missing:?} on PATH");
        return None;
    }
    let spec = ferry_testbed::parse(&common::example("sfc.yaml")).expect("parse sfc.yaml");
    Some(ferry_testbed::up(&spec).expect("bring up sfc.yaml"))
}

/// A process that still runs (not gone, not a zombie waiting for PID 1).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string)))
        .is_some_and(|state| state != "Z" && state != "X")
}

fn backends(tb: &Testbed) -> (Nginx, Nginx) {
    let b1 = Nginx::start(tb, "b1", SocketAddrV4::new(B1, 80), "b1", NginxOpts::default()).expect("nginx b1");
    let b2 = Nginx::start(tb, "b2", SocketAddrV4::new(B2, 80), "b2", NginxOpts::default()).expect("nginx b2");
    (b1, b2)
}

fn add_vip(tb: &Testbed) {
    let st = tb.exec("dut", "ip", ["addr", "add", "10.10.9.9/32", "dev", "lo"]).status().expect("run ip");
    assert!(st.success(), "ip addr add 10.10.9.9/32 dev lo in dut: {st}");
}

#[test]
fn nginx_backends_answer_through_the_dut() {
    let Some(tb) = sfc(&["nginx", "curl"]) else { return };
    // 768 KiB at 256 KiB/s: nginx sends the first second's worth at once
    // and counts whole seconds, so the download lasts about 2 s (3 s - 1).
    let opts = NginxOpts { big_file_bytes: 768 << 10, limit_rate: Some(256 << 10), ..NginxOpts::default() };
    let b1 = Nginx::start(&tb, "b1", SocketAddrV4::new(B1, 80), "b1", opts).expect("nginx b1");
    let b2 = Nginx::start(&tb, "b2", SocketAddrV4::new(B2, 80), "b2", NginxOpts::default()).expect("nginx b2");
    assert_eq!(b1.pids().len(), 2, "master + 1 worker: {:?}", b1.pids());

    for (n, who) in [(&b1, "b1"), (&b2, "b2")] {
        let r = curl_get(&tb, "client", &n.url("/"), CurlOpts::default()).expect("curl /");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, format!("backend {who}\n"));
        assert_ne!(r.local_port, 0);
        assert_eq!(r.num_connects, 1);
    }
    let r = curl_get(&tb, "client", &b1.url("/nope"), CurlOpts::default()).expect("curl /nope");
    assert_eq!(r.status, 404);

    let r = curl_get(&tb, "client", &b1.url("/big"), CurlOpts::default()).expect("curl /big");
    assert_eq!((r.status, r.body.len()), (200, 768 << 10));
    eprintln!("throttled /big took {:?}", r.time_total);
    // A rate limit can only make a download slower, so the lower bound
    // holds on any machine; how much slower a loaded machine makes it is
    // not this test's business (the value nginx gets is checked in the
    // config's unit test).
    assert!(r.time_total >= Duration::from_millis(900), "limit_rate not applied: {:?}", r.time_total);

    let urls = vec![b1.url("/"); 3];
    let bodies = curl_many(&tb, "client", &urls).expect("curl_many on one connection");
    assert_eq!(bodies, vec!["backend b1\n".to_string(); 3]);

    // Drop stops the whole group and removes the directory.
    let (pids, dir, url) = (b1.pids(), b1.dir().to_path_buf(), b1.url("/"));
    drop(b1);
    assert!(!dir.exists(), "{} left behind", dir.display());
    for p in pids {
        assert!(!alive(p), "nginx pid {p} survived drop");
    }
    let e = curl_get(&tb, "client", &url, CurlOpts { timeout: Duration::from_secs(2), local_port: None })
        .expect_err("b1 is stopped");
    assert!(matches!(e, AppError::Failed { .. }), "{e}");
}

#[test]
fn haproxy_balances_the_vip() {
    let Some(tb) = sfc(&["nginx", "haproxy", "curl", "wrk"]) else { return };
    let (b1, b2) = backends(&tb);
    add_vip(&tb);
    let lb = Haproxy::start(
        &tb,
        "dut",
        SocketAddrV4::new(VIP, 80),
        &[(b1.listen(), 1), (b2.listen(), 1)],
        HaproxyOpts::default(),
    )
    .expect("haproxy");
    assert!(lb.pid() > 0);

    let (mut n1, mut n2) = (0, 0);
    for _ in 0..20 {
        let r = curl_get(&tb, "client", "http://10.10.9.9/", CurlOpts::default()).expect("curl VIP");
        match r.body.as_str() {
            "backend b1\n" => n1 += 1,
            "backend b2\n" => n2 += 1,
            other => panic!("unexpected body {other:?}"),
        }
    }
    assert!(n1 >= 5 && n2 >= 5, "round robin over 20 requests: b1 {n1}, b2 {n2}");

    let opts = WrkOpts { connections: 4, threads: 1, duration: Duration::from_secs(2), ..WrkOpts::default() };
    let r = wrk(&tb, "client", "http://10.10.9.9/", opts).expect("wrk");
    eprintln!("wrk through haproxy: {r:?}");
    assert!(r.requests > 0 && r.requests_per_sec > 0.0, "{r:?}");
    assert!(r.latency_avg_us > 0.0 && r.latency_p50_us > 0.0, "{r:?}");
    assert!(r.latency_p50_us <= r.latency_p90_us && r.latency_p90_us <= r.latency_p99_us, "{r:?}");
    // A request slower than wrk's timeout is load, not a fault: only the
    // other socket errors (connect, read, write) are.
    assert_eq!((r.socket_errors - r.timeouts, r.non_2xx), (0, 0), "{r:?}");
    assert!(r.duration_secs >= 1.9, "{r:?}");
}

#[test]
fn iperf3_flows_through_the_dut() {
    let Some(tb) = sfc(&["iperf3"]) else { return };
    let s1 = Iperf3Server::start(&tb, "b1", B1, 5201, None).expect("iperf3 server");
    let opts = IperfOpts { duration: Duration::from_secs(2), ..IperfOpts::default() };
    let r = iperf3_client(&tb, "client", B1, s1.addr().port(), opts).expect("iperf3 client");
    eprintln!("iperf3 client -> b1: {r:?}");
    assert!(r.bits_per_second > 0.0 && r.bytes_received > 0, "{r:?}");
    assert!(r.seconds >= 1.5, "{r:?}");

    // Concurrent flows with known source ports, one server each.
    let _s2 = Iperf3Server::start(&tb, "b1", B1, 5202, None).expect("iperf3 server 2");
    let _s3 = Iperf3Server::start(&tb, "b2", B2, 5201, None).expect("iperf3 server 3");
    let job = |server, port, cport| IperfJob {
        server,
        port,
        opts: IperfOpts { duration: Duration::from_secs(1), cport: Some(cport), ..IperfOpts::default() },
    };
    let reports =
        iperf3_clients(&tb, "client", &[job(B1, 5202, 40001), job(B2, 5201, 40002)]).expect("concurrent clients");
    assert_eq!(reports.len(), 2);
    assert_eq!((reports[0].local_port, reports[1].local_port), (40001, 40002));
    assert!(reports.iter().all(|r| r.bits_per_second > 0.0), "{reports:?}");

    // Nothing listens on 5999: iperf3 says so in its JSON.
    let e = iperf3_client(&tb, "client", B1, 5999, IperfOpts::default()).expect_err("no server");
    assert!(matches!(&e, AppError::Reported { message, .. } if message.contains("refused")), "{e}");
}

#[test]
fn nft_counter_counts_forwarded_icmp() {
    let Some(tb) = sfc(&["nft", "ping"]) else { return };
    let ruleset = r#"
table inet ferry_test {
    counter icmp_fwd { }
    chain forward {
        type filter hook forward priority 0; policy accept;
        meta l4proto icmp counter name "icmp_fwd"
    }
}
"#;
    nft_apply(&tb, "dut", ruleset).expect("nft -f");
    assert_eq!(nft_counter(&tb, "dut", "inet", "ferry_test", "icmp_fwd").expect("counter"), (0, 0));
    assert!(common::ping(|| tb.exec("client", "ping", ["-c", "1", "-W", "5", "10.10.2.11"])), "ping b1");
    let (packets, bytes) = nft_counter(&tb, "dut", "inet", "ferry_test", "icmp_fwd").expect("counter");
    // Echo request and reply are both forwarded by dut.
    assert!(packets >= 2 && bytes >= 2 * 84, "packets {packets}, bytes {bytes}");

    let e = nft_apply(&tb, "dut", "table inet broken { chain c { bogus } }\n").expect_err("bad ruleset");
    assert!(matches!(&e, AppError::Failed { stderr, .. } if stderr.contains("syntax error")), "{e}");
    let e = nft_counter(&tb, "dut", "inet", "ferry_test", "no_such_counter").expect_err("no counter");
    assert!(matches!(e, AppError::Failed { .. }), "{e}");
}

#[test]
fn start_failures_carry_the_log() {
    let Some(tb) = sfc(&["nginx", "haproxy", "iperf3"]) else { return };
    // Addresses the namespace does not have: bind() fails at once.
    let e = Nginx::start(&tb, "b1", SocketAddrV4::new(B2, 80), "wrongaddr", NginxOpts::default())
        .expect_err("nginx on a foreign address");
    let s = e.to_string();
    assert!(matches!(e, AppError::StartFailed { .. }), "{s}");
    assert!(s.contains("nginx[wrongaddr]") && s.contains("Cannot assign requested address"), "{s}");

    let e = Haproxy::start(
        &tb,
        "dut",
        SocketAddrV4::new(VIP, 80),
        &[(SocketAddrV4::new(B1, 80), 1)],
        HaproxyOpts::default(),
    )
    .expect_err("haproxy without the VIP on lo");
    let s = e.to_string();
    assert!(matches!(e, AppError::StartFailed { .. }), "{s}");
    assert!(s.contains("haproxy") && s.contains("10.10.9.9:80"), "{s}");

    let e = Iperf3Server::start(&tb, "b1", B2, 5201, None).expect_err("iperf3 on a foreign address");
    assert!(matches!(e, AppError::StartFailed { .. }), "{e}");

    let e = wrk(&tb, "client", "http://10.10.2.11/", WrkOpts { connections: 1, threads: 2, ..WrkOpts::default() })
        .expect_err("threads > connections");
    assert!(matches!(e, AppError::InvalidOptions { .. }), "{e}");
}

#[test]
fn cpu_meter_sees_a_busy_process() {
    // No namespace needed: the meter reads /proc.
    let mut busy = Command::new("sh").args(["-c", "while :; do :; done"]).stdin(Stdio::null()).spawn().expect("sh");
    let mut idle = Command::new("sleep").arg("30").spawn().expect("sleep");
    let m = CpuMeter::start(&[busy.id(), idle.id()]).expect("meter start");
    std::thread::sleep(Duration::from_millis(1000));
    let r = m.stop();
    for c in [&mut busy, &mut idle] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let r = r.expect("meter stop");
    eprintln!("{r:?}");
    let busy_pct = r.pid_percent(busy.id()).expect("busy measured");
    let idle_pct = r.pid_percent(idle.id()).expect("idle measured");
    // The loop was runnable for the whole second, so the scheduler gave it
    // some of it however loaded the machine: at least one clock tick (how
    // much is the load's business, not the meter's).
    let ticks = busy_pct / 100.0 * r.elapsed.as_secs_f64() * 100.0;
    assert!(ticks >= 1.0, "busy loop at {busy_pct}%");
    assert!(idle_pct < 5.0, "sleep at {idle_pct}%");
    assert!(r.total_busy_percent >= busy_pct * 0.5, "{r:?}");
    assert_eq!(r.softirq_percent_per_cpu.len(), r.busy_percent_per_cpu.len());
    assert!(r.elapsed >= Duration::from_millis(1000));
}

/// The HAProxy baseline numbers: `cargo test -p ferry-testbed --test apps
/// -- --ignored --nocapture bench_haproxy`. wrk on CPU 0, HAProxy on CPU 1,
/// nginx unpinned, 5 s per point.
#[test]
#[ignore = "benchmark, ~15 s; run explicitly"]
fn bench_haproxy_wrk() {
    let Some(tb) = sfc(&["nginx", "haproxy", "wrk"]) else { return };
    let (b1, b2) = backends(&tb);
    add_vip(&tb);
    let lb = Haproxy::start(
        &tb,
        "dut",
        SocketAddrV4::new(VIP, 80),
        &[(b1.listen(), 1), (b2.listen(), 1)],
        HaproxyOpts { cpu: Some(1), nbthread: 1 },
    )
    .expect("haproxy");
    let threads: u32 = std::env::var("FERRY_WRK_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(1);
    for connections in [4, 36] {
        let opts =
            WrkOpts { connections, threads, duration: Duration::from_secs(5), cpu: Some(0), ..WrkOpts::default() };
        let mut pids = vec![lb.pid()];
        pids.extend(b1.pids());
        pids.extend(b2.pids());
        let meter = CpuMeter::start(&pids).expect("meter");
        let t = Instant::now();
        let r = wrk(&tb, "client", "http://10.10.9.9/", opts).expect("wrk");
        let cpu = meter.stop().expect("meter stop");
        println!(
            "c={connections} t={threads}: {:.0} req/s, {} requests, avg {:.0} us, p50 {:.0} us, p90 {:.0} us, \
             p99 {:.0} us, errors {}, non-2xx {} ({:?})",
            r.requests_per_sec,
            r.requests,
            r.latency_avg_us,
            r.latency_p50_us,
            r.latency_p90_us,
            r.latency_p99_us,
            r.socket_errors,
            r.non_2xx,
            t.elapsed()
        );
        println!(
            "  cpu: haproxy {:.0}%, nginx b1 {:.0}%, nginx b2 {:.0}%, softirq per cpu {:?}, busy per cpu {:?}",
            cpu.sum_percent(&[lb.pid()]),
            cpu.sum_percent(&b1.pids()),
            cpu.sum_percent(&b2.pids()),
            cpu.softirq_percent_per_cpu.iter().map(|v| v.round()).collect::<Vec<_>>(),
            cpu.busy_percent_per_cpu.iter().map(|v| v.round()).collect::<Vec<_>>(),
        );
        assert!(r.requests > 0);
    }
    assert!(Path::new(lb.dir()).exists());
}
