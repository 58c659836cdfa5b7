//! Helpers of the tests that run chains under ferryd.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_chain::proto::{self, Status};
use ferry_cli::chainctl::{self, counter, RunningChain};

use super::{Ferry, TempDir, FERRY};

/// gen (g0) -- (d0) dut (d1) -- (s0) sink: a chain's two ports in `dut`,
/// a generator and a sink on either side.
pub const PORTS_TESTBED: &str = r#"
name: chain-ports
namespaces:
  - name: gen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: dut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: sink
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:01:01" }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:01:02" }
  - a: { ns: dut, dev: d1, mac: "02:00:00:00:02:02" }
    b: { ns: sink, dev: s0, mac: "02:00:00:00:02:01" }
"#;

/// Writes `yaml` as the chain file and starts ferryd on it.
pub fn start(dir: &TempDir, yaml: &str) -> (RunningChain, PathBuf) {
    let chain = dir.path("chain.yaml");
    std::fs::write(&chain, yaml).unwrap();
    let socket = dir.path("ferryd.sock");
    let rc = chainctl::start(&chain, &socket, false).unwrap_or_else(|e| panic!("chain up: {e:#}"));
    (rc, chain)
}

/// NF `nf`'s counter `name`.
pub fn c(s: &Status, nf: &str, name: &str) -> u64 {
    counter(s, nf, name)
}

pub fn pid_of(s: &Status, nf: &str) -> u32 {
    s.nfs.iter().find(|n| n.name == nf).and_then(|n| n.pid).unwrap_or_else(|| panic!("no pid for {nf}"))
}

/// Every frame of every domain is in exactly one place. An audit in which
/// a live NF thread did not acknowledge ferryd's pause in time (a loaded
/// machine can keep it off its CPU that long) checked nothing, so it is
/// repeated until every thread answers.
pub fn assert_conserved(rc: &RunningChain) {
    let reports = super::wait_for("an audit every NF thread answered", || {
        let reports = rc.audit().expect("audit");
        reports.iter().all(|r| r.unresponsive.is_empty()).then_some(reports)
    });
    for r in reports {
        assert!(r.conserved(), "frame conservation violated: {r:?}");
    }
}

/// `ferry nf serve --kind fwd` as NF `nf` of `chain` at ferryd's NF
/// socket `socket`, run as `uid` with `env` added.
pub fn nf_process(socket: &Path, (chain, nf): (&str, &str), uid: u32, env: &[(&str, &str)]) -> Ferry {
    let mut cmd = Command::new(FERRY);
    cmd.args(["nf", "serve", "--kind", "fwd"]).env(proto::ENV_SOCKET, socket);
    // Started by hand, an NF is told its chain (ferryd hosts several);
    // untold, it finds the chain whose keys hold its own.
    if !chain.is_empty() {
        cmd.env(proto::ENV_CHAIN, chain);
    }
    cmd.env(proto::ENV_NF, nf);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.uid(uid).gid(uid).current_dir("/");
    Ferry::spawn_cmd(cmd, format!("NF process {chain}/{nf} as uid {uid}"))
}

/// `GET path` on `addr` (`host:port`): (status line, body).
pub fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP address");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// A line of /proc/PID/status, its fields after the name.
pub fn proc_status(pid: u32, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"));
    line[key.len()..].split_whitespace().map(str::to_string).collect()
}

/// Sends `count` UDP frames of `flows` flows from g0 to d0's MAC (as
/// [`PORTS_TESTBED`] has it) at `rate` pps and checks the generator sent
/// them all.
pub fn send_from_gen(tb: &ferry_testbed::Testbed, count: u64, rate: u64, flows: u32) {
    let (count_s, rate_s, flows_s) = (count.to_string(), rate.to_string(), format!("flows={flows}"));
    let args = [
        "gen",
        "xsk",
        "--dev",
        "g0",
        "--count",
        &count_s,
        "--rate",
        &rate_s,
        "--dst-mac",
        "02:00:00:00:01:02",
        "--set",
        &flows_s,
        "--json",
    ];
    let gen = Ferry::spawn(tb, "gen", &args).wait_json(std::time::Duration::from_secs(60));
    assert_eq!(super::u(&gen, "/sent"), count, "{gen:#}");
}

/// [`send_from_gen`] with an AF_XDP sink on s0; returns the sink's report
/// (it ends 1.5 s after the last frame).
pub fn generator_to_sink(tb: &ferry_testbed::Testbed, count: u64, rate: u64, flows: u32) -> serde_json::Value {
    let sink = super::spawn_sink(tb, "sink", "s0", &["--idle-exit", "1500ms"]);
    send_from_gen(tb, count, rate, flows);
    sink.wait_json(std::time::Duration::from_secs(30))
}
