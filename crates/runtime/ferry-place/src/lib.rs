//! The orchestrator: where each NF of a chain runs (P4SFC §III-D and
//! §III-E, with XDP in the place of P4SFC's switch).
//!
//! P4SFC splits a chain into pre_server, server and post_server parts and
//! runs the first and last on the switch. Ferry's switch tier is the XDP
//! stage pipeline on the ingress device (`ferry_bpf::pipeline`):
//! - **pre_server**: from each port, the leading run of NFs that are fully
//!   offloadable, allowed to move (`offload: auto|force`), have an XDP form
//!   ([`lower`]) and sit on a plain path (one link in, one link out) runs
//!   as pipeline elements on the port's device. The pipeline hands each
//!   frame that survives to the first server NF's AF_XDP socket, its
//!   metadata naming the chain and that NF.
//! - **server**: every other NF runs as a ferryd NF process, as before;
//!   [`Placement::server`] is the chain file without the offloaded NFs.
//! - A path whose NFs all move and that ends at a port of the same
//!   namespace runs in XDP entirely: the pipeline redirects what passes
//!   out of that port, and no process is started for it.
//! - **post_server**: to each port that only sends, the trailing run of
//!   such NFs after the last server NF runs as pipeline elements too. A
//!   frame an AF_XDP socket transmits skips XDP and TC on its device, so
//!   ferryd puts a veth pair (the *loop device*) in front of the port: the
//!   server NF sends into one end, the pipeline runs on the other end's
//!   receive side and redirects what survives out of the port.
//!
//! - **hybrid** ([`hybrid`]): an eVNF NF (`efw`, `elb`, `edpi`, `enat`)
//!   runs its fast path in XDP on its path's port and its control plane as
//!   a process that holds the fast path's map fds; its path ends in the
//!   kernel's routing. This is also P4SFC's split of a partially
//!   offloadable NF: the eNAT's and eLB's stateless parts run in XDP, the
//!   eNAT's misses go to its process, which installs the mapping.
//!
//! - **split** (a NAT inside a chain, [`hybrid::is_chain_nat`]): an `enat`
//!   right before a port that only sends, after the last process, ends
//!   the post-server part with its stateless element; its misses go to
//!   its process on the loop device's receiving end (the *miss port*),
//!   which sends what it handled back through the loop device and out.
//!   One with no process before it (only XDP between a port and it, and
//!   a port after it) ends that port's pre-server path the same way: its
//!   misses go to its process's sockets on the ingress port, which sends
//!   what it handled out of the egress port. Anywhere else (between
//!   processes, or before one, where its misses and the next process's
//!   frames would share the port's socket map), with `offload: never`,
//!   and where the port its misses arrive on has more than one queue, it
//!   runs whole as a process.
//!
//! Partially offloadable process NFs (`parallel-nat`, `maglev`) run whole
//! as processes; their split forms are the hybrid types.
//!
//! - **fusion** ([`FusedGroup`], `fuse.rs`): with `fuse: auto`, runs of
//!   adjacent process NFs become one NF that runs each batch through each
//!   of them in its threads; the NFs after the last process stay in its
//!   threads rather than crossing a loop device when they fuse with it.
//!
//! - **cost** ([`cost`]): with a [`CostModel`] measured on the machine, the
//!   post-server part goes where its estimated per-frame cost is lowest:
//!   XDP on the loop device, fused into the last process, or processes.

pub mod cost;
mod fuse;
pub mod hybrid;
mod install;

use std::collections::HashSet;
use std::path::Path;

use ferry_chain::spec::{ChainSpec, LinkSpec, Node, OffloadPolicy, PortSpec};
use ferry_config::{locate, Seg, YamlError};
use ferry_nf::model::{Element, Offload};

pub use cost::{CostModel, PostCost, PostPlace};
pub use ferry_catalog::lower::{lower, Lowering, Step};
pub use fuse::FusedGroup;
pub use hybrid::{HybridNf, HybridPath};
pub use install::{elements, install, Configs, Installed, InstalledNf, Target};

/// Where one NF runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Elements of the XDP pipeline on its path's ingress device.
    Xdp,
    /// A ferryd NF process (plain or parallel).
    Server,
    /// A hybrid NF: its fast path in XDP, its control plane a process.
    Hybrid,
}

/// One NF's place and the reason for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub nf: String,
    pub kind: String,
    pub place: Place,
    pub why: String,
}

/// Where frames go after a port's XDP part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    /// To this server NF (its AF_XDP socket on the port).
    Nf(String),
    /// Out of this port, redirected in XDP: the whole path runs in XDP.
    Port(String),
}

/// An NF running in XDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadedNf {
    pub name: String,
    pub kind: String,
    pub lowering: Lowering,
}

