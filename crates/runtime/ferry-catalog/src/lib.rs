//! The one registry of NF types. Every `kind:` a chain file can name, and
//! every NF `ferry nf list` shows, has one entry here that describes it
//! (name, summary, typed arguments with defaults, counters, elements with
//! their offloadability, execution model), checks its arguments
//! ([`check`]) and builds and runs it: in the NF host process (the
//! entry's [`host::Serve`], called by [`host::serve`]) and, where it is
//! offloadable, as XDP pipeline elements ([`lower`]). The NFs declare their
//! own parts where they are implemented (`ferry_nf`'s registry, the
//! parallel NFs' `RegisteredNf` impls, the hybrid NFs' types); this crate
//! gathers them into entries and adds the NF host's own loops
//! (forwarders, a source and a sink, Maglev, the tenant router).
//!
//! Readers: the chain parser ([`parse_chain`], through
//! [`ferry_chain::spec::KindCheck`]), `ferry nf list`, ferryd ([`runner`]),
//! and the NF host binary `ferry-host`, which only parses its command
//! line and calls [`host::serve`] or [`host::host`].

pub mod fused;
pub mod host;
pub mod lower;
mod types;

use std::path::Path;
use std::sync::OnceLock;

use ferry_chain::spec::{ChainSpec, KindCheck};
use ferry_config::YamlError;
use ferry_nf::args::NfArgs;
use ferry_nf::model::{nf_offload, ArgSpec, ArgType, Element, ExecModel, Offload};

pub use types::PARALLEL_HOST_ARGS;

/// The trusted router NF of `classify: router` (a chain file's classifier
/// port in router mode becomes one).
pub use ferry_chain::classify::TENANT_ROUTER;

/// One NF type.
#[derive(Debug, Clone)]
pub struct NfType {
    /// Its `kind:` in chain files.
    pub kind: String,
    pub summary: &'static str,
    /// What it does with IPv6 and with VLAN tag stacks.
    pub ip: &'static str,
    pub model: ExecModel,
    pub args: Args,
    /// Its own counters (the framework's per-thread counters come on top).
    pub counters: Vec<&'static str>,
    pub elements: &'static [Element],
    /// How the NF host runs it.
    pub runner: Runner,
    /// Whether its output leaves by its out-links, so that in a chain it
    /// needs one (what it sends would otherwise be dropped); a sink, a
    /// responder or a hybrid NF sending by its own ports does not.
    pub passes: bool,
    /// What builds and runs it in the NF host.
    pub serve: host::Serve,
    /// For kinds whose argument values are checked by building the NF
    /// (the parallel NFs): builds it for an NF with the given out-links.
    pub check_built: Option<BuiltCheck>,
}

/// Checks a kind's arguments by building it: `(kind, args, out_links)`.
pub type BuiltCheck = fn(&str, &[String], usize) -> Result<(), KindError>;

/// How the NF host (`ferry-host`) runs an NF type: the one answer to
/// "what runs for this `kind:`", which the host and ferryd ask here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// A per-packet NF on each thread; a responder's replies leave by the
    /// port the frame came in on.
    Packet { replies: bool },
    /// The per-packet flow monitor, which also exports its flows to a table
    /// ferryd makes for it.
    FlowExport,
    /// One of the host's own loops (forwarders, source, sink, Maglev, the
    /// tenant router).
    HostLoop,
    /// The parallel runtime, on `workers` threads: NF `name` of its table.
    Parallel { name: &'static str },
    /// A hybrid NF's control plane; ferryd runs its fast path.
    Hybrid,
}

impl Runner {
    fn of(hosted: ferry_nf::Hosted) -> Runner {
        match hosted {
            ferry_nf::Hosted::Plain => Runner::Packet { replies: false },
            ferry_nf::Hosted::Replies => Runner::Packet { replies: true },
            ferry_nf::Hosted::ExportsFlows => Runner::FlowExport,
        }
    }
}

impl NfType {
    /// Its offloadability, from its elements (P4SFC §III-D3).
    pub fn offload(&self) -> Offload {
        nf_offload(self.elements)
    }

