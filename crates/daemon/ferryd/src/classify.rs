//! A classifier port (`classify:` in xdp mode): the XDP classifier on the
//! shared edge device, and a device per tenant entry it feeds. Each entry
//! is a veth pair in the edge's namespace: the classifier redirects a
//! frame into one end, it arrives on the other, and the tenant NF's
//! AF_XDP sockets there (over the tenant's own UMEM, bound by
//! [`crate::ports`] like any port's) take it. So the frame is copied once,
//! by the kernel, straight into the memory of the tenant its rule picks;
//! no process of any tenant, and no trusted router, ever holds it first.

use anyhow::{anyhow, bail, Context, Result};
use ferry_bpf::classify::{Classifier, Unmatched};
use ferry_bpf::{LoadedXdp, Object};
use ferry_chain::plan::{ChainPlan, ClassifyPlan};
use ferry_chain::proto::ClassifiedStatus;
use ferry_wire::classify::Table;

use crate::loopdev::LoopDevice;
use crate::ports::{attach_mode, Port};

/// Fields drop in order: the program leaves before the entries' devices.
/// On a chain's stop the program leaves first of all ([`Self::detach`]),
/// before the entries' ports lose their programs: no frame is redirected
/// into an entry whose socket is gone.
pub struct EdgeClassifier {
    /// The classifier port's name.
    pub port: String,
    /// None once detached.
    prog: Option<Classifier>,
    table: ClassifyPlan,
    /// Per rule, its entry's port name.
    entry_of_rule: Vec<String>,
    /// An XDP drop on each entry's sending end.
    _closed: Vec<LoadedXdp>,
    _entries: Vec<LoopDevice>,
}

impl EdgeClassifier {
    /// Makes the device of each entry of classifier port `c` (and names it
    /// in the entry's plan, so its sockets bind there), then loads the
    /// classifier with its table and attaches it to the edge device.
    pub fn open(plan: &mut ChainPlan, c: usize) -> Result<EdgeClassifier> {
        let edge = plan.ports[c].clone();
        let Some(table) = edge.classify.clone() else { bail!("port {} does not classify", edge.name) };
        let ns = edge.netns.as_deref();
        let texts: Vec<&str> = table.rules.iter().map(String::as_str).collect();
        let rules =
            Table::parse(&texts).map_err(|(i, e)| anyhow!("port {}: classification rule {i}: {e}", edge.name))?.rules;
        let unmatched = if table.default_kernel { Unmatched::Kernel } else { Unmatched::Drop };
        let mut prog =
            Classifier::load(&rules, unmatched).with_context(|| format!("port {}: the classifier", edge.name))?;
        let mode = attach_mode(&edge);
        let (mut entries, mut closed) = (Vec::new(), Vec::new());
        for (out, &e) in table.entries.iter().enumerate() {
            let entry = &plan.ports[e];
            let dev = LoopDevice::create(ns, &entry.name, &edge.netdev, entry.queues)
                .with_context(|| format!("the device of tenant entry {}", entry.name))?;
            let send = dev.send_ifindex;
            ferry_sys::in_netns(ns, || prog.set_entry(out as u16, send))?
                .with_context(|| format!("port {}: entry {}", edge.name, entry.name))?;
            // The tenant's sockets on the other end could transmit: what
            // they send arrives here, and must not reach the edge's stack.
            let drop = ferry_sys::in_netns(ns, || LoadedXdp::attach(Object::Basic, "ferry_drop", send, mode))?
                .with_context(|| format!("closing the way back of tenant entry {}", entry.name))?;
            plan.ports[e].netdev = dev.receive_end.clone();
            closed.push(drop);
            entries.push(dev);
        }
        let device = Port::ifindex(&edge)?;
        ferry_sys::in_netns(ns, || prog.attach(device, mode))?
            .with_context(|| format!("attaching the classifier to {} ({})", edge.netdev, edge.name))?;
        let entry_of_rule = rules.iter().map(|r| plan.ports[table.entries[usize::from(r.out)]].name.clone()).collect();
        Ok(EdgeClassifier {
            port: edge.name,
            prog: Some(prog),
            table,
            entry_of_rule,
            _closed: closed,
            _entries: entries,
        })
    }

    /// Takes the program off the edge device (the entries stay).
    pub fn detach(&mut self) {
        self.prog = None;
    }

    pub fn verdicts(&self) -> Option<ferry_bpf::Verdicts> {
        self.prog.as_ref()?.verdicts().ok()
    }

    /// Frames per rule, and those no rule took.
    pub fn status(&self) -> ClassifiedStatus {
        let hits = self.prog.as_ref().and_then(|p| p.hits(self.table.rules.len()).ok());
        let (hits, unmatched) = hits.unwrap_or_default();
        let rules = self
            .table
            .rules
            .iter()
            .zip(&self.entry_of_rule)
            .zip(hits.iter().chain(std::iter::repeat(&0)))
            .map(|((rule, entry), &frames)| (rule.clone(), entry.clone(), frames))
            .collect();
        ClassifiedStatus { rules, unmatched }
    }
}