/// The pre_server part of one port: its NFs, in path order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpPath {
    /// The ingress port's name.
    pub port: String,
    pub nfs: Vec<OffloadedNf>,
    pub then: Then,
    /// The partially offloadable NF that ends `nfs` (a NAT right before
    /// the port of [`Then::Port`]), if any: its established mappings are
    /// rewritten here, its misses go to its process's sockets on this
    /// port, which sends what it handled out of that port itself.
    pub split: Option<String>,
}

/// The post_server part of one port that only sends: the NFs after the
/// chain's last process on the way to it, in path order. They run on a
/// loop device in front of the port, which redirects what they pass out
/// of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostPath {
    /// The egress port's name.
    pub port: String,
    /// The server NF that sends into the loop device.
    pub after: String,
    pub nfs: Vec<OffloadedNf>,
    /// The partially offloadable NF that ends `nfs` (a NAT), if any: its
    /// stateless part runs there, its misses go to its process, which
    /// receives them on port [`PostPath::miss_port`] and sends back the
    /// same way.
    pub split: Option<String>,
}

impl PostPath {
    /// The port through which the split NF's process gets its misses (the
    /// loop device's receiving end) and sends them on (to its sending
    /// end, whose pipeline entry redirects out of the port).
    pub fn miss_port(&self) -> Option<String> {
        self.split.as_ref().map(|nf| miss_port_name(&self.port, nf))
    }
}

/// The name of the port through which NF `nf`'s process gets the misses
/// of its fast path in front of port `port`.
pub fn miss_port_name(port: &str, nf: &str) -> String {
    format!("{port}~{nf}")
}

/// A chain, placed.
#[derive(Debug, Clone)]
pub struct Placement {
    /// What ferryd runs as processes: the chain without its offloaded NFs,
    /// each port linked to the NF its XDP part hands frames to, and the
    /// last process before a post-server part linked to its port.
    pub server: ChainSpec,
    pub xdp: Vec<XdpPath>,
    pub post: Vec<PostPath>,
    /// The hybrid NFs, by the port their path starts at.
    pub hybrid: Vec<HybridPath>,
    /// Hybrid NFs that run whole as processes (a NAT inside a chain that
    /// is not split): their processes keep their state in the hybrid
    /// tables all the same.
    pub whole: Vec<HybridNf>,
    /// Runs of NFs that run in one NF's threads (`fuse: auto`); in
    /// [`Placement::server`] each is one NF of kind `fused` with the
    /// first member's name.
    pub fused: Vec<FusedGroup>,
    /// Every NF of the chain file, in file order.
    pub decisions: Vec<Decision>,
    /// Each post-server part's estimates and where it went (with a cost
    /// model only).
    pub costs: Vec<PostCost>,
}

/// Why a chain cannot be placed: an NF that must be offloaded
/// (`offload: force`) cannot be, or a hybrid NF is not on a hybrid path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PlaceError {
    /// The field at fault.
    pub at: Vec<Seg>,
    pub message: String,
}

/// Reads, validates and places a chain file; errors name the file, line
/// and field.
pub fn load(path: &Path) -> Result<(ChainSpec, Placement), YamlError> {
    load_with(path, None)
}

/// As [`load`], placing by `model` when given.
pub fn load_with(path: &Path, model: Option<&CostModel>) -> Result<(ChainSpec, Placement), YamlError> {
    let (text, origin) = ferry_config::read_file(path)?;
    load_str_with(&text, &origin, model)
}

/// As [`load`], from text.
pub fn load_str(text: &str, origin: &str) -> Result<(ChainSpec, Placement), YamlError> {
    load_str_with(text, origin, None)
}

/// As [`load_with`], from text.
pub fn load_str_with(text: &str, origin: &str, model: Option<&CostModel>) -> Result<(ChainSpec, Placement), YamlError> {
    let spec = ferry_catalog::parse_chain_str(text, origin)?;
    let placement = place_with(&spec, model).map_err(|e| {
        let (line, column) = locate(text, &e.at).unzip();
        YamlError {
            origin: origin.to_string(),
            line,
            column,
            field: ferry_config::path_string(&e.at),
            message: e.message,
        }
    })?;
    Ok((spec, placement))
}