    /// What of it placement can run in XDP today: offloadability says
    /// what could, this what Ferry's elements do.
    pub fn xdp_form(&self) -> XdpForm {
        if let Some((_, when)) = lower::LOWERED_KINDS.iter().find(|(k, _)| *k == self.kind) {
            XdpForm::Yes { when }
        } else if self.model == ExecModel::Hybrid {
            XdpForm::Split
        } else {
            XdpForm::No
        }
    }
}

/// An NF type's XDP form ([`NfType::xdp_form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpForm {
    /// Lowered to pipeline elements; `when` says on what condition.
    Yes { when: &'static str },
    /// A hybrid NF: its fast path in XDP, the rest in its process.
    Split,
    /// It runs as a process.
    No,
}

impl XdpForm {
    /// One word: `yes`, `split` or `no` (the JSON's `xdp_form`).
    pub fn word(self) -> &'static str {
        match self {
            XdpForm::Yes { .. } => "yes",
            XdpForm::Split => "split",
            XdpForm::No => "no",
        }
    }

    /// In words, for the table.
    pub fn text(self) -> &'static str {
        match self {
            XdpForm::Yes { when } => when,
            XdpForm::Split => "split (its fast path; the rest in its process)",
            XdpForm::No => "no (runs as a process)",
        }
    }
}

/// How an NF type takes arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// `key=value`, each declared.
    KeyValue(Vec<ArgSpec>),
    /// Positional, checked by building the NF; the text says what they are.
    Positional(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error("unknown NF type {kind:?} (known: {known})")]
    Unknown { kind: String, known: String },
    #[error("{kind}: {arg:?} is not key=value")]
    NotKeyValue { kind: String, arg: String, index: usize },
    #[error("{kind}: unknown argument {key}= (it takes: {known})")]
    UnknownArg { kind: String, key: String, known: String, index: usize },
    #[error("{kind}: {key}= given twice")]
    Repeated { kind: String, key: String, index: usize },
    #[error("{kind}: {message}")]
    BadValue { kind: String, message: String, index: usize },
    #[error("{kind}: missing argument {key}= ({help})")]
    Missing { kind: String, key: &'static str, help: &'static str },
    #[error("{kind}: {message}")]
    Invalid { kind: String, message: String, index: Option<usize> },
}

impl KindError {
    /// The argument at fault, if one is.
    pub fn arg_index(&self) -> Option<usize> {
        match self {
            KindError::NotKeyValue { index, .. }
            | KindError::UnknownArg { index, .. }
            | KindError::Repeated { index, .. }
            | KindError::BadValue { index, .. } => Some(*index),
            KindError::Invalid { index, .. } => *index,
            _ => None,
        }
    }
}

/// Every NF type, in `ferry nf list` order.
pub fn catalog() -> &'static [NfType] {
    static CATALOG: OnceLock<Vec<NfType>> = OnceLock::new();
    CATALOG.get_or_init(types::all)
}

/// The NF type `kind`, if there is one (`a+b` names a per-packet chain of
/// `a` then `b` in one process and is checked by [`check`]).
pub fn find(kind: &str) -> Option<&'static NfType> {
    catalog().iter().find(|t| t.kind == kind)
}

fn unknown(kind: &str) -> KindError {
    let known: Vec<&str> = catalog().iter().map(|t| t.kind.as_str()).collect();
    KindError::Unknown { kind: kind.to_string(), known: known.join(", ") }
}

/// How the NF host runs `kind`; `a+b` (per-packet NFs joined in one
/// process) replies if one of them does.
pub fn runner(kind: &str) -> Result<Runner, KindError> {
    if kind.contains('+') {
        let parts = kind.split('+').map(|k| find(k).map(|t| t.runner).ok_or_else(|| unknown(k)));
        let replies = parts.collect::<Result<Vec<_>, _>>()?.contains(&Runner::Packet { replies: true });
        return Ok(Runner::Packet { replies });
    }
    find(kind).map(|t| t.runner).ok_or_else(|| unknown(kind))
}

