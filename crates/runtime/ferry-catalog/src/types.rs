//! The catalog's entries: gathered from where each NF is implemented, plus
//! the NF host's own loops ([`crate::host::loops`]: forwarders, a source and
//! a sink for chain tests and benchmarks, Maglev, the tenant router).

use ferry_nf::model::{ArgSpec, ArgType, Element, ExecModel, Offload};
use ferry_nf::NfError;
use ferry_parallel::live::counter::DstCounter;
use ferry_parallel::live::registry::RegisteredNf;
use ferry_parallel::nfs::policer::Policer;
use ferry_parallel::nfs::{anti_ddos::AntiDdos, bridge::Bridge, firewall::Firewall, maglev::Maglev, nat::Nat};

use crate::host::{self, loops, Serve};
use crate::{find, Args, KindError, NfType, Runner, Values};

const fn arg(key: &'static str, ty: ArgType, default: Option<&'static str>, help: &'static str) -> ArgSpec {
    ArgSpec { key, ty, default, help }
}

const fn u64_in(min: u64, max: u64) -> ArgType {
    ArgType::U64 { min, max }
}

/// The arguments the NF host takes for every parallel NF, on top of
/// the NF's own. The defaults are the live runtime's
/// (`ferry_parallel::live::DEFAULT_*`; a test keeps them equal).
pub const PARALLEL_HOST_ARGS: [ArgSpec; 5] = [
    arg("workers", u64_in(1, 64), Some("1"), "worker threads (cores) running the handlers"),
    arg("batch", u64_in(1, 1024), Some("32"), "packets per transaction"),
    arg("queue", u64_in(1, 4096), Some("8"), "batches queued per worker"),
    arg("tick_us", u64_in(1, 60_000_000), Some("10000"), "tick of idle workers with timers, µs"),
    arg("ring_port", u64_in(0, 65535), Some("0"), "NF port of frames from other NFs"),
];

fn serve_types() -> Vec<NfType> {
    let threaded = |kind: &str, [summary, ip]: [&'static str; 2], args, counters, elements, serve| NfType {
        kind: kind.to_string(),
        summary,
        ip,
        model: ExecModel::Threaded,
        args: Args::KeyValue(args),
        counters,
        elements,
        runner: Runner::HostLoop,
        passes: true,
        serve,
        check_built: None,
    };
    vec![
        threaded(
            "fwd",
            ["forward everything on out-link 0", "any frame"],
            vec![arg(
                "by_port",
                ArgType::Flag,
                Some("0"),
                "1: a frame from the thread's i-th port leaves by out-link i",
            )],
            vec![],
            &[Element { name: "forward", offload: Offload::Full }],
            loops::serve_forward,
        ),
        threaded(
            "split",
            [
                "spread flows over all out-links by flow hash (fan-out)",
                "hashes IPv4 and IPv6 flows (their 128-bit addresses) through up to two VLAN tags; other frames to out-link 0",
            ],
            vec![],
            vec![],
            &[Element { name: "flow-hash-classifier", offload: Offload::Full }],
            loops::serve_forward,
        ),
        threaded(
            "slow",
            [
                "burn work_ns of CPU per packet, then forward (a heavy NF for experiments)",
                "any frame",
            ],
            vec![arg("work_ns", u64_in(1, 1_000_000_000), None, "CPU to burn per packet, ns")],
            vec![],
            &[Element { name: "busy-work", offload: Offload::No }],
            loops::serve_forward,
        ),
        threaded(
            "maglev",
            [
                "Maglev load balancer: each flow to one out-link by consistent hashing (the parallel runtime's table)",
                "IPv4 and IPv6 flows alike",
            ],
            vec![arg("table_size", u64_in(2, 5_000_011), Some("65537"), "lookup table entries, a prime")],
            vec![],
            // A static table lookup: XDP does that. Connection affinity
            // across backend changes would need per-flow state (partial).
            &[Element { name: "consistent-hash-forward", offload: Offload::Full }],
            loops::serve_maglev,
        ),
        NfType {
            kind: crate::TENANT_ROUTER.to_string(),
            summary: "classify: router: each frame to the tenant entry of the first rule it matches, by copy",
            ip: "IPv4 and IPv6 prefixes; vlan= the outer (or only) tag, inner_vlan= the inner tag of QinQ",
            model: ExecModel::Threaded,
            args: Args::Positional(
                "RULE... (out=N[,src=CIDR][,dst=CIDR][,vlan=ID][,inner_vlan=ID][,dport=PORT]; first match wins)",
            ),
            counters: ferry_nf::ROUTER_COUNTERS.to_vec(),
            // The baseline of XDP classification: a process by definition.
            elements: &[Element { name: "tenant-classifier", offload: Offload::No }],
            runner: Runner::HostLoop,
            passes: true,
            serve: loops::serve_tenant_router,
            check_built: None,
        },
        threaded(
            "source",
            [
                "make stamped UDP frames in the domain's own UMEM (chaining without veth)",
                "makes IPv4 UDP only (ferry gen --profile ipv6 makes IPv6)",
            ],
            vec![
                arg("size", u64_in(60, 2048), Some("64"), "frame length, bytes"),
                arg("rate", u64_in(0, 1_000_000_000), Some("0"), "frames per second (0: as fast as it can)"),
                arg("flows", u64_in(1, 65536), Some("64"), "distinct UDP flows"),
                arg("count", u64_in(0, u64::MAX), Some("0"), "frames per thread, then stop making (0: for ever)"),
                arg(
                    "mica",
                    ArgType::Text,
                    Some(""),
                    "MICA request batches instead of stamps: keys=N,get=F,dist=uniform|zipf:S,value=B,batch=R",
                ),
            ],
            vec!["made"],
            &[],
            loops::serve_source,
        ),
        // It keeps what it receives: nothing leaves it.
        NfType {
            passes: false,
            ..threaded(
                "sink",
                [
                    "count frames, check stamps, publish latency percentiles, free them",
                    "counts any frame; reads the stamp of IPv4 and IPv6 UDP, TCP and ICMP echo",
                ],
                vec![],
                vec!["sunk", "stamped", "lat_p50_ns", "lat_p99_ns", "lat_max_ns", "lat_p999_ns"],
                &[],
                loops::serve_sink,
            )
        },
    ]
}

