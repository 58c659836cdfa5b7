//! Writes the seed corpora under `fuzz/corpus`: frames of every shape
//! the parsers handle, the example chain, eVNF and rule files, a message
//! of each simple kind, and a state file of each example chain. Run once
//! when a format changes: `cargo run -p ferry-fuzz --example seeds`;
//! `make fuzz-all` then grows the corpora from them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ferry_chain::plan::ChainPlan;
use ferry_chain::proto::{frame, Msg};
use ferry_traffic::{FlowSchedule, TemplateCache, TrafficProfile};
use ferry_wire::mica::{emit_batch, MicaRequestRepr};
use ferry_wire::nsh::{NshContext, NshRepr, ETHERTYPE_NSH};
use ferry_wire::{build_frame, vxlan_gpe, FiveTuple, FrameSpec, L4Proto, Stamp};

/// What the rule targets draw a few rules from: prefixes of both
/// families, protocols and port ranges of every kind.
const RULE_BYTES: [u8; 48] = [
    3, 1, 1, 10, 0, 0, 0, 8, 2, 32, 1, 13, 184, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 48, 0, 1, 0, 53, 0, 53, 1, 0, 2, 1,
    192, 0, 2, 0, 24, 0, 0, 0, 80, 0, 80, 1,
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = repo().join("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

/// UDP, TCP and ICMP over IPv4 and IPv6, stamped, untagged, tagged and
/// double-tagged.
fn frames() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let addrs: [(&str, IpAddr, IpAddr); 2] = [
        ("v4", "10.0.0.1".parse().unwrap(), "192.0.2.7".parse().unwrap()),
        ("v6", "2001:db8::1".parse().unwrap(), "2001:db8:ff::2".parse().unwrap()),
    ];
    for (family, src, dst) in addrs {
        for (pname, proto) in [("udp", L4Proto::Udp), ("tcp", L4Proto::Tcp), ("icmp", L4Proto::Icmp)] {
            let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 96 };
            let t = FiveTuple { src_ip: src, dst_ip: dst, src_port: 1000, dst_port: 53, proto };
            let mut f = vec![0u8; spec.frame_len];
            build_frame(&spec, &t, Some(&Stamp { stream: 1, seq: 2, tx_ns: 3 }), &mut f).unwrap();
            let tagged = [&f[..12], &[0x81, 0, 0, 7], &f[12..]].concat();
            let qinq = [&f[..12], &[0x88, 0xa8, 0, 100, 0x81, 0, 0, 200], &f[12..]].concat();
            out.push((format!("{family}-{pname}"), f));
            out.push((format!("{family}-{pname}-vlan"), tagged));
            out.push((format!("{family}-{pname}-qinq"), qinq));
        }
    }
    out
}

/// Frames Linux sent (ping -6, neighbor discovery, MLD), as captured.
mod linux6 {
    include!("../../../base/ferry-wire/testdata/linux_ipv6_frames.rs");
}

fn captured() -> Vec<(String, Vec<u8>)> {
    use linux6::*;
    let frames: [(&str, &[u8]); 5] = [
        ("linux-ping6-request", &PING6_REQUEST),
        ("linux-ping6-reply", &PING6_REPLY),
        ("linux-neighbor-solicitation", &NEIGHBOR_SOLICITATION),
        ("linux-neighbor-advertisement", &NEIGHBOR_ADVERTISEMENT),
        ("linux-mld-report", &MLD_REPORT),
    ];
    frames.iter().map(|(n, f)| (n.to_string(), f.to_vec())).collect()
}

