//! ferryd under faults and hostile neighbours: several NFs of one domain
//! killed at once (with audits running), impostors with an NF's uid, NFs
//! started outside ferryd proving themselves with their key.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::chain::*;
use common::*;
use ferry_chain::proto::{self, Status};
use ferry_cli::chainctl::{self, RunningChain};

/// src -> f1 -> f2 -> f3 -> snk in one domain, src at 300 kpps.
const FIVE_NF_CHAIN: &str = r#"
name: deaths
domains: [ { name: main, frames: 4096, ring_size: 512 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["rate=300000"] }
  - { name: f1, domain: main, kind: fwd }
  - { name: f2, domain: main, kind: fwd }
  - { name: f3, domain: main, kind: fwd }
  - { name: snk, domain: main, kind: sink }
links:
  - { from: src, to: f1 }
  - { from: f1, to: f2 }
  - { from: f2, to: f3 }
  - { from: f3, to: snk }
"#;

const NFS: [&str; 5] = ["src", "f1", "f2", "f3", "snk"];

/// Every `k`-subset of the five NFs, in a fixed order.
fn subsets(k: usize) -> Vec<Vec<&'static str>> {
    (0u32..32)
        .filter(|m| m.count_ones() as usize == k)
        .map(|m| (0..5).filter(|i| m & (1 << i) != 0).map(|i| NFS[i]).collect())
        .collect()
}

fn nf<'a>(s: &'a Status, name: &str) -> &'a proto::NfStatus {
    s.nfs.iter().find(|n| n.name == name).unwrap_or_else(|| panic!("no NF {name}"))
}

struct Round {
    killed: Vec<&'static str>,
    reclaimed: u64,
    lost: u64,
    duplicated: u64,
}

/// Kills `victims` at once (SIGKILL, back to back) and waits until each
/// was restarted and traffic flows through the whole chain again; checks
/// that each victim restarted exactly once and nobody else did.
fn kill_together(rc: &RunningChain, victims: &[&'static str]) -> Round {
    let before = rc.status().unwrap();
    let restarts: BTreeMap<&str, u32> = NFS.iter().map(|&n| (n, nf(&before, n).restarts)).collect();
    let pids: Vec<u32> = victims.iter().map(|v| pid_of(&before, v)).collect();
    for &pid in &pids {
        // SAFETY: plain kill of an NF process ferryd started.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    }
    wait_until(&format!("{victims:?} restarted"), || {
        rc.status().is_ok_and(|s| {
            victims.iter().zip(&pids).all(|(v, &old)| {
                let n = nf(&s, v);
                n.connected && n.pid != Some(old) && n.restarts == restarts[v] + 1
            })
        })
    });
    let resumed = c(&rc.status().unwrap(), "snk", "sunk");
    wait_until("traffic through the chain after the restarts", || {
        rc.status().is_ok_and(|s| c(&s, "snk", "sunk") >= resumed + 1000)
    });
    let after = rc.status().unwrap();
    for n in NFS {
        let want = restarts[n] + u32::from(victims.contains(&n));
        assert_eq!(nf(&after, n).restarts, want, "{n} restarts after killing {victims:?}");
        assert!(nf(&after, n).connected, "{n} connected after killing {victims:?}");
    }
    let (d0, d1) = (&before.domains[0], &after.domains[0]);
    Round {
        killed: victims.to_vec(),
        reclaimed: d1.reclaimed - d0.reclaimed,
        lost: d1.lost - d0.lost,
        duplicated: d1.duplicated - d0.duplicated,
    }
}

/// FLASH's monitor must survive any number of NFs dying together: every
/// audit sees the dead threads (not only the one whose connection closed
/// first), reclaims all their frames, and resets their rings before any of
/// them restarts. 20 rounds of 2 NFs and 20 of 3, under load, while a
/// thread keeps asking for audits; every audit must find every frame in
/// exactly one place.
#[test]
fn nfs_killed_together_lose_no_frame_and_each_restarts_once() {
    if !privileged("killed_together") {
        return;
    }
    let dir = TempDir::new("deaths");
    let (rc, _) = start(&dir, FIVE_NF_CHAIN);
    wait_until("traffic at the sink", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 1000));
    // Pairs: each death is found by the recovery of the NFs whose
    // connections closed.
    let mut rounds: Vec<Round> = subsets(2).iter().cycle().take(20).map(|v| kill_together(&rc, v)).collect();
    // Triples, with audits racing the deaths and the restarts: each round
    // waits until an audit began after its kill, so every round has one
    // (an event, not a share of the run).
    let stop = AtomicBool::new(false);
    let audits = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let auditor = scope.spawn(|| {
            let mut answered = 0u64;
            while !stop.load(Ordering::Relaxed) {
                audits.fetch_add(1, Ordering::AcqRel);
                for r in chainctl::audit(&rc.admin, &rc.name).expect("audit") {
                    // One a live thread did not answer in time checked nothing.
                    if r.unresponsive.is_empty() {
                        answered += 1;
                        assert!(r.conserved(), "an audit during the kills: {r:?}");
                    }
                }
            }
            answered
        });
        for victims in subsets(3).iter().cycle().take(20) {
            let before = audits.load(Ordering::Acquire);
            rounds.push(kill_together(&rc, victims));
            wait_until("an audit begun during the round", || audits.load(Ordering::Acquire) > before);
        }
        stop.store(true, Ordering::Relaxed);
        let answered = auditor.join().expect("auditor");
        let audits = audits.load(Ordering::Acquire);
        eprintln!("{audits} audits ran during the 3-NF rounds, {answered} with every live thread answering");
    });
    eprintln!("round  killed           reclaimed  lost  duplicated");
    for (i, r) in rounds.iter().enumerate() {
        eprintln!("{:>5}  {:<16} {:>9}  {:>4}  {:>10}", i + 1, r.killed.join(","), r.reclaimed, r.lost, r.duplicated);
    }
    for (i, r) in rounds.iter().enumerate() {
        assert_eq!((r.lost, r.duplicated), (0, 0), "round {}: {:?} killed", i + 1, r.killed);
    }
    // How many frames the dead held depends on where they were (a sleeping
    // NF holds none), so `reclaimed` is reported, not asserted; that
    // every frame is somewhere is.
    assert_conserved(&rc);
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert_eq!(st.domains[0].lost + st.domains[0].duplicated, 0);
    rc.shutdown().unwrap();
}

