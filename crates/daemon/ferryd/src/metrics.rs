//! Every counter of every chain in the Prometheus text format (0.0.4),
//! served over HTTP (`GET /metrics`) on localhost by default.
//!
//! Families, all with the `ferry_` prefix and bounded labels (chain, NF,
//! domain and port names come from chain files; thread indices are at most
//! 64; counter names are the framework's fixed list or an NF's, at most
//! 24 of at most 64 characters):
//! * `ferry_thread_<counter>_total{chain,nf,thread}`: the framework's
//!   per-thread counters (`ferry_chain::shm::COUNTERS`), packets or events;
//! * `ferry_nf_counter_total{chain,nf,thread,name}`: an NF's own counters;
//! * `ferry_ring_depth_frames` / `ferry_ring_capacity_frames`
//!   `{chain,nf,thread}`: the thread's receive ring;
//! * `ferry_thread_loops_total{chain,nf,thread}`: data-loop iterations;
//! * `ferry_nf_up`, `ferry_nf_restarts_total`, `ferry_nf_cpu_seconds_total`
//!   `{chain,nf}`;
//! * `ferry_ips_alerts_total{chain,nf,gid,sid}`: an IPS's alerts per
//!   rule (one label set per rule of its file: bounded by the file);
//! * `ferry_domain_frames`, `ferry_domain_pool_frames`,
//!   `ferry_domain_reclaimed_frames_total`, `ferry_domain_lost_frames_total`,
//!   `ferry_domain_duplicated_frames_total`, `ferry_domain_audits_total`
//!   `{chain,domain}`, plus `tenant` for a tenant's domains;
//! * `ferry_xdp_packets_total` / `ferry_xdp_bytes_total`
//!   `{chain,port,verdict}`: each port's XDP program;
//! * `ferry_classifier_frames_total{chain,port,rule,entry}`: frames each
//!   tenant classification rule of a port took (rule: its index, 0 to
//!   63, or `none` for what no rule took);
//! * `ferry_xdp_nf_counter_total{chain,nf,port,name}`: the counters of
//!   NFs the orchestrator placed in XDP (a flow monitor's flows are not
//!   exported: one label set per flow would be unbounded; `ferry chain
//!   show --json` has them);
//! * `ferry_listener_events_total{listener,event}`: what became of the
//!   connections to ferryd's NF socket, admin socket and mutual-TLS
//!   listener (accepted, timed out, closed for a limit, refused
//!   handshakes...: fixed names);
//! * `ferry_chains`: chains deployed.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use ferry_chain::proto::Status;
use ferry_chain::shm::COUNTERS;

use crate::chain::Chain;

/// A label value, escaped as the format wants.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes one family: HELP, TYPE, then its samples (labels, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

