//! The chain file: what an operator declares.
//!
//! ```yaml
//! name: demo
//! domains:                      # trust domains: one UMEM + one shared region each
//!   - { name: main, frames: 8192 }
//! ports:                        # AF_XDP ports {netdev, queues}, optionally in a netns
//!   - { name: in, netns: dut, netdev: d0 }
//!   - { name: out, netns: dut, netdev: d1 }
//! nfs:
//!   - name: resp
//!     domain: main
//!     kind: arp-responder+icmp-echo   # NF types of `ferry nf list` ...
//!     args: ["10.0.1.2=02:00:00:00:01:02", "--", "10.0.1.2"]
//!   - name: fwd
//!     domain: main
//!     exec: [/usr/local/bin/my-nf, --flag]   # ... or any program using the SDK
//!     threads: 2
//!     poll: { busy_threshold: 8, idle_timeout_us: 200, idle_polls: 6 }   # idle_polls: see PollSpec
//!                                    # or poll: { busy: true } with cpus: of its own
//!     backpressure: { mode: block, threshold: 0.75 }
//!     offload: never          # auto (default) | never | force: may it run in XDP?
//!     fuse: auto              # never (default, or the domain's fuse:) | auto: run with its neighbours in one thread
//!     cpus: [1]               # CPUs its process may run on (default: any)
//! links:                        # out-link i of an NF = its i-th `from:` line
//!   - { from: in, to: resp }
//!   - { from: resp, to: fwd }
//!   - { from: fwd, to: out }
//! ```
//!
//! Each trust domain runs as its own uid. By default ferryd allocates one
//! per domain (as systemd's DynamicUser does); `user:` on a domain or an NF
//! names an existing user instead, and two domains may name the same user
//! only if the file says `share_users: true` (then the OS no longer keeps
//! them apart: any process of that user can signal the other's NFs).
//!
//! Tenants (`tenants: [{ name, user }]`, and `tenant:` on every domain)
//! group domains of one customer: all of a tenant's NFs run as the
//! tenant's one uid (allocated, or its `user`), and frames cross between
//! tenants only through copy links.
//!
//! Errors name the file, line, column and field (`chain.yaml:12:9:
//! links[1].to: unknown node "fw"`), through `ferry_config`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ferry_config::{parse_located, Seg, YamlError};

use crate::classify::ClassifySpec;
use crate::hosts::HostSpec;
use serde::{Deserialize, Serialize};

/// A whole chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSpec {
    /// Names the chain's socket and state; defaults to the file stem.
    #[serde(default)]
    pub name: Option<String>,
    pub domains: Vec<DomainSpec>,
    #[serde(default)]
    pub ports: Vec<PortSpec>,
    /// Ways into the kernel stack: TAP devices ferryd creates.
    #[serde(default)]
    pub kernel: Vec<KernelSpec>,
    pub nfs: Vec<NfSpec>,
    #[serde(default)]
    pub links: Vec<LinkSpec>,
    /// Lets two domains (or tenants) run as the same named user (refused
    /// otherwise).
    #[serde(default)]
    pub share_users: bool,
    /// Customers: each owns domains and runs all their NFs as its own uid.
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
    /// The hosts a chain over several hosts runs on ([`crate::hosts`]).
    #[serde(default)]
    pub hosts: Vec<HostSpec>,
    /// Its NSH service path id.
    #[serde(default)]
    pub spi: Option<u32>,
    #[serde(skip)]
    pub origin: String,
}

/// A tenant: a customer whose domains and NFs run as one uid of its own
/// (allocated, or `user`), apart from every other tenant's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    #[serde(default)]
    pub user: Option<String>,
}

/// A trust domain: NFs in it share one UMEM and hand frames over by
/// reference; frames cross into another domain only by copy.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainSpec {
    pub name: String,
    /// UMEM frames (a power of two).
    #[serde(default = "default_frames")]
    pub frames: u32,
    /// Bytes per frame: 2048 or 4096.
    #[serde(default = "default_frame_size")]
    pub frame_size: u32,
    /// Slots of each NF thread's receive ring (a power of two).
    #[serde(default = "default_ring_size")]
    pub ring_size: u32,
    /// The user the domain's NFs run as; absent, ferryd allocates a uid
    /// for the domain alone (or its tenant's).
    #[serde(default)]
    pub user: Option<String>,
    /// The tenant that owns it (required once `tenants:` are declared).
    #[serde(default)]
    pub tenant: Option<String>,
    /// Whether placement may run adjacent NFs of the domain in one thread
    /// (`fuse: auto`); an NF's own `fuse` overrides it.
    #[serde(default, skip_serializing_if = "FusePolicy::is_never")]
    pub fuse: FusePolicy,
}

/// An AF_XDP port: queues of one netdev.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    pub name: String,
    /// Network namespace the device lives in (`ip netns` name); root if absent.
    #[serde(default)]
    pub netns: Option<String>,
    /// Required, but for a tenant entry (`via:`).
    #[serde(default)]
    pub netdev: String,
    /// Queues used: thread i of the NF on this port uses queue i.
    #[serde(default = "one")]
    pub queues: u32,
    /// XDP attach mode: `generic` (default, works everywhere) or `driver`.
    #[serde(default)]
    pub xdp_mode: XdpMode,
    /// Tenant classification of what arrives on the device: the port feeds
    /// tenant entries, no NF ([`crate::classify`]).
    #[serde(default)]
    pub classify: Option<ClassifySpec>,
    /// A tenant entry: the classifier port that feeds it.
    #[serde(default)]
    pub via: Option<String>,
    /// A tenant entry's tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// The host it is on (a chain over `hosts`); its namespace is the
    /// host's.
    #[serde(default)]
    pub location: Option<String>,
    /// Sizes of the AF_XDP rings of each of its sockets.
    #[serde(default)]
    pub rings: PortRings,
    /// Frames that arrive on a receive queue of the device with no socket
    /// of the port (see [`UnownedQueues`]).
    #[serde(default)]
    pub unowned_queues: UnownedQueues,
}

/// The AF_XDP ring sizes of a port's sockets, in descriptors (powers of
/// two). The fill ring is what a socket keeps stocked for reception:
/// `min(fill, rx)` frames of the domain's pool wait there per receiving
/// socket, which is how long a burst can outlast an NF kept off its CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRings {
    #[serde(default = "default_xsk_ring")]
    pub rx: u32,
    #[serde(default = "default_xsk_ring")]
    pub tx: u32,
    #[serde(default = "default_xsk_ring")]
    pub fill: u32,
    #[serde(default = "default_xsk_ring")]
    pub completion: u32,
}

impl Default for PortRings {
    fn default() -> Self {
        let n = default_xsk_ring();
        PortRings { rx: n, tx: n, fill: n, completion: n }
    }
}

impl PortRings {
    /// Frames of the pool one receiving socket keeps in the kernel.
    pub fn parked(&self) -> u32 {
        self.fill.min(self.rx)
    }

    /// The sizes a socket is made (ferryd) and mapped (the NF) with.
    pub fn sizes(&self) -> ferry_xsk::RingSizes {
        ferry_xsk::RingSizes { rx: self.rx, tx: self.tx, fill: self.fill, comp: self.completion }
    }
}

/// What happens to a frame that arrives on one of a receiving port's
/// device queues that has no socket of the port (the port's NF has fewer
/// threads than the device has receive queues, or the device gained
/// queues after deploy). Counted as `no_socket` in the port's verdicts
/// either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnownedQueues {
    /// ferryd refuses a device with more receive queues than the port has
    /// sockets; a frame that reaches such a queue later is dropped.
    #[default]
    Refuse,
    /// Such frames go to the kernel stack: the device is shared with it
    /// (steer Ferry's flows to its queues with `ethtool -N`).
    Kernel,
}

