//! The profile: what the profiler found, as plain serialisable data, and
//! how it is computed from the per-worker statistics.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::Location;

use serde::{Deserialize, Serialize};

use super::causes::{Recipe, RootCause};
use super::text::{duration, short_file};
use super::{Profiler, StructureConfig, IMBALANCE_THRESHOLD};
use crate::runtime::TraceReport;
use crate::stm::{ConflictSite, Op, SiteAccess, StructureId, StructureKind, TxStats};

/// A source location (of an NF's data-structure call, or of the line that
/// created a structure). Displays as `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl SourceLine {
    pub fn of(location: &Location<'_>) -> SourceLine {
        SourceLine { file: location.file().to_string(), line: location.line(), column: location.column() }
    }

    /// `name.rs:line`, without the directories.
    pub fn short(&self) -> String {
        format!("{}:{}", short_file(&self.file), self.line)
    }
}

/// A data structure as the report names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructureRef {
    pub id: u32,
    pub name: String,
    /// `Vector`, `Map`, `Allocator`, `DistributedObj` or `Object`.
    pub kind: String,
    pub created_at: Option<SourceLine>,
    pub config: Option<StructureConfig>,
}

/// One side of a conflict: the operation and the NF line that called it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSite {
    /// As [`Op::name`], e.g. `Allocator::allocate`.
    pub op: String,
    pub line: SourceLine,
}

/// The parameter a recipe changes and a value to try.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suggestion {
    /// `capacity`, `refresh_interval_ns`, `max_staleness_ns` or `buckets`.
    pub parameter: String,
    pub current: u64,
    pub suggested: u64,
}

/// Aborts from one root cause between one pair of operation sites of one
/// structure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseProfile {
    /// 1 for the cause with the most aborts.
    pub rank: usize,
    pub aborts: u64,
    /// Of all aborts, 0.0..=1.0.
    pub share: f64,
    pub structure: StructureRef,
    pub cause: RootCause,
    /// The cause's condition (NFOS Tables 3-5).
    pub condition: String,
    /// The condition with the structure's configuration filled in (e.g.
    /// "refresh interval 0: every refresh ...").
    pub detail: String,
    /// The two operations, in a fixed order (not who won): `second` is
    /// `None` when the engine no longer knew the other side.
    pub first: OpSite,
    pub second: Option<OpSite>,
    /// Aborts per engine-level conflict kind (`ConflictKind::name`).
    pub kinds: BTreeMap<String, u64>,
    /// Aborts per class of object they were on (`ElementClass::name`:
    /// `element` for structures of one kind of object; an Allocator's
    /// `slot`, `free pool` or `lease list`; a DistributedObj's `part` or
    /// `cached merge`).
    pub elements: BTreeMap<String, u64>,
    /// The recipes, main one first.
    pub recipes: Vec<Recipe>,
    /// For the main recipe, when the structure's configuration is known.
    pub suggestion: Option<Suggestion>,
    /// One line naming the structure, both operations, the cause and what
    /// to do.
    pub explanation: String,
}

/// All aborts of one root cause on one structure (over every pair of
/// operation sites): the ranking a developer acts on first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootCauseTotal {
    pub rank: usize,
    pub cause: RootCause,
    pub structure: StructureRef,
    pub aborts: u64,
    pub share: f64,
    pub recipes: Vec<Recipe>,
    pub suggestion: Option<Suggestion>,
    /// "`cause` on Kind `name`: recipe (parameter a → b)".
    pub summary: String,
}

/// Aborts attributed to one NF source line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineProfile {
    /// Its `column` is 0: calls on one line are counted together.
    pub line: SourceLine,
    /// What this line calls, e.g. ``Allocator::allocate on `nat_ports` ``.
    pub accesses: Vec<String>,
    /// Aborts whose losing access was made on this line.
    pub aborted: u64,
    /// Aborts whose winning (committed) access was made on this line.
    pub caused: u64,
    /// `aborted` over all aborts.
    pub share: f64,
}

/// One worker's part of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerLoad {
    pub worker: usize,
    pub packets: u64,
    pub batches: u64,
    pub commits: u64,
    pub aborts: u64,
    pub abort_rate: f64,
}