/// Why NF `i` cannot move into XDP at its place, or its XDP form.
fn offloadable(spec: &ChainSpec, i: usize, in_links: usize) -> Result<Lowering, String> {
    let nf = &spec.nfs[i];
    let Some(kind) = nf.kind.as_deref() else {
        return Err("an exec NF is a program of its own: only its process can run it".into());
    };
    let elements: &[Element] = match ferry_catalog::find(kind) {
        Some(t) => t.elements,
        None => return Err(format!("{kind} joins NFs in one process")),
    };
    if elements.is_empty() {
        return Err(format!("{kind} declares no elements that could run in XDP"));
    }
    let blocking = |o: Offload| elements.iter().filter(|e| e.offload == o).map(|e| e.name).collect::<Vec<_>>();
    let no = blocking(Offload::No);
    if !no.is_empty() {
        return Err(format!("not offloadable: {} needs more than XDP can do", no.join(", ")));
    }
    let partial = blocking(Offload::Partial);
    if !partial.is_empty() {
        return Err(format!(
            "partially offloadable ({}): as a process it runs whole (the split forms are the hybrid types: enat, elb)",
            partial.join(", ")
        ));
    }
    if nf.offload == OffloadPolicy::Never {
        return Err("offload: never".into());
    }
    if !nf.spawn {
        return Err("spawn: false: a process of its own connects as it".into());
    }
    if in_links != 1 {
        return Err(format!("frames reach it from {in_links} places; an XDP part serves one ingress port"));
    }
    let outs = spec.links.iter().filter(|l| l.from == nf.name).count();
    if outs == 0 {
        return Err("it has no out-link: its process ends the path there (it sends frames back out the port they \
                    came in by, or keeps them); an XDP part passes frames on"
            .into());
    }
    if outs != 1 {
        return Err(format!("it has {outs} out-links; an XDP part is a straight path"));
    }
    lower(kind, &nf.args)
}

/// Why no XDP part starts at `port`, if it is a tenant edge's: its frames
/// reach their NF's socket from the edge's classifier (the device's one
/// XDP hook), in the tenant's memory; a stage pipeline there would hand
/// them across tenants by AF_XDP instead of by copy.
fn classified(port: &PortSpec) -> Option<String> {
    match (&port.via, &port.classify) {
        (Some(edge), _) => Some(format!(
            "port {} is a tenant entry of {edge}: the edge's classifier hands its frames to this NF's socket in the \
             tenant's memory, so the NFs after it run as processes",
            port.name
        )),
        (None, Some(_)) => {
            Some(format!("port {} classifies frames into tenants: its XDP hook is the classifier", port.name))
        }
        (None, None) => None,
    }
}

/// Splits `spec` into its XDP and server parts, by the rules alone.
pub fn place(spec: &ChainSpec) -> Result<Placement, PlaceError> {
    place_with(spec, None)
}