/// A hop into the kernel's network stack. AF_XDP cannot hand a frame
/// back to the stack of the device it came from, so ferryd creates a TAP
/// device: a frame an NF sends to it is received by the kernel as if it
/// had arrived on that device (one copy, one write() per frame).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelSpec {
    pub name: String,
    #[serde(default)]
    pub netns: Option<String>,
    /// The TAP device's name.
    pub dev: String,
    /// Addresses to give it (`10.0.9.1/24`), so the stack accepts packets.
    #[serde(default)]
    pub addrs: Vec<String>,
    /// Its MAC address. The stack takes in only frames sent to it: give
    /// it the MAC of the port whose frames an NF hands on (a router's
    /// frames keep the destination MAC they arrived with).
    #[serde(default, deserialize_with = "ferry_wire::mac::deserialize_unicast")]
    pub mac: Option<ferry_wire::MacAddr>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpMode {
    #[default]
    Generic,
    Driver,
}

/// One NF: a process with `threads` data-path threads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NfSpec {
    pub name: String,
    pub domain: String,
    /// A built-in NF (`ferry nf list`), run by the NF host, `ferry-host`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Arguments for a built-in NF (`key=value`).
    #[serde(default)]
    pub args: Vec<String>,
    /// An external program using the SDK: argv. ferryd appends nothing;
    /// the program finds ferryd through `FERRY_SOCKET` and `FERRY_NF`.
    #[serde(default)]
    pub exec: Option<Vec<String>>,
    /// Whether ferryd starts the NF (true) or waits for it to connect.
    #[serde(default = "yes")]
    pub spawn: bool,
    /// The only user allowed to connect as this NF; ferryd also runs it as
    /// this user, with no capabilities. Absent: the domain's `user`, else
    /// the uid ferryd allocates for the domain.
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default = "one")]
    pub threads: u32,
    /// Descriptors moved per ring enqueue (1 turns batched redirect off).
    #[serde(default = "default_batch")]
    pub batch: u32,
    #[serde(default)]
    pub poll: PollSpec,
    #[serde(default)]
    pub backpressure: BackpressureSpec,
    /// What the NF does with frames for a downstream NF that is down.
    #[serde(default)]
    pub on_downstream_down: DownPolicy,
    /// Restart the NF when it dies (ferryd-spawned NFs only).
    #[serde(default = "yes")]
    pub restart: bool,
    /// Where the orchestrator may place it (`ferry chain check --explain`).
    #[serde(default)]
    pub offload: OffloadPolicy,
    /// CPUs its process may run on (ferryd sets the affinity when it
    /// starts it); empty: any. Keep NFs off a CPU that something spins on
    /// (a generator, another NF busy-polling): a woken NF waits there for
    /// the scheduler tick.
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// The host it runs on (a chain over `hosts`).
    #[serde(default)]
    pub location: Option<String>,
    /// Whether placement may fuse it with its neighbours (absent: its
    /// domain's `fuse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse: Option<FusePolicy>,
}

/// Highest CPU number `cpus:` may name (the size of a `cpu_set_t`).
pub const MAX_CPU: u32 = 1023;

impl DomainSpec {
    /// A domain with every default (what the file would give it).
    pub fn new(name: &str) -> DomainSpec {
        DomainSpec {
            name: name.to_string(),
            frames: default_frames(),
            frame_size: default_frame_size(),
            ring_size: default_ring_size(),
            user: None,
            tenant: None,
            fuse: FusePolicy::Never,
        }
    }
}

impl NfSpec {
    /// NF `name` in `domain` with every default, running nothing yet.
    pub fn new(name: &str, domain: &str) -> NfSpec {
        NfSpec {
            name: name.to_string(),
            domain: domain.to_string(),
            kind: None,
            args: Vec::new(),
            exec: None,
            spawn: yes(),
            user: None,
            threads: one(),
            batch: default_batch(),
            poll: PollSpec::default(),
            backpressure: BackpressureSpec::default(),
            on_downstream_down: DownPolicy::default(),
            restart: yes(),
            offload: OffloadPolicy::default(),
            cpus: Vec::new(),
            location: None,
            fuse: None,
        }
    }
}

/// Whether placement may run a run of adjacent NFs in one thread, each
/// batch through each NF in turn, with no ring and no wake-up between
/// them (BESS's and VPP's run to completion). It gives up process
/// isolation between the NFs fused, who share a domain (one UMEM)
/// already.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FusePolicy {
    /// Fuse with the neighbours it can be fused with (same domain,
    /// threads, CPUs, user and polling; one link between them).
    Auto,
    /// A process of its own.
    #[default]
    Never,
}

impl FusePolicy {
    fn is_never(&self) -> bool {
        *self == FusePolicy::Never
    }
}

impl ChainSpec {
    /// NF `i`'s fuse policy: its own, else its domain's.
    pub fn fuse_policy(&self, i: usize) -> FusePolicy {
        let nf = &self.nfs[i];
        nf.fuse
            .unwrap_or_else(|| self.domains.iter().find(|d| d.name == nf.domain).map_or(FusePolicy::Never, |d| d.fuse))
    }
}

/// Whether an NF may run in XDP instead of as a process (P4SFC's
/// placement, with XDP as the offload target).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffloadPolicy {
    /// In XDP when its type can be and its place in the graph allows it.
    #[default]
    Auto,
    /// Always a process.
    Never,
    /// In XDP, or the chain is refused with the reason.
    Force,
}

/// Smart polling (FLASH §4): busy-poll while batches are large, block in
/// poll() once no batch reached the threshold for the idle timeout, or
/// once `idle_polls` polls in a row found nothing. With `busy: true` the
/// NF never blocks: it polls its inputs without pause, as a DPDK, VPP or
/// OVS PMD thread does, for the lowest latency at the price of its CPUs
/// (all of them, at any load).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PollSpec {
    /// Never block: spin on the inputs. Needs `cpus:` on the NF, CPUs of
    /// its own (a spinning thread takes the whole CPU from whatever shares
    /// it). The other fields are then unused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub busy: bool,
    /// Packets per receive burst that count as "busy".
    #[serde(default = "default_busy_threshold")]
    pub busy_threshold: u32,
    /// Block after this long without a busy burst; 0 = block at once.
    #[serde(default = "default_idle_timeout_us")]
    pub idle_timeout_us: u64,
    /// Block after this many polls in a row found nothing, even within the
    /// idle timeout (each such poll first yields the CPU). Left out, ferryd
    /// settles it at deploy (`ChainPlan::settle_polling`): no limit while
    /// the NF's CPUs have room for every chain thread that may run on
    /// them; when those threads outnumber the CPUs, their number, so that
    /// each gets one turn to hand this thread work before it blocks.
    /// (Left out of the wire form when unset, so an NF built before the
    /// field existed still reads a plan that does not limit it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_polls: Option<u32>,
    /// Keep polling through an idle gap for a window sized by the recent
    /// gaps, at most this many µs, before blocking: gaps the window
    /// covers cost no wake-up, gaps past it soon cost no spinning (see
    /// the SDK's `SpinWindow`). 0 (the default): block at once. Needs
    /// `cpus:`, as `busy` does.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spin_us: u32,
    /// The kernel's preferred busy polling on the NF's AF_XDP sockets:
    /// each receive poll runs the device's NAPI in the NF's own syscall,
    /// on the NF's CPU, instead of in a softirq. Left out: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_busy_poll: Option<PreferBusyPoll>,
}