/// The whole exposition for `chains` and ferryd's `listeners` counters
/// (`listener.event`).
pub fn render(chains: &[Arc<Chain>], listeners: &[(String, u64)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP ferry_chains Chains deployed on this ferryd.");
    let _ = writeln!(out, "# TYPE ferry_chains gauge");
    let _ = writeln!(out, "ferry_chains {}", chains.len());
    let events: Vec<(String, u64)> = listeners
        .iter()
        .filter_map(|(k, v)| {
            let (listener, event) = k.split_once('.')?;
            Some((format!("listener=\"{}\",event=\"{}\"", esc(listener), esc(event)), *v))
        })
        .collect();
    let help = "Connections to ferryd's listeners, by what became of them.";
    family(&mut out, "ferry_listener_events_total", "counter", help, &events);
    let statuses: Vec<_> = chains.iter().map(|c| c.status()).collect();
    thread_families(&mut out, &statuses);
    nf_families(&mut out, &statuses);
    domain_families(&mut out, &statuses);
    port_families(&mut out, &statuses);
    offloaded_family(&mut out, &statuses);
    out
}

/// Labels of one NF thread's samples.
fn thread_labels(chain: &str, nf: &str, t: usize) -> String {
    format!("chain=\"{}\",nf=\"{}\",thread=\"{t}\"", esc(chain), esc(nf))
}

/// Per NF thread: the framework's counters, the NF's own, its ring.
fn thread_families(out: &mut String, statuses: &[Status]) {
    for (k, counter) in COUNTERS.iter().enumerate() {
        let mut samples = Vec::new();
        for s in statuses {
            for n in &s.nfs {
                for (t, th) in n.threads.iter().enumerate() {
                    samples.push((thread_labels(&s.chain, &n.name, t), th[k].1));
                }
            }
        }
        let name = format!("ferry_thread_{counter}_total");
        family(out, &name, "counter", &format!("Framework counter {counter} of each NF thread."), &samples);
    }
    let mut own = Vec::new();
    for s in statuses {
        for n in &s.nfs {
            for (t, th) in n.threads.iter().enumerate() {
                for (name, v) in &th[COUNTERS.len()..] {
                    own.push((format!("{},name=\"{}\"", thread_labels(&s.chain, &n.name, t), esc(name)), *v));
                }
            }
        }
    }
    family(out, "ferry_nf_counter_total", "counter", "An NF's own counters, per thread.", &own);
    let (mut depth, mut capacity, mut loops) = (Vec::new(), Vec::new(), Vec::new());
    for s in statuses {
        for n in &s.nfs {
            for (t, r) in n.rings.iter().enumerate() {
                depth.push((thread_labels(&s.chain, &n.name, t), r.depth));
                capacity.push((thread_labels(&s.chain, &n.name, t), r.capacity));
                loops.push((thread_labels(&s.chain, &n.name, t), r.loops));
            }
        }
    }
    family(out, "ferry_ring_depth_frames", "gauge", "Frames queued on the thread's receive ring.", &depth);
    family(out, "ferry_ring_capacity_frames", "gauge", "Slots of the thread's receive ring.", &capacity);
    family(out, "ferry_thread_loops_total", "counter", "Data-loop iterations (receive calls).", &loops);
}

/// Per NF: up, CPU time, restarts.
fn nf_families(out: &mut String, statuses: &[Status]) {
    let (mut up, mut restarts) = (Vec::new(), Vec::new());
    for s in statuses {
        for n in &s.nfs {
            let l = format!("chain=\"{}\",nf=\"{}\"", esc(&s.chain), esc(&n.name));
            up.push((l.clone(), u64::from(n.connected)));
            restarts.push((l, u64::from(n.restarts)));
        }
    }
    family(out, "ferry_nf_up", "gauge", "1 while the NF is connected.", &up);
    let _ = writeln!(out, "# HELP ferry_nf_cpu_seconds_total CPU time of the NF's process (user + system).");
    let _ = writeln!(out, "# TYPE ferry_nf_cpu_seconds_total counter");
    for s in statuses {
        for n in &s.nfs {
            if let Some(cpu) = n.cpu_seconds {
                let _ = writeln!(
                    out,
                    "ferry_nf_cpu_seconds_total{{chain=\"{}\",nf=\"{}\"}} {cpu}",
                    esc(&s.chain),
                    esc(&n.name)
                );
            }
        }
    }
    family(out, "ferry_nf_restarts_total", "counter", "Restarts of the NF after it died.", &restarts);
    let mut alerts = Vec::new();
    for s in statuses {
        for n in &s.nfs {
            for a in &n.alerts {
                let l =
                    format!("chain=\"{}\",nf=\"{}\",gid=\"{}\",sid=\"{}\"", esc(&s.chain), esc(&n.name), a.gid, a.sid);
                alerts.push((l, a.alerts));
            }
        }
    }
    family(out, "ferry_ips_alerts_total", "counter", "Alerts an IPS raised, per rule.", &alerts);
}

/// Per domain: its frames, pool, reclaimed, lost and duplicated frames.
fn domain_families(out: &mut String, statuses: &[Status]) {
    type DomainValue = fn(&ferry_chain::proto::DomainStatus) -> u64;
    let domain_families: [(&str, &str, &str, DomainValue); 6] = [
        ("ferry_domain_frames", "gauge", "UMEM frames of the domain.", |d| d.frames_total),
        ("ferry_domain_pool_frames", "gauge", "Frames in the domain's shared free pool.", |d| d.in_pool),
        ("ferry_domain_reclaimed_frames_total", "counter", "Frames reclaimed from dead NFs.", |d| d.reclaimed),
        ("ferry_domain_lost_frames_total", "counter", "Frames audits found nowhere (must stay 0).", |d| d.lost),
        ("ferry_domain_duplicated_frames_total", "counter", "Frames audits found twice (must stay 0).", |d| {
            d.duplicated
        }),
        ("ferry_domain_audits_total", "counter", "Frame audits run.", |d| d.audits),
    ];
    for (name, kind, help, value) in domain_families {
        let mut samples = Vec::new();
        for s in statuses {
            for d in &s.domains {
                // A tenant's domains carry its name, so a tenant's frames
                // and pool can be summed (`sum by (tenant)`).
                let tenant = d.tenant.as_deref().map(|t| format!(",tenant=\"{}\"", esc(t))).unwrap_or_default();
                let labels = format!("chain=\"{}\",domain=\"{}\"{tenant}", esc(&s.chain), esc(&d.name));
                samples.push((labels, value(d)));
            }
        }
        family(out, name, kind, help, &samples);
    }
}

/// Per port: its XDP program's verdicts and its classifier's rules.
fn port_families(out: &mut String, statuses: &[Status]) {
    let (mut packets, mut bytes) = (Vec::new(), Vec::new());
    for s in statuses {
        for port in &s.ports {
            for (verdict, p, b) in &port.verdicts {
                let l = format!("chain=\"{}\",port=\"{}\",verdict=\"{verdict}\"", esc(&s.chain), esc(&port.name));
                packets.push((l.clone(), *p));
                bytes.push((l, *b));
            }
        }
    }
    family(out, "ferry_xdp_packets_total", "counter", "Packets by verdict of each port's XDP program.", &packets);
    family(out, "ferry_xdp_bytes_total", "counter", "Bytes by verdict of each port's XDP program.", &bytes);
    let mut classified = Vec::new();
    for s in statuses {
        for (port, c) in s.ports.iter().filter_map(|p| Some((&p.name, p.classified.as_ref()?))) {
            let at = |rule: &str, entry: &str| {
                format!("chain=\"{}\",port=\"{}\",rule=\"{rule}\",entry=\"{}\"", esc(&s.chain), esc(port), esc(entry))
            };
            for (i, (_, entry, frames)) in c.rules.iter().enumerate() {
                classified.push((at(&i.to_string(), entry), *frames));
            }
            classified.push((at("none", ""), c.unmatched));
        }
    }
    let help = "Frames each tenant classification rule took (rule index; \"none\": no rule).";
    family(out, "ferry_classifier_frames_total", "counter", help, &classified);
}

/// The counters of the NFs placed in XDP.
fn offloaded_family(out: &mut String, statuses: &[Status]) {
    let mut offloaded = Vec::new();
    for s in statuses {
        for n in &s.offloaded {
            for (name, v) in &n.counters {
                let l = format!(
                    "chain=\"{}\",nf=\"{}\",port=\"{}\",name=\"{}\"",
                    esc(&s.chain),
                    esc(&n.name),
                    esc(&n.port),
                    esc(name)
                );
                offloaded.push((l, *v));
            }
        }
    }
    let help = "Counters of the NFs placed in XDP, by port (packets).";
    family(out, "ferry_xdp_nf_counter_total", "counter", help, &offloaded);
}

/// Serves `GET /metrics` on `addr` from a thread; returns the address
/// bound (port 0 picks one).
pub fn serve(
    addr: SocketAddr,
    chains: impl Fn() -> Vec<Arc<Chain>> + Send + 'static,
    listeners: impl Fn() -> Vec<(String, u64)> + Send + 'static,
) -> Result<SocketAddr> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("metrics on {addr}"))?;
    let bound = server.server_addr().to_ip().context("metrics: not an IP address")?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for req in server.incoming_requests() {
            let reply = if req.url() == "/metrics" && *req.method() == tiny_http::Method::Get {
                let header = tiny_http::Header::from_bytes("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    .expect("a valid header");
                tiny_http::Response::from_string(render(&chains(), &listeners())).with_header(header)
            } else {
                tiny_http::Response::from_string("ferryd serves GET /metrics\n").with_status_code(404)
            };
            if let Err(e) = req.respond(reply) {
                tracing::warn!("metrics: {e}");
            }
        }
    })?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn no_chain_still_renders_every_family() {
        let text = render(&[], &[]);
        assert!(text.starts_with("# HELP ferry_chains"), "{text}");
        assert!(text.contains("ferry_chains 0\n"));
        for f in [
            "ferry_thread_rx_port_total",
            "ferry_nf_counter_total",
            "ferry_xdp_packets_total",
            "ferry_xdp_nf_counter_total",
            "ferry_listener_events_total",
        ] {
            assert!(text.contains(&format!("# TYPE {f} ")), "{f}");
        }
    }
}