/// Per-core load of a trace run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadProfile {
    pub workers: Vec<WorkerLoad>,
    pub mean_packets: f64,
    pub max_packets: u64,
    /// Busiest worker's packets over the mean; 1.0 is perfect balance.
    pub imbalance: f64,
    pub threshold: f64,
    /// NFOS's advice when `imbalance > threshold`.
    pub advice: Option<String>,
}

/// Totals over all workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub workers: usize,
    /// Known for trace runs.
    pub packets: Option<u64>,
    pub batches: Option<u64>,
    /// Committed transactions (one per receive batch in the runtime).
    pub transactions: u64,
    /// Committed transactions that wrote nothing (they never abort).
    pub read_only: u64,
    /// Committed plus aborted attempts.
    pub attempts: u64,
    pub aborts: u64,
    /// Re-runs after an abort. The runtime retries every aborted attempt
    /// (`Worker::atomically`), so this equals `aborts`; only callers of
    /// `Worker::try_once` may choose not to retry.
    pub retries: u64,
    /// Aborts over attempts, 0.0..=1.0.
    pub abort_rate: f64,
    /// Aborts whose other side the engine no longer knew.
    pub unknown_other_side: u64,
}

/// What the profiler found. `Display` renders the text report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The finding in one sentence.
    pub headline: String,
    pub summary: Summary,
    /// Most aborted first.
    pub lines: Vec<LineProfile>,
    /// Root causes per structure, most aborts first.
    pub root_causes: Vec<RootCauseTotal>,
    /// Conflicting operation pairs with their cause, most aborts first.
    pub causes: Vec<CauseProfile>,
    pub load: Option<LoadProfile>,
}

impl Profile {
    /// The profile as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile is plain data")
    }

    /// The top-ranked operation pair, if anything aborted.
    pub fn top_cause(&self) -> Option<&CauseProfile> {
        self.causes.first()
    }

    /// The top-ranked root cause, if anything aborted.
    pub fn top_root_cause(&self) -> Option<&RootCauseTotal> {
        self.root_causes.first()
    }

    /// Share of all aborts due to `cause` (over every structure and site).
    pub fn share_of(&self, cause: RootCause) -> f64 {
        self.causes.iter().filter(|c| c.cause == cause).map(|c| c.share).sum()
    }
}

pub(super) fn build<'s>(
    profiler: &Profiler,
    stats: impl IntoIterator<Item = &'s TxStats>,
    report: Option<&TraceReport>,
) -> Profile {
    let per_worker: Vec<&TxStats> = stats.into_iter().collect();
    let mut total = TxStats::default();
    for s in &per_worker {
        total.merge(s);
    }
    let summary = summary(profiler.workers.max(per_worker.len()), &total, report);
    let lines = lines(profiler, &total);
    let per_transaction = summary.packets.zip(summary.batches).map(|(p, b)| p.div_ceil(b.max(1)));
    let causes = causes(profiler, &total, per_transaction);
    let load = report.map(|r| load(r, &per_worker));
    let root_causes = root_causes(&causes);
    let headline = headline(&summary, &root_causes);
    Profile { headline, summary, lines, root_causes, causes, load }
}

