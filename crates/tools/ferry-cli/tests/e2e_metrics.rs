//! ferryd's Prometheus metrics, scraped from a running chain over HTTP and
//! read with a real parser (Python's prometheus_client).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::chain::*;
use common::*;
use ferry_cli::chainctl;

const CHAIN: &str = r#"
name: metered
domains: [ { name: main, frames: 2048, ring_size: 512 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["rate=20000"] }
  - { name: mid, domain: main, kind: fwd }
  - { name: snk, domain: main, kind: sink }
links:
  - { from: src, to: mid }
  - { from: mid, to: snk }
"#;

/// The exposition parsed by prometheus_client: one line per sample,
/// `name {labels as JSON, keys sorted} value`, or the parser's error.
fn parse_with_prometheus_client(text: &str) -> String {
    let script = "import sys, json\n\
                  from prometheus_client.parser import text_string_to_metric_families\n\
                  for f in text_string_to_metric_families(sys.stdin.read()):\n\
                  \x20   for s in f.samples:\n\
                  \x20       print(s.name, json.dumps(s.labels, sort_keys=True), s.value)\n";
    // Debian's python3, for which `make deps` installs the package (a
    // python3 earlier on the PATH, such as pyenv's, may not have it).
    let python = if std::path::Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No module named 'prometheus_client'") {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but python3-prometheus-client is missing");
        return String::new();
    }
    assert!(out.status.success(), "prometheus_client refused the exposition: {err}\n{text}");
    String::from_utf8(out.stdout).unwrap()
}

fn sample(parsed: &str, name: &str, labels: &str) -> f64 {
    parsed
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} {labels} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} {labels} in:\n{parsed}"))
}

#[test]
fn metrics_are_scraped_and_parsed_by_prometheus_client() {
    if !privileged("metrics") {
        return;
    }
    let dir = TempDir::new("metrics");
    let (rc, _) = start(&dir, CHAIN);
    wait_until("traffic at the sink", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 1000));
    let addr = chainctl::metrics_addr(&rc.admin).unwrap().expect("ferryd serves metrics");
    assert!(addr.starts_with("127.0.0.1:"), "localhost only: {addr}");
    let (status, body) = http_get(&addr, "/metrics");
    assert!(status.contains(" 200 "), "{status}");
    let parsed = parse_with_prometheus_client(&body);
    if parsed.is_empty() {
        eprintln!("SKIP the parse: python3-prometheus-client is not installed (make deps installs it)");
        return;
    }
    let st = rc.status().unwrap();
    let thread = |nf: &str| format!("{{\"chain\": \"metered\", \"nf\": \"{nf}\", \"thread\": \"0\"}}");
    // Counters only grow: what the scrape saw is at most what a later
    // status shows, and the sink had 1000 frames before the scrape.
    let own = "{\"chain\": \"metered\", \"name\": \"sunk\", \"nf\": \"snk\", \"thread\": \"0\"}";
    let sunk = sample(&parsed, "ferry_nf_counter_total", own);
    assert!(sunk >= 1000.0 && sunk <= c(&st, "snk", "sunk") as f64, "sunk {sunk}");
    assert!(sample(&parsed, "ferry_thread_rx_ring_total", &thread("mid")) > 0.0);
    assert!(sample(&parsed, "ferry_ring_capacity_frames", &thread("snk")) == 512.0);
    for nf in ["src", "mid", "snk"] {
        let l = format!("{{\"chain\": \"metered\", \"nf\": \"{nf}\"}}");
        assert_eq!(sample(&parsed, "ferry_nf_up", &l), 1.0, "{nf} up");
    }
    let dom = "{\"chain\": \"metered\", \"domain\": \"main\"}";
    assert_eq!(sample(&parsed, "ferry_domain_frames", dom), 2048.0);
    assert_eq!(sample(&parsed, "ferry_domain_lost_frames_total", dom), 0.0);
    assert_eq!(sample(&parsed, "ferry_chains", "{}"), 1.0);
    // Every name is Ferry's, and every counter's sample ends in _total.
    for line in parsed.lines() {
        let name = line.split(' ').next().unwrap();
        assert!(name.starts_with("ferry_"), "{line}");
    }
    for line in body.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" counter")) {
        assert!(line.split(' ').nth(2).unwrap().ends_with("_total"), "{line}");
    }
    let (status, _) = http_get(&addr, "/other");
    assert!(status.contains(" 404 "), "{status}");
    dashboard_queries_what_ferryd_exports(&body);
    rc.shutdown().unwrap();
}

/// Every family the Grafana dashboard's queries name is one ferryd
/// exports (a family is there, with its TYPE line, even before it has
/// samples).
fn dashboard_queries_what_ferryd_exports(body: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../deploy/grafana/ferry.json");
    let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    exprs.push(dash["templating"]["list"][1]["query"].as_str().unwrap().to_string());
    let mut names = std::collections::BTreeSet::new();
    for e in &exprs {
        for (i, _) in e.match_indices("ferry_") {
            let name: String = e[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            names.insert(name);
        }
    }
    assert!(names.len() >= 12, "{names:?}");
    for name in &names {
        assert!(body.lines().any(|l| l.starts_with(&format!("# TYPE {name} "))), "the dashboard queries {name}");
    }
}

/// Kills the tmux session on drop, so a failed test leaves none.
struct TmuxSession(String);

impl Drop for TmuxSession {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.0]).status();
    }
}

/// `ferry top` in a real terminal (a detached tmux pane): it redraws and
/// shows the chain's NF threads with a packet rate and their ring.
#[test]
fn ferry_top_shows_live_rates_in_a_terminal() {
    if !privileged("top") {
        return;
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but tmux is missing (make deps installs it)");
        eprintln!("SKIP ferry top: no tmux");
        return;
    }
    let dir = TempDir::new("top");
    let (rc, _) = start(&dir, CHAIN);
    wait_until("traffic at the sink", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 1000));
    let session = TmuxSession(format!("ferry-top-{}", std::process::id()));
    let cmd = format!("{FERRY} top --admin {} --interval 300ms", rc.admin.display());
    let ok = Command::new("tmux")
        .args(["new-session", "-d", "-s", &session.0, "-x", "160", "-y", "40", &cmd])
        .status()
        .expect("tmux");
    assert!(ok.success(), "tmux new-session");
    // Wait for a view in which mid forwards at a rate above zero (the
    // source sends 20 kpps); the first views may come before any traffic
    // moved between two samples.
    let pane = wait_for("ferry top to show mid forwarding", || {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &session.0]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let row = text.lines().find(|l| l.split_whitespace().nth(1) == Some("mid"))?;
        let rate: f64 = row.split_whitespace().nth(3)?.parse().ok()?;
        (rate > 0.0).then_some(text)
    });
    assert!(pane.contains("PKTS/S") && pane.contains("ferry top: 1 chains"), "{pane}");
    for nf in ["src", "snk"] {
        assert!(pane.lines().any(|l| l.split_whitespace().nth(1) == Some(nf)), "{nf} in:\n{pane}");
    }
    assert!(pane.contains("/512"), "ring fill of a 512-slot ring in:\n{pane}");
    drop(session);
    rc.shutdown().unwrap();
}
