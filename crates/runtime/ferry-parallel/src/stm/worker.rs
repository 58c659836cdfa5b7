//! A worker's handle on the engine: runs transactions to commit, retrying
//! aborted attempts, and counts what happened.

use std::sync::Arc;

use super::abort::Abort;
use super::engine::Stm;
use super::lockstep::{Lockstep, Phase};
use super::stats::TxStats;
use super::tx::{Tx, TxBuffers};
use crate::sync::Stamp;

/// Writing commits between two refreshes of the reclamation horizon: a
/// fresh horizon costs a read of every worker's announce slot.
const DEFAULT_RECLAIM_PERIOD: u32 = 32;

/// Aborts after which the back-off stops growing (2^10 spin hints).
#[cfg(not(loom))]
const MAX_BACKOFF_SHIFT: u32 = 10;

/// One worker thread's access to an [`Stm`]. Not shareable: a worker runs
/// one transaction at a time.
pub struct Worker<'a> {
    stm: &'a Stm,
    index: usize,
    buffers: Option<TxBuffers<'a>>,
    stats: TxStats,
    horizon: u64,
    /// Attempts started so far (numbers them for [`Tx::attempt`]).
    attempts: u64,
    reclaim_period: u32,
    commits_since_horizon: u32,
    #[cfg_attr(loom, allow(dead_code))]
    backoff_state: u64,
    /// Turns to take with the other workers, in a lockstep run.
    lockstep: Option<Arc<Lockstep>>,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(stm: &'a Stm, index: usize) -> Worker<'a> {
        Worker {
            stm,
            index,
            buffers: Some(TxBuffers::new(index)),
            stats: TxStats::default(),
            horizon: 0,
            attempts: 0,
            reclaim_period: DEFAULT_RECLAIM_PERIOD,
            commits_since_horizon: DEFAULT_RECLAIM_PERIOD,
            backoff_state: 0x2545_f491_4f6c_dd1d ^ (index as u64 + 1),
            lockstep: None,
        }
    }

    /// Takes turns with the other workers from now on: each attempt's body
    /// and its commit wait for this worker's turn ([`Lockstep`]).
    pub fn set_lockstep(&mut self, lockstep: Arc<Lockstep>) {
        self.lockstep = Some(lockstep);
    }

    fn wait_turn(&self, phase: Phase) {
        if let Some(lockstep) = &self.lockstep {
            lockstep.wait_turn(self.index, phase);
        }
    }

    fn end_body_turn(&self) {
        if let Some(lockstep) = &self.lockstep {
            lockstep.end_body_turn();
        }
    }

    fn end_commit_turn(&self, committed: bool) {
        if let Some(lockstep) = &self.lockstep {
            lockstep.end_commit_turn(committed);
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn stm(&self) -> &'a Stm {
        self.stm
    }

    /// Runs `body` as one transaction at time `now_ns` until it commits and
    /// returns its result. An attempt that aborts (a data-structure call
    /// returned [`Abort`], or the commit failed) is discarded, counted and
    /// re-run from the start after a randomised back-off, so `body` must
    /// keep its side effects (output packets) in buffers it resets at its
    /// start and releases only after this returns.
    ///
    /// No starvation guarantee (as in NFOS): a transaction that keeps
    /// losing on a hot object retries until it wins; the profiler shows
    /// such objects and their recipes.
    pub fn atomically<R>(&mut self, now_ns: u64, mut body: impl FnMut(&mut Tx<'a>) -> Result<R, Abort>) -> R {
        let mut aborts = 0u32;
        loop {
            match self.attempt(now_ns, &mut body) {
                Ok(value) => {
                    self.stats.max_retries = self.stats.max_retries.max(aborts);
                    return value;
                }
                Err(abort) => {
                    self.stats.record_abort(&abort);
                    aborts = aborts.saturating_add(1);
                    self.back_off(aborts);
                }
            }
        }
    }

    /// Runs `body` once: its result if it committed, the abort otherwise.
    /// For callers that want their own retry policy.
    pub fn try_once<R>(
        &mut self,
        now_ns: u64,
        mut body: impl FnMut(&mut Tx<'a>) -> Result<R, Abort>,
    ) -> Result<R, Abort> {
        let result = self.attempt(now_ns, &mut body);
        if let Err(abort) = &result {
            self.stats.record_abort(abort);
        }
        result
    }

    fn attempt<R>(&mut self, now_ns: u64, body: &mut impl FnMut(&mut Tx<'a>) -> Result<R, Abort>) -> Result<R, Abort> {
        let buffers = self.buffers.take().unwrap_or_else(|| TxBuffers::new(self.index));
        if self.commits_since_horizon >= self.reclaim_period {
            self.horizon = self.stm.horizon();
            self.commits_since_horizon = 0;
        }
        // Clock reads: one here, two around a writing commit, one more if
        // the body aborts; none per access.
        self.wait_turn(Phase::Body);
        let began = Stamp::now();
        self.attempts += 1;
        let mut tx = Tx::begin(self.stm, self.index, self.attempts, now_ns, buffers);
        let begun = Stamp::now();
        let mut ended = None;
        let body_result = body(&mut tx);
        self.end_body_turn();
        // An attempt whose body aborted takes its commit turn too, so the
        // order of turns does not depend on what the bodies did.
        self.wait_turn(Phase::Commit);
        let result = body_result.and_then(|value| {
            if tx.is_read_only() {
                // Nothing to lock, validate or install.
                return tx.commit(self.horizon).map(|()| value);
            }
            let committing = Stamp::now();
            let committed = tx.commit(self.horizon);
            let done = Stamp::now();
            self.stats.commit_ns += committing.nanos_until(done);
            ended = Some(done);
            committed.map(|()| value)
        });
        // When it aborted: at the end of a failed commit, else now.
        let aborted_at = result.is_err().then(|| ended.unwrap_or_else(Stamp::now));
        if result.is_ok() {
            tx.run_commit_hooks();
        }
        self.end_commit_turn(result.is_ok());
        let read_only = tx.is_read_only();
        let (reads, writes) = tx.access_counts();
        let access_ns = tx.sampled_access_ns();
        self.buffers = Some(tx.finish());
        self.stats.reads += reads;
        self.stats.writes += writes;
        match &result {
            Ok(_) => {
                // An aborted attempt's time is all in `aborted_ns`.
                self.stats.begin_ns += began.nanos_until(begun);
                self.stats.access_ns += access_ns;
                self.stats.commits += 1;
                if read_only {
                    self.stats.read_only_commits += 1;
                } else {
                    self.commits_since_horizon += 1;
                }
            }
            Err(_) => self.stats.aborted_ns += aborted_at.map_or(0, |at| began.nanos_until(at)),
        }
        result
    }

    /// Spins a random number of hints, up to 2^aborts, so two transactions
    /// that keep colliding drift apart.
    fn back_off(&mut self, aborts: u32) {
        #[cfg(loom)]
        {
            // Model checking explores every interleaving anyway; spinning
            // would only multiply the schedules.
            let _ = aborts;
        }
        #[cfg(not(loom))]
        {
            // xorshift64: cheap, and per-worker seeds keep workers apart.
            let mut x = self.backoff_state;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.backoff_state = x;
            let limit = 1u64 << aborts.min(MAX_BACKOFF_SHIFT);
            for _ in 0..(x % limit) {
                crate::sync::spin_hint();
            }
        }
    }

    /// Refreshes the reclamation horizon every `commits` writing commits
    /// (1 reclaims as eagerly as possible; tests use it).
    pub fn set_reclaim_period(&mut self, commits: u32) {
        self.reclaim_period = commits.max(1);
        self.commits_since_horizon = self.reclaim_period;
    }

    pub fn stats(&self) -> &TxStats {
        &self.stats
    }

    /// Returns the counts so far and starts new ones.
    pub fn take_stats(&mut self) -> TxStats {
        std::mem::take(&mut self.stats)
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        self.stm.release_worker(self.index);
    }
}