/// Frames as `ferry gen` makes and the traffic tests capture: a few of
/// each profile (UDP and TCP, IPv4 and IPv6, flows and ports varied).
fn generated() -> Vec<(String, Vec<u8>)> {
    let profiles: [(&str, &[(&str, &str)]); 4] = [
        ("udp4", &[("proto", "udp")]),
        ("tcp4", &[("proto", "tcp"), ("dst_port", "80-90")]),
        ("udp6", &[("proto", "udp"), ("src_ip", "2001:db8::1"), ("dst_ip", "2001:db8::2")]),
        ("tcp6", &[("proto", "tcp"), ("src_ip", "2001:db8::1"), ("dst_ip", "2001:db8::2")]),
    ];
    let mut out = Vec::new();
    for (name, settings) in profiles {
        let mut p = TrafficProfile { frame_len: 128, active_flows: 4, seed: 7, ..Default::default() };
        for (k, v) in settings {
            p.set(k, v).unwrap();
        }
        let mut sched = FlowSchedule::new(&p).unwrap();
        let mut cache = TemplateCache::new(p.frame_spec(), p.version(), p.proto.into(), sched.active_flows());
        let mut buf = [0u8; 256];
        for seq in 0..4u32 {
            let n = cache.write_frame(&sched.next_packet(), &Stamp { stream: 0, seq, tx_ns: 1 }, &mut buf).unwrap();
            out.push((format!("gen-{name}-{seq}"), buf[..n].to_vec()));
        }
    }
    out
}

/// NSH (MD type 1 and 2) after Ethernet and in VXLAN-GPE over UDP.
fn nsh_frames() -> Vec<(String, Vec<u8>)> {
    let tlvs = [0x01, 0x02, 0x03, 0x05, 1, 2, 3, 4, 5, 0, 0, 0];
    let headers = [("md1", NshContext::Md1([7; 16])), ("md2", NshContext::Md2(&tlvs))];
    let mut out = Vec::new();
    for (name, context) in headers {
        let repr = NshRepr { oam: false, ttl: 63, next_protocol: 1, spi: 0x12_3456, si: 254, context };
        let mut h = vec![0u8; repr.buffer_len()];
        repr.emit(&mut h);
        out.push((format!("{name}-header"), h.clone()));
        out.push((
            format!("{name}-ethernet"),
            [&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1][..], &ETHERTYPE_NSH.to_be_bytes(), &h].concat(),
        ));
        let mut gpe = [0u8; 8];
        vxlan_gpe::emit(&mut gpe, 7, vxlan_gpe::next_proto::NSH);
        out.push((format!("{name}-gpe-header"), [&gpe[..], &h].concat()));
        let udp_len = (8 + gpe.len() + h.len()) as u16;
        let total = 20 + udp_len;
        let ip = [0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 2, 2];
        let udp = [[0xc0, 0x00], vxlan_gpe::UDP_PORT.to_be_bytes(), udp_len.to_be_bytes(), [0, 0]].concat();
        let eth = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        out.push((format!("{name}-vxlan-gpe"), [&eth[..], &ip, &udp, &gpe, &h].concat()));
    }
    out
}