impl Default for PollSpec {
    fn default() -> Self {
        PollSpec {
            busy: false,
            busy_threshold: default_busy_threshold(),
            idle_timeout_us: default_idle_timeout_us(),
            idle_polls: None,
            spin_us: 0,
            prefer_busy_poll: None,
        }
    }
}

/// Preferred busy polling (the kernel's `napi.rst`): the socket options
/// `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` and `SO_BUSY_POLL_BUDGET` on every
/// AF_XDP socket of the NF, and the device settings that keep the softirq
/// from taking the NAPI back: `napi_defer_hard_irqs` and
/// `gro_flush_timeout`, which ferryd sets on the port's device while the
/// chain runs and puts back after. The defaults are the values the
/// kernel's documentation gives as an example.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PreferBusyPoll {
    /// `SO_BUSY_POLL`: how long one syscall polls the NAPI, µs.
    #[serde(default = "default_busy_poll_us")]
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET`: packets one busy poll may process.
    #[serde(default = "default_busy_poll_budget")]
    pub budget: u32,
    /// The device's `napi_defer_hard_irqs`.
    #[serde(default = "default_defer_hard_irqs")]
    pub defer_hard_irqs: u32,
    /// The device's `gro_flush_timeout`, ns: the longest the device waits
    /// for the NF's next poll before its softirq runs the NAPI again.
    #[serde(default = "default_gro_flush_timeout_ns")]
    pub gro_flush_timeout_ns: u64,
}

impl Default for PreferBusyPoll {
    fn default() -> Self {
        PreferBusyPoll {
            usecs: default_busy_poll_us(),
            budget: default_busy_poll_budget(),
            defer_hard_irqs: default_defer_hard_irqs(),
            gro_flush_timeout_ns: default_gro_flush_timeout_ns(),
        }
    }
}

/// What an NF does when a downstream ring is fuller than `threshold`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackpressureSpec {
    #[serde(default)]
    pub mode: BackpressureMode,
    /// Fraction of the downstream ring (0 < t <= 1).
    #[serde(default = "default_bp_threshold")]
    pub threshold: f64,
    /// Sleep per throttle in `sleep` mode.
    #[serde(default = "default_bp_sleep_us")]
    pub sleep_us: u64,
}

impl Default for BackpressureSpec {
    fn default() -> Self {
        BackpressureSpec {
            mode: BackpressureMode::default(),
            threshold: default_bp_threshold(),
            sleep_us: default_bp_sleep_us(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackpressureMode {
    /// No throttling: what does not fit is dropped and counted.
    None,
    /// FLASH: sleep `sleep_us` and retry.
    Sleep,
    /// Beyond FLASH: block until the downstream signals room.
    #[default]
    Block,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DownPolicy {
    /// Drop and count frames for a dead downstream NF.
    #[default]
    Drop,
    /// Keep them queued (the ring fills, then backpressure) until it is back.
    Wait,
}

/// One directed edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub from: String,
    pub to: String,
    /// Defaults to zero-copy inside a domain and copy across domains.
    #[serde(default)]
    pub mode: Option<LinkMode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkMode {
    ZeroCopy,
    Copy,
}

fn default_frames() -> u32 {
    4096
}
fn default_frame_size() -> u32 {
    2048
}
fn default_ring_size() -> u32 {
    1024
}
fn default_batch() -> u32 {
    32
}
fn default_xsk_ring() -> u32 {
    512
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn is_false(b: &bool) -> bool {
    !b
}
fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn default_busy_threshold() -> u32 {
    8
}
fn default_idle_timeout_us() -> u64 {
    200
}
fn default_busy_poll_us() -> u32 {
    20
}
fn default_busy_poll_budget() -> u32 {
    64
}
fn default_defer_hard_irqs() -> u32 {
    2
}
fn default_gro_flush_timeout_ns() -> u64 {
    200_000
}
fn default_bp_threshold() -> f64 {
    0.75
}
fn default_bp_sleep_us() -> u64 {
    50
}

/// The NF types there are, as the chain parser asks about them (the
/// registry lives above this layer: `ferry-catalog`).
pub trait KindCheck {
    /// Whether `kind` is an NF type that can run in a chain and `args` are
    /// its arguments, for an NF with `out_links` out-links (its links in
    /// the file). An error blames `args[i]` (`Some(i)`) or the kind.
    fn check(&self, kind: &str, args: &[String], out_links: usize) -> Result<(), (Option<usize>, String)>;
    /// Whether an NF of `kind` sends its output by its out-links, so that
    /// one without any would drop everything it passes.
    fn needs_out_link(&self, kind: &str) -> bool;
}

/// The first placeholder `text` leaves to its user, `{name}` (a name of
/// lowercase letters, digits and `_` between braces; a YAML flow mapping
/// holds a `:` or a space; a shell's `${name}` is no placeholder), with
/// its 1-based line and column. Comments, where a file's header explains
/// its placeholders, do not count.
pub fn unfilled_placeholder(text: &str) -> Option<(usize, usize, &str)> {
    text.lines()
        .enumerate()
        .find_map(|(i, line)| placeholder_in(without_comment(line)).map(|(at, name)| (i + 1, at + 1, name)))
}

/// The first placeholder in `s` and its byte offset.
fn placeholder_in(s: &str) -> Option<(usize, &str)> {
    s.match_indices('{').filter(|&(at, _)| !s[..at].ends_with('$')).find_map(|(at, _)| {
        let rest = &s[at + 1..];
        let name = &rest[..rest.find('}')?];
        let first = name.bytes().next()?;
        let valid = first.is_ascii_lowercase()
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        valid.then_some((at, name))
    })
}

/// A placeholder in a value as parsed: one the line-by-line look missed,
/// in a line of a quoted value that spans lines and starts like a
/// comment.
fn placeholder_in_values(spec: &ChainSpec) -> Option<String> {
    fn walk(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::String(s) => placeholder_in(s).map(|(_, name)| name.to_string()),
            serde_json::Value::Array(a) => a.iter().find_map(walk),
            serde_json::Value::Object(m) => m.values().find_map(walk),
            _ => None,
        }
    }
    walk(&serde_json::to_value(spec).ok()?)
}

fn placeholder_error(origin: &str, (line, column): (usize, usize), name: &str) -> YamlError {
    YamlError {
        origin: origin.to_string(),
        line: Some(line),
        column: Some(column),
        field: String::new(),
        message: format!(
            "{{{name}}} is a placeholder to fill in (the file's header says what goes there): \
             give `--set {name}=VALUE` to `ferry chain check`, `ferry chain deploy`, `ferry chain up` or ferryd"
        ),
    }
}

/// `line` up to its YAML comment: a `#` at its start or after a space,
/// outside quotes.
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev = b' ';
    for (i, b) in line.bytes().enumerate() {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), _) if b == q => quote = None,
            (None, b'#') if prev == b' ' || prev == b'\t' => return &line[..i],
            _ => {}
        }
        prev = b;
    }
    line
}

/// `text` with `{key}` replaced by its value, for each of `vars`.
pub fn fill_placeholders(text: &str, vars: &[(String, String)]) -> String {
    vars.iter().fold(text.to_string(), |t, (k, v)| t.replace(&format!("{{{k}}}"), v))
}

/// Chain file `path`'s text with its placeholders filled by `vars`, and
/// its origin (what errors name).
pub fn read_filled(path: &Path, vars: &[(String, String)]) -> Result<(String, String), YamlError> {
    let (text, origin) = ferry_config::read_file(path)?;
    Ok((fill_placeholders(&text, vars), origin))
}

