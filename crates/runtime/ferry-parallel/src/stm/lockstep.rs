//! A fixed interleaving of the workers' transactions, for runs whose
//! conflicts must not depend on timing: the profiler's tests, and profiles
//! that must come out the same on every machine.
//!
//! Free-running workers conflict only when their transactions happen to
//! overlap, and how often they overlap is up to the OS scheduler: on a
//! loaded machine they may hardly overlap at all, so the same NF shows a
//! different abort rate, and sometimes a different top cause, run to run.
//!
//! A transaction touches other workers at one point only, its commit
//! (reads leave no trace; writes are private until then, see the module
//! above). Under a [`Lockstep`] the run proceeds in rounds, and in each
//! round every running worker commits exactly one transaction. A round
//! starts with every worker doing the body of its attempt (begin, reads,
//! buffered writes), one worker at a time; then the workers try to commit,
//! one at a time, in the same order. Those whose commit failed try again in
//! the same way, among themselves, until each has committed (the first
//! committer of such a retry never fails: nobody committed after its
//! body). So every pair of transactions in a round overlaps, the most
//! contention the NF's sharing can produce; workers stay aligned (round `k`
//! runs every worker's `k`-th transaction, whatever aborted before); and
//! the run, aborts included, is a function of the input alone. The worker
//! that goes first rotates from round to round, so none always wins.
//!
//! Workers take turns, so a lockstep run measures contention, never speed.

use std::sync::{Condvar, Mutex, MutexGuard};

/// The two halves of a transaction attempt that take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Begin, run the body (reads and buffered writes).
    Body,
    /// Validate and install, or find the attempt aborted.
    Commit,
}

/// The turn-taking shared by the workers of one run. Each worker's
/// [`super::Worker`] takes its turns through it; a worker with no more
/// transactions to run must [`Lockstep::leave`] (see [`LeaveOnDrop`]), or
/// the others wait for it forever.
pub struct Lockstep {
    state: Mutex<Turns>,
    turn_changed: Condvar,
}

/// Invariant: while any worker takes part in the round (running, and not
/// yet committed in it), the current step belongs to one that does.
struct Turns {
    /// Rotates the order: worker `round % n` goes first.
    round: usize,
    /// `0..n` are the bodies, `n..2n` the commits, in round order, where
    /// `n` is the number of workers.
    step: usize,
    running: Vec<bool>,
    /// Workers still to commit in this round.
    pending: Vec<bool>,
}

impl Turns {
    fn workers(&self) -> usize {
        self.running.len()
    }

    /// Whose turn it is, and for what.
    fn current(&self) -> (Phase, usize) {
        let n = self.workers();
        let phase = if self.step < n { Phase::Body } else { Phase::Commit };
        (phase, (self.round + self.step % n) % n)
    }

    fn takes_part(&self, worker: usize) -> bool {
        self.running[worker] && self.pending[worker]
    }

    /// Moves to the next step of a worker that takes part: on past the
    /// commits to the retries of those that did not commit, or to the next
    /// round once all have. Stays put when no worker is running.
    fn advance(&mut self) {
        let n = self.workers();
        if !self.running.iter().any(|r| *r) {
            return;
        }
        loop {
            self.step += 1;
            if self.step == 2 * n {
                self.step = 0;
                if !(0..n).any(|w| self.takes_part(w)) {
                    self.round += 1;
                    self.pending.clone_from(&self.running);
                }
            }
            if self.takes_part(self.current().1) {
                return;
            }
        }
    }
}

impl Lockstep {
    /// Turns for `workers` workers, all running, worker 0's body first.
    pub fn new(workers: usize) -> Lockstep {
        let n = workers.max(1);
        Lockstep {
            state: Mutex::new(Turns { round: 0, step: 0, running: vec![true; n], pending: vec![true; n] }),
            turn_changed: Condvar::new(),
        }
    }