/// Splits `spec` into its XDP and server parts; with `model`, each
/// post-server part goes where it costs least ([`cost`]).
pub fn place_with(spec: &ChainSpec, model: Option<&CostModel>) -> Result<Placement, PlaceError> {
    let hybrid = hybrid::paths(spec)?;
    let in_links = |name: &str| spec.links.iter().filter(|l| l.to == name).count();
    let mut why_server: Vec<Option<String>> = vec![None; spec.nfs.len()];
    // The NFs ahead of a hybrid path run in XDP with it.
    let mut offloaded: HashSet<usize> = (0..spec.nfs.len())
        .filter(|&i| hybrid.iter().any(|h| h.before.iter().any(|n| n.name == spec.nfs[i].name)))
        .collect();
    let mut paths = Vec::new();
    for port in &spec.ports {
        let Some(first) = spec.links.iter().find(|l| l.from == port.name) else { continue };
        if hybrid.iter().any(|h| h.port == port.name) {
            continue;
        }
        if let Some(why) = classified(port) {
            if let Some(Node::Nf(i)) = spec.node(&first.to) {
                why_server[i] = Some(why);
            }
            continue;
        }
        let mut nfs: Vec<(usize, Lowering)> = Vec::new();
        let mut split = None;
        let mut to = first.to.as_str();
        let then = loop {
            match spec.node(to) {
                Some(Node::Nf(i)) => match offloadable(spec, i, in_links(to)) {
                    Ok(l) => {
                        nfs.push((i, l));
                        to = &spec.links.iter().find(|l| l.from == spec.nfs[i].name).expect("one out-link").to;
                    }
                    Err(_) if hybrid::is_chain_nat(spec, i) => match pre_split(spec, i, port) {
                        Ok((l, out)) => {
                            nfs.push((i, l));
                            split = Some(i);
                            break Some(Then::Port(out));
                        }
                        Err(why) => {
                            why_server[i] = Some(why);
                            break Some(Then::Nf(spec.nfs[i].name.clone()));
                        }
                    },
                    Err(why) => {
                        why_server[i] = Some(why);
                        break Some(Then::Nf(spec.nfs[i].name.clone()));
                    }
                },
                // Redirected out of a port of the same namespace: the
                // whole path runs in XDP (a devmap takes the ifindex as
                // the namespace that fills it sees it).
                Some(Node::Port(q)) if spec.ports[q].netns == port.netns => break Some(Then::Port(to.to_string())),
                _ => break None,
            }
        };
        let then = match then {
            Some(then) => then,
            // The path leaves into the kernel, or by a port in another
            // namespace: its last NF stays a process and sends it there.
            None => match nfs.pop() {
                Some((i, _)) => {
                    why_server[i] = Some(format!(
                        "it ends the path to {to:?}, which the XDP pipeline cannot send to (another namespace, or \
                         the kernel stack)"
                    ));
                    Then::Nf(spec.nfs[i].name.clone())
                }
                None => continue,
            },
        };
        if nfs.is_empty() {
            continue;
        }
        // The port's queue i goes to thread i of the NF it feeds; the file
        // gave the port to the path's first NF, so the process after the
        // path must have as many threads, or frames of some queues would
        // find no socket.
        if let Then::Nf(next) = &then {
            let (first, next) =
                (&spec.nfs[nfs[0].0], &spec.nfs[spec.nfs.iter().position(|n| &n.name == next).expect("an NF")]);
            if first.threads != next.threads {
                why_server[nfs[0].0] = Some(format!(
                    "it has {} threads on port {} and {} after it has {}: the port's queues would not all reach a \
                     socket",
                    first.threads, port.name, next.name, next.threads
                ));
                continue;
            }
        }
        // A split NF keeps its process.
        offloaded.extend(nfs.iter().map(|(i, _)| *i).filter(|&i| Some(i) != split));
        let split = split.map(|i| spec.nfs[i].name.clone());
        paths.push(XdpPath { port: port.name.clone(), nfs: offloaded_nfs(spec, nfs), then, split });
    }
    let post = post_paths(spec, &mut offloaded, &mut why_server);
    let (post, whole_by_fusion, costs) = place_posts(spec, post, model, &mut offloaded, &mut why_server);
    let decisions = decide(spec, &offloaded, (&paths, &post), &hybrid, why_server);
    if let Some((i, d)) = decisions
        .iter()
        .enumerate()
        .find(|(i, d)| d.place == Place::Server && spec.nfs[*i].offload == OffloadPolicy::Force)
    {
        return Err(PlaceError {
            at: vec![Seg::Key("nfs"), Seg::Index(i), Seg::Key("offload")],
            message: format!("{}: offload: force, but {}", d.nf, d.why),
        });
    }
    let split = |i: usize| {
        let name = Some(&spec.nfs[i].name);
        post.iter().any(|p| p.split.as_ref() == name) || paths.iter().any(|p| p.split.as_ref() == name)
    };
    let whole = (0..spec.nfs.len())
        .filter(|&i| hybrid::is_chain_nat(spec, i) && !split(i))
        .map(|i| hybrid::hybrid_nf(spec, i))
        .collect();
    let mut server = server_part(spec, &paths, &post, &hybrid, &offloaded);
    let (fused, why_not) = fuse::fuse(&mut server);
    fuse::check_port_owners(spec, &server, &fused, &why_not)?;
    let (post, decisions) = note_fusion(post, decisions, &fused, (why_not, whole_by_fusion));
    Ok(Placement { server, xdp: paths, post, hybrid, whole, fused, decisions, costs })
}

/// Where each post-server part runs. Without a model: fused into the last
/// process's threads when its NFs fuse with it ([`fuse::post_fuses`]),
/// else in XDP. With one: the cheapest place the file allows
/// (`offload: force` keeps XDP). Parts taken out of XDP leave `offloaded`;
/// also returns the NATs that run whole for it, with the reason, and the
/// estimates.
fn place_posts(
    spec: &ChainSpec,
    post: Vec<PostPath>,
    model: Option<&CostModel>,
    offloaded: &mut HashSet<usize>,
    why_server: &mut [Option<String>],
) -> (Vec<PostPath>, Vec<(String, String)>, Vec<PostCost>) {
    let index = |name: &str| spec.nfs.iter().position(|n| n.name == name).expect("an NF of the chain");
    let (mut whole, mut kept, mut costs) = (Vec::new(), Vec::new(), Vec::new());
    for p in post {
        let nfs: Vec<usize> = p.nfs.iter().map(|n| index(&n.name)).collect();
        let split = p.split.as_deref().map(index);
        let fusable = fuse::post_fuses(spec, index(&p.after), &nfs, split);
        let forced = nfs.iter().any(|&i| spec.nfs[i].offload == OffloadPolicy::Force);
        let (chosen, cost) = match model {
            _ if forced => (PostPlace::Xdp, String::new()),
            None if fusable => (PostPlace::Fused, String::new()),
            None => (PostPlace::Xdp, String::new()),
            Some(m) => {
                let estimate = m.estimate(nfs.len(), fusable, split.is_some());
                let chosen = estimate.cheapest();
                let names = p.nfs.iter().map(|n| n.name.clone()).collect();
                let (after, port) = (p.after.clone(), p.port.clone());
                costs.push(PostCost { after, port, nfs: names, estimate, chosen, by: m.origin.clone() });
                (chosen, format!(" ({})", estimate.describe()))
            }
        };
        if chosen == PostPlace::Xdp {
            kept.push(p);
            continue;
        }
        for &i in &nfs {
            offloaded.remove(&i);
            let why = match (chosen, Some(i) == split) {
                (PostPlace::Fused, true) => format!(
                    "after {}'s fused run (fuse: auto), whole as a process: no loop device in front of port {}{cost}",
                    p.after, p.port
                ),
                (PostPlace::Fused, false) => format!(
                    "after the last process {} with fuse: auto: run in its threads rather than in XDP on a loop \
                     device in front of port {} (no device crossing){cost}",
                    p.after, p.port
                ),
                _ => format!(
                    "after the last process {}: processes cost less per frame than XDP on a loop device in front \
                     of port {}{cost}",
                    p.after, p.port
                ),
            };
            if Some(i) == split {
                whole.push((spec.nfs[i].name.clone(), why.clone()));
            }
            why_server[i] = Some(why);
        }
    }
    (kept, whole, costs)
}