fn summary(workers: usize, total: &TxStats, report: Option<&TraceReport>) -> Summary {
    let attempts = total.commits + total.aborts;
    let unknown_other_side = total.conflicts.iter().filter(|(site, _)| site.theirs.is_none()).map(|(_, n)| *n).sum();
    Summary {
        workers,
        packets: report.map(|r| r.workers.iter().map(|w| w.packets).sum()),
        batches: report.map(|r| r.workers.iter().map(|w| w.batches).sum()),
        transactions: total.commits,
        read_only: total.read_only_commits,
        attempts,
        aborts: total.aborts,
        retries: total.aborts,
        abort_rate: total.abort_ratio(),
        unknown_other_side,
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn kind_name(kind: StructureKind) -> &'static str {
    match kind {
        StructureKind::Object => "Object",
        StructureKind::Vector => "Vector",
        StructureKind::Map => "Map",
        StructureKind::Allocator => "Allocator",
        StructureKind::DistributedObj => "DistributedObj",
    }
}

fn structure_ref(profiler: &Profiler, id: StructureId) -> (StructureRef, Option<StructureKind>) {
    match profiler.info(id) {
        Some(info) => (
            StructureRef {
                id: id.0,
                name: info.name.clone(),
                kind: kind_name(info.kind).to_string(),
                created_at: Some(SourceLine::of(info.created_at)),
                config: profiler.config(id).cloned(),
            },
            Some(info.kind),
        ),
        None => (
            StructureRef {
                id: id.0,
                name: format!("#{}", id.0),
                kind: "unknown".to_string(),
                created_at: None,
                config: profiler.config(id).cloned(),
            },
            None,
        ),
    }
}

fn lines(profiler: &Profiler, total: &TxStats) -> Vec<LineProfile> {
    #[derive(Default)]
    struct Acc {
        aborted: u64,
        caused: u64,
        accesses: BTreeSet<String>,
    }
    let mut by_line: HashMap<(&'static str, u32), Acc> = HashMap::new();
    for (site, n) in &total.conflicts {
        let name = structure_ref(profiler, site.structure).0.name;
        let ours = by_line.entry((site.ours.location.file(), site.ours.location.line())).or_default();
        ours.aborted += n;
        ours.accesses.insert(format!("{} on `{name}`", site.ours.op.name()));
        if let Some(theirs) = site.theirs {
            let acc = by_line.entry((theirs.location.file(), theirs.location.line())).or_default();
            acc.caused += n;
            acc.accesses.insert(format!("{} on `{name}`", theirs.op.name()));
        }
    }
    let mut lines: Vec<LineProfile> = by_line
        .into_iter()
        .map(|((file, line), acc)| LineProfile {
            line: SourceLine { file: file.to_string(), line, column: 0 },
            accesses: acc.accesses.into_iter().collect(),
            aborted: acc.aborted,
            caused: acc.caused,
            share: ratio(acc.aborted, total.aborts),
        })
        .collect();
    lines.sort_by(|a, b| b.aborted.cmp(&a.aborted).then(b.caused.cmp(&a.caused)).then(a.line.cmp(&b.line)));
    lines
}

/// A fixed order of operations, so a pair is grouped the same whoever won
/// (reads before writes, lease queries before allocate before refresh
/// before expire).
fn op_rank(op: Op) -> u8 {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::VectorRead => 2,
        Op::VectorWrite => 3,
        Op::MapGet => 4,
        Op::MapSet => 5,
        Op::MapRemove => 6,
        Op::AllocatorQuery => 7,
        Op::AllocatorAllocate => 8,
        Op::AllocatorFree => 9,
        Op::AllocatorRefresh => 10,
        Op::AllocatorExpire => 11,
        Op::DistributedRead => 12,
        Op::DistributedUpdate => 13,
    }
}

fn site_order(s: &SiteAccess) -> (u8, &'static str, u32, u32) {
    (op_rank(s.op), s.location.file(), s.location.line(), s.location.column())
}

/// The site pair in its fixed order.
fn ordered_pair(site: &ConflictSite) -> (SiteAccess, Option<SiteAccess>) {
    match site.theirs {
        Some(theirs) if site_order(&theirs) < site_order(&site.ours) => (theirs, Some(site.ours)),
        theirs => (site.ours, theirs),
    }
}

fn op_site(s: &SiteAccess) -> OpSite {
    OpSite { op: s.op.name().to_string(), line: SourceLine::of(s.location) }
}

type CauseKey = (StructureId, RootCause, SiteAccess, Option<SiteAccess>);

/// A cause group's aborts, per conflict kind and per element class.
#[derive(Default)]
struct CauseCounts {
    aborts: u64,
    kinds: BTreeMap<String, u64>,
    elements: BTreeMap<String, u64>,
}

/// `packets_per_transaction`: the mean batch, when known (sizes the Map
/// suggestion).
fn causes(profiler: &Profiler, total: &TxStats, packets_per_transaction: Option<u64>) -> Vec<CauseProfile> {
    let mut groups: HashMap<CauseKey, CauseCounts> = HashMap::new();
    for (site, n) in &total.conflicts {
        let (_, kind) = structure_ref(profiler, site.structure);
        let cause = match kind {
            Some(kind) => {
                RootCause::classify(kind, site.element_class, site.ours.op, site.theirs.map(|t| t.op), site.same_key)
            }
            None => RootCause::Unclassified,
        };
        let (first, second) = ordered_pair(site);
        let group = groups.entry((site.structure, cause, first, second)).or_default();
        group.aborts += n;
        *group.kinds.entry(site.kind.name().to_string()).or_insert(0) += n;
        *group.elements.entry(site.element_class.name().to_string()).or_insert(0) += n;
    }
    let mut causes: Vec<CauseProfile> = groups
        .into_iter()
        .map(|((structure, cause, first, second), CauseCounts { aborts, kinds, elements })| {
            let (structure, _) = structure_ref(profiler, structure);
            let recipes = cause.recipes().to_vec();
            let suggestion = suggest(recipes[0], structure.config.as_ref(), packets_per_transaction);
            let detail = detail(cause, structure.config.as_ref(), profiler.workers);
            let explanation = explain(&structure, cause, &first, second.as_ref(), &detail, suggestion.as_ref());
            CauseProfile {
                rank: 0,
                aborts,
                share: ratio(aborts, total.aborts),
                structure,
                cause,
                condition: cause.condition().to_string(),
                detail,
                first: op_site(&first),
                second: second.as_ref().map(op_site),
                kinds,
                elements,
                recipes,
                suggestion,
                explanation,
            }
        })
        .collect();
    causes.sort_by(|a, b| {
        b.aborts
            .cmp(&a.aborts)
            .then(a.structure.id.cmp(&b.structure.id))
            .then(a.cause.cmp(&b.cause))
            .then(a.first.line.cmp(&b.first.line))
            .then(a.first.op.cmp(&b.first.op))
            .then(a.second.as_ref().map(|s| &s.line).cmp(&b.second.as_ref().map(|s| &s.line)))
            .then(a.second.as_ref().map(|s| &s.op).cmp(&b.second.as_ref().map(|s| &s.op)))
    });
    for (i, cause) in causes.iter_mut().enumerate() {
        cause.rank = i + 1;
    }
    causes
}

/// `Map::new` refuses more buckets than this (`ds::map::MAX_BUCKETS`).
const MAX_MAP_BUCKETS: u64 = 1 << 32;

/// A value to try for the main recipe's parameter. A starting point, not
/// a computed optimum: apply it, profile again, repeat while the cause
/// stays on top (NFOS's NAT needed 53 → 55 public IPs).
fn suggest(
    recipe: Recipe,
    config: Option<&StructureConfig>,
    packets_per_transaction: Option<u64>,
) -> Option<Suggestion> {
    let (parameter, current, suggested) = match (recipe, config?) {
        (Recipe::OverprovisionResource, StructureConfig::Allocator { capacity, .. }) => {
            let current = u64::from(*capacity);
            ("capacity", current, current.saturating_mul(2).min(u64::from(u32::MAX - 1)))
        }
        (Recipe::RaiseRefreshInterval, StructureConfig::Allocator { lease_ns, refresh_interval_ns, .. }) => {
            // NFOS's bridge: 1 s for 2-minute entries, i.e. about a
            // hundredth of the lease; an interval must stay well below it.
            let hundredth = (lease_ns / 100).max(1);
            let suggested =
                if *refresh_interval_ns == 0 { hundredth } else { (refresh_interval_ns * 10).min(lease_ns / 2) };
            ("refresh_interval_ns", *refresh_interval_ns, suggested.max(refresh_interval_ns + 1))
        }
        (Recipe::RaiseStaleness, StructureConfig::DistributedObj { max_staleness_ns }) => {
            // NFOS's anti-DDoS: 0 → 0.1 ms.
            let suggested = if *max_staleness_ns == 0 { 100_000 } else { max_staleness_ns.saturating_mul(10) };
            ("max_staleness_ns", *max_staleness_ns, suggested)
        }
        (Recipe::EnlargeMapOrChangeHash, StructureConfig::Map { buckets, keys, .. }) => {
            // Two transactions that touch k keys each share a bucket with
            // probability about k²/B: with k = the packets per transaction
            // (one key per packet; NFOS batches 32), B = 16·k² keeps that
            // near 6%. At least 4 buckets per key, and 16× the current.
            let k = packets_per_transaction.unwrap_or(32).max(1);
            let from_batch = k.saturating_mul(k).saturating_mul(16);
            let from_keys = keys.map_or(0, |n| n.saturating_mul(4));
            let suggested =
                buckets.saturating_mul(16).max(from_keys).max(from_batch).next_power_of_two().min(MAX_MAP_BUCKETS);
            ("buckets", *buckets, suggested)
        }
        _ => return None,
    };
    Some(Suggestion { parameter: parameter.to_string(), current, suggested })
}

/// The operation's short name: `allocate` for `Allocator::allocate`.
fn short_op(op: Op) -> &'static str {
    let name = op.name();
    name.rsplit("::").next().unwrap_or(name)
}