/// The `KEY=VALUE` of a `--set` option: the value for placeholder `{KEY}`.
pub fn placeholder_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?}: expected KEY=VALUE, e.g. dut=fy1234-dut for a file's {{dut}}")),
    }
}

/// Reads and validates a chain file, its NFs' kinds and arguments too.
pub fn parse(path: &Path, kinds: &dyn KindCheck) -> Result<ChainSpec, YamlError> {
    let (text, origin) = ferry_config::read_file(path)?;
    ChainSpec::from_yaml_str(&text, &origin, kinds)
}

fn valid_user(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && !s.contains([':', '/', ' ', '\n'])
}

pub(crate) fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

/// A node a link can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    Nf(usize),
    Port(usize),
    Kernel(usize),
}

type Invalid = (Vec<Seg>, String);

impl ChainSpec {
    pub fn from_yaml_str(text: &str, origin: &str, kinds: &dyn KindCheck) -> Result<ChainSpec, YamlError> {
        if let Some((line, column, name)) = unfilled_placeholder(text) {
            return Err(placeholder_error(origin, (line, column), name));
        }
        let mut spec: ChainSpec = parse_located(text, origin, |s: &ChainSpec| {
            s.validate(kinds)?;
            // Lowered here, so its errors are located too; the lowered
            // file is what placement and planning see.
            s.clone().lower_routers()
        })?;
        if let Some(name) = placeholder_in_values(&spec) {
            let at = text.find(&format!("{{{name}}}")).map_or((1, 1), |i| ferry_config::editor_position(text, i));
            return Err(placeholder_error(origin, at, &name));
        }
        spec.lower_routers().expect("lowered once already");
        spec.place_entries();
        for p in &mut spec.ports {
            if let Some(h) = spec.hosts.iter().find(|h| Some(&h.name) == p.location.as_ref()) {
                p.netns = h.netns.clone();
            }
        }
        spec.origin = origin.to_string();
        Ok(spec)
    }

    /// The chain's name: `name:` or the origin's file stem.
    pub fn name(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        let stem = Path::new(&self.origin).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if valid_name(&stem) {
            stem
        } else {
            "chain".into()
        }
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        if let Some(i) = self.nfs.iter().position(|n| n.name == name) {
            return Some(Node::Nf(i));
        }
        if let Some(i) = self.kernel.iter().position(|k| k.name == name) {
            return Some(Node::Kernel(i));
        }
        self.ports.iter().position(|p| p.name == name).map(Node::Port)
    }

