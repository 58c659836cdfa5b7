//! Fusion: runs of adjacent process NFs that may share one thread become
//! one NF of kind `fused` (`ferry_catalog::fused`), which runs each batch
//! through each of them in turn. It runs on the server part, after XDP
//! has taken what it can.
//!
//! NF `a` fuses with the NF `b` after it when both have `fuse: auto`
//! (their own, or their domain's), both are of kinds that fuse, `a`'s one
//! out-link is a zero-copy link to `b`, `b`'s one in-link is that link,
//! and they agree on what a thread is: domain, threads, CPUs, user,
//! batch, polling, backpressure and host. The fused NF takes the first
//! NF's name and settings, and the last NF's out-links, in their order.

use std::collections::HashMap;

use ferry_catalog::fused::{fused_args, stage_budget, unfusable, Stage, FUSED};
use ferry_chain::shm::MAX_NF_COUNTERS;
use ferry_chain::spec::{ChainSpec, FusePolicy, LinkMode, NfSpec, OffloadPolicy};

/// NFs that run in one NF's threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedGroup {
    /// The fused NF: the first member's name.
    pub name: String,
    /// The members in path order.
    pub members: Vec<String>,
}

/// Why NF `i` cannot fuse at all, if it cannot.
pub(crate) fn alone(spec: &ChainSpec, i: usize) -> Option<String> {
    let nf = &spec.nfs[i];
    if spec.fuse_policy(i) == FusePolicy::Never {
        return Some("fuse: never".into());
    }
    if !nf.spawn {
        return Some("spawn: false: a process of its own connects as it".into());
    }
    match nf.kind.as_deref() {
        None => Some("an exec NF is a program of its own".into()),
        Some(kind) => unfusable(kind, &nf.args),
    }
}

/// Why `a` cannot fuse with `b` after it, if it cannot.
pub(crate) fn apart(spec: &ChainSpec, a: &NfSpec, b: &NfSpec) -> Option<String> {
    let outs: Vec<_> = spec.links.iter().filter(|l| l.from == a.name).collect();
    if outs.len() != 1 || outs[0].to != b.name {
        return Some(format!("{} has {} out-links", a.name, outs.len()));
    }
    if outs[0].mode == Some(LinkMode::Copy) {
        return Some("the link between them is a copy link".into());
    }
    let ins = spec.links.iter().filter(|l| l.to == b.name).count();
    if ins != 1 {
        return Some(format!("frames reach {} from {ins} places", b.name));
    }
    let differ = [
        ("domain", a.domain != b.domain),
        ("threads", a.threads != b.threads),
        ("cpus", a.cpus != b.cpus),
        ("user", a.user != b.user),
        ("batch", a.batch != b.batch),
        ("poll", a.poll != b.poll),
        ("backpressure", a.backpressure != b.backpressure),
        ("on_downstream_down", a.on_downstream_down != b.on_downstream_down),
        ("restart", a.restart != b.restart),
        ("location", a.location != b.location),
    ];
    differ.iter().find(|(_, d)| *d).map(|(field, _)| format!("their {field} differ"))
}

/// Fuses what may be fused in `server`; returns the groups and, for each
/// NF with `fuse: auto` left alone, why.
pub(crate) fn fuse(server: &mut ChainSpec) -> (Vec<FusedGroup>, HashMap<String, String>) {
    let n = server.nfs.len();
    let alone: Vec<Option<String>> = (0..n).map(|i| alone(server, i)).collect();
    let mut why_not: HashMap<String, String> = HashMap::new();
    // next[i]: the NF after i that i fuses with.
    let mut next: Vec<Option<usize>> = vec![None; n];
    for i in 0..n {
        let Some(link) = server.links.iter().find(|l| l.from == server.nfs[i].name) else { continue };
        let Some(j) = server.nfs.iter().position(|nf| nf.name == link.to) else { continue };
        let why =
            alone[i].clone().or_else(|| alone[j].clone()).or_else(|| apart(server, &server.nfs[i], &server.nfs[j]));
        match why {
            None => next[i] = Some(j),
            Some(why) if server.fuse_policy(i) == FusePolicy::Auto => {
                why_not.insert(server.nfs[i].name.clone(), format!("not fused with {}: {why}", link.to));
            }
            Some(_) => {}
        }
    }
    let mut groups = Vec::new();
    for head in (0..n).filter(|&h| !next.contains(&Some(h))) {
        let mut run = vec![head];
        while let Some(j) = next[*run.last().expect("one member")] {
            run.push(j);
        }
        for members in cut(server, &run, &mut why_not) {
            if members.len() > 1 {
                groups.push(members);
            }
        }
    }
    let fused: Vec<FusedGroup> = groups.iter().map(|g| rewrite(server, g)).collect();
    let gone: Vec<&str> = fused.iter().flat_map(|g| g.members[1..].iter().map(String::as_str)).collect();
    server.nfs.retain(|nf| !gone.contains(&nf.name.as_str()));
    for g in &fused {
        // The last member's reason (why the group ends there) stays.
        for m in &g.members[..g.members.len() - 1] {
            why_not.remove(m);
        }
    }
    (fused, why_not)
}

