//! Admission: who may join a chain as one of its NFs, and what an admitted
//! NF is handed (its domain's memory, rings and sockets, its taps and maps).
//!
//! The decisions are pure functions ([`identity_refusal`],
//! [`hello_refusal`]), tested below; [`Chain::admit`] gathers what they need
//! from the kernel and carries out the admission.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use ferry_bpf::flow_table::FlowTable;
use ferry_chain::plan::{NfPlan, OutLink};
use ferry_chain::proto::{self, FdRole, Msg, Welcome};
use ferry_chain::shm;
use ferry_xsk::XskSocket;

use super::{Chain, NfState};
use crate::domain::Domain;
use crate::persist::NfRecord;
use crate::spawn;

/// How ferryd knows an NF's process is the NF.
pub(super) enum Launch<'a> {
    /// ferryd starts it: only the child it started (if one runs) is it.
    ByFerryd { child: Option<u32> },
    /// It starts outside ferryd: its hello carries the key ferryd wrote to
    /// `key_path`, readable by the NF's user only.
    Outside { key_matches: bool, key_given: bool, key_path: &'a Path },
}

/// Why a process of uid `uid` and pid `pid` may not say hello as NF `name`
/// (of user `user`, uid `want_uid`), if it may not. A uid is not enough:
/// any process of that user could say hello while the NF is down and take
/// its memory.
pub(super) fn identity_refusal(
    name: &str,
    (pid, uid): (u32, u32),
    (user, want_uid): (&str, u32),
    launch: &Launch,
) -> Option<String> {
    if uid != want_uid {
        return Some(format!("peer uid {uid} is not NF {name:?}'s user ({user}, uid {want_uid})"));
    }
    match launch {
        Launch::ByFerryd { child } if *child != Some(pid) => Some(format!(
            "pid {pid} is not the process ferryd started as NF {name:?} ({}): ferryd starts this NF itself",
            child.map_or("none is running".to_string(), |c| format!("that is pid {c}"))
        )),
        Launch::Outside { key_matches: false, key_given, key_path } => Some(format!(
            "NF {name:?} is started outside ferryd, so its hello carries the key in {} (readable by its user \
             only); this one {}",
            key_path.display(),
            if *key_given { "is wrong" } else { "has none" }
        )),
        _ => None,
    }
}

/// Why the hello of an NF whose identity passed may still be refused: its
/// counters (their number and name length are bounded, as status shows
/// them), or an NF of that name already connected (as `connected_pid`).
pub(super) fn hello_refusal(name: &str, counters: &[String], connected: Option<Option<u32>>) -> Option<String> {
    if counters.len() > shm::MAX_NF_COUNTERS {
        return Some(format!("{} NF counters, at most {}", counters.len(), shm::MAX_NF_COUNTERS));
    }
    if let Some(long) = counters.iter().find(|c| c.chars().count() > proto::MAX_ECHOED) {
        return Some(format!("counter name {} is over {} characters", proto::echoed(long), proto::MAX_ECHOED));
    }
    connected.map(|pid| format!("NF {name:?} is already connected (pid {pid:?})"))
}

/// The fds an admitted NF is handed, each with its role, in the order the
/// welcome lists them.
#[derive(Default)]
struct Handed {
    roles: Vec<FdRole>,
    fds: Vec<RawFd>,
}

impl Handed {
    fn push(&mut self, role: FdRole, fd: RawFd) {
        self.roles.push(role);
        self.fds.push(fd);
    }

    /// The domain's UMEM, region and rings.
    fn domain(&mut self, dom: &Domain) {
        self.push(FdRole::Umem, dom.umem.as_fd().as_raw_fd());
        self.push(FdRole::Region, dom.region.fd().as_raw_fd());
        for r in 0..dom.plan.rings {
            self.push(FdRole::RingData(r), dom.data[r as usize].as_fd().as_raw_fd());
            self.push(FdRole::RingRoom(r), dom.room[r as usize].as_fd().as_raw_fd());
        }
    }
}