/// The condition with the structure's configuration filled in.
fn detail(cause: RootCause, config: Option<&StructureConfig>, workers: usize) -> String {
    match (cause, config) {
        (RootCause::AllocatorPoolExhausted, Some(StructureConfig::Allocator { capacity, .. })) => {
            let per_core = capacity.div_ceil(workers.max(1) as u32);
            format!(
                "a core's local free pool ran dry (capacity {capacity} = {per_core} per core on {workers} cores) \
                 and it allocated from another core's pool"
            )
        }
        (RootCause::AllocatorPoolExhausted, _) => {
            "a core's local free pool ran dry and it allocated from another core's pool".to_string()
        }
        (RootCause::AllocatorLeaseListRefresh, Some(StructureConfig::Allocator { refresh_interval_ns: 0, .. })) => {
            "refresh interval 0: every refresh (each packet) moves its lease on a lease list that other cores \
             also change"
                .to_string()
        }
        (RootCause::AllocatorLeaseListRefresh, Some(StructureConfig::Allocator { refresh_interval_ns, .. })) => {
            format!(
                "refresh interval {}: refreshes still move leases on a lease list that other cores also change",
                duration(*refresh_interval_ns)
            )
        }
        (RootCause::AllocatorLeaseListRefresh, _) => {
            "refreshes move leases on a lease list that other cores also change".to_string()
        }
        (RootCause::DistributedStaleRead, Some(StructureConfig::DistributedObj { max_staleness_ns: 0 })) => {
            "max staleness 0: every read merges every core's part, which other cores' updates change".to_string()
        }
        (RootCause::DistributedStaleRead, Some(StructureConfig::DistributedObj { max_staleness_ns })) => format!(
            "max staleness {}: reads whose merge is older merge every core's part, which other cores' updates change",
            duration(*max_staleness_ns)
        ),
        (RootCause::DistributedStaleRead, _) => {
            "reads whose merge is older than the maximum staleness merge every core's part, which other cores' \
             updates change"
                .to_string()
        }
        (RootCause::MapSameBucket, Some(StructureConfig::Map { buckets, keys, longest_bucket })) => {
            let plural = if *buckets == 1 { "" } else { "s" };
            let mut s = format!("different keys in one bucket ({buckets} bucket{plural}");
            if let (Some(keys), Some(longest)) = (keys, longest_bucket) {
                s.push_str(&format!(", {keys} keys, longest bucket {longest}"));
            }
            s.push(')');
            s
        }
        (RootCause::MapSameBucket, _) => "different keys (or an unknown key) in one bucket".to_string(),
        (RootCause::MapSameKey, _) => "the same key, from several cores".to_string(),
        (cause, _) => cause.condition().to_string(),
    }
}