/// Builds a per-packet NF of `kind` (or several joined with `+`, their
/// arguments in groups separated by `--`), as the NF host runs it.
pub fn build_packet(kind: &str, args: &[String]) -> Result<Box<dyn ferry_nf::PacketNf>, KindError> {
    let invalid =
        |e: ferry_nf::NfError| KindError::Invalid { kind: kind.to_string(), message: e.to_string(), index: None };
    let build = |k: &str, g: &[String]| ferry_nf::by_name(k, &g.iter().map(String::as_str).collect::<Vec<_>>());
    if !kind.contains('+') {
        let first = args.split(|a| a == "--").next().unwrap_or_default();
        return build(kind, first).map_err(invalid);
    }
    let nfs = types::joined(kind, args)?.into_iter().map(|(k, g)| build(k, g)).collect::<Result<Vec<_>, _>>();
    Ok(Box::new(ferry_nf::NfChainLocal::new(nfs.map_err(invalid)?)))
}

/// Whether `kind` with `args` can run in a ferryd chain.
pub fn check(kind: &str, args: &[String]) -> Result<(), KindError> {
    if kind == fused::FUSED {
        return fused::check(args);
    }
    if kind.contains('+') {
        return types::check_joined(kind, args);
    }
    let t = find(kind).ok_or_else(|| unknown(kind))?;
    match &t.args {
        Args::KeyValue(specs) => {
            let values = Values::parse(kind, specs, args)?;
            match t.model {
                ExecModel::Hybrid => types::check_hybrid(kind, args, &values),
                _ => Ok(()),
            }
        }
        Args::Positional(_) => types::check_positional(kind, args, 0),
    }
}

/// The files an NF of `kind` with `args` reads when its process builds it
/// (the per-packet NFs' rule files; `a+b` joins them, their arguments in
/// groups separated by `--`).
pub fn files_read<'a>(kind: &str, args: &'a [String]) -> Vec<&'a str> {
    let groups = args.split(|a| a == "--");
    kind.split('+')
        .zip(groups)
        .filter_map(|(k, group)| group.get(ferry_nf::info(k)?.file_arg?).map(String::as_str))
        .collect()
}

/// The per-packet NFs an NF of `kind` with `args` runs, with their
/// arguments: itself, each part of `a+b`, each stage of a fused NF.
fn packet_parts<'a>(kind: &'a str, args: &'a [String]) -> Vec<(&'a str, Vec<&'a str>)> {
    let as_refs = |a: &'a [String]| a.iter().map(String::as_str).collect::<Vec<_>>();
    if kind == fused::FUSED {
        let stages = fused::stages(args).unwrap_or_default();
        return stages.into_iter().flat_map(|s| packet_parts(s.kind, s.args)).collect();
    }
    match types::joined(kind, args) {
        Ok(parts) => parts.into_iter().map(|(k, a)| (k, as_refs(a))).collect(),
        Err(_) => Vec::new(),
    }
}

/// What each per-packet NF an NF of `kind` runs loaded from its file
/// (an IPS: its rules, and those it skipped by option), a line each:
/// for `ferry chain check` and the NF process's log.
pub fn loaded(kind: &str, args: &[String]) -> Vec<String> {
    let parts = packet_parts(kind, args);
    let reports = parts.iter().filter_map(|(k, a)| Some((k, ferry_nf::info(k)?.report?(a))));
    reports.map(|(k, r)| r.map_or_else(|e| e.to_string(), |line| format!("{k}: {line}"))).collect()
}

/// Whether an NF of `kind` raises alerts (an IPS, alone, joined or
/// fused): ferryd makes it an alert table.
pub fn raises_alerts(kind: &str, args: &[String]) -> bool {
    packet_parts(kind, args).iter().any(|(k, _)| ferry_nf::info(k).is_some_and(|i| i.eve_file.is_some()))
}

/// The EVE files an NF of `kind` writes its alerts to, which ferryd
/// opens for it (absolute paths, checked with its arguments).
pub fn eve_files(kind: &str, args: &[String]) -> Vec<String> {
    let parts = packet_parts(kind, args);
    let files = parts.iter().filter_map(|(k, a)| ferry_nf::info(k)?.eve_file?(a).map(str::to_string));
    let mut files: Vec<String> = files.collect();
    files.sort();
    files.dedup();
    files
}

