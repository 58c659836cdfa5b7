//! Tenant classification at the edge, as the chain file declares it: a
//! port with `classify:` owns a shared device and sorts what arrives on
//! it into tenant entries, ports with `via:` that name it.
//!
//! ```yaml
//! ports:
//!   - name: edge
//!     netns: dut
//!     netdev: d0
//!     classify:
//!       mode: xdp          # xdp (default): in the edge's XDP program | router: a trusted NF copies
//!       default: drop      # drop (default) | kernel: what no rule takes
//!       rules:             # the first match wins (1 to 64)
//!         - { dst: 10.1.0.0/16, to: acme-in }
//!         - { vlan: 200, to: zeta-in }
//!         - { vlan: 100, inner_vlan: 300, to: zeta-in }   # QinQ: outer and inner tag
//!         - { src: "2001:db8:9::/48", dport: 53, to: zeta-in }
//!         - { src: 10.9.0.0/16, dport: 53, to: zeta-in }
//!       cpus: [1]          # router mode: where the router NF may run
//!   - { name: acme-in, via: edge, tenant: acme }
//!   - { name: zeta-in, via: edge, tenant: zeta }
//! ```
//!
//! In `xdp` mode ferryd gives each entry a device of its own and the
//! edge's XDP program redirects each frame there, so a frame lands in the
//! UMEM of its tenant's NF and in no other (`docs/ARCHITECTURE.md`,
//! Tenants). In `router` mode the file is rewritten before planning: the
//! edge feeds one `tenant-router` NF, in a domain of its own (the
//! provider's, no tenant's), and each entry becomes a copy link from the
//! router to the entry's NF.
//!
//! Rule fields are checked by the router's own parser (through
//! [`KindCheck`]), so the XDP table and the router read one syntax.

use serde::{Deserialize, Serialize};

use crate::spec::{valid_name, ChainSpec, DomainSpec, KindCheck, LinkSpec, NfSpec, Node, XdpMode, MAX_CPU};
use ferry_config::Seg;

/// The NF type of `classify: router` (the catalog names it too).
pub const TENANT_ROUTER: &str = "tenant-router";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifySpec {
    #[serde(default)]
    pub mode: ClassifyMode,
    #[serde(default)]
    pub default: ClassifyDefault,
    pub rules: Vec<ClassifyRule>,
    /// Router mode: the CPUs the router NF may run on (default: any).
    #[serde(default)]
    pub cpus: Vec<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifyMode {
    /// The edge's XDP program picks the entry; the frame lands in the
    /// tenant's memory directly.
    #[default]
    Xdp,
    /// A trusted router NF receives everything and copies.
    Router,
}

/// What happens to a frame no rule takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifyDefault {
    #[default]
    Drop,
    /// The edge device's own kernel stack (xdp mode only).
    Kernel,
}

/// One rule: the fields it matches (absent: any) and the entry it picks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifyRule {
    #[serde(default)]
    pub src: Option<String>,
    #[serde(default)]
    pub dst: Option<String>,
    /// The outer (or only) tag's VLAN id.
    #[serde(default)]
    pub vlan: Option<u32>,
    /// The inner tag's VLAN id, of a frame with two tags (QinQ).
    #[serde(default)]
    pub inner_vlan: Option<u32>,
    #[serde(default)]
    pub dport: Option<u32>,
    /// A tenant entry of this classifier (a port with `via:` naming it).
    pub to: String,
}

impl ClassifyRule {
    /// Its fields as (key, text), in the router's syntax.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut f = Vec::new();
        f.extend(self.src.as_ref().map(|v| ("src", v.clone())));
        f.extend(self.dst.as_ref().map(|v| ("dst", v.clone())));
        f.extend(self.vlan.map(|v| ("vlan", v.to_string())));
        f.extend(self.inner_vlan.map(|v| ("inner_vlan", v.to_string())));
        f.extend(self.dport.map(|v| ("dport", v.to_string())));
        f
    }

    /// The rule in the router's text form, picking entry `out`.
    pub fn text(&self, out: usize) -> String {
        let mut s = format!("out={out}");
        for (k, v) in self.fields() {
            s += &format!(",{k}={v}");
        }
        s
    }
}

type Invalid = (Vec<Seg>, String);

impl ChainSpec {
    /// The tenant entries (port indices) of classifier port `c`, in file
    /// order: entry i is rule `out=i`.
    pub fn entries_of(&self, c: usize) -> Vec<usize> {
        let name = &self.ports[c].name;
        self.ports.iter().enumerate().filter(|(_, p)| p.via.as_ref() == Some(name)).map(|(i, _)| i).collect()
    }

    /// Classifier port `c`'s rules in the router's text form, `out` the
    /// index of the rule's entry in [`ChainSpec::entries_of`].
    pub fn classify_table(&self, c: usize) -> Vec<String> {
        let entries = self.entries_of(c);
        let out = |to: &str| entries.iter().position(|&e| self.ports[e].name == to).unwrap_or(usize::MAX);
        self.ports[c].classify.iter().flat_map(|s| &s.rules).map(|r| r.text(out(&r.to))).collect()
    }

