//! CPU affinity.
//!
//! A [`CpuSet`] is built before a fork, so that applying it between fork and
//! exec ([`CpuSet::apply_to`] with pid 0) allocates nothing and makes one
//! async-signal-safe system call.

use std::io;

/// A set of CPUs, as `sched_setaffinity(2)` takes it.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The set of `cpus`; numbers at or past `CPU_SETSIZE` are left out.
    pub fn of(cpus: impl IntoIterator<Item = usize>) -> CpuSet {
        // SAFETY: cpu_set_t is plain data and all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for cpu in cpus.into_iter().filter(|c| *c < libc::CPU_SETSIZE as usize) {
            // SAFETY: cpu is below CPU_SETSIZE, checked above.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        CpuSet(set)
    }

    /// The CPUs the calling thread may run on.
    pub fn allowed() -> io::Result<CpuSet> {
        let mut set = CpuSet::of([]);
        // SAFETY: a valid cpu_set_t and its size.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set.0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(set)
    }

    /// The CPUs in the set, in increasing order.
    pub fn cpus(&self) -> Vec<usize> {
        // SAFETY: CPU_ISSET reads the set for numbers below CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize).filter(|c| unsafe { libc::CPU_ISSET(*c, &self.0) }).collect()
    }

    /// Restricts task `pid` (0: the calling thread) to the set. Safe between
    /// fork and exec: one system call, no allocation.
    pub fn apply_to(&self, pid: libc::pid_t) -> io::Result<()> {
        // SAFETY: a valid cpu_set_t and its size.
        if unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &self.0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    CpuSet::of([cpu]).apply_to(0).map_err(|e| io::Error::new(e.kind(), format!("pinning to CPU {cpu}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::CpuSet;

    #[test]
    fn a_set_holds_what_it_was_built_of() {
        assert_eq!(CpuSet::of([3, 0, 7]).cpus(), vec![0, 3, 7]);
        assert_eq!(CpuSet::of([usize::MAX]).cpus(), Vec::<usize>::new());
    }

    #[test]
    fn a_thread_pinned_to_an_allowed_cpu_runs_only_there() {
        let allowed = CpuSet::allowed().unwrap().cpus();
        let last = *allowed.last().unwrap();
        std::thread::spawn(move || {
            super::pin_thread(last).unwrap();
            assert_eq!(CpuSet::allowed().unwrap().cpus(), vec![last]);
        })
        .join()
        .unwrap();
    }
}