fn recipe_text(cause: RootCause, suggestion: Option<&Suggestion>) -> String {
    let recipes: Vec<&str> = cause.recipes().iter().map(|r| r.text()).collect();
    let mut s = recipes.join("; or ");
    if let Some(sg) = suggestion {
        let (from, to) = if sg.parameter.ends_with("_ns") {
            (duration(sg.current), duration(sg.suggested))
        } else {
            (sg.current.to_string(), sg.suggested.to_string())
        };
        s.push_str(&format!("; try {} {from} → {to}", sg.parameter));
    }
    s
}

fn explain(
    structure: &StructureRef,
    cause: RootCause,
    first: &SiteAccess,
    second: Option<&SiteAccess>,
    detail: &str,
    suggestion: Option<&Suggestion>,
) -> String {
    let at = |s: &SiteAccess| format!("{} at {}", short_op(s.op), SourceLine::of(s.location).short());
    let other = second.map_or_else(|| "a write the engine no longer knew".to_string(), at);
    format!(
        "{} `{}`: {} conflicts with {} — {}: {}",
        structure.kind,
        structure.name,
        at(first),
        other,
        detail,
        recipe_text(cause, suggestion)
    )
}

fn root_causes(causes: &[CauseProfile]) -> Vec<RootCauseTotal> {
    let mut totals: Vec<RootCauseTotal> = Vec::new();
    for c in causes {
        match totals.iter_mut().find(|t| t.cause == c.cause && t.structure.id == c.structure.id) {
            Some(t) => {
                t.aborts += c.aborts;
                t.share += c.share;
            }
            None => totals.push(RootCauseTotal {
                rank: 0,
                cause: c.cause,
                structure: c.structure.clone(),
                aborts: c.aborts,
                share: c.share,
                recipes: c.recipes.clone(),
                suggestion: c.suggestion.clone(),
                summary: format!(
                    "{} on {} `{}`: {}",
                    c.cause.name(),
                    c.structure.kind,
                    c.structure.name,
                    recipe_text(c.cause, c.suggestion.as_ref())
                ),
            }),
        }
    }
    // `causes` is sorted with full tie-breaks, so a stable sort keeps
    // equal totals in a fixed order.
    totals.sort_by_key(|t| std::cmp::Reverse(t.aborts));
    for (i, t) in totals.iter_mut().enumerate() {
        t.rank = i + 1;
    }
    totals
}

