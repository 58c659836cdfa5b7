//! The chain file compiled to numbers: what each NF thread needs at run
//! time, computed once by ferryd and sent to each NF when it connects.
//!
//! Per domain, threads get ids `0..tids`: first the NF threads in chain-file
//! order, then one per copy link touching the domain. The id is the
//! thread's producer id on every ring of the domain, its block in the
//! control words and its mark in the frame-owner table. Ring `i` of a domain
//! is the receive ring of thread id `i` for NF threads; copy link input rings
//! follow.

use serde::{Deserialize, Serialize};

use crate::classify::ClassifyDefault;
use crate::spec::{
    BackpressureSpec, ChainSpec, DownPolicy, LinkMode, Node, PollSpec, PortRings, UnownedQueues, XdpMode,
};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChainPlan {
    pub name: String,
    pub domains: Vec<DomainPlan>,
    pub ports: Vec<PortPlan>,
    pub kernel: Vec<crate::spec::KernelSpec>,
    pub nfs: Vec<NfPlan>,
    /// (`bridges` in plans written before copy links had their name.)
    #[serde(alias = "bridges")]
    pub copy_links: Vec<CopyLinkPlan>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainPlan {
    pub name: String,
    pub frames: u32,
    pub frame_size: u32,
    pub ring_size: u32,
    /// Thread ids in use (NF threads, then copy links).
    pub tids: u32,
    /// Rings in the region: `tids_of_nf_threads` receive rings, then one
    /// input ring per copy link leaving this domain.
    pub rings: u32,
    /// Its tenant, if tenants are declared.
    #[serde(default)]
    pub tenant: Option<String>,
    /// What runs as one uid with it (`tenant "x"` or `domain "y"`).
    #[serde(default)]
    pub uid_group: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortPlan {
    pub name: String,
    pub netns: Option<String>,
    pub netdev: String,
    pub queues: u32,
    pub xdp_mode: XdpMode,
    /// The NF whose threads own this port's sockets (queue i = thread i).
    pub nf: Option<usize>,
    /// Whether traffic arriving on the port goes to the NF (an XDP redirect
    /// program is attached) or the port is only transmitted on.
    pub rx: bool,
    /// The port classifies its device's frames into tenant entries (XDP
    /// mode: router mode was lowered to an NF before planning). ferryd
    /// makes each entry's device and names it in the entry's `netdev`.
    #[serde(default)]
    pub classify: Option<ClassifyPlan>,
    /// Sizes of its sockets' AF_XDP rings.
    #[serde(default)]
    pub rings: PortRings,
    /// Frames on device queues with no socket of the port go to the
    /// kernel (else they are dropped); counted either way.
    #[serde(default)]
    pub unowned_to_kernel: bool,
}

/// An XDP classifier's table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifyPlan {
    /// Rules in the router's text form (`ferry_wire::classify::Rule`); `out`
    /// is an index into `entries`.
    pub rules: Vec<String>,
    /// What no rule takes goes to the kernel (else it is dropped).
    pub default_kernel: bool,
    /// The tenant entries (port indices), in file order.
    pub entries: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NfPlan {
    pub name: String,
    pub domain: usize,
    pub kind: Option<String>,
    pub args: Vec<String>,
    pub exec: Option<Vec<String>>,
    pub spawn: bool,
    pub restart: bool,
    /// The named user it runs as; None: its domain's allocated uid.
    pub user: Option<String>,
    pub threads: Vec<ThreadPlan>,
    /// CPUs its process may run on; empty: any.
    #[serde(default)]
    pub cpus: Vec<u32>,
    pub batch: u32,
    /// Out-link i, in the order of the chain file's `from:` lines.
    pub outs: Vec<OutLink>,
    pub out_names: Vec<String>,
    pub poll: PollSpec,
    pub backpressure: BackpressureSpec,
    pub on_downstream_down: DownPolicy,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadPlan {
    /// Index within the NF (also its queue on every port it uses).
    pub index: u32,
    /// Id within the domain.
    pub tid: u32,
    /// Its receive ring.
    pub ring: u32,
    /// Ports this thread has a socket on (queue = `index`).
    pub ports: Vec<usize>,
}

/// Where out-link i sends a frame.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum OutLink {
    /// Zero-copy to another NF of the domain: one receive ring per thread of
    /// it; the sender picks a thread by flow hash.
    Nf { nf: usize, rings: Vec<u32>, tids: Vec<u32> },
    /// Across domains: into the input ring of a ferryd copy link.
    Copy {
        #[serde(alias = "bridge")]
        link: usize,
        ring: u32,
        tid: u32,
    },
    /// Out of a port, on this thread's own socket.
    Port { port: usize },
    /// Into the kernel stack: a write to TAP device `kernel`.
    Kernel { kernel: usize },
}

/// A copy link, served by a ferryd thread that maps both domains.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CopyLinkPlan {
    pub from_nf: usize,
    pub to_nf: usize,
    pub from_domain: usize,
    pub to_domain: usize,
    pub from_tid: u32,
    pub to_tid: u32,
    /// Its input ring, in `from_domain`.
    pub ring: u32,
    /// Receive rings (and tids) of the target NF's threads, in `to_domain`.
    pub to_rings: Vec<u32>,
    pub to_tids: Vec<u32>,
}

impl ChainPlan {
    /// Compiles a validated spec.
    pub fn compile(spec: &ChainSpec) -> ChainPlan {
        let dom_index = |name: &str| spec.domains.iter().position(|d| d.name == name).expect("validated");
        let mut domains: Vec<DomainPlan> = spec
            .domains
            .iter()
            .map(|d| DomainPlan {
                name: d.name.clone(),
                frames: d.frames,
                frame_size: d.frame_size,
                ring_size: d.ring_size,
                tids: 0,
                rings: 0,
                tenant: d.tenant.clone(),
                uid_group: spec.uid_group(&d.name),
            })
            .collect();
        let mut nfs: Vec<NfPlan> = Vec::new();
        for (i, n) in spec.nfs.iter().enumerate() {
            let d = dom_index(&n.domain);
            let threads = (0..n.threads)
                .map(|i| {
                    let tid = domains[d].tids + i;
                    ThreadPlan { index: i, tid, ring: tid, ports: Vec::new() }
                })
                .collect();
            domains[d].tids += n.threads;
            nfs.push(NfPlan {
                name: n.name.clone(),
                domain: d,
                kind: n.kind.clone(),
                args: n.args.clone(),
                exec: n.exec.clone(),
                spawn: n.spawn,
                restart: n.restart,
                user: spec.user_of(i).map(str::to_string),
                threads,
                batch: n.batch,
                outs: Vec::new(),
                out_names: Vec::new(),
                poll: n.poll,
                backpressure: n.backpressure,
                on_downstream_down: n.on_downstream_down,
                cpus: n.cpus.clone(),
            });
        }
        for d in &mut domains {
            d.rings = d.tids;
        }
        let mut ports: Vec<PortPlan> = spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let classify = p.classify.as_ref().map(|c| ClassifyPlan {
                    rules: spec.classify_table(i),
                    default_kernel: c.default == ClassifyDefault::Kernel,
                    entries: spec.entries_of(i),
                });
                PortPlan {
                    name: p.name.clone(),
                    netns: p.netns.clone(),
                    netdev: p.netdev.clone(),
                    queues: p.queues,
                    xdp_mode: p.xdp_mode,
                    nf: None,
                    rx: false,
                    classify,
                    rings: p.rings,
                    unowned_to_kernel: p.unowned_queues == UnownedQueues::Kernel,
                }
            })
            .collect();
        let mut copy_links: Vec<CopyLinkPlan> = Vec::new();
        for l in &spec.links {
            let (from, to) = (spec.node(&l.from).expect("validated"), spec.node(&l.to).expect("validated"));
            match (from, to) {
                (Node::Port(p), Node::Nf(n)) => {
                    ports[p].nf = Some(n);
                    ports[p].rx = true;
                    for t in &mut nfs[n].threads {
                        if !t.ports.contains(&p) {
                            t.ports.push(p);
                        }
                    }
                }
                (Node::Nf(n), Node::Port(p)) => {
                    ports[p].nf = Some(n);
                    for t in &mut nfs[n].threads {
                        if !t.ports.contains(&p) {
                            t.ports.push(p);
                        }
                    }
                    nfs[n].outs.push(OutLink::Port { port: p });
                    nfs[n].out_names.push(l.to.clone());
                }
                (Node::Nf(a), Node::Nf(b)) => {
                    let (da, db) = (nfs[a].domain, nfs[b].domain);
                    let copy = l.mode == Some(LinkMode::Copy) || da != db;
                    let rings: Vec<u32> = nfs[b].threads.iter().map(|t| t.ring).collect();
                    let tids: Vec<u32> = nfs[b].threads.iter().map(|t| t.tid).collect();
                    let out = if copy {
                        let from_tid = domains[da].tids;
                        domains[da].tids += 1;
                        let to_tid = if da == db {
                            from_tid
                        } else {
                            domains[db].tids += 1;
                            domains[db].tids - 1
                        };
                        let ring = domains[da].rings;
                        domains[da].rings += 1;
                        copy_links.push(CopyLinkPlan {
                            from_nf: a,
                            to_nf: b,
                            from_domain: da,
                            to_domain: db,
                            from_tid,
                            to_tid,
                            ring,
                            to_rings: rings,
                            to_tids: tids,
                        });
                        OutLink::Copy { link: copy_links.len() - 1, ring, tid: from_tid }
                    } else {
                        OutLink::Nf { nf: b, rings, tids }
                    };
                    nfs[a].outs.push(out);
                    nfs[a].out_names.push(l.to.clone());
                }
                (Node::Nf(n), Node::Kernel(k)) => {
                    nfs[n].outs.push(OutLink::Kernel { kernel: k });
                    nfs[n].out_names.push(l.to.clone());
                }
                _ => unreachable!("validated"),
            }
        }
        let plan = ChainPlan { name: spec.name(), domains, ports, kernel: spec.kernel.clone(), nfs, copy_links };
        debug_assert_eq!(plan.check_indices(), Ok(()));
        plan
    }

    /// Whether every index in the plan names something in it: NFs, ports,
    /// kernel links and copy links by position, thread ids and rings
    /// within their domain's. A compiled plan always does; one read back
    /// from a state file is checked before a ferryd runs by it.
    pub fn check_indices(&self) -> Result<(), String> {
        let (nfs, ports) = (self.nfs.len(), self.ports.len());
        for p in &self.ports {
            within(&format!("port {}: its NF", p.name), p.nf, nfs)?;
            for &e in p.classify.iter().flat_map(|c| &c.entries) {
                within(&format!("port {}: an entry", p.name), Some(e), ports)?;
            }
        }
        for n in &self.nfs {
            let what = |field: &str| format!("NF {}: {field}", n.name);
            within(&what("its domain"), Some(n.domain), self.domains.len())?;
            let d = &self.domains[n.domain];
            for t in &n.threads {
                in_domain(&what("a thread"), d, [t.tid], [t.ring])?;
                t.ports.iter().try_for_each(|&p| within(&what("a thread's port"), Some(p), ports))?;
            }
            if n.out_names.len() != n.outs.len() {
                return Err(what("out-links and their names differ in number"));
            }
            for o in &n.outs {
                match o {
                    OutLink::Nf { nf, rings, tids } => {
                        within(&what("an out-link"), Some(*nf), nfs)?;
                        in_domain(&what("an out-link"), d, tids.iter().copied(), rings.iter().copied())?;
                    }
                    OutLink::Copy { link, ring, tid } => {
                        within(&what("a copy link"), Some(*link), self.copy_links.len())?;
                        in_domain(&what("a copy link"), d, [*tid], [*ring])?;
                    }
                    OutLink::Port { port } => within(&what("an out port"), Some(*port), ports)?,
                    OutLink::Kernel { kernel } => within(&what("a kernel link"), Some(*kernel), self.kernel.len())?,
                }
            }
        }
        self.copy_links.iter().try_for_each(|l| self.check_copy_link(l))
    }

    fn check_copy_link(&self, l: &CopyLinkPlan) -> Result<(), String> {
        let what = format!("copy link {}->{}", l.from_nf, l.to_nf);
        within(&what, Some(l.from_nf.max(l.to_nf)), self.nfs.len())?;
        within(&what, Some(l.from_domain.max(l.to_domain)), self.domains.len())?;
        in_domain(&what, &self.domains[l.from_domain], [l.from_tid], [l.ring])?;
        let to = &self.domains[l.to_domain];
        in_domain(&what, to, l.to_tids.iter().copied().chain([l.to_tid]), l.to_rings.iter().copied())
    }
}