/// Says in each decision what fusion did (and why a NAT runs whole for
/// it), and names a post-server part by the fused NF that now sends into
/// it.
fn note_fusion(
    mut post: Vec<PostPath>,
    mut decisions: Vec<Decision>,
    fused: &[FusedGroup],
    (mut why_not, whole_by_fusion): (std::collections::HashMap<String, String>, Vec<(String, String)>),
) -> (Vec<PostPath>, Vec<Decision>) {
    for d in &mut decisions {
        if let Some(g) = fused.iter().find(|g| g.members.contains(&d.nf)) {
            d.why += &format!("; fused: runs in {}'s threads ({})", g.name, g.members.join(" -> "));
        } else if let Some(why) = why_not.remove(&d.nf) {
            d.why += &format!("; {why}");
        }
    }
    for (nat, why) in whole_by_fusion {
        if let Some(d) = decisions.iter_mut().find(|d| d.nf == nat) {
            d.why = why;
        }
    }
    for p in &mut post {
        if let Some(g) = fused.iter().find(|g| g.members.contains(&p.after)) {
            p.after = g.name.clone();
        }
    }
    (post, decisions)
}

/// NFs `nfs` (index and XDP form), in order, as they run in XDP.
fn offloaded_nfs(spec: &ChainSpec, nfs: Vec<(usize, Lowering)>) -> Vec<OffloadedNf> {
    nfs.into_iter()
        .map(|(i, lowering)| OffloadedNf {
            name: spec.nfs[i].name.clone(),
            kind: spec.nfs[i].kind.clone().unwrap_or_default(),
            lowering,
        })
        .collect()
}

/// The post_server parts: from each port that only sends, back to the
/// last process before it, the NFs that can move into XDP. A path that
/// reaches a port, an NF already in XDP or a hybrid NF is a pre-server
/// path's or a hybrid path's, not this.
fn post_paths(spec: &ChainSpec, offloaded: &mut HashSet<usize>, why_server: &mut [Option<String>]) -> Vec<PostPath> {
    let into = |name: &str| spec.links.iter().filter(|l| l.to == name).collect::<Vec<_>>();
    let mut post = Vec::new();
    for port in &spec.ports {
        // A port that also receives would need its NF's sockets on two
        // devices (the chain parser gives a port's sockets to one NF, so
        // such an NF has two in-links and stays a process anyway).
        let ins = into(&port.name);
        if ins.len() != 1 || spec.links.iter().any(|l| l.from == port.name) || classified(port).is_some() {
            continue;
        }
        let mut nfs: Vec<(usize, Lowering)> = Vec::new();
        let mut split = None;
        let mut at = ins[0].from.as_str();
        let after = loop {
            let Some(Node::Nf(i)) = spec.node(at) else { break None };
            if nfs.is_empty() && hybrid::is_chain_nat(spec, i) {
                match split_nat(spec, i, port) {
                    Ok(l) => {
                        nfs.push((i, l));
                        split = Some(i);
                        at = into(at)[0].from.as_str();
                        continue;
                    }
                    Err(why) => {
                        why_server[i] = Some(why);
                        break Some(i);
                    }
                }
            }
            // A NAT inside a chain that is not split here is a process.
            if hybrid::is_chain_nat(spec, i) {
                why_server[i].get_or_insert_with(|| NAT_BEFORE_XDP.into());
                break Some(i);
            }
            if offloaded.contains(&i) || hybrid::is_hybrid(spec, i) {
                break None;
            }
            if why_server[i].is_some() {
                break Some(i);
            }
            let ins = into(at);
            match offloadable(spec, i, ins.len()) {
                Ok(l) => {
                    nfs.push((i, l));
                    at = &ins[0].from;
                }
                Err(why) => {
                    why_server[i] = Some(why);
                    break Some(i);
                }
            }
        };
        let Some(after) = after else { continue };
        if nfs.is_empty() {
            continue;
        }
        // The last process's thread i sends on the port's queue i (of the
        // loop device in front of it, which has the port's queues).
        let (threads, queues) = (spec.nfs[after].threads, port.queues);
        if threads > queues {
            for (i, _) in &nfs {
                why_server[*i] = Some(format!(
                    "after the last process {}, which has {threads} threads for port {}'s {queues} queues: it could \
                     not send to the loop device in front of the port",
                    spec.nfs[after].name, port.name
                ));
            }
            continue;
        }
        nfs.reverse();
        // A split NF keeps its process.
        offloaded.extend(nfs.iter().map(|(i, _)| *i).filter(|&i| Some(i) != split));
        post.push(PostPath {
            port: port.name.clone(),
            after: spec.nfs[after].name.clone(),
            nfs: offloaded_nfs(spec, nfs),
            split: split.map(|i| spec.nfs[i].name.clone()),
        });
    }
    post
}