    /// Classifier ports and tenant entries: each entry names a classifier
    /// and is picked by one of its rules; rules are valid and pick entries
    /// of their own classifier; neither kind of port is a link's target,
    /// and a classifier is in no link at all.
    pub(crate) fn check_classifiers(&self, kinds: &dyn KindCheck) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        for (i, p) in self.ports.iter().enumerate() {
            let at = |f| vec![Key("ports"), Index(i), Key(f)];
            if let Some(c) = &p.via {
                let classifier = self.ports.iter().position(|q| &q.name == c && q.classify.is_some());
                let Some(ci) = classifier else {
                    return Err((at("via"), format!("{c:?} is not a port with `classify:`")));
                };
                if p.classify.is_some() {
                    return Err((at("classify"), "a tenant entry cannot classify in turn".into()));
                }
                // Its classifier's namespace is allowed: normalised files
                // (see `place_entries`) say so.
                if !p.netdev.is_empty() || p.netns.as_ref().is_some_and(|n| Some(n) != self.ports[ci].netns.as_ref()) {
                    return Err((
                        at("netdev"),
                        "a tenant entry's device is made by ferryd, in its classifier's namespace: give no netdev or \
                         netns"
                            .into(),
                    ));
                }
                let edge_mode = self.ports[ci].xdp_mode;
                if p.xdp_mode != XdpMode::default() && p.xdp_mode != edge_mode {
                    let why = format!("an entry takes its classifier's XDP mode ({edge_mode:?}): leave it out");
                    return Err((at("xdp_mode"), why));
                }
                let picked = self.ports[ci].classify.iter().flat_map(|s| &s.rules).any(|r| r.to == p.name);
                if !picked {
                    return Err((
                        at("via"),
                        format!("no rule of {c:?} picks {:?}: it would never get a frame", p.name),
                    ));
                }
                // One link to one NF, whose thread i takes queue i: a
                // queue without a thread would lose what lands there.
                let fed: Vec<&str> = self.links.iter().filter(|l| l.from == p.name).map(|l| l.to.as_str()).collect();
                let [nf] = fed[..] else {
                    let why = format!("tenant entry {:?} feeds {} links: link it to one NF, once", p.name, fed.len());
                    return Err((at("via"), why));
                };
                // (An NF's own threads are checked with the NF.)
                let threads = self.nfs.iter().find(|n| n.name == nf).map_or(p.queues, |n| n.threads);
                if (1..=64).contains(&threads) && threads != p.queues {
                    let why = format!("{} queues but NF {nf:?} has {threads} threads: give as many queues", p.queues);
                    return Err((at("queues"), why));
                }
                match (&p.tenant, self.tenants.is_empty()) {
                    (Some(t), _) if !self.tenants.iter().any(|x| &x.name == t) => {
                        return Err((at("tenant"), format!("unknown tenant {t:?}")))
                    }
                    (None, false) => {
                        return Err((at("tenant"), "once tenants are declared, each entry names its tenant".into()))
                    }
                    _ => {}
                }
            } else if p.tenant.is_some() {
                return Err((at("tenant"), "only a tenant entry (a port with `via:`) names a tenant".into()));
            }
            let Some(spec) = &p.classify else { continue };
            let entries = self.entries_of(i);
            let rules_at = || vec![Key("ports"), Index(i), Key("classify"), Key("rules")];
            if spec.rules.is_empty() {
                return Err((rules_at(), "give at least one rule".into()));
            }
            if spec.mode == ClassifyMode::Xdp && !spec.cpus.is_empty() {
                let why = "`cpus` places the router NF: xdp mode has none (XDP runs where frames arrive)";
                return Err((vec![Key("ports"), Index(i), Key("classify"), Key("cpus")], why.into()));
            }
            let mut seen = std::collections::HashSet::new();
            if let Some(&cpu) = spec.cpus.iter().find(|&&c| c > MAX_CPU || !seen.insert(c)) {
                let why = format!("CPU {cpu}: past {MAX_CPU} or given twice");
                return Err((vec![Key("ports"), Index(i), Key("classify"), Key("cpus")], why));
            }
            if spec.mode == ClassifyMode::Router && spec.default == ClassifyDefault::Kernel {
                return Err((
                    vec![Key("ports"), Index(i), Key("classify"), Key("default")],
                    "router mode drops what no rule takes (the router NF has no way into the edge's stack)".into(),
                ));
            }
            for (j, r) in spec.rules.iter().enumerate() {
                let rule = |f| vec![Key("ports"), Index(i), Key("classify"), Key("rules"), Index(j), Key(f)];
                if !entries.iter().any(|&e| self.ports[e].name == r.to) {
                    return Err((
                        rule("to"),
                        format!("{:?} is not a tenant entry of {:?} (a port with `via: {}`)", r.to, p.name, p.name),
                    ));
                }
                for (key, value) in r.fields() {
                    // One field: a `,` would smuggle another in.
                    if value.contains([',', '=']) {
                        return Err((rule(key), format!("{value:?}: one value, without `,` or `=`")));
                    }
                    let one = [format!("out=0,{key}={value}")];
                    kinds.check(TENANT_ROUTER, &one, entries.len()).map_err(|(_, message)| (rule(key), message))?;
                }
            }
            // The table as a whole: the classifier's limits on rules and
            // entries.
            kinds
                .check(TENANT_ROUTER, &self.classify_table(i), entries.len())
                .map_err(|(_, message)| (rules_at(), message))?;
        }
        for (i, l) in self.links.iter().enumerate() {
            for (end, name) in [("from", &l.from), ("to", &l.to)] {
                let Some(Node::Port(p)) = self.node(name) else { continue };
                let port = &self.ports[p];
                if port.classify.is_some() {
                    let why =
                        format!("port {name:?} classifies: its frames go to its tenant entries, not through links");
                    return Err((vec![Key("links"), Index(i), Key(end)], why));
                }
                if port.via.is_some() && end == "to" {
                    let why = format!("{name:?} is a tenant entry: frames only come in by it");
                    return Err((vec![Key("links"), Index(i), Key(end)], why));
                }
            }
            // An entry's NF is its tenant's.
            let (Some(Node::Port(p)), Some(Node::Nf(n))) = (self.node(&l.from), self.node(&l.to)) else { continue };
            let Some(t) = &self.ports[p].tenant else { continue };
            let tenant = self.domains.iter().find(|d| d.name == self.nfs[n].domain).and_then(|d| d.tenant.as_ref());
            if tenant != Some(t) {
                let why = format!("{:?} is tenant {t:?}'s entry, but NF {:?} is not {t:?}'s", l.from, l.to);
                return Err((vec![Key("links"), Index(i), Key("to")], why));
            }
        }
        Ok(())
    }

    /// Puts each tenant entry where ferryd makes its device: in its
    /// classifier's namespace, with its classifier's XDP mode. Placement
    /// and planning then see where the entry really is.
    pub(crate) fn place_entries(&mut self) {
        for i in 0..self.ports.len() {
            let Some(c) = self.ports[i].via.as_ref() else { continue };
            if let Some(edge) = self.ports.iter().find(|q| &q.name == c).cloned() {
                (self.ports[i].netns, self.ports[i].xdp_mode) = (edge.netns, edge.xdp_mode);
            }
        }
    }

    /// Rewrites each classifier in router mode into its router NF (see the
    /// module's docs). The names it adds (`<port>-router` for the domain
    /// and the NF) must be free.
    pub(crate) fn lower_routers(&mut self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        for c in 0..self.ports.len() {
            let Some(spec) = self.ports[c].classify.clone().filter(|s| s.mode == ClassifyMode::Router) else {
                continue;
            };
            let edge = self.ports[c].name.clone();
            let router = format!("{edge}-router");
            let at_mode = vec![Key("ports"), Index(c), Key("classify"), Key("mode")];
            if !valid_name(&router) {
                return Err((at_mode, format!("router mode adds an NF named {router:?}: shorten the port's name")));
            }
            if self.node(&router).is_some() || self.domains.iter().any(|d| d.name == router) {
                let why = format!("router mode adds a domain and an NF named {router:?}: that name is taken");
                return Err((at_mode, why));
            }
            let entries: Vec<String> = self.entries_of(c).into_iter().map(|e| self.ports[e].name.clone()).collect();
            let args = self.classify_table(c);
            self.domains.push(DomainSpec::new(&router));
            let threads = self.ports[c].queues;
            let cpus = spec.cpus;
            self.nfs.push(NfSpec {
                kind: Some(TENANT_ROUTER.into()),
                args,
                threads,
                cpus,
                ..NfSpec::new(&router, &router)
            });
            // Out-link i of the router is entry i: its links in entry order.
            let mut links = vec![LinkSpec { from: edge.clone(), to: router.clone(), mode: None }];
            for e in &entries {
                let nf = self.links.iter().find(|l| &l.from == e).expect("checked: an entry feeds one NF");
                links.push(LinkSpec { from: router.clone(), to: nf.to.clone(), mode: None });
            }
            self.links.retain(|l| !entries.contains(&l.from));
            self.links.extend(links);
            self.ports[c].classify = None;
        }
        let keep = |p: &crate::spec::PortSpec| {
            p.via.as_ref().map_or(true, |c| self.ports.iter().any(|q| &q.name == c && q.classify.is_some()))
        };
        let kept: Vec<_> = self.ports.iter().filter(|p| keep(p)).cloned().collect();
        self.ports = kept;
        Ok(())
    }
}
