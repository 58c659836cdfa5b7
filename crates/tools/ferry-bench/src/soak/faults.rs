//! The soak's chains, its ferryd, and the faults it applies to them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::proto::{self, Status};
use ferry_cli::chainctl::{self, counter};
use ferry_cli::util::{wait_until, wait_while_progressing};

use super::{sample, SoakOptions, SoakReport, Tally, BOUNDS};

/// The chains' ring size and NF batch (what one killed thread may hold).
pub const RING_SIZE: u64 = 512;
pub const BATCH: u64 = 32;
/// The chains that run all along: their names and whether they cross
/// domains by a copy link.
pub const STEADY: [(&str, bool); 2] = [("soak-a", false), ("soak-b", true)];
const CHURN: &str = "soak-c";
const CHURN_FRAMES: u64 = 2000;
/// How long any one awaited event may take before the soak gives up: a
/// hang guard, far above what any step needs.
const GUARD: Duration = Duration::from_secs(120);

/// src -> fw -> f2 -> snk in one domain; fw reads `rules`.
fn chain_a(rate: u64, count: u64, rules: &Path) -> String {
    format!(
        r#"name: soak-a
domains: [ {{ name: main, frames: 4096, ring_size: {RING_SIZE} }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate={rate}", "count={count}"], on_downstream_down: wait }}
  - {{ name: fw, domain: main, kind: firewall, args: ["{}"], on_downstream_down: wait }}
  - {{ name: f2, domain: main, kind: fwd, on_downstream_down: wait }}
  - {{ name: snk, domain: main, kind: sink }}
links: [ {{ from: src, to: fw }}, {{ from: fw, to: f2 }}, {{ from: f2, to: snk }} ]
"#,
        rules.display()
    )
}

/// src -> mid in one domain, -> snk in another (a copy link).
fn chain_b(rate: u64, count: u64) -> String {
    format!(
        r#"name: soak-b
domains: [ {{ name: main, frames: 4096, ring_size: {RING_SIZE} }}, {{ name: far, frames: 4096, ring_size: {RING_SIZE} }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate={rate}", "count={count}"], on_downstream_down: wait }}
  - {{ name: mid, domain: main, kind: fwd, on_downstream_down: wait }}
  - {{ name: snk, domain: far, kind: sink }}
links: [ {{ from: src, to: mid }}, {{ from: mid, to: snk }} ]
"#
    )
}

fn churn_chain() -> String {
    format!(
        r#"name: {CHURN}
domains: [ {{ name: main, frames: 2048, ring_size: 256 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=20000", "count={CHURN_FRAMES}"] }}
  - {{ name: snk, domain: main, kind: sink }}
links: [ {{ from: src, to: snk }} ]
"#
    )
}

/// Two allow-all rule files, so each reload changes what fw reads.
const RULES: [&str; 2] = ["allow proto udp\ndefault allow\n", "allow proto tcp\ndefault allow\n"];

/// One fault of the loop.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// soak-c deployed, run to its count, removed.
    Churn,
    /// soak-a's firewall rules changed and `ferry chain reload`ed.
    Reload,
    /// soak-a's f2 killed (SIGKILL) and restarted by ferryd.
    KillOne,
    /// soak-a's fw and f2 killed together.
    KillTwo,
    /// soak-b's mid killed (its copy link's upstream).
    KillAcross,
    /// soak-b's sink stopped (SIGSTOP) until an audit has run, then
    /// continued: a consumer that falls behind.
    SlowConsumer,
}

impl Step {
    pub const ALL: [Step; 6] =
        [Step::Churn, Step::Reload, Step::KillOne, Step::KillTwo, Step::KillAcross, Step::SlowConsumer];

    fn name(self) -> &'static str {
        match self {
            Step::Churn => "deploy+remove",
            Step::Reload => "reload",
            Step::KillOne => "kill -9 one NF",
            Step::KillTwo => "kill -9 two NFs",
            Step::KillAcross => "kill -9 copy-link upstream",
            Step::SlowConsumer => "SIGSTOP+SIGCONT sink",
        }
    }
}

fn signal(pid: u32, sig: i32) -> Result<()> {
    // SAFETY: a plain kill of a process this soak started.
    match unsafe { libc::kill(pid as i32, sig) } {
        0 => Ok(()),
        _ => Err(anyhow!("kill({pid}, {sig}): {}", std::io::Error::last_os_error())),
    }
}

pub struct Soak {
    dir: PathBuf,
    socket: PathBuf,
    admin: PathBuf,
    ferryd: Child,
    count: u64,
    /// Per steady chain: NF threads killed.
    threads_killed: BTreeMap<&'static str, u64>,
    ferryd_kills: u64,
    faults: BTreeMap<String, u64>,
    audits: u64,
    audits_conserved: u64,
    failures: Vec<String>,
    reloads: usize,
    pub(super) samples: Vec<sample::Sample>,
    last_sample: Option<Instant>,
}

impl Soak {
    /// Writes the chain files to `dir` and starts a `ferryd --persist`
    /// with the two steady chains, each source making `count` frames.
    pub fn start(dir: &Path, rate: u64, count: u64) -> Result<Soak> {
        let chains = dir.join("chains");
        let _ = std::fs::remove_dir_all(&chains);
        std::fs::create_dir_all(&chains)?;
        let rules = dir.join("fw.rules");
        std::fs::write(&rules, RULES[0])?;
        std::fs::write(chains.join("a.yaml"), chain_a(rate, count, &rules))?;
        std::fs::write(chains.join("b.yaml"), chain_b(rate, count))?;
        std::fs::write(dir.join("churn.yaml"), churn_chain())?;
        let socket = dir.join("ferryd.sock");
        let ferryd = spawn_ferryd(&socket, Some(&chains))?;
        let mut soak = Soak {
            dir: dir.to_path_buf(),
            admin: proto::admin_socket(&socket),
            socket,
            ferryd,
            count,
            threads_killed: BTreeMap::new(),
            ferryd_kills: 0,
            faults: BTreeMap::new(),
            audits: 0,
            audits_conserved: 0,
            failures: Vec::new(),
            reloads: 0,
            samples: Vec::new(),
            last_sample: None,
        };
        soak.wait_serving()?;
        Ok(soak)
    }

    pub fn status(&self, chain: &str) -> Result<Status> {
        chainctl::status(&self.admin, chain)
    }

    pub fn ferryd_pid(&self) -> u32 {
        self.ferryd.id()
    }

    /// Both steady chains served, every NF connected and none awaiting
    /// its rejoin.
    fn wait_serving(&mut self) -> Result<()> {
        let ferryd = &mut self.ferryd;
        let admin = &self.admin;
        wait_until("ferryd serving both chains, every NF connected", GUARD, || {
            if ferryd.try_wait().ok().flatten().is_some() {
                return true;
            }
            STEADY.iter().all(|(c, _)| {
                chainctl::status(admin, c).is_ok_and(|s| s.nfs.iter().all(|n| n.connected && !n.awaiting_rejoin))
            })
        })?;
        match self.ferryd.try_wait()? {
            Some(st) => bail!("ferryd exited ({st}); its log: {}", self.dir.join("ferryd.log").display()),
            None => Ok(()),
        }
    }

    /// Ends ferryd with `sig`; a new `ferryd --persist` adopts the chains.
    pub fn restart_ferryd(&mut self, sig: i32) -> Result<()> {
        signal(self.ferryd.id(), sig)?;
        self.ferryd.wait()?;
        if sig == libc::SIGKILL {
            self.ferryd_kills += 1;
        }
        self.ferryd = spawn_ferryd(&self.socket, None)?;
        self.wait_serving()?;
        let what = if sig == libc::SIGKILL { "ferryd SIGKILL+adopt" } else { "ferryd SIGTERM+adopt" };
        *self.faults.entry(what.into()).or_default() += 1;
        Ok(())
    }

    pub fn apply(&mut self, step: Step) -> Result<()> {
        match step {
            Step::Churn => self.churn(),
            Step::Reload => self.reload(),
            Step::KillOne => self.kill("soak-a", &["f2"]),
            Step::KillTwo => self.kill("soak-a", &["fw", "f2"]),
            Step::KillAcross => self.kill("soak-b", &["mid"]),
            Step::SlowConsumer => self.slow_consumer(),
        }
        .with_context(|| step.name())?;
        *self.faults.entry(step.name().into()).or_default() += 1;
        Ok(())
    }

    fn churn(&mut self) -> Result<()> {
        chainctl::deploy(&self.admin, &self.dir.join("churn.yaml"))?;
        let admin = &self.admin;
        wait_until("the churn chain's frames at its sink", GUARD, || {
            chainctl::status(admin, CHURN).is_ok_and(|s| counter(&s, "snk", "sunk") == CHURN_FRAMES)
        })?;
        chainctl::remove(&self.admin, CHURN)?;
        wait_until("the churn chain gone", GUARD, || {
            chainctl::list(admin).is_ok_and(|l| l.iter().all(|c| c.name != CHURN))
        })
    }

    fn reload(&mut self) -> Result<()> {
        self.reloads += 1;
        std::fs::write(self.dir.join("fw.rules"), RULES[self.reloads % 2])?;
        let outcome = chainctl::reload(&self.admin, "soak-a")?;
        match outcome.iter().find(|r| r.nf == "fw") {
            Some(r) if r.outcome == "applied" => Ok(()),
            other => bail!("fw's reload: {other:?}"),
        }
    }

    /// Kills `victims` of `chain` together; each restarts once, and
    /// frames reach the sink again.
    fn kill(&mut self, chain: &'static str, victims: &[&str]) -> Result<()> {
        let before = self.status(chain)?;
        let old: Vec<(u32, u32, usize)> = victims
            .iter()
            .map(|v| {
                let n = before.nfs.iter().find(|n| n.name == *v).expect("a chain NF");
                (n.pid.unwrap_or(0), n.restarts, n.threads.len())
            })
            .collect();
        for &(pid, _, _) in &old {
            signal(pid, libc::SIGKILL)?;
        }
        *self.threads_killed.entry(chain).or_default() += old.iter().map(|o| o.2 as u64).sum::<u64>();
        let admin = &self.admin;
        wait_until("the killed NFs restarted", GUARD, || {
            chainctl::status(admin, chain).is_ok_and(|s| {
                victims.iter().zip(&old).all(|(v, &(pid, restarts, _))| {
                    s.nfs
                        .iter()
                        .any(|n| n.name == *v && n.connected && n.pid != Some(pid) && n.restarts == restarts + 1)
                })
            })
        })?;
        self.wait_flowing(chain)
    }

    /// Frames reach `chain`'s sink (or its source made its count).
    fn wait_flowing(&self, chain: &str) -> Result<()> {
        let sunk0 = counter(&self.status(chain)?, "snk", "sunk");
        let (admin, count) = (&self.admin, self.count);
        wait_until("frames at the sink", GUARD, || {
            chainctl::status(admin, chain)
                .is_ok_and(|s| counter(&s, "snk", "sunk") > sunk0 || counter(&s, "src", "made") == count)
        })
    }

    /// soak-b's sink stopped until an audit of its domain has run (one
    /// that, finding it unresponsive, touches nothing), then continued.
    fn slow_consumer(&mut self) -> Result<()> {
        let st = self.status("soak-b")?;
        let pid = st.nfs.iter().find(|n| n.name == "snk").and_then(|n| n.pid).context("soak-b's sink")?;
        signal(pid, libc::SIGSTOP)?;
        let audited = chainctl::audit(&self.admin, "soak-b");
        signal(pid, libc::SIGCONT)?;
        audited?;
        self.wait_flowing("soak-b")
    }

    /// Audits both steady chains; an audit every live thread answered
    /// must find every frame in exactly one place.
    pub fn audit(&mut self) -> Result<()> {
        for (chain, _) in STEADY {
            for r in chainctl::audit(&self.admin, chain)? {
                if !r.unresponsive.is_empty() {
                    continue;
                }
                self.audits += 1;
                if r.conserved() {
                    self.audits_conserved += 1;
                } else {
                    self.failures.push(format!("{chain}: an audit found {r:?}"));
                }
            }
        }
        Ok(())
    }

    pub fn sample_due(&self) -> bool {
        self.last_sample.map_or(true, |t| t.elapsed() >= Duration::from_secs(60))
    }

    /// Records a sample (and prints its row).
    pub fn sample(&mut self, start: Instant) -> Result<()> {
        let s = sample::take(self, start, (self.audits, self.audits_conserved), self.faults.values().sum())?;
        eprintln!("{}", sample::row(&s));
        self.samples.push(s);
        self.last_sample = Some(Instant::now());
        Ok(())
    }

    /// Waits for both sources to make their count and every frame to be
    /// accounted for, stops ferryd and its chains, and judges the run.
    pub fn finish(mut self, opts: &SoakOptions, start: Instant, outcome: Result<()>) -> Result<SoakReport> {
        if let Err(e) = outcome {
            self.failures.push(format!("{e:#}"));
        }
        let mut tallies = Vec::new();
        if self.failures.is_empty() {
            for (chain, copy_link) in STEADY {
                match self.tally(chain, copy_link) {
                    Ok(t) => tallies.push(t),
                    Err(e) => self.failures.push(format!("{chain}: {e:#}")),
                }
            }
            self.sample(start)?;
        }
        for t in &tallies {
            if t.lost > 0 || t.reclaimed > t.reclaim_bound {
                self.failures.push(format!(
                    "{}: {} frames lost, {} reclaimed (bound {})",
                    t.chain, t.lost, t.reclaimed, t.reclaim_bound
                ));
            }
        }
        self.failures.extend(sample::growth(&self.samples, &BOUNDS));
        if let Err(e) = chainctl::shutdown(&self.admin) {
            self.failures.push(format!("shutting ferryd down: {e:#}"));
        }
        let _ = self.ferryd.wait();
        Ok(SoakReport {
            minutes: opts.minutes,
            rate: opts.rate,
            bounds: BOUNDS,
            samples: std::mem::take(&mut self.samples),
            faults: std::mem::take(&mut self.faults),
            audits: self.audits,
            audits_conserved: self.audits_conserved,
            tallies,
            failures: std::mem::take(&mut self.failures),
            plot: None,
        })
    }

    /// `chain`'s frames once its source made its count: every frame not
    /// sunk was dropped (and counted) or reclaimed by an audit.
    fn tally(&mut self, chain: &'static str, copy_link: bool) -> Result<Tally> {
        let (admin, count) = (self.admin.clone(), self.count);
        let made = || chainctl::status(&admin, chain).map_or(0, |s| counter(&s, "src", "made"));
        // As long as the source makes frames: faults held it back a while.
        let made_at_end = wait_while_progressing("the source's count", GUARD, count, made)?;
        if made_at_end != count {
            bail!("the source made {made_at_end} frames, not its count of {count}");
        }
        let settled = |s: &Status| {
            let t = tally_of(chain, s, 0);
            t.sunk + t.dropped + t.reclaimed >= t.made
        };
        // The audits reclaim what the dead held; frames in flight arrive.
        let _ = wait_until("every frame made sunk, dropped or reclaimed", GUARD, || {
            let _ = chainctl::audit(&admin, chain);
            chainctl::status(&admin, chain).is_ok_and(|s| settled(&s))
        });
        for n in &self.status(chain)?.nfs {
            let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
            n.threads.iter().flatten().for_each(|(k, v)| *sums.entry(k).or_default() += v);
            eprintln!("{chain}/{}: {sums:?}", n.name);
        }
        let threads = self.threads_killed.get(chain).copied().unwrap_or(0);
        let links = if copy_link { self.ferryd_kills } else { 0 };
        let bound = threads * BOUNDS.reclaim_per_nf_kill + links * BOUNDS.reclaim_per_ferryd_kill;
        Ok(tally_of(chain, &self.status(chain)?, bound))
    }
}

/// What the NFs but the sink dropped and counted: the framework's
/// `drop_*` counters, whose `drop_nf` holds the NF's own decisions (the
/// sink drops what it counted as sunk). A restarted NF's counters start
/// again: what it dropped before is then unaccounted for, and counts as
/// lost.
fn tally_of(chain: &str, s: &Status, reclaim_bound: u64) -> Tally {
    let framework = ferry_chain::shm::COUNTERS.len();
    let threads = s.nfs.iter().filter(|n| n.name != "snk").flat_map(|n| n.threads.iter());
    let counters = threads.flat_map(|t| t.iter().take(framework));
    let dropped = counters.filter(|(k, _)| k.starts_with("drop")).map(|(_, v)| v).sum();
    let (made, sunk) = (counter(s, "src", "made"), counter(s, "snk", "sunk"));
    let reclaimed = s.domains.iter().map(|d| d.reclaimed).sum();
    let lost = made.saturating_sub(sunk + dropped + reclaimed);
    Tally { chain: chain.into(), made, sunk, dropped, reclaimed, lost, reclaim_bound }
}

/// A `ferryd --persist` on `socket`, with the chains of `chains` (else
/// adopting what the last one left), its output in `ferryd.log` beside
/// the socket.
fn spawn_ferryd(socket: &Path, chains: Option<&Path>) -> Result<Child> {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(socket.with_file_name("ferryd.log"))?;
    Command::new(chainctl::ferryd_bin()?)
        .args(chains)
        .arg("--socket")
        .arg(socket)
        .args(["--persist", "--no-metrics"])
        .env("FERRY_HOST", chainctl::host_bin()?)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ferryd")
}

impl Drop for Soak {
    /// What a failed run leaves: ferryd, and every NF whose environment
    /// names this soak's socket (NFs outlive a persistent ferryd).
    fn drop(&mut self) {
        let _ = self.ferryd.kill();
        let _ = self.ferryd.wait();
        let mine = format!("FERRY_SOCKET={}", self.socket.display());
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if environ.split(|&b| b == 0).any(|v| v == mine.as_bytes()) {
                let _ = signal(pid, libc::SIGKILL);
            }
        }
    }
}