const NAT_NEVER: &str = "offload: never: the whole NAT runs as a process, mappings and rewrites";
/// A chain NAT after the last process with NFs after it in XDP.
const NAT_BEFORE_XDP: &str = "partially offloadable, after the last process but before NFs that run in XDP: its split \
                              form must end the post-server part (its process sends its misses to the port), so it \
                              runs whole as a process";

/// A NAT inside a chain reached from port `port` through XDP only, split
/// over that path and its process when a port follows it in the same
/// namespace: its XDP form, and that port's name; or why it runs whole.
fn pre_split(spec: &ChainSpec, i: usize, port: &ferry_chain::spec::PortSpec) -> Result<(Lowering, String), String> {
    let name = &spec.nfs[i].name;
    let to = &spec.links.iter().find(|l| &l.from == name).expect("a chain NAT has one out-link").to;
    match spec.node(to) {
        Some(Node::Port(q)) if spec.ports[q].netns == port.netns => Ok((split_nat(spec, i, port)?, to.clone())),
        Some(Node::Port(_)) => Err(format!(
            "partially offloadable, but port {to:?} after it is in another namespace, where the XDP pipeline on \
             port {}'s device cannot redirect: it runs whole as a process",
            port.name
        )),
        _ => Err(format!(
            "partially offloadable, but {to:?} after it is a process: split, its misses and {to:?}'s frames would \
             share port {}'s socket map (one socket per queue), so it runs whole as a process",
            port.name
        )),
    }
}

/// A NAT inside a chain, right before port `port`, split: its mappings
/// rewritten in XDP on the loop device, its misses to its process; or
/// why it runs whole as a process.
fn split_nat(spec: &ChainSpec, i: usize, port: &ferry_chain::spec::PortSpec) -> Result<Lowering, String> {
    if spec.nfs[i].offload == OffloadPolicy::Never {
        return Err(NAT_NEVER.into());
    }
    if port.queues != 1 {
        return Err(format!(
            "port {} has {} queues: its misses would reach its one thread's socket on one queue only",
            port.name, port.queues
        ));
    }
    Ok(Lowering::Split(ferry_bpf::hybrid::HybridElement::Nat))
}