/// `Ok` when `i` (if any) is below `n`.
fn within(what: &str, i: Option<usize>, n: usize) -> Result<(), String> {
    match i {
        Some(i) if i >= n => Err(format!("{what}: index {i}, but there are {n}")),
        _ => Ok(()),
    }
}

/// `Ok` when the thread ids and rings are within domain `d`'s.
fn in_domain(
    what: &str,
    d: &DomainPlan,
    tids: impl IntoIterator<Item = u32>,
    rings: impl IntoIterator<Item = u32>,
) -> Result<(), String> {
    if let Some(t) = tids.into_iter().find(|&t| t >= d.tids) {
        return Err(format!("{what}: thread id {t}, but domain {} has {}", d.name, d.tids));
    }
    match rings.into_iter().find(|&r| r >= d.rings) {
        Some(r) => Err(format!("{what}: ring {r}, but domain {} has {}", d.name, d.rings)),
        None => Ok(()),
    }
}

impl ChainPlan {
    /// Settles each NF's smart-polling `idle_polls` that the chain file
    /// left out. `cpus` is how many CPUs an unpinned NF may run on.
    ///
    /// Polling after a busy burst is only cheap while the thread has a CPU
    /// to itself. When an NF's CPUs are shared by more chain threads (its
    /// own, other NFs' whose CPU sets meet its set, ferryd's copy links)
    /// than there are CPUs, each empty poll yields to them, and after one
    /// turn for each (their number of empty polls) it blocks: it keeps
    /// polling while the threads it shares with keep handing it work, and
    /// spends no more than a turn once they stop. Other chains and other
    /// processes on those CPUs are not counted.
    pub fn settle_polling(&mut self, cpus: usize) {
        let meets = |a: &[u32], b: &[u32]| a.is_empty() || b.is_empty() || a.iter().any(|c| b.contains(c));
        let links = self.copy_links.len();
        let limits: Vec<Option<u32>> = self
            .nfs
            .iter()
            .map(|nf| {
                let sharing: usize = self
                    .nfs
                    .iter()
                    .filter(|other| meets(&nf.cpus, &other.cpus))
                    .map(|other| other.threads.len())
                    .sum::<usize>()
                    + links;
                let room = if nf.cpus.is_empty() { cpus } else { nf.cpus.len() };
                (sharing > room).then(|| u32::try_from(sharing).unwrap_or(u32::MAX))
            })
            .collect();
        for (nf, limit) in self.nfs.iter_mut().zip(limits) {
            if nf.poll.idle_polls.is_none() {
                nf.poll.idle_polls = limit;
            }
        }
    }