fn mica_batch() -> Vec<u8> {
    let get = MicaRequestRepr { operation: 1, result: 0, key_hash: 7, opaque: 1, key: b"key00007", value: b"" };
    let set = MicaRequestRepr { operation: 2, result: 0, key_hash: 9, opaque: 2, key: b"key9", value: b"value" };
    let mut buf = vec![0u8; ferry_wire::mica::batch_len(&[get, set])];
    emit_batch(&mut buf, ferry_wire::mica::MAGIC_REQUEST, &[get, set]);
    buf
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn copy_files(target: &str, dir: &str, ext: &str) {
    for p in files(dir, ext) {
        write(target, &p.file_name().unwrap().to_string_lossy(), &std::fs::read(&p).unwrap());
    }
}

fn messages() {
    let texts = [
        r#"{"type":"list"}"#,
        r#"{"type":"ok"}"#,
        r#"{"type":"remove","chain":"demo"}"#,
        r#"{"type":"hello","chain":"demo","nf":"fw","pid":42,"counters":["pass","drop"],"key":"k"}"#,
        r#"{"type":"deploy","file":"/etc/ferry/chains/demo.yaml","set":[["a","b"]]}"#,
        r#"{"type":"error","message":"no chain \"x\""}"#,
        r#"{"type":"info-reply","metrics":"127.0.0.1:9100","listen":null}"#,
    ];
    for (i, t) in texts.iter().enumerate() {
        let msg: Msg = serde_json::from_str(t).unwrap();
        let mut two = frame(&msg).unwrap();
        write("control-protocol", &format!("msg{i}"), &two);
        two.extend_from_slice(&frame(&Msg::List).unwrap());
        write("control-protocol", &format!("msg{i}-then-list"), &two);
    }
}

/// `text` with each placeholder filled with its own name (`{dut}`: dut).
fn filled(text: &str) -> String {
    let mut text = text.to_string();
    while let Some((_, _, name)) = ferry_chain::spec::unfilled_placeholder(&text) {
        let name = name.to_string();
        text = ferry_chain::spec::fill_placeholders(&text, &[(name.clone(), name)]);
    }
    text
}

/// A state file of each example chain that loads without its files.
fn states() {
    for p in files("examples/chains", "yaml") {
        let text = filled(&std::fs::read_to_string(&p).unwrap());
        write("chain-file", &format!("filled-{}", p.file_name().unwrap().to_string_lossy()), text.as_bytes());
        let spec = match ferry_catalog::parse_chain_str(&text, &p.to_string_lossy()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("no state seed of {}: {e}", p.display());
                continue;
            }
        };
        let plan = ChainPlan::compile(&spec);
        let n = plan.nfs.len();
        let state = serde_json::json!({
            "version": ferryd::persist::STATE_VERSION, "id": 1, "nf_ids": (1..=n as u32).collect::<Vec<_>>(),
            "file": p, "placement": "process", "plan": plan,
            "creds": vec![(1000, 1000, "ferry-nf"); n], "leases": [1000],
            "domains": plan.domains.iter().map(|_| serde_json::json!({
                "umem": [1, 2], "region": [3, 4], "data": [5], "room": [6]})).collect::<Vec<_>>(),
            "pins": plan.ports.iter().map(|_| None::<String>).collect::<Vec<_>>(),
            "nfs": vec![serde_json::json!({"process": [42, 7], "generation": 1, "restarts": 0, "counters": ["pass"]}); n],
            "keys": vec![Some("k"); n],
        });
        let bytes = serde_json::to_vec_pretty(&state).unwrap();
        ferryd::persist::ChainState::from_bytes(&bytes).expect("a seed state loads");
        write("state-file", &p.file_stem().unwrap().to_string_lossy(), &bytes);
    }
}

fn main() {
    for (name, f) in frames().into_iter().chain(captured()).chain(generated()) {
        for target in ["frame", "parse-diff"] {
            write(target, &name, &f);
        }
        // A frame, then bytes to draw rules from (differential::frame_then_rules).
        let with_rules = [&(f.len() as u16).to_be_bytes()[..], &f, &RULE_BYTES].concat();
        for target in ["acl-diff", "classify-diff"] {
            write(target, &name, &with_rules);
        }
    }
    for (name, f) in nsh_frames() {
        let target = if name.ends_with("header") { "nsh" } else { "parse-diff" };
        write(target, &name, &f);
    }
    write("mica", "get-set", &mica_batch());
    copy_files("chain-file", "examples/chains", "yaml");
    copy_files("chain-file", "examples/peers", "yaml");
    copy_files("evnf-file", "examples/evnf", "yaml");
    write("firewall-rules", "sfc-fw.rules", &std::fs::read(repo().join("examples/chains/sfc-fw.rules")).unwrap());
    write("ips-rules", "sfc-ips.rules", &std::fs::read(repo().join("examples/chains/sfc-ips.rules")).unwrap());
    let classify = "out=0,dst=10.1.0.0/16\nout=1,vlan=200\nout=2,src=2001:db8::/32,dport=53\nout=3,inner_vlan=7";
    write("classifier-rules", "edge", classify.as_bytes());
    messages();
    states();
}