impl Chain {
    /// Checks who an NF is, creates its sockets and sends it everything it
    /// needs.
    pub fn admit(
        &self,
        stream: &UnixStream,
        name: &str,
        _claimed_pid: u32,
        counters: Vec<String>,
        key: &str,
    ) -> Result<usize> {
        let i = self
            .plan
            .nf_index(name)
            .ok_or_else(|| anyhow!("no NF {} in chain {:?}", proto::echoed(name), self.plan.name))?;
        let nf = &self.plan.nfs[i];
        let (pid, uid, _) = spawn::peer_cred(stream)?;
        let mut st = self.nfs[i].lock().expect("nf lock");
        self.check_hello(i, (pid, uid), &st, key, &counters)?;
        let dom = &self.domains[nf.domain];
        let sockets = self.open_sockets(nf)?;
        let maps = self.control_maps(name, nf)?;
        let flow_table = self.flow_tables[i].as_ref().map(FlowTable::fd).transpose()?;
        let mut handed = Handed::default();
        handed.domain(dom);
        for (role, s) in &sockets {
            handed.push(role.clone(), s.as_raw_fd());
        }
        for o in &nf.outs {
            if let OutLink::Kernel { kernel } = o {
                handed.push(FdRole::Tap(*kernel), self.taps[*kernel].fd.as_raw_fd());
            }
        }
        for (map, fd) in &maps {
            handed.push(FdRole::Map(map.to_string()), fd.as_raw_fd());
        }
        if let Some(fd) = &flow_table {
            handed.push(FdRole::Map(ferry_bpf::flow_table::MAP_NAME.to_string()), fd.as_raw_fd());
        }
        let alert_table = self.alerts[i].as_ref().map(|a| a.table.fd()).transpose()?;
        if let Some(fd) = &alert_table {
            handed.push(FdRole::Map(ferry_bpf::alert_table::MAP_NAME.to_string()), fd.as_raw_fd());
        }
        for (path, file) in self.alerts[i].iter().flat_map(|a| &a.eve) {
            handed.push(FdRole::File(path.clone()), file.as_raw_fd());
        }
        let (pidfd, start) = self.take_on(i, pid, &mut st, &counters)?;
        let threads: Vec<(u32, u32)> = nf.threads.iter().map(|t| (t.tid, t.ring)).collect();
        dom.attach(&threads, pid, pidfd.clone(), true);
        self.welcome(stream, i, st.generation, handed)?;
        // Our copies of the sockets close here: the NF holds the only ones,
        // so its death releases them.
        drop(sockets);
        st.connected = true;
        st.pid = Some(pid);
        st.conn = stream.try_clone().ok();
        st.pidfd = Some(pidfd);
        st.start = Some(start);
        st.counters = counters;
        tracing::info!("NF {name} connected (pid {pid}, uid {uid})");
        Ok(i)
    }

    /// Refuses a hello that is not NF `i`'s (see [`identity_refusal`]), from
    /// a dumpable process, or with bad counters.
    fn check_hello(
        &self,
        i: usize,
        (pid, uid): (u32, u32),
        st: &NfState,
        key: &str,
        counters: &[String],
    ) -> Result<()> {
        let name = &self.plan.nfs[i].name;
        let key_path = proto::key_path(&self.socket, &self.plan.name, name);
        let launch = match &self.keys[i] {
            None => Launch::ByFerryd { child: st.child },
            Some(k) => Launch::Outside { key_matches: k.matches(key), key_given: !key.is_empty(), key_path: &key_path },
        };
        let want = &self.creds[i];
        if let Some(why) = identity_refusal(name, (pid, uid), (&want.shown, want.uid), &launch) {
            bail!(why);
        }
        // A dumpable NF would expose the domain's memory to every process of
        // its uid through /proc (root sees everything anyway).
        if uid != 0 && spawn::is_dumpable(pid)? {
            bail!(
                "NF {name:?} (pid {pid}) is dumpable, so any process of uid {uid} could open its fds and memory: \
                 an NF calls prctl(PR_SET_DUMPABLE, 0) before hello (ferry's SDKs do)"
            );
        }
        match hello_refusal(name, counters, st.connected.then_some(st.pid)) {
            Some(why) => bail!(why),
            None => Ok(()),
        }
    }

    /// An AF_XDP socket per (thread, port) of `nf`, registered wherever a
    /// fast path hands frames to it.
    fn open_sockets(&self, nf: &NfPlan) -> Result<Vec<(FdRole, XskSocket)>> {
        let dom = &self.domains[nf.domain];
        let mut sockets = Vec::new();
        for t in &nf.threads {
            for &p in &t.ports {
                let port = self.ports[p].as_ref().ok_or_else(|| anyhow!("port {p} not open"))?;
                let sock =
                    port.lock().expect("port lock").socket(&dom.umem, t.index, nf.poll.prefer_busy_poll.as_ref())?;
                if let Some(h) = self.hybrids.lock().expect("hybrids lock").as_mut() {
                    h.register_socket(&nf.name, &self.plan.ports[p].name, t.index, &sock)?;
                }
                // A pre-server split's port registered it already (its
                // pipeline steers there).
                if let Some(s) = self.splits.iter().find(|s| s.miss == Some(p)) {
                    let of = self.ports[s.port].as_ref().ok_or_else(|| anyhow!("port {} not open", s.port))?;
                    of.lock().expect("port lock").register_miss_socket(t.index, &sock)?;
                }
                sockets.push((FdRole::Xsk { thread: t.index, port: p }, sock));
            }
        }
        Ok(sockets)
    }

    /// A hybrid NF's control plane gets its fast path's maps.
    fn control_maps(&self, name: &str, nf: &NfPlan) -> Result<Vec<(&'static str, OwnedFd)>> {
        let hybrids = self.hybrids.lock().expect("hybrids lock");
        match (hybrids.as_ref(), self.splits.iter().find(|s| s.nf == name)) {
            (_, Some(s)) => {
                let port = self.ports[s.port].as_ref().ok_or_else(|| anyhow!("port {} not open", s.port))?;
                let kind = nf.kind.as_deref().unwrap_or_default();
                let t = ferry_evnf::types::find(kind).ok_or_else(|| anyhow!("{kind}: not a hybrid type"))?;
                let fds = port.lock().expect("port lock").split_map_fds(&ferry_evnf::types::control_maps(t))?;
                Ok(fds)
            }
            (Some(h), None) => h.map_fds(name),
            (None, None) => Ok(Vec::new()),
        }
    }