/// An impostor's attempt to be NF `nf` (chain, name): it must be refused
/// (exit with an error naming `why`), which takes no time; one admitted
/// would run on and fail the test at the hang guard.
fn assert_impostor_refused(socket: &Path, nf: (&str, &str), uid: u32, env: &[(&str, &str)], why: &str) {
    let done = nf_process(socket, nf, uid, env).finish(HANG_GUARD);
    assert!(
        !done.status.success() && done.stderr.contains(why),
        "impostor as {nf:?}: {}\n{}",
        done.status,
        done.stderr
    );
}

fn uid_of(s: &Status, name: &str) -> u32 {
    nf(s, name).uid.expect("status shows the NF's uid")
}

/// A process with exactly an NF's uid cannot take the NF's place: ferryd
/// admits, as an NF it starts, only the pid it started (and has not yet
/// reaped), whether the NF runs, is being restarted, or is dead for good.
#[test]
fn an_impostor_with_the_nf_uid_is_refused_running_restarting_or_dead() {
    if !privileged("impostor") {
        return;
    }
    let dir = TempDir::new("impostor");
    let yaml = r#"
name: impostor
domains: [ { name: main, frames: 4096, ring_size: 512 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["rate=100000"] }
  - { name: aux, domain: main, kind: fwd }
  - { name: mid, domain: main, kind: fwd, restart: false }
  - { name: snk, domain: main, kind: sink }
links:
  - { from: src, to: aux }
  - { from: aux, to: mid }
  - { from: mid, to: snk }
"#;
    let (rc, _) = start(&dir, yaml);
    let st = rc.status().unwrap();
    let uid = uid_of(&st, "mid");
    assert_impostor_refused(
        &rc.socket,
        ("impostor", "mid"),
        uid,
        &[],
        "is not the process ferryd started as NF \"mid\"",
    );

    // While aux is killed and restarted, impostors keep saying hello as aux.
    let aux_pid = pid_of(&st, "aux");
    let stop = AtomicBool::new(false);
    let tries = std::thread::scope(|scope| {
        let hammer = scope.spawn(|| {
            let mut tries = 0;
            while !stop.load(Ordering::Relaxed) || tries < 10 {
                assert_impostor_refused(&rc.socket, ("impostor", "aux"), uid, &[], "ferryd starts this NF itself");
                tries += 1;
            }
            tries
        });
        // SAFETY: plain kill of an NF process ferryd started.
        assert_eq!(unsafe { libc::kill(aux_pid as i32, libc::SIGKILL) }, 0);
        wait_until("aux restarted", || {
            rc.status().is_ok_and(|s| nf(&s, "aux").connected && nf(&s, "aux").pid != Some(aux_pid))
        });
        stop.store(true, Ordering::Relaxed);
        hammer.join().expect("impostor loop")
    });
    let st = rc.status().unwrap();
    assert_eq!(nf(&st, "aux").restarts, 1, "the real aux restarted once, impostors notwithstanding");
    eprintln!("{tries} impostor hellos as aux around its restart, all refused");
    let sunk = c(&st, "snk", "sunk");
    wait_until("traffic through the restarted aux", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > sunk + 1000));

    // mid dies for good (restart: false): its slot stays empty.
    let mid_pid = pid_of(&st, "mid");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(mid_pid as i32, libc::SIGKILL) }, 0);
    wait_until("mid gone", || rc.status().is_ok_and(|s| !nf(&s, "mid").connected));
    assert_impostor_refused(&rc.socket, ("impostor", "mid"), uid, &[], "none is running");
    let st = rc.status().unwrap();
    assert!(!nf(&st, "mid").connected && nf(&st, "mid").pid.is_none(), "mid stays empty: {:?}", nf(&st, "mid"));
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