fn load(report: &TraceReport, stats: &[&TxStats]) -> LoadProfile {
    let workers: Vec<WorkerLoad> = report
        .workers
        .iter()
        .zip(stats)
        .enumerate()
        .map(|(worker, (w, s))| WorkerLoad {
            worker,
            packets: w.packets,
            batches: w.batches,
            commits: s.commits,
            aborts: s.aborts,
            abort_rate: s.abort_ratio(),
        })
        .collect();
    let total: u64 = workers.iter().map(|w| w.packets).sum();
    let max_packets = workers.iter().map(|w| w.packets).max().unwrap_or(0);
    let mean_packets = if workers.is_empty() { 0.0 } else { total as f64 / workers.len() as f64 };
    let imbalance = report.load_imbalance();
    let advice = (imbalance > IMBALANCE_THRESHOLD).then(|| {
        format!(
            "load imbalance {imbalance:.2} is above {IMBALANCE_THRESHOLD}: the busiest core gets {imbalance:.2}× \
             the mean. Define finer-grained packet sets (more header fields, e.g. ports as well as addresses) so \
             packets spread over more sets; coarse sets also concentrate a few heavy flows on one core"
        )
    });
    LoadProfile { workers, mean_packets, max_packets, imbalance, threshold: IMBALANCE_THRESHOLD, advice }
}

/// Below this abort rate, conflicts are not worth a recipe.
const NEGLIGIBLE_ABORT_RATE: f64 = 0.01;

fn headline(summary: &Summary, root_causes: &[RootCauseTotal]) -> String {
    if summary.attempts == 0 {
        return "no transactions ran".to_string();
    }
    let rate = summary.abort_rate * 100.0;
    match root_causes.first() {
        Some(top) if summary.abort_rate >= NEGLIGIBLE_ABORT_RATE => format!(
            "{rate:.1}% of transaction attempts aborted; {:.1}% of the aborts are {}",
            top.share * 100.0,
            top.summary
        ),
        _ => format!("{rate:.2}% of transaction attempts aborted: shared-state conflicts are not a bottleneck"),
    }
}