/// Cuts a run of NFs that may fuse pairwise into fused NFs that fit one
/// NF: its counters, and one flow monitor (one flow table).
fn cut(server: &ChainSpec, run: &[usize], why_not: &mut HashMap<String, String>) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let (mut counters, mut monitor) = (0usize, false);
    for &i in run {
        let nf = &server.nfs[i];
        let (c, is_monitor) = budget(nf);
        let full = counters.saturating_add(c) > MAX_NF_COUNTERS;
        if groups.is_empty() || full || (monitor && is_monitor) {
            if let Some(prev) = groups.last().and_then(|g| g.last()) {
                let why = if full { "their counters together would not fit one NF" } else { "a second flow monitor" };
                why_not.insert(server.nfs[*prev].name.clone(), format!("not fused with {}: {why}", nf.name));
            }
            groups.push(Vec::new());
            (counters, monitor) = (0, false);
        }
        groups.last_mut().expect("a group").push(i);
        counters = counters.saturating_add(c);
        monitor |= is_monitor;
    }
    groups
}

/// What NF `nf` adds to a fused NF: counters, and whether it is a flow
/// monitor.
fn budget(nf: &NfSpec) -> (usize, bool) {
    stage_budget(nf.kind.as_deref().unwrap_or_default(), &nf.args)
}

/// Whether NFs `run` fit one fused NF ([`cut`] would not cut them).
fn fits(spec: &ChainSpec, run: &[usize]) -> bool {
    let budgets: Vec<(usize, bool)> = run.iter().map(|&i| budget(&spec.nfs[i])).collect();
    let counters = budgets.iter().fold(0usize, |n, (c, _)| n.saturating_add(*c));
    counters <= MAX_NF_COUNTERS && budgets.iter().filter(|(_, m)| *m).count() <= 1
}

/// Makes group `members` (indexes into `server.nfs`, in path order) one
/// NF in the first's place; the others are removed by the caller.
fn rewrite(server: &mut ChainSpec, members: &[usize]) -> FusedGroup {
    let names: Vec<String> = members.iter().map(|&i| server.nfs[i].name.clone()).collect();
    let owned: Vec<(String, String, Vec<String>)> = members
        .iter()
        .map(|&i| {
            let nf = &server.nfs[i];
            (nf.name.clone(), nf.kind.clone().expect("a kind NF"), nf.args.clone())
        })
        .collect();
    let stages: Vec<Stage> = owned.iter().map(|(name, kind, args)| Stage { name, kind, args }).collect();
    let first = &mut server.nfs[members[0]];
    first.kind = Some(FUSED.to_string());
    first.args = fused_args(&stages);
    let (head, last) = (names[0].clone(), names[names.len() - 1].clone());
    // The links inside the group go; the last member's out-links become
    // the fused NF's, in the same places (out-link i is the i-th).
    server.links.retain(|l| !(names.contains(&l.from) && names.contains(&l.to)));
    for l in server.links.iter_mut().filter(|l| l.from == last) {
        l.from = head.clone();
    }
    FusedGroup { name: head, members: names }
}