/// The reason of every NF, in file order.
fn decide(
    spec: &ChainSpec,
    offloaded: &HashSet<usize>,
    (paths, post): (&[XdpPath], &[PostPath]),
    hybrid: &[HybridPath],
    why_server: Vec<Option<String>>,
) -> Vec<Decision> {
    spec.nfs
        .iter()
        .zip(why_server)
        .enumerate()
        .map(|(i, (nf, why))| {
            let kind = nf.kind.clone().unwrap_or_else(|| "exec".into());
            if let Some(h) = hybrid.iter().find(|h| h.nfs.iter().any(|n| n.name == nf.name)) {
                let why = format!(
                    "hybrid: its fast path runs in XDP on port {}'s device, its control plane as an unprivileged \
                     process holding the fast path's maps",
                    h.port
                );
                return Decision { nf: nf.name.clone(), kind, place: Place::Hybrid, why };
            }
            if let Some(h) = hybrid.iter().find(|h| h.before.iter().any(|n| n.name == nf.name)) {
                let why = format!(
                    "fully offloadable, before the hybrid NFs of port {}'s path: elements of their pipeline, ahead of \
                     theirs",
                    h.port
                );
                return Decision { nf: nf.name.clone(), kind, place: Place::Xdp, why };
            }
            if let Some(p) = post.iter().find(|p| p.split.as_ref() == Some(&nf.name)) {
                let why = format!(
                    "partially offloadable, after the last process {} on the path to port {}: established \
                     mappings are rewritten in XDP on the loop device in front of the port, new ones made by its \
                     process, which gets the misses",
                    p.after, p.port
                );
                return Decision { nf: nf.name.clone(), kind, place: Place::Hybrid, why };
            }
            if let Some(p) = paths.iter().find(|p| p.split.as_ref() == Some(&nf.name)) {
                let out = match &p.then {
                    Then::Port(out) | Then::Nf(out) => out,
                };
                let why = format!(
                    "partially offloadable, on the path from port {} before any process (pre-server): established \
                     mappings are rewritten in XDP on its device and redirected out of port {out}, new ones made by \
                     its process, which gets the misses on port {}'s sockets",
                    p.port, p.port
                );
                return Decision { nf: nf.name.clone(), kind, place: Place::Hybrid, why };
            }
            if hybrid::is_chain_nat(spec, i) {
                let why = match (nf.offload, why) {
                    (OffloadPolicy::Never, _) => NAT_NEVER.into(),
                    // Every reason placement records for a chain NAT is its own.
                    (_, Some(why)) => why,
                    _ => "partially offloadable, between processes: P4SFC splits such an NF only where it borders a \
                          port with no process between, so it runs whole as a process"
                        .into(),
                };
                return Decision { nf: nf.name.clone(), kind, place: Place::Server, why };
            }
            if let Some(p) = post.iter().find(|p| p.nfs.iter().any(|n| n.name == nf.name)) {
                let why = format!(
                    "fully offloadable, after the last process {} on the path to port {} (post-server): on the \
                     loop device in front of the port",
                    p.after, p.port
                );
                return Decision { nf: nf.name.clone(), kind, place: Place::Xdp, why };
            }
            if offloaded.contains(&i) {
                let why = "fully offloadable, on the path from a port before any process (pre-server)".into();
                return Decision { nf: nf.name.clone(), kind, place: Place::Xdp, why };
            }
            let why = why.unwrap_or_else(|| match offloadable(spec, i, 1) {
                Err(why) => why,
                Ok(_) => "between processes: only the NFs before the first process and after the last one on a \
                          path to a port that only sends run in XDP"
                    .into(),
            });
            Decision { nf: nf.name.clone(), kind, place: Place::Server, why }
        })
        .collect()
}

/// The chain without its offloaded NFs; each XDP path's port links to
/// the NF the path hands frames to, where the port's link was (a path
/// that ends at a port leaves no link), and the process before a
/// post-server part links to its port. Domains no process uses go too.
/// Hybrid NFs stay as their control planes' processes, unlinked, but for
/// a slow path's: the port links to it (its threads own the port's
/// sockets) and its link to the kernel hop stays.
fn server_part(
    spec: &ChainSpec,
    paths: &[XdpPath],
    post: &[PostPath],
    hybrid: &[HybridPath],
    offloaded: &HashSet<usize>,
) -> ChainSpec {
    let gone: HashSet<&str> = offloaded.iter().map(|&i| spec.nfs[i].name.as_str()).collect();
    // Hybrid NFs on hybrid paths; a NAT inside a chain keeps its links.
    let hybrids: HashSet<&str> = (0..spec.nfs.len())
        .filter(|&i| hybrid::is_hybrid(spec, i) && !hybrid::is_chain_nat(spec, i))
        .map(|i| spec.nfs[i].name.as_str())
        .collect();
    let slow = |path: &HybridPath| path.nfs.iter().find(|n| n.slow_path).map(|n| n.name.clone());
    let slow_nfs: Vec<String> = hybrid.iter().filter_map(slow).collect();
    let mut server = spec.clone();
    server.nfs.retain(|n| !gone.contains(n.name.as_str()));
    server.domains.retain(|d| server.nfs.iter().any(|n| n.domain == d.name));
    server.links = spec
        .links
        .iter()
        .filter_map(|l| {
            if let Some(h) = hybrid.iter().find(|h| h.port == l.from) {
                return slow(h).or(h.then.clone()).map(|to| LinkSpec { from: l.from.clone(), to, mode: l.mode });
            }
            // The last process's link to the first post-server NF becomes
            // its link to the port, in the same place: an NF's out-links
            // are numbered in file order.
            if let Some(p) = post.iter().find(|p| p.after == l.from && p.nfs[0].name == l.to) {
                return Some(LinkSpec { from: p.after.clone(), to: p.port.clone(), mode: l.mode });
            }
            // A split NF sends what it handled back through its miss port.
            if let Some(p) = post.iter().find(|p| p.split.as_ref() == Some(&l.from) && p.port == l.to) {
                return p.miss_port().map(|to| LinkSpec { from: l.from.clone(), to, mode: l.mode });
            }
            match paths.iter().find(|p| p.port == l.from) {
                Some(XdpPath { then: Then::Nf(to), .. }) => {
                    Some(LinkSpec { from: l.from.clone(), to: to.clone(), mode: l.mode })
                }
                // A split NF's process gets its misses on the port's sockets.
                Some(XdpPath { then: Then::Port(_), split: Some(nf), .. }) => {
                    Some(LinkSpec { from: l.from.clone(), to: nf.clone(), mode: l.mode })
                }
                Some(XdpPath { then: Then::Port(_), split: None, .. }) => None,
                None if slow_nfs.contains(&l.from) => Some(l.clone()),
                None if [&l.from, &l.to].iter().any(|n| gone.contains(n.as_str()) || hybrids.contains(n.as_str())) => {
                    None
                }
                None => Some(l.clone()),
            }
        })
        .collect();
    for p in post {
        let (Some(nf), Some(miss)) = (&p.split, p.miss_port()) else { continue };
        let port = spec.ports.iter().find(|q| q.name == p.port).expect("a port of the chain");
        server.ports.push(ferry_chain::spec::PortSpec { name: miss.clone(), ..port.clone() });
        server.links.push(LinkSpec { from: miss, to: nf.clone(), mode: None });
    }
    server
}