/// Every NF type.
pub(crate) fn all() -> Vec<NfType> {
    let mut types: Vec<NfType> = ferry_nf::registry()
        .iter()
        .map(|i| NfType {
            kind: i.spec.name.to_string(),
            summary: i.summary,
            ip: i.ip,
            model: ExecModel::PerPacket,
            args: Args::Positional(i.args),
            counters: i.spec.counters.to_vec(),
            elements: i.elements,
            runner: Runner::of(i.hosted),
            passes: i.passes,
            serve: match i.hosted {
                ferry_nf::Hosted::ExportsFlows => host::flow_monitor::serve,
                _ => host::serve_packet,
            },
            check_built: None,
        })
        .collect();
    types.extend(serve_types());
    types.push(fused_type());
    types.extend([
        parallel::<DstCounter>("counter"),
        parallel::<Nat>("nat"),
        parallel::<Bridge>("bridge"),
        parallel::<Firewall>("firewall"),
        parallel::<Maglev>("maglev"),
        parallel::<Policer>("policer"),
        parallel::<AntiDdos>("anti_ddos"),
    ]);
    for h in &ferry_evnf::types::TYPES {
        types.push(NfType {
            kind: h.kind.to_string(),
            summary: h.summary,
            ip: h.ip,
            model: ExecModel::Hybrid,
            args: Args::KeyValue(h.args.to_vec()),
            counters: ferry_evnf::types::counters(h),
            elements: h.elements,
            runner: Runner::Hybrid,
            passes: false,
            serve: host::hybrid::serve,
            check_built: None,
        });
    }
    types
}

/// What placement makes of a run of NFs with `fuse: auto`.
fn fused_type() -> NfType {
    NfType {
        kind: crate::fused::FUSED.to_string(),
        summary: "NFs run to completion in one NF's threads: what placement makes of a run of NFs with fuse: auto",
        ip: "as its stages",
        model: ExecModel::Threaded,
        args: Args::Positional(
            "@stage=NAME:KIND:N ARG... (two or more stages, each with its N arguments, as placement writes them)",
        ),
        counters: vec![],
        elements: &[],
        runner: Runner::HostLoop,
        passes: true,
        serve: host::fused::serve,
        check_built: None,
    }
}