/// Whether the NFs after the last process `after` on the way to a port
/// (`post`, in path order, a split NAT last if `split`) run better in
/// `after`'s threads than in XDP on a loop device in front of the port:
/// yes when all of them say `fuse: auto` and each fuses with the one
/// before it (the NAT, which does not fuse, then runs whole as the process
/// after them). A frame then crosses no loop device: on the 2-vCPU
/// machine Ferry is built on, P4SFC's chain placed so carries 0.90-1.10x
/// its all-process throughput, and 0.68-0.74x with its monitor, firewall
/// and NAT on the loop device (`ferry bench offload`, fused and placed
/// variants).
/// Not when one of them must run in XDP (`offload: force`), or when they
/// and `after` would not fit one fused NF.
pub(crate) fn post_fuses(spec: &ChainSpec, after: usize, post: &[usize], split: Option<usize>) -> bool {
    let fusing: Vec<usize> = post.iter().copied().filter(|&i| Some(i) != split).collect();
    if fusing.is_empty() || alone(spec, after).is_some() || fusing.iter().any(|&i| alone(spec, i).is_some()) {
        return false;
    }
    if post.iter().any(|&i| spec.nfs[i].offload == OffloadPolicy::Force) {
        return false;
    }
    let run: Vec<usize> = std::iter::once(after).chain(fusing).collect();
    if !run.windows(2).all(|w| apart(spec, &spec.nfs[w[0]], &spec.nfs[w[1]]).is_none()) {
        return false;
    }
    // The fused NF holds the NFs before `after` that fuse with it too.
    let mut whole = run;
    while let Some(p) = fusing_before(spec, whole[0]) {
        if whole.contains(&p) {
            break;
        }
        whole.insert(0, p);
    }
    fits(spec, &whole)
}

/// The NF before NF `i` that fuses with it, if one does.
fn fusing_before(spec: &ChainSpec, i: usize) -> Option<usize> {
    let name = &spec.nfs[i].name;
    let ins: Vec<_> = spec.links.iter().filter(|l| &l.to == name).collect();
    let [link] = ins.as_slice() else { return None };
    let p = spec.nfs.iter().position(|n| n.name == link.from)?;
    (alone(spec, p).is_none() && apart(spec, &spec.nfs[p], &spec.nfs[i]).is_none()).then_some(p)
}

/// Each port is one NF's after fusion. The chain parser lets two NFs with
/// `fuse: auto` share a port (`in -> a -> b -> in`, a round trip through
/// a run of NFs) on the understanding that they fuse; if they did not,
/// the link that made the second one a user of the port is refused here,
/// with why they did not fuse.
pub(crate) fn check_port_owners(
    spec: &ChainSpec,
    server: &ChainSpec,
    fused: &[FusedGroup],
    why_not: &HashMap<String, String>,
) -> Result<(), crate::PlaceError> {
    // A server link from a fused NF was the last member's in the file.
    let file_names = |nf: &str| -> Vec<String> {
        fused.iter().find(|g| g.name == nf).map_or_else(|| vec![nf.to_string()], |g| g.members.clone())
    };
    for port in &spec.ports {
        let mut owner: Option<&str> = None;
        for (i, l) in server.links.iter().enumerate() {
            let nf = if l.from == port.name {
                &l.to
            } else if l.to == port.name {
                &l.from
            } else {
                continue;
            };
            if server.nfs.iter().all(|n| &n.name != nf) {
                continue;
            }
            match owner {
                Some(o) if o != nf => {
                    let why = why_not
                        .get(o)
                        .or_else(|| why_not.get(nf.as_str()))
                        .map_or(String::new(), |w| format!(" ({w})"));
                    let (froms, tos) = (file_names(&l.from), file_names(&l.to));
                    let at =
                        spec.links.iter().position(|s| froms.contains(&s.from) && tos.contains(&s.to)).unwrap_or(i);
                    return Err(crate::PlaceError {
                        at: vec![ferry_config::Seg::Key("links"), ferry_config::Seg::Index(at)],
                        message: format!(
                            "port {:?} is used by NFs {o:?} and {nf:?}, which did not fuse into one{why}: a port queue \
                             is one AF_XDP socket, owned by one NF thread",
                            port.name
                        ),
                    });
                }
                _ => owner = Some(nf),
            }
        }
    }
    Ok(())
}