/// Whether `ferry chain reload` makes an NF of `kind` read its file again:
/// a per-packet NF that reads one (the firewall's rules, the IPS's),
/// alone or joined with `+`. (Hybrid NFs reload their configuration by
/// their own control plane.)
pub fn reloads_file(kind: &str) -> bool {
    kind.split('+').any(|k| {
        find(k).is_some_and(|t| matches!(t.runner, Runner::Packet { .. }))
            && ferry_nf::info(k).is_some_and(|i| i.file_arg.is_some())
    })
}

/// As [`check`], for an NF with `out_links` out-links in its chain: kinds
/// whose argument values only building can check (the parallel NFs' own
/// arguments, some of which name out-links) are built once, and dropped.
pub fn check_in_chain(kind: &str, args: &[String], out_links: usize) -> Result<(), KindError> {
    check(kind, args)?;
    match find(kind).and_then(|t| t.check_built) {
        Some(built) => built(kind, args, out_links),
        None => Ok(()),
    }
}

/// The values of a key=value NF type's arguments, checked against its
/// declared [`ArgSpec`]s, defaults filled in; read through the one
/// `key=value` reader, [`NfArgs`].
#[derive(Debug, Clone)]
pub struct Values {
    kind: String,
    args: NfArgs,
}

impl Values {
    /// Checks `args` against the declared `specs` of `kind`.
    fn parse(kind: &str, specs: &[ArgSpec], args: &[String]) -> Result<Values, KindError> {
        let k = || kind.to_string();
        let mut pairs: Vec<(&'static str, String)> = Vec::new();
        for (index, a) in args.iter().enumerate() {
            let Some((key, value)) = ferry_nf::model::split_key_value(a) else {
                return Err(KindError::NotKeyValue { kind: k(), arg: a.clone(), index });
            };
            let Some(spec) = specs.iter().find(|s| s.key == key) else {
                let known: Vec<&str> = specs.iter().map(|s| s.key).collect();
                return Err(KindError::UnknownArg { kind: k(), key: key.into(), known: known.join(", "), index });
            };
            if pairs.iter().any(|(seen, _)| *seen == key) {
                return Err(KindError::Repeated { kind: k(), key: key.into(), index });
            }
            spec.check(value).map_err(|message| KindError::BadValue { kind: k(), message, index })?;
            pairs.push((spec.key, value.to_string()));
        }
        for s in specs {
            if !pairs.iter().any(|(key, _)| *key == s.key) {
                match s.default {
                    Some(d) => pairs.push((s.key, d.to_string())),
                    None => return Err(KindError::Missing { kind: k(), key: s.key, help: s.help }),
                }
            }
        }
        let args = NfArgs::from_pairs(pairs.into_iter().map(|(key, value)| (key.to_string(), value)).collect());
        Ok(Values { kind: kind.to_string(), args })
    }

    /// The arguments of key=value NF type `kind`, checked.
    pub fn of(kind: &str, args: &[String]) -> Result<Values, KindError> {
        match find(kind).map(|t| &t.args) {
            Some(Args::KeyValue(specs)) => Values::parse(kind, specs, args),
            Some(Args::Positional(_)) => {
                Err(KindError::Invalid { kind: kind.into(), message: "takes positional arguments".into(), index: None })
            }
            None => Err(unknown(kind)),
        }
    }

    /// The text of argument `key` (given or default); None if the type
    /// declares no such argument or it has no default.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.args.get(key)
    }

    /// Argument `key` as a number (its type was checked on parsing).
    pub fn u64(&self, key: &str) -> Result<u64, KindError> {
        let v = self.text(key).ok_or_else(|| KindError::Invalid {
            kind: self.kind.clone(),
            message: format!("no argument {key}= declared"),
            index: None,
        })?;
        v.parse().map_err(|_| KindError::Invalid {
            kind: self.kind.clone(),
            message: format!("{key}={v}: not a number"),
            index: None,
        })
    }