/// Parallel NF `N` as `parallel-<name>`: the host's arguments, then its own.
fn parallel<N: RegisteredNf>(name: &'static str) -> NfType {
    let mut args = PARALLEL_HOST_ARGS.to_vec();
    args.extend(N::ARGS.iter().map(|&key| {
        arg(key, ArgType::Text, Some(""), "the NF's own (empty: the NF's default); checked by building the NF")
    }));
    let serve: Serve = host::parallel::serve::<N>;
    let check_built: crate::BuiltCheck = host::parallel::check_built::<N>;
    NfType {
        kind: format!("parallel-{name}"),
        summary: N::SUMMARY,
        ip: N::IP,
        model: ExecModel::Parallel,
        args: Args::KeyValue(args),
        counters: N::COUNTERS.to_vec(),
        elements: N::ELEMENTS,
        runner: Runner::Parallel { name },
        passes: true,
        serve,
        check_built: Some(check_built),
    }
}

/// A per-packet NF's positional `args` (from `offset` in the chain file's
/// list), checked by building it.
pub(crate) fn check_positional(kind: &str, args: &[String], offset: usize) -> Result<(), KindError> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    if kind == crate::TENANT_ROUTER {
        return ferry_wire::classify::Table::parse(&refs).map(|_| ()).map_err(|(i, e)| KindError::Invalid {
            kind: kind.to_string(),
            message: e.to_string(),
            index: Some(i + offset),
        });
    }
    let invalid = |message: String, index: Option<usize>| KindError::Invalid {
        kind: kind.to_string(),
        message,
        index: index.map(|i| i + offset),
    };
    let file_arg = ferry_nf::info(kind).and_then(|i| i.file_arg);
    if let Some((i, file)) = file_arg.and_then(|i| refs.get(i).map(|f| (i, f))) {
        if !std::path::Path::new(file).is_absolute() {
            let message =
                format!("{file:?} is a relative path, and the NF process reads it from `/`: give an absolute one");
            return Err(invalid(message, Some(i)));
        }
    }
    ferry_nf::by_name(kind, &refs).map(|_| ()).map_err(|e| {
        let index = match &e {
            NfError::BadArg { arg, .. } => refs.iter().position(|a| a == arg),
            NfError::BadFile { file, .. } => refs.iter().position(|a| a == file),
            _ => None,
        };
        // KindError names the kind already.
        let message = e.to_string();
        let message = message.strip_prefix(&format!("{kind}: ")).unwrap_or(&message).to_string();
        invalid(message, index)
    })
}

/// `a+b`: per-packet NFs joined in one process, their arguments in
/// groups separated by `--`.
pub(crate) fn check_joined(kind: &str, args: &[String]) -> Result<(), KindError> {
    let parts: Vec<&str> = kind.split('+').collect();
    for p in &parts {
        match find(p) {
            Some(t) if t.model == ExecModel::PerPacket => {}
            Some(t) => {
                return Err(KindError::Invalid {
                    kind: kind.to_string(),
                    message: format!("only per-packet NFs join with +, and {p} is {}", t.model.as_str()),
                    index: None,
                })
            }
            None => return Err(crate::unknown(p)),
        }
    }
    let mut offset = 0;
    for (p, g) in joined(kind, args)? {
        check_positional(p, g, offset)?;
        offset += g.len() + 1;
    }
    Ok(())
}

/// `a+b`'s NFs, each with its group of arguments (groups separated by
/// `--`, one per NF).
pub(crate) fn joined<'a>(kind: &'a str, args: &'a [String]) -> Result<Vec<(&'a str, &'a [String])>, KindError> {
    let parts: Vec<&str> = kind.split('+').collect();
    let groups: Vec<&[String]> = args.split(|a| a == "--").collect();
    if groups.len() != parts.len() {
        return Err(KindError::Invalid {
            kind: kind.to_string(),
            message: format!("give the arguments of each of the {} NFs, separated by \"--\"", parts.len()),
            index: None,
        });
    }
    Ok(parts.into_iter().zip(groups).collect())
}

/// A hybrid NF's `config=FILE`: the file parses and has the NF's section.
pub(crate) fn check_hybrid(kind: &str, args: &[String], values: &Values) -> Result<(), KindError> {
    let file = values.text("config").unwrap_or_default();
    ferry_evnf::chained::config(kind, std::path::Path::new(file)).map(|_| ()).map_err(|message| KindError::BadValue {
        kind: kind.to_string(),
        message,
        index: args.iter().position(|a| a.starts_with("config=")).unwrap_or(0),
    })
}