/// An NF that ferryd does not start (`spawn: false`) runs as its domain's
/// allocated uid (status shows it) and proves itself with the key ferryd
/// wrote for it, which only that uid can read. Without the key, or with a
/// wrong one, it is refused; with it, it is admitted again after a death.
#[test]
fn an_nf_started_outside_ferryd_proves_itself_with_its_key() {
    if !privileged("outside_key") {
        return;
    }
    let dir = TempDir::new("keyed");
    let chain = dir.path("chain.yaml");
    std::fs::write(&chain, memory_chain_with_external_mid()).unwrap();
    let socket = dir.path("ferryd.sock");
    let mut rc = chainctl::launch(&chain, &socket, false, chainctl::Placing::AsConfigured).expect("ferryd serves");
    let st = rc.status().unwrap();
    let uid = uid_of(&st, "mid");
    assert_ne!(uid, uid_of(&st, "other"), "two domains, two uids");
    let key = proto::key_path(&socket, "keyed", "mid");
    let meta = std::fs::metadata(&key).expect("ferryd wrote mid's key");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o400), "{}", key.display());
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(&key)
        .output()
        .expect("setpriv");
    assert!(!out.status.success(), "another uid read the key");

    assert_impostor_refused(&socket, ("keyed", "mid"), uid, &[(proto::ENV_KEY, "/dev/null")], "this one has none");
    let wrong = dir.path("wrong-key");
    std::fs::write(&wrong, "0".repeat(64)).unwrap();
    std::os::unix::fs::chown(&wrong, Some(uid), Some(uid)).unwrap();
    let wrong_env = [(proto::ENV_KEY, wrong.to_str().unwrap())];
    assert_impostor_refused(&socket, ("keyed", "mid"), uid, &wrong_env, "this one is wrong");

    for life in 1..=2 {
        // The second life is not told its chain.
        let chain = if life == 1 { "keyed" } else { "" };
        let mut mid = nf_process(&socket, (chain, "mid"), uid, &[]);
        rc.wait_connected(HANG_GUARD).expect("mid connects with its key");
        let sunk = c(&rc.status().unwrap(), "snk", "sunk");
        wait_until("traffic through the external mid", || {
            rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > sunk + 1000)
        });
        assert!(mid.running());
        // SAFETY: plain kill of our own child.
        assert_eq!(unsafe { libc::kill(mid.pid(), libc::SIGKILL) }, 0);
        drop(mid);
        wait_until("mid gone", || rc.status().is_ok_and(|s| !nf(&s, "mid").connected));
        assert_impostor_refused(&socket, ("keyed", "mid"), uid, &wrong_env, "this one is wrong");
        eprintln!("external mid life {life}: admitted with its key, killed, impostor refused");
    }
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

fn memory_chain_with_external_mid() -> String {
    r#"
name: keyed
domains: [ { name: main, frames: 4096, ring_size: 512 }, { name: side, frames: 1024 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["rate=100000"] }
  - { name: mid, domain: main, spawn: false }
  - { name: snk, domain: main, kind: sink }
  - { name: other, domain: side, kind: sink }
links:
  - { from: src, to: mid }
  - { from: mid, to: snk }
"#
    .to_string()
}