    /// Takes process `pid` on as NF `i`'s next generation: its pidfd and
    /// start time, recorded first when the chain outlives ferryd (the next
    /// ferryd must know the process before it holds anything).
    fn take_on(&self, i: usize, pid: u32, st: &mut NfState, counters: &[String]) -> Result<(Arc<OwnedFd>, u64)> {
        let pidfd = Arc::new(spawn::pidfd_open(pid).with_context(|| format!("pidfd of NF pid {pid}"))?);
        let start = crate::persist::start_time(pid).ok_or_else(|| anyhow!("NF pid {pid} is gone"))?;
        st.generation += 1;
        if self.persist.is_some() {
            let record = NfRecord {
                process: Some((pid, start)),
                generation: st.generation,
                restarts: st.restarts,
                counters: counters.to_vec(),
            };
            if let Err(e) = self.record(i, record) {
                st.generation -= 1;
                return Err(e);
            }
        }
        Ok((pidfd, start))
    }

    /// Sends NF `i` its welcome with the fds it is handed; on failure its
    /// threads are marked dead so nothing waits for them.
    fn welcome(&self, stream: &UnixStream, i: usize, generation: u64, handed: Handed) -> Result<()> {
        let nf = &self.plan.nfs[i];
        let dom = &self.domains[nf.domain];
        let welcome = Welcome {
            chain: self.plan.name.clone(),
            nf_index: i,
            nf: nf.clone(),
            domain: dom.plan.clone(),
            fds: handed.roles,
            port_rings: self.plan.ports.iter().map(|p| p.rings).collect(),
            port_rx: self.plan.ports.iter().map(|p| p.rx).collect(),
            generation,
            outlives_ferryd: self.persist.is_some(),
        };
        if let Err(e) = proto::send(stream, &Msg::Welcome(Box::new(welcome)), &handed.fds) {
            for t in &nf.threads {
                dom.block(t.tid).set(shm::T_STATE, shm::STATE_DEAD);
            }
            return Err(e.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{hello_refusal, identity_refusal, Launch};

    const USER: (&str, u32) = ("fw (allocated)", 64_001);

    #[test]
    fn only_the_child_ferryd_started_is_its_nf() {
        let started = Launch::ByFerryd { child: Some(42) };
        assert_eq!(identity_refusal("fw", (42, 64_001), USER, &started), None);
        let other = identity_refusal("fw", (43, 64_001), USER, &started).unwrap();
        assert!(other.contains("pid 43 is not the process") && other.contains("that is pid 42"), "{other}");
        let none = identity_refusal("fw", (43, 64_001), USER, &Launch::ByFerryd { child: None }).unwrap();
        assert!(none.contains("none is running"), "{none}");
    }

    #[test]
    fn the_uid_is_checked_before_anything_else() {
        let started = Launch::ByFerryd { child: Some(42) };
        let why = identity_refusal("fw", (42, 0), USER, &started).unwrap();
        assert_eq!(why, "peer uid 0 is not NF \"fw\"'s user (fw (allocated), uid 64001)");
    }

    #[test]
    fn an_nf_started_outside_needs_its_key() {
        let path = Path::new("/run/ferry/keys/c/fw");
        let ok = Launch::Outside { key_matches: true, key_given: true, key_path: path };
        assert_eq!(identity_refusal("fw", (7, 64_001), USER, &ok), None);
        let wrong = Launch::Outside { key_matches: false, key_given: true, key_path: path };
        assert!(identity_refusal("fw", (7, 64_001), USER, &wrong).unwrap().ends_with("this one is wrong"));
        let none = Launch::Outside { key_matches: false, key_given: false, key_path: path };
        let why = identity_refusal("fw", (7, 64_001), USER, &none).unwrap();
        assert!(why.contains("/run/ferry/keys/c/fw") && why.ends_with("this one has none"), "{why}");
    }

    #[test]
    fn counters_are_bounded_and_a_connected_nf_is_not_admitted_twice() {
        assert_eq!(hello_refusal("fw", &["rx".into(), "tx".into()], None), None);
        let many: Vec<String> = (0..=ferry_chain::shm::MAX_NF_COUNTERS).map(|i| format!("c{i}")).collect();
        assert!(hello_refusal("fw", &many, None).unwrap().contains("NF counters, at most"));
        let long = "x".repeat(ferry_chain::proto::MAX_ECHOED + 1);
        assert!(hello_refusal("fw", &[long], None).unwrap().contains("is over"));
        let twice = hello_refusal("fw", &[], Some(Some(9))).unwrap();
        assert_eq!(twice, "NF \"fw\" is already connected (pid Some(9))");
    }
}