    pub fn nf_index(&self, name: &str) -> Option<usize> {
        self.nfs.iter().position(|n| n.name == name)
    }

    /// Which NF thread owns thread id `tid` of domain `d`.
    pub fn thread_by_tid(&self, d: usize, tid: u32) -> Option<(usize, usize)> {
        self.nfs
            .iter()
            .enumerate()
            .filter(|(_, n)| n.domain == d)
            .find_map(|(ni, n)| n.threads.iter().position(|t| t.tid == tid).map(|ti| (ni, ti)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_fan_out_fan_in_and_copy_links() {
        let text = r#"
domains: [ { name: a }, { name: b } ]
ports:
  - { name: in, netdev: d0 }
  - { name: out, netdev: d1, queues: 2 }
nfs:
  - { name: s, domain: a, kind: split }
  - { name: x, domain: a, kind: l2fwd }
  - { name: y, domain: b, kind: l2fwd }
  - { name: c, domain: a, kind: l2fwd, threads: 2 }
links:
  - { from: in, to: s }
  - { from: s, to: x }
  - { from: s, to: y }
  - { from: x, to: c }
  - { from: y, to: c }
  - { from: c, to: out }
"#;
        let p = plan_of(text);
        // A plan written before copy links had their name still reads (a
        // persisted state of an older ferryd is then refused by version).
        let old = serde_json::to_string(&p)
            .unwrap()
            .replace("\"copy_links\"", "\"bridges\"")
            .replace("{\"link\"", "{\"bridge\"");
        assert!(old.contains("\"bridges\"") && old.contains("\"bridge\""));
        assert_eq!(serde_json::from_str::<ChainPlan>(&old).unwrap(), p);
        // Each copy link has a thread id in both domains it joins.
        assert_eq!(p.domains[0].tids, 4 + 2, "s, x, c×2 and both copy links");
        assert_eq!(p.domains[1].tids, 1 + 2, "y and both copy links");
        assert_eq!(p.copy_links.len(), 2);
        let s = &p.nfs[0];
        assert_eq!(s.outs.len(), 2);
        assert!(matches!(&s.outs[0], OutLink::Nf { nf: 1, rings, .. } if rings == &vec![1]));
        assert!(matches!(&s.outs[1], OutLink::Copy { link: 0, .. }));
        let c = &p.nfs[3];
        assert_eq!(c.threads.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(c.threads[1].ports, vec![1]);
        assert_eq!(p.ports[0].nf, Some(0));
        assert!(p.ports[0].rx && !p.ports[1].rx);
        // The copy link y->c leaves domain b (ring after y's) and lands on c's rings.
        let b = &p.copy_links[1];
        assert_eq!((b.from_domain, b.to_domain, b.ring), (1, 0, 1));
        assert_eq!(b.to_rings, vec![2, 3]);
        assert_eq!(p.domains[1].rings, 2);
    }

    fn plan_of(text: &str) -> ChainPlan {
        // Planning does not look at kinds: any will do here.
        struct AnyKind;
        impl crate::spec::KindCheck for AnyKind {
            fn check(&self, _: &str, _: &[String], _: usize) -> Result<(), (Option<usize>, String)> {
                Ok(())
            }
            fn needs_out_link(&self, _: &str) -> bool {
                false
            }
        }
        ChainPlan::compile(&ChainSpec::from_yaml_str(text, "t.yaml", &AnyKind).unwrap())
    }

    fn idle_polls(p: &ChainPlan) -> Vec<Option<u32>> {
        p.nfs.iter().map(|n| n.poll.idle_polls).collect()
    }

    #[test]
    fn polling_settles_by_threads_per_cpu() {
        let chain = |extra_a: &str, extra_c: &str| {
            format!(
                "domains: [ {{ name: m }} ]\nnfs:\n  - {{ name: a, domain: m, kind: k{extra_a} }}\n  \
                 - {{ name: b, domain: m, kind: k }}\n  - {{ name: c, domain: m, kind: k{extra_c} }}\n\
                 links:\n  - {{ from: a, to: b }}\n  - {{ from: b, to: c }}\n"
            )
        };
        // Three unpinned threads: they fit four CPUs (no limit), not two
        // (one turn for each of the three).
        let mut p = plan_of(&chain("", ""));
        p.settle_polling(4);
        assert_eq!(idle_polls(&p), vec![None; 3]);
        let mut p = plan_of(&chain("", ""));
        p.settle_polling(2);
        assert_eq!(idle_polls(&p), vec![Some(3); 3]);
        // a and c pinned apart: each pinned NF shares its CPU with b (any
        // CPU) only; b may meet all three.
        let mut p = plan_of(&chain(", cpus: [0]", ", cpus: [1]"));
        p.settle_polling(3);
        assert_eq!(idle_polls(&p), vec![Some(2), None, Some(2)]);
        // A value the file gives is kept, whatever the CPUs; the timeout
        // is never touched.
        let mut p = plan_of(&chain(", poll: { idle_polls: 50 }", ""));
        p.settle_polling(1);
        assert_eq!(idle_polls(&p), vec![Some(50), Some(3), Some(3)]);
        assert!(p.nfs.iter().all(|n| n.poll.idle_timeout_us == 200));
    }
}