    fn validate(&self, kinds: &dyn KindCheck) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        if let Some(n) = &self.name {
            if !valid_name(n) {
                return Err((vec![Key("name")], bad_name(n)));
            }
        }
        if self.domains.is_empty() {
            return Err((vec![Key("domains")], "at least one domain is required".into()));
        }
        if self.nfs.is_empty() {
            return Err((vec![Key("nfs")], "at least one NF is required".into()));
        }
        let mut names = HashSet::new();
        for (i, d) in self.domains.iter().enumerate() {
            let at = |f| vec![Key("domains"), Index(i), Key(f)];
            if !valid_name(&d.name) {
                return Err((at("name"), bad_name(&d.name)));
            }
            if !names.insert(d.name.as_str()) {
                return Err((at("name"), format!("duplicate domain {:?}", d.name)));
            }
            if !d.frames.is_power_of_two() || !(64..=1 << 20).contains(&d.frames) {
                return Err((at("frames"), format!("{} is not a power of two in 64..=1048576", d.frames)));
            }
            if d.frame_size != 2048 && d.frame_size != 4096 {
                return Err((at("frame_size"), format!("{} must be 2048 or 4096", d.frame_size)));
            }
            if !d.ring_size.is_power_of_two() || !(64..=1 << 16).contains(&d.ring_size) {
                return Err((at("ring_size"), format!("{} is not a power of two in 64..=65536", d.ring_size)));
            }
            if let Some(u) = d.user.as_deref().filter(|u| !valid_user(u)) {
                return Err((at("user"), format!("{u:?} is not a user name")));
            }
        }
        self.check_tenants()?;
        self.check_hosts()?;
        let mut nodes = HashSet::new();
        for (i, p) in self.ports.iter().enumerate() {
            let at = |f| vec![Key("ports"), Index(i), Key(f)];
            if !valid_name(&p.name) {
                return Err((at("name"), bad_name(&p.name)));
            }
            if !nodes.insert(p.name.as_str()) {
                return Err((at("name"), format!("duplicate node name {:?}", p.name)));
            }
            let entry = p.via.is_some() && p.netdev.is_empty();
            if !entry && (p.netdev.is_empty() || p.netdev.len() > 15 || p.netdev.contains(['/', ' '])) {
                return Err((at("netdev"), format!("{:?} is not a device name", p.netdev)));
            }
            if !(1..=64).contains(&p.queues) {
                return Err((at("queues"), format!("{} must be in 1..=64", p.queues)));
            }
            let r = &p.rings;
            for (field, n) in [("rx", r.rx), ("tx", r.tx), ("fill", r.fill), ("completion", r.completion)] {
                if !n.is_power_of_two() || !(16..=16384).contains(&n) {
                    let path = vec![Key("ports"), Index(i), Key("rings"), Key(field)];
                    return Err((path, format!("{n} is not a power of two in 16..=16384")));
                }
            }
        }
        self.check_classifiers(kinds)?;
        for (i, k) in self.kernel.iter().enumerate() {
            let at = |f| vec![Key("kernel"), Index(i), Key(f)];
            if !valid_name(&k.name) {
                return Err((at("name"), bad_name(&k.name)));
            }
            if !nodes.insert(k.name.as_str()) {
                return Err((at("name"), format!("duplicate node name {:?}", k.name)));
            }
            if k.dev.is_empty() || k.dev.len() > 15 || k.dev.contains(['/', ' ']) {
                return Err((at("dev"), format!("{:?} is not a device name", k.dev)));
            }
            if let Some(a) = k.addrs.iter().find(|a| !a.contains('/') || a.contains(' ')) {
                return Err((at("addrs"), format!("{a:?} is not an address/prefix")));
            }
        }
        for (i, n) in self.nfs.iter().enumerate() {
            let at = |f| vec![Key("nfs"), Index(i), Key(f)];
            if !valid_name(&n.name) {
                return Err((at("name"), bad_name(&n.name)));
            }
            if !nodes.insert(n.name.as_str()) {
                return Err((at("name"), format!("duplicate node name {:?}", n.name)));
            }
            if !names.contains(n.domain.as_str()) {
                return Err((at("domain"), format!("unknown domain {:?}", n.domain)));
            }
            match (&n.kind, &n.exec) {
                (Some(_), Some(_)) => return Err((at("exec"), "give `kind` or `exec`, not both".into())),
                (None, None) if n.spawn => {
                    return Err((at("kind"), "needs `kind` or `exec` (or `spawn: false`)".into()))
                }
                (None, Some(argv)) if argv.is_empty() => return Err((at("exec"), "empty command".into())),
                (Some(kind), None) => {
                    let out_links = self.links.iter().filter(|l| l.from == n.name).count();
                    kinds.check(kind, &n.args, out_links).map_err(|(arg, message)| match arg {
                        Some(j) => (vec![Key("nfs"), Index(i), Key("args"), Index(j)], message),
                        None => (at("kind"), message),
                    })?;
                    if out_links == 0 && kinds.needs_out_link(kind) {
                        let message = format!(
                            "{kind} passes frames on, but no link leaves {:?}: what it passes would be dropped. \
                             Add a link `{{ from: {}, to: NEXT }}` (NEXT an NF or a port), or end the chain with an NF \
                             that keeps frames (`kind: sink` counts and frees them)",
                            n.name, n.name
                        );
                        return Err((at("name"), message));
                    }
                }
                _ => {}
            }
            if !(1..=64).contains(&n.threads) {
                return Err((at("threads"), format!("{} must be in 1..=64", n.threads)));
            }
            if n.poll.busy && n.cpus.is_empty() {
                let path = vec![Key("nfs"), Index(i), Key("poll"), Key("busy")];
                return Err((path, "a busy NF spins on its CPUs: give it `cpus:` of its own".into()));
            }
            if n.poll.spin_us > 0 && n.cpus.is_empty() {
                let path = vec![Key("nfs"), Index(i), Key("poll"), Key("spin_us")];
                return Err((path, "a spinning NF takes its CPU while it spins: give it `cpus:` of its own".into()));
            }
            if n.poll.spin_us > 1_000_000 {
                let path = vec![Key("nfs"), Index(i), Key("poll"), Key("spin_us")];
                return Err((path, format!("{} µs is past a second", n.poll.spin_us)));
            }
            if let Some(b) = n.poll.prefer_busy_poll {
                let path = |f| vec![Key("nfs"), Index(i), Key("poll"), Key("prefer_busy_poll"), Key(f)];
                if !(1..=65535).contains(&b.budget) {
                    return Err((path("budget"), format!("{} must be in 1..=65535", b.budget)));
                }
                if b.usecs > 1_000_000 {
                    return Err((path("usecs"), format!("{} µs is past a second", b.usecs)));
                }
            }
            if !(1..=256).contains(&n.batch) {
                return Err((at("batch"), format!("{} must be in 1..=256", n.batch)));
            }
            let t = n.backpressure.threshold;
            if !(t > 0.0 && t <= 1.0) {
                let path = vec![Key("nfs"), Index(i), Key("backpressure"), Key("threshold")];
                return Err((path, format!("{t} must be in (0, 1]")));
            }
            if let Some(u) = n.user.as_deref().filter(|u| !valid_user(u)) {
                return Err((at("user"), format!("{u:?} is not a user name")));
            }
            if !n.cpus.is_empty() && !n.spawn {
                return Err((at("cpus"), "only for NFs ferryd starts (spawn: true)".into()));
            }
            let mut seen_cpus = HashSet::new();
            for (j, &cpu) in n.cpus.iter().enumerate() {
                let at_cpu = || vec![Key("nfs"), Index(i), Key("cpus"), Index(j)];
                if cpu > MAX_CPU {
                    return Err((at_cpu(), format!("CPU {cpu} is past {MAX_CPU}")));
                }
                if !seen_cpus.insert(cpu) {
                    return Err((at_cpu(), format!("CPU {cpu} given twice")));
                }
            }
        }
        self.check_users()?;
        // Each port queue is one AF_XDP socket, so one NF thread at most.
        let mut port_user: HashMap<usize, usize> = HashMap::new();
        for (i, l) in self.links.iter().enumerate() {
            let at = |f| vec![Key("links"), Index(i), Key(f)];
            let from = self.node(&l.from).ok_or_else(|| (at("from"), format!("unknown node {:?}", l.from)))?;
            let to = self.node(&l.to).ok_or_else(|| (at("to"), format!("unknown node {:?}", l.to)))?;
            let (nf, port) = match (from, to) {
                (Node::Kernel(_), _) => {
                    return Err((at("from"), "the kernel hop only takes frames (NF -> kernel)".into()))
                }
                (Node::Nf(_), Node::Kernel(_)) => {
                    if l.mode.is_some() {
                        return Err((at("mode"), "a kernel hop is always a copy (TAP write)".into()));
                    }
                    continue;
                }
                (Node::Port(_), Node::Port(_) | Node::Kernel(_)) => {
                    return Err((at("to"), "a link joins a port to an NF, never two ports".into()))
                }
                (Node::Nf(a), Node::Nf(b)) => {
                    if a == b {
                        return Err((at("to"), "an NF cannot link to itself".into()));
                    }
                    let cross = self.nfs[a].domain != self.nfs[b].domain;
                    if cross && l.mode == Some(LinkMode::ZeroCopy) {
                        return Err((
                            at("mode"),
                            format!(
                                "zero-copy needs one domain, but {:?} is in {:?} and {:?} in {:?}",
                                l.from, self.nfs[a].domain, l.to, self.nfs[b].domain
                            ),
                        ));
                    }
                    continue;
                }
                (Node::Port(p), Node::Nf(n)) | (Node::Nf(n), Node::Port(p)) => (n, p),
            };
            if l.mode == Some(LinkMode::Copy) {
                return Err((at("mode"), "port links are always AF_XDP sockets; `mode` is for NF-to-NF links".into()));
            }
            if let Some(&other) = port_user.get(&port) {
                // Two NFs that may fuse may share a port: placement makes
                // them one NF, or refuses the chain at this link.
                let may_fuse = self.fuse_policy(other) == FusePolicy::Auto && self.fuse_policy(nf) == FusePolicy::Auto;
                if other != nf && !may_fuse {
                    return Err((
                        at("to"),
                        format!(
                            "port {:?} is already used by NF {:?}: a port queue is one AF_XDP socket, owned by one \
                             NF thread (fan in through an NF instead, or give both NFs fuse: auto so that placement \
                             runs them as one)",
                            self.ports[port].name, self.nfs[other].name
                        ),
                    ));
                }
            }
            port_user.insert(port, nf);
            if self.nfs[nf].threads > self.ports[port].queues {
                return Err((
                    at("to"),
                    format!(
                        "NF {:?} has {} threads but port {:?} only {} queues (thread i uses queue i)",
                        self.nfs[nf].name, self.nfs[nf].threads, self.ports[port].name, self.ports[port].queues
                    ),
                ));
            }
        }
        if self.links.iter().filter(|l| l.from == l.to).count() > 0 {
            return Err((vec![Key("links")], "self links are not allowed".into()));
        }
        self.check_no_loop()?;
        self.check_parked_frames()
    }

    /// Each receiving socket keeps `min(fill, rx)` frames of its domain's
    /// pool waiting in the kernel. At most half the pool may wait there:
    /// the rest carries frames through the NFs' rings and out. The port
    /// that tips a domain over is blamed.
    fn check_parked_frames(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        let mut parked: HashMap<&str, u64> = HashMap::new();
        for l in &self.links {
            let (Some(Node::Port(p)), Some(Node::Nf(n))) = (self.node(&l.from), self.node(&l.to)) else { continue };
            let (port, nf) = (&self.ports[p], &self.nfs[n]);
            let Some(domain) = self.domains.iter().find(|d| d.name == nf.domain) else { continue };
            let sum = parked.entry(domain.name.as_str()).or_default();
            *sum += u64::from(nf.threads) * u64::from(port.rings.parked());
            let total = *sum;
            if total > u64::from(domain.frames / 2) {
                return Err((
                    vec![Key("ports"), Index(p), Key("rings")],
                    format!(
                        "the receiving sockets of domain {:?} would keep {total} of its {} frames on their fill \
                         rings (here {} thread(s) x min(fill, rx) = {}), more than half: too few would be left to \
                         carry traffic. Lower `rings.fill` (or `rings.rx`), or raise the domain's `frames` to {}",
                        domain.name,
                        domain.frames,
                        nf.threads,
                        port.rings.parked(),
                        (total * 2).next_power_of_two()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// NF-to-NF links must not loop: a frame would circle for ever. (A
    /// path out of a port and back in, through an outside program, is not
    /// a loop of the chain's.) The link that closes a loop is blamed, in
    /// file order.
    fn check_no_loop(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); self.nfs.len()];
        for (i, l) in self.links.iter().enumerate() {
            let (Some(Node::Nf(a)), Some(Node::Nf(b))) = (self.node(&l.from), self.node(&l.to)) else {
                continue;
            };
            if let Some(path) = path_between(&next, b, a) {
                let names: Vec<&str> = path.iter().chain([&b]).map(|&n| self.nfs[n].name.as_str()).collect();
                return Err((
                    vec![Key("links"), Index(i), Key("to")],
                    format!("this link closes a loop ({}): frames would circle for ever", names.join(" -> ")),
                ));
            }
            next[a].push(b);
        }
        Ok(())
    }

    /// The user NF `i` runs as, if the file names one (its own, else its
    /// domain's, else its tenant's); None means an allocated uid.
    pub fn user_of(&self, i: usize) -> Option<&str> {
        let n = &self.nfs[i];
        let d = self.domains.iter().find(|d| d.name == n.domain)?;
        let tenant = || self.tenants.iter().find(|t| Some(&t.name) == d.tenant.as_ref())?.user.as_deref();
        n.user.as_deref().or(d.user.as_deref()).or_else(tenant)
    }

    /// What runs as one uid: a domain's tenant, else the domain itself.
    pub fn uid_group(&self, domain: &str) -> String {
        match self.domains.iter().find(|d| d.name == domain).and_then(|d| d.tenant.as_ref()) {
            Some(t) => format!("tenant {t:?}"),
            None => format!("domain {domain:?}"),
        }
    }

    /// Tenants: valid, unique, owning every domain once declared; a
    /// tenant's domains and NFs name no user of their own.
    fn check_tenants(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        let mut names = HashSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
            let at = |f| vec![Key("tenants"), Index(i), Key(f)];
            if !valid_name(&t.name) {
                return Err((at("name"), bad_name(&t.name)));
            }
            if !names.insert(t.name.as_str()) {
                return Err((at("name"), format!("duplicate tenant {:?}", t.name)));
            }
            if let Some(u) = t.user.as_deref().filter(|u| !valid_user(u)) {
                return Err((at("user"), format!("{u:?} is not a user name")));
            }
        }
        for (i, d) in self.domains.iter().enumerate() {
            let at = |f| vec![Key("domains"), Index(i), Key(f)];
            match (&d.tenant, self.tenants.is_empty()) {
                (None, false) => {
                    return Err((at("name"), format!("domain {:?} names no tenant: once tenants are declared, every domain belongs to one", d.name)))
                }
                (Some(t), _) if !names.contains(t.as_str()) => {
                    return Err((at("tenant"), format!("unknown tenant {t:?}")))
                }
                (Some(t), _) if d.user.is_some() => {
                    return Err((at("user"), format!("domain {:?} belongs to tenant {t:?}, whose domains all run as its uid: set `user` on the tenant", d.name)))
                }
                _ => {}
            }
        }
        for (i, n) in self.nfs.iter().enumerate() {
            let tenant = self.domains.iter().find(|d| d.name == n.domain).and_then(|d| d.tenant.as_ref());
            if let (Some(t), Some(_)) = (tenant, &n.user) {
                return Err((
                    vec![Key("nfs"), Index(i), Key("user")],
                    format!(
                        "NF {:?} belongs to tenant {t:?}, whose NFs all run as its uid: set `user` on the tenant",
                        n.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Two domains under one named user are not kept apart by the OS, so
    /// that takes `share_users: true`.
    fn check_users(&self) -> Result<(), Invalid> {
        use Seg::{Index, Key};
        if self.share_users {
            return Ok(());
        }
        let mut first: HashMap<&str, String> = HashMap::new();
        let by_tenant = self.tenants.iter().enumerate().filter_map(|(i, t)| {
            let path = vec![Key("tenants"), Index(i), Key("user")];
            t.user.as_deref().map(|u| (u, format!("tenant {:?}", t.name), path))
        });
        let by_domain = self.domains.iter().enumerate().filter_map(|(i, d)| {
            let path = vec![Key("domains"), Index(i), Key("user")];
            d.user.as_deref().map(|u| (u, self.uid_group(&d.name), path))
        });
        let by_nf = self.nfs.iter().enumerate().filter_map(|(i, n)| {
            let path = vec![Key("nfs"), Index(i), Key("user")];
            n.user.as_deref().map(|u| (u, self.uid_group(&n.domain), path))
        });
        for (user, group, path) in by_tenant.chain(by_domain).chain(by_nf) {
            match first.get(user) {
                Some(other) if *other != group => {
                    return Err((
                        path,
                        format!(
                            "user {user:?} already runs {other}: domains sharing a user are not isolated by the \
                             OS, so each runs as its own (leave `user` out and ferryd allocates one), or set \
                             `share_users: true` to allow it"
                        ),
                    ))
                }
                _ => {
                    first.insert(user, group);
                }
            }
        }
        Ok(())
    }
}

/// A path `from` ... `to` along `next` (depth first), as the nodes from
/// `from` to `to`, both included; None if there is none.
fn path_between(next: &[Vec<usize>], from: usize, to: usize) -> Option<Vec<usize>> {
    let mut seen = vec![false; next.len()];
    let mut stack = vec![(from, vec![from])];
    while let Some((n, path)) = stack.pop() {
        if n == to {
            return Some(path);
        }
        if std::mem::replace(&mut seen[n], true) {
            continue;
        }
        for &m in &next[n] {
            let mut p = path.clone();
            p.push(m);
            stack.push((m, p));
        }
    }
    None
}

fn bad_name(s: &str) -> String {
    format!("{s:?} is not a name (1-32 of a-z 0-9 - _, starting with a letter or digit)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_outside_comments() {
        let text =
            "# `{dut}` is the testbed's dut namespace\nports:\n  - { name: in, netns: \"{dut}\", netdev: d0 }  # {x}\n";
        assert_eq!(unfilled_placeholder(text), Some((3, 25, "dut")));
        let filled = fill_placeholders(text, &[("dut".into(), "fy1-dut".into())]);
        assert_eq!(unfilled_placeholder(&filled), None);
        assert!(filled.contains("netns: \"fy1-dut\""));
        assert_eq!(unfilled_placeholder("a: \"#{dut}\"\n"), Some((1, 6, "dut")), "a # inside quotes is no comment");
        assert_eq!(unfilled_placeholder("- { name: a }\n- {b: 1}\n"), None, "flow mappings are not placeholders");
        assert_eq!(unfilled_placeholder("exec: [sh, -c, \"nf ${dev}\"]\n"), None, "a shell variable is not one");
        // A line of a quoted value that starts like a comment: found in the
        // value as parsed, at its line.
        let text =
            "name: c\ndomains: [ { name: main } ]\nports:\n  - { name: p, netns: \"x\n  # {dut}\", netdev: d0 }\n\
                    nfs: [ { name: f, domain: main, kind: l2fwd } ]\nlinks: [ { from: p, to: f } ]\n";
        let e = parse(text).unwrap_err();
        assert!(e.message.contains("{dut} is a placeholder"), "{e}");
        assert_eq!((e.line, e.column), (Some(5), Some(5)), "{e}");
    }

    const GOOD: &str = r#"
name: t
domains:
  - { name: a }
  - { name: b, frames: 1024 }
ports:
  - { name: in, netns: dut, netdev: d0 }
  - { name: out, netdev: d1 }
nfs:
  - { name: x, domain: a, kind: l2fwd }
  - { name: y, domain: b, kind: l2fwd, threads: 1, backpressure: { mode: sleep, sleep_us: 10 } }
links:
  - { from: in, to: x }
  - { from: x, to: y }
  - { from: y, to: out }
"#;

    #[test]
    fn parses_a_good_chain() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.nfs.len(), 2);
        assert_eq!(c.nfs[1].backpressure.mode, BackpressureMode::Sleep);
        assert_eq!(c.user_of(0), None, "an allocated uid by default");
        assert_eq!(c.node("out"), Some(Node::Port(1)));
    }

    #[test]
    fn an_nf_passing_frames_to_no_link_is_refused() {
        let forwarding = GOOD.replace("kind: l2fwd, threads: 1", "kind: fwd, threads: 1");
        assert!(parse(&forwarding).is_ok());
        let nowhere = forwarding.replace("  - { from: y, to: out }\n", "");
        let e = err(&nowhere);
        assert!(e.starts_with("c.yaml:11:"), "{e}");
        assert!(
            e.contains("nfs[1].name") && e.contains("no link leaves \"y\"") && e.contains("from: y, to: NEXT"),
            "{e}"
        );
        // l2fwd sends back what it gets when nothing leaves it.
        assert!(parse(&GOOD.replace("  - { from: y, to: out }\n", "")).is_ok());
    }

    /// The kinds of these tests: `l2fwd` (no arguments) and `fwd`
    /// (`by_port=0|1`, passing frames on).
    struct TestKinds;

    impl KindCheck for TestKinds {
        fn check(&self, kind: &str, args: &[String], _out_links: usize) -> Result<(), (Option<usize>, String)> {
            let allowed: &[&str] = match kind {
                "l2fwd" => &[],
                "fwd" => &["by_port=0", "by_port=1"],
                _ => return Err((None, format!("unknown NF type {kind:?}"))),
            };
            match args.iter().position(|a| !allowed.contains(&a.as_str())) {
                Some(j) => Err((Some(j), format!("bad argument {:?}", args[j]))),
                None => Ok(()),
            }
        }

        fn needs_out_link(&self, kind: &str) -> bool {
            kind == "fwd"
        }
    }

    fn parse(text: &str) -> Result<ChainSpec, YamlError> {
        ChainSpec::from_yaml_str(text, "c.yaml", &TestKinds)
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = GOOD.replace("{ from: x, to: y }", "{ from: x, to: z }");
        assert_eq!(err(&bad), "c.yaml:14:20: links[1].to: unknown node \"z\"");
        let bad = GOOD.replace("frames: 1024", "frames: 1000");
        assert!(err(&bad).starts_with("c.yaml:5:"), "{}", err(&bad));
        assert!(err(&bad).contains("domains[1].frames: 1000 is not a power of two"), "{}", err(&bad));
        let bad = GOOD.replace("kind: l2fwd }", "kind: l2fwd, colour: red }");
        assert!(err(&bad).contains("nfs[0].colour: unknown field `colour`"), "{}", err(&bad));
    }

    #[test]
    fn cpus_are_checked() {
        let with = |cpus: &str| GOOD.replace("kind: l2fwd }", &format!("kind: l2fwd, cpus: {cpus} }}"));
        assert_eq!(parse(&with("[0, 3]")).unwrap().nfs[0].cpus, [0, 3]);
        assert!(err(&with("[1, 1]")).contains("nfs[0].cpus[1]: CPU 1 given twice"), "{}", err(&with("[1, 1]")));
        assert!(err(&with("[1024]")).contains("nfs[0].cpus[0]: CPU 1024 is past 1023"), "{}", err(&with("[1024]")));
        let unspawned = with("[0]").replace("kind: l2fwd,", "spawn: false,");
        assert!(err(&unspawned).contains("nfs[0].cpus: only for NFs ferryd starts"), "{}", err(&unspawned));
    }

    #[test]
    fn a_busy_nf_needs_cpus_of_its_own() {
        let busy = GOOD.replace("kind: l2fwd }", "kind: l2fwd, poll: { busy: true } }");
        let e = err(&busy);
        assert!(e.contains("nfs[0].poll.busy: a busy NF spins on its CPUs: give it `cpus:`"), "{e}");
        let pinned = busy.replace("poll: { busy: true }", "poll: { busy: true }, cpus: [1]");
        let spec = parse(&pinned).unwrap();
        assert!(spec.nfs[0].poll.busy);
        // The wire form says busy only when it is.
        assert!(serde_json::to_string(&spec.nfs[0].poll).unwrap().contains("\"busy\":true"));
        assert!(!serde_json::to_string(&PollSpec::default()).unwrap().contains("busy\""));
    }

    #[test]
    fn preferred_busy_polling_takes_the_kernel_documentation_defaults() {
        let with =
            |b: &str| GOOD.replace("kind: l2fwd }", &format!("kind: l2fwd, poll: {{ prefer_busy_poll: {b} }} }}"));
        let spec = parse(&with("{}")).unwrap();
        assert_eq!(spec.nfs[0].poll.prefer_busy_poll, Some(PreferBusyPoll::default()));
        let b = PreferBusyPoll::default();
        assert_eq!((b.usecs, b.budget, b.defer_hard_irqs, b.gro_flush_timeout_ns), (20, 64, 2, 200_000));
        let e = err(&with("{ budget: 0 }"));
        assert!(e.contains("nfs[0].poll.prefer_busy_poll.budget: 0 must be in 1..=65535"), "{e}");
        let e = err(&with("{ usecs: 2000000 }"));
        assert!(e.contains("nfs[0].poll.prefer_busy_poll.usecs"), "{e}");
        assert!(err(&with("{ budgett: 8 }")).contains("budgett"), "unknown fields are refused");
        assert!(PollSpec::default().prefer_busy_poll.is_none(), "off unless asked for");
    }

    #[test]
    fn a_spin_window_needs_cpus_of_its_own() {
        let spin = GOOD.replace("kind: l2fwd }", "kind: l2fwd, poll: { spin_us: 50 } }");
        let e = err(&spin);
        assert!(e.contains("nfs[0].poll.spin_us: a spinning NF takes its CPU while it spins: give it `cpus:`"), "{e}");
        let pinned = spin.replace("poll: { spin_us: 50 }", "poll: { spin_us: 50 }, cpus: [1]");
        assert_eq!(parse(&pinned).unwrap().nfs[0].poll.spin_us, 50);
        assert!(!serde_json::to_string(&PollSpec::default()).unwrap().contains("spin_us"), "left out when off");
    }

    #[test]
    fn zero_copy_across_domains_is_refused() {
        let bad = GOOD.replace("{ from: x, to: y }", "{ from: x, to: y, mode: zero-copy }");
        assert!(err(&bad).contains("links[1].mode: zero-copy needs one domain"), "{}", err(&bad));
    }

    #[test]
    fn a_port_queue_has_one_owner() {
        let bad = GOOD.replace("{ from: y, to: out }", "{ from: y, to: in }");
        assert!(err(&bad).contains("port \"in\" is already used by NF \"x\""), "{}", err(&bad));
    }

    #[test]
    fn the_kernel_hop_only_takes_frames() {
        let with_kernel =
            GOOD.replace("nfs:\n", "kernel:\n  - { name: host, dev: fk0, addrs: [\"10.0.9.1/24\"] }\nnfs:\n");
        let ok = with_kernel.replace("{ from: y, to: out }", "{ from: y, to: host }");
        let c = parse(&ok).unwrap();
        assert_eq!(c.node("host"), Some(Node::Kernel(0)));
        let bad = with_kernel.replace("{ from: in, to: x }", "{ from: host, to: x }");
        assert!(err(&bad).contains("links[0].from: the kernel hop only takes frames"), "{}", err(&bad));
        let bad = with_kernel.replace("addrs: [\"10.0.9.1/24\"]", "addrs: [\"10.0.9.1\"]");
        assert!(err(&bad).contains("kernel[0].addrs"), "{}", err(&bad));
    }

    #[test]
    fn port_rings_are_powers_of_two_the_pool_can_feed() {
        let bad = GOOD.replace("netdev: d0 }", "netdev: d0, rings: { fill: 1000 } }");
        assert!(err(&bad).contains("ports[0].rings.fill: 1000 is not a power of two"), "{}", err(&bad));
        // Domain a's 4096 frames: 2048 may wait on fill rings, not 4096.
        let ok = GOOD.replace("netdev: d0 }", "netdev: d0, rings: { rx: 2048, fill: 2048 } }");
        assert_eq!(parse(&ok).unwrap().ports[0].rings.parked(), 2048);
        let greedy = GOOD.replace("netdev: d0 }", "netdev: d0, rings: { rx: 4096, fill: 4096 } }");
        let e = err(&greedy);
        assert!(e.contains("ports[0].rings: the receiving sockets of domain \"a\" would keep 4096"), "{e}");
        assert!(e.contains("raise the domain's `frames` to 8192"), "{e}");
        // The smaller of fill and rx is what waits.
        assert!(parse(&GOOD.replace("netdev: d0 }", "netdev: d0, rings: { rx: 64, fill: 4096 } }")).is_ok());
    }

    #[test]
    fn unowned_queues_are_refused_or_the_kernels() {
        let spec = parse(&GOOD.replace("netdev: d0 }", "netdev: d0, unowned_queues: kernel }")).unwrap();
        assert_eq!(
            (spec.ports[0].unowned_queues, spec.ports[1].unowned_queues),
            (UnownedQueues::Kernel, UnownedQueues::Refuse)
        );
        let bad = GOOD.replace("netdev: d0 }", "netdev: d0, unowned_queues: pass }");
        assert!(err(&bad).contains("ports[0].unowned_queues: unknown variant `pass`"), "{}", err(&bad));
    }

    #[test]
    fn threads_need_queues() {
        let bad =
            GOOD.replace("{ name: x, domain: a, kind: l2fwd }", "{ name: x, domain: a, kind: l2fwd, threads: 2 }");
        assert!(err(&bad).contains("has 2 threads but port \"in\" only 1 queues"), "{}", err(&bad));
    }

    #[test]
    fn two_domains_under_one_user_need_share_users() {
        let named = GOOD.replace("{ name: a }", "{ name: a, user: svc }");
        let c = parse(&named).unwrap();
        assert_eq!((c.user_of(0), c.user_of(1)), (Some("svc"), None));
        let bad = named.replace("kind: l2fwd, threads: 1", "kind: l2fwd, user: svc, threads: 1");
        let e = err(&bad);
        assert!(e.starts_with("c.yaml:11:"), "{e}");
        assert!(e.contains("nfs[1].user: user \"svc\" already runs domain \"a\""), "{e}");
        let bad = named.replace("{ name: b, frames: 1024 }", "{ name: b, frames: 1024, user: svc }");
        assert!(err(&bad).contains("domains[1].user: user \"svc\" already runs domain \"a\""), "{}", err(&bad));
        let shared = format!("share_users: true\n{bad}");
        let c = parse(&shared).unwrap();
        assert_eq!((c.user_of(0), c.user_of(1)), (Some("svc"), Some("svc")));
        // A user per domain is what isolation wants.
        let apart = named.replace("kind: l2fwd, threads: 1", "kind: l2fwd, user: web, threads: 1");
        assert!(parse(&apart).is_ok());
        let bad = GOOD.replace("{ name: a }", "{ name: a, user: \"a b\" }");
        assert!(err(&bad).contains("domains[0].user: \"a b\" is not a user name"), "{}", err(&bad));
    }

    #[test]
    fn kinds_and_arguments_are_checked_where_they_are_written() {
        let bad = GOOD.replace("{ name: x, domain: a, kind: l2fwd }", "{ name: x, domain: a, kind: arp-icmp }");
        let e = err(&bad);
        assert!(e.starts_with("c.yaml:10:"), "{e}");
        assert!(e.contains("nfs[0].kind: unknown NF type \"arp-icmp\""), "{e}");
        let bad = GOOD.replace(
            "{ name: x, domain: a, kind: l2fwd }",
            "{ name: x, domain: a, kind: fwd, args: [\"by_port=1\", \"colour=red\"] }",
        );
        assert!(err(&bad).contains("nfs[0].args[1]: bad argument \"colour=red\""), "{}", err(&bad));
        // `exec` NFs are programs of their own: nothing to check.
        let ok = GOOD.replace("{ name: x, domain: a, kind: l2fwd }", "{ name: x, domain: a, exec: [/bin/nf] }");
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn nf_loops_are_refused_at_the_link_that_closes_them() {
        let three = GOOD
            .replace(
                "  - { name: y, domain: b, kind: l2fwd, threads: 1, backpressure: { mode: sleep, sleep_us: 10 } }\n",
                "  - { name: y, domain: b, kind: l2fwd }\n  - { name: z, domain: b, kind: l2fwd }\n",
            )
            .replace(
                "  - { from: y, to: out }\n",
                "  - { from: y, to: z }\n  - { from: z, to: x }\n  - { from: z, to: out }\n",
            );
        let e = err(&three);
        assert!(e.contains("links[3].to: this link closes a loop (x -> y -> z -> x)"), "{e}");
        // x -> y -> out, and back in from out to y through whatever is
        // outside: not a loop of the chain's.
        let via_port =
            GOOD.replace("  - { from: y, to: out }\n", "  - { from: y, to: out }\n  - { from: out, to: y }\n");
        assert!(parse(&via_port).is_ok(), "{}", err(&via_port));
    }

    #[test]
    fn tenants_own_domains_and_run_as_one_uid() {
        let tenants = GOOD
            .replace("  - { name: a }\n", "  - { name: a, tenant: acme }\n")
            .replace("  - { name: b, frames: 1024 }\n", "  - { name: b, frames: 1024, tenant: zeta }\n")
            .replace("domains:\n", "tenants: [ { name: acme }, { name: zeta, user: svc } ]\ndomains:\n");
        let c = parse(&tenants).unwrap();
        assert_eq!((c.user_of(0), c.user_of(1)), (None, Some("svc")));
        assert_eq!(
            (c.uid_group("a"), c.uid_group("b")),
            ("tenant \"acme\"".to_string(), "tenant \"zeta\"".to_string())
        );
        let table = [
            (tenants.replace(", tenant: zeta", ""), "domains[1].name: domain \"b\" names no tenant"),
            (tenants.replace("tenant: zeta", "tenant: nobody"), "domains[1].tenant: unknown tenant \"nobody\""),
            (
                tenants.replace("tenant: zeta", "tenant: zeta, user: x"),
                "domains[1].user: domain \"b\" belongs to tenant \"zeta\"",
            ),
            (
                tenants.replace("kind: l2fwd }", "kind: l2fwd, user: x }"),
                "nfs[0].user: NF \"x\" belongs to tenant \"acme\"",
            ),
            (
                tenants.replace("{ name: acme }", "{ name: acme, user: svc }"),
                "tenants[1].user: user \"svc\" already runs tenant \"acme\"",
            ),
            (
                tenants.replace("{ name: zeta, user: svc }", "{ name: acme }"),
                "tenants[1].name: duplicate tenant \"acme\"",
            ),
        ];
        for (text, want) in table {
            assert!(err(&text).contains(want), "{} lacks {want:?}", err(&text));
        }
    }
}