impl Placement {
    /// Where each NF goes and why, one line each, then each XDP path.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let width = self.decisions.iter().map(|d| d.nf.len()).max().unwrap_or(0);
        for d in &self.decisions {
            let place = match d.place {
                Place::Xdp => "xdp",
                Place::Server => "process",
                Place::Hybrid => "hybrid",
            };
            out += &format!("{:<width$}  {:<14} {:<8} {}\n", d.nf, d.kind, place, d.why);
        }
        for p in &self.xdp {
            let names: Vec<&str> = p.nfs.iter().map(|n| n.name.as_str()).collect();
            let then = match &p.then {
                Then::Nf(nf) => format!("AF_XDP socket of {nf}"),
                Then::Port(port) => format!("redirected out of port {port}"),
            };
            out += &format!("xdp path on port {}: {} -> {then}\n", p.port, names.join(" -> "));
            for n in &p.nfs {
                out += &format!("  {}: {}\n", n.name, n.lowering.elements());
            }
            if let (Some(nf), Then::Port(port)) = (&p.split, &p.then) {
                out += &format!(
                    "  {nf}: misses to its process, on port {}'s sockets; it makes the mapping and sends the frame \
                     out of port {port}\n",
                    p.port
                );
            }
        }
        for p in &self.post {
            let names: Vec<&str> = p.nfs.iter().map(|n| n.name.as_str()).collect();
            out += &format!(
                "xdp path after {} to port {}: {} -> redirected out of port {} (by the loop device in front of it)\n",
                p.after,
                p.port,
                names.join(" -> "),
                p.port
            );
            for n in &p.nfs {
                out += &format!("  {}: {}\n", n.name, n.lowering.elements());
            }
            if let Some(nf) = &p.split {
                out += &format!(
                    "  {nf}: misses to its process, on the loop device's receiving end; it makes the mapping and \
                     sends the frame out of port {}\n",
                    p.port
                );
            }
        }
        for c in &self.costs {
            out += &format!(
                "cost after {} to port {} ({}): {} per frame: {} (cost model: {})\n",
                c.after,
                c.port,
                c.nfs.join(" -> "),
                c.estimate.describe(),
                c.chosen.name(),
                c.by
            );
        }
        for g in &self.fused {
            out += &format!(
                "fused in {}'s threads: {} (each batch through each NF in turn: no ring, no wake-up between them)\n",
                g.name,
                g.members.join(" -> ")
            );
        }
        for h in &self.hybrid {
            let names: Vec<&str> =
                h.before.iter().map(|n| n.name.as_str()).chain(h.nfs.iter().map(|n| n.name.as_str())).collect();
            let end = h.then.as_ref().map_or("the kernel's routing".to_string(), |nf| format!("AF_XDP socket of {nf}"));
            out += &format!("hybrid path on port {}: {} -> {end}\n", h.port, names.join(" -> "));
            for n in &h.before {
                out += &format!("  {}: {}\n", n.name, n.lowering.elements());
            }
            if let Some(n) = h.nfs.iter().find(|n| n.slow_path) {
                out +=
                    &format!("  {}: its slow path on port {}'s AF_XDP sockets, back into the kernel\n", n.name, h.port);
            }
            for n in h.nfs.iter().filter(|n| !n.reply_ports.is_empty()) {
                let ports = if n.reply_ports.len() == 1 { "port" } else { "ports" };
                out += &format!("  {}: replies rewritten on {ports} {}\n", n.name, n.reply_ports.join(", "));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