    /// Every argument the caller gave plus the defaults, as `key=value`.
    pub fn to_args(&self) -> Vec<String> {
        self.args.pairs().map(|(k, v)| format!("{k}={v}")).collect()
    }
}

/// What `ferry nf list` prints: each type's kind, model, offloadability
/// and summary, then its arguments, counters, elements and what it does
/// with IPv6 and VLAN tags.
pub fn table() -> String {
    let mut out = String::new();
    for t in catalog() {
        out += &format!("{:<22} {:<10} {:<22} {}\n", t.kind, t.model.as_str(), t.offload().as_str(), t.summary);
        let args = match &t.args {
            Args::Positional(usage) => usage.to_string(),
            Args::KeyValue(specs) if specs.is_empty() => "(none)".to_string(),
            Args::KeyValue(specs) => specs
                .iter()
                .map(|a| match a.default {
                    Some("") | None => format!("{}=", a.key),
                    Some(d) => format!("{}={d}", a.key),
                })
                .collect::<Vec<_>>()
                .join(" "),
        };
        out += &format!("{:<22} args: {args}\n", "");
        if !t.counters.is_empty() {
            out += &format!("{:<22} counters: {}\n", "", t.counters.join(", "));
        }
        let elements: Vec<String> = t.elements.iter().map(|e| format!("{} ({})", e.name, e.offload.as_str())).collect();
        if !elements.is_empty() {
            out += &format!("{:<22} elements: {}\n", "", elements.join(", "));
        }
        out += &format!("{:<22} XDP form: {}\n", "", t.xdp_form().text());
        out += &format!("{:<22} ip: {}\n", "", t.ip);
    }
    out
}

/// What `ferry nf list --json` prints (see docs/JSON.md).
pub fn json() -> serde_json::Value {
    let types: Vec<serde_json::Value> = catalog()
        .iter()
        .map(|t| {
            let args = match &t.args {
                Args::Positional(usage) => serde_json::json!({ "positional": usage }),
                Args::KeyValue(specs) => serde_json::Value::Array(
                    specs
                        .iter()
                        .map(|a| {
                            let ty = match a.ty {
                                ArgType::U64 { min, max } => serde_json::json!({ "u64": [min, max] }),
                                ArgType::Flag => serde_json::json!("flag"),
                                ArgType::Text => serde_json::json!("text"),
                            };
                            serde_json::json!({ "key": a.key, "type": ty, "default": a.default, "help": a.help })
                        })
                        .collect(),
                ),
            };
            let elements: Vec<serde_json::Value> = t
                .elements
                .iter()
                .map(|e| serde_json::json!({ "name": e.name, "offload": e.offload.as_str() }))
                .collect();
            serde_json::json!({
                "kind": t.kind,
                "summary": t.summary,
                "ip": t.ip,
                "model": t.model.as_str(),
                "offload": t.offload().as_str(),
                "xdp_form": t.xdp_form().word(),
                "args": args,
                "counters": t.counters,
                "elements": elements,
            })
        })
        .collect();
    serde_json::Value::Array(types)
}

/// The catalog as the chain parser asks it.
pub struct Catalog;

impl KindCheck for Catalog {
    fn check(&self, kind: &str, args: &[String], out_links: usize) -> Result<(), (Option<usize>, String)> {
        check_in_chain(kind, args, out_links).map_err(|e| (e.arg_index(), e.to_string()))
    }

    /// Of NFs joined with `+`, the last one's output is the process's (an
    /// l2fwd last sends back what the others passed).
    fn needs_out_link(&self, kind: &str) -> bool {
        kind.rsplit('+').next().and_then(find).is_some_and(|t| t.passes)
    }
}

/// Reads and validates a chain file, its NFs' kinds and arguments
/// included: the one way ferryd and the CLI read chain files.
pub fn parse_chain(path: &Path) -> Result<ChainSpec, YamlError> {
    ferry_chain::spec::parse(path, &Catalog)
}

/// As [`parse_chain`], from text (`origin` names it in errors).
pub fn parse_chain_str(text: &str, origin: &str) -> Result<ChainSpec, YamlError> {
    ChainSpec::from_yaml_str(text, origin, &Catalog)
}

#[cfg(test)]
mod tests;