    fn turns(&self) -> MutexGuard<'_, Turns> {
        // A worker that panicked while holding the lock left the turns
        // consistent: every change is a few plain assignments.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Blocks until it is `worker`'s turn for `phase`.
    pub(crate) fn wait_turn(&self, worker: usize, phase: Phase) {
        let mut turns = self.turns();
        while turns.current() != (phase, worker) {
            turns = self.turn_changed.wait(turns).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Ends the body turn of the worker whose turn it is.
    pub(crate) fn end_body_turn(&self) {
        self.turns().advance();
        self.turn_changed.notify_all();
    }

    /// Ends the commit turn of the worker whose turn it is; one that did
    /// not commit tries again before the round ends.
    pub(crate) fn end_commit_turn(&self, committed: bool) {
        let mut turns = self.turns();
        if committed {
            let worker = turns.current().1;
            turns.pending[worker] = false;
        }
        turns.advance();
        drop(turns);
        self.turn_changed.notify_all();
    }

    /// `worker` runs no more transactions: its turns are skipped from now
    /// on (and the current one, if it is the worker's).
    pub fn leave(&self, worker: usize) {
        let mut turns = self.turns();
        if let Some(running) = turns.running.get_mut(worker) {
            *running = false;
        }
        let current = turns.current().1;
        if !turns.takes_part(current) {
            turns.advance();
        }
        drop(turns);
        self.turn_changed.notify_all();
    }
}

/// Makes a worker leave the turns when it goes out of scope, however its
/// thread ends (a panicking worker must not hold up the others forever).
pub struct LeaveOnDrop<'a> {
    pub lockstep: &'a Lockstep,
    pub worker: usize,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        self.lockstep.leave(self.worker);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    /// Runs `plan[w]` on worker `w` (a commit result per transaction
    /// attempt) and returns the order in which the steps ran.
    fn run(plan: Vec<Vec<bool>>) -> Vec<(Phase, usize)> {
        let lockstep = Arc::new(Lockstep::new(plan.len()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = plan
            .into_iter()
            .enumerate()
            .map(|(worker, attempts)| {
                let (lockstep, log) = (Arc::clone(&lockstep), Arc::clone(&log));
                thread::spawn(move || {
                    let _leave = LeaveOnDrop { lockstep: &lockstep, worker };
                    for committed in attempts {
                        lockstep.wait_turn(worker, Phase::Body);
                        log.lock().unwrap().push((Phase::Body, worker));
                        lockstep.end_body_turn();
                        lockstep.wait_turn(worker, Phase::Commit);
                        log.lock().unwrap().push((Phase::Commit, worker));
                        lockstep.end_commit_turn(committed);
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner().unwrap()
    }

    use Phase::{Body, Commit};

    #[test]
    fn rounds_rotate_and_skip_workers_that_left() {
        // Worker 0 commits 3 transactions, worker 1 one.
        let order = run(vec![vec![true; 3], vec![true]]);
        #[rustfmt::skip]
        let expected = vec![
            // Round 0: worker 0 first.
            (Body, 0), (Body, 1), (Commit, 0), (Commit, 1),
            // Rounds 1 and 2: worker 1 would go first in round 1, but it
            // has left.
            (Body, 0), (Commit, 0),
            (Body, 0), (Commit, 0),
        ];
        assert_eq!(order, expected);
    }

    #[test]
    fn a_worker_that_did_not_commit_retries_within_the_round() {
        // Round 0: worker 1's commit fails, its retry commits. Round 1
        // (worker 1 first): worker 0's commit fails, its retry commits.
        let order = run(vec![vec![true, false, true], vec![false, true, true]]);
        #[rustfmt::skip]
        let expected = vec![
            (Body, 0), (Body, 1), (Commit, 0), (Commit, 1),
            (Body, 1), (Commit, 1),
            (Body, 1), (Body, 0), (Commit, 1), (Commit, 0),
            (Body, 0), (Commit, 0),
        ];
        assert_eq!(order, expected);
    }

    #[test]
    fn a_worker_leaving_during_its_turn_passes_the_turn_on() {
        let lockstep = Lockstep::new(2);
        // Worker 0's body is current; it leaves without taking it.
        lockstep.leave(0);
        assert_eq!(lockstep.turns().current(), (Phase::Body, 1));
        lockstep.leave(1);
        // Nobody left: the turns stay put instead of spinning.
        assert_eq!(lockstep.turns().current(), (Phase::Body, 1));
    }
}
