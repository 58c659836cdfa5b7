//! One ferryd, many chains: chains deployed and removed at run time over
//! the admin socket, without disturbing the chains already running.

mod common;

use std::path::Path;

use common::chain::*;
use common::*;
use ferry_chain::proto::{self, Msg, Status};
use ferry_cli::chainctl;

/// src -> mid -> snk in memory, named `name`, src at `rate` pps.
fn memory_chain(name: &str, rate: u64) -> String {
    format!(
        r#"
name: {name}
domains: [ {{ name: main, frames: 2048, ring_size: 512 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate={rate}"] }}
  - {{ name: mid, domain: main, kind: fwd }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: mid }}
  - {{ from: mid, to: snk }}
"#
    )
}

/// Counters that mean a frame was lost on the way (the sink frees what it
/// sinks through `drop_nf`, so that one counts only for the others).
fn losses(s: &Status) -> Vec<String> {
    let mut out = Vec::new();
    for n in &s.nfs {
        for (k, v) in n.threads.iter().flatten() {
            let lossy = k.starts_with("drop_") && !(n.name == "snk" && k == "drop_nf");
            if lossy && *v > 0 {
                out.push(format!("{}.{k}={v}", n.name));
            }
        }
    }
    out
}

fn write(dir: &TempDir, file: &str, text: &str) -> std::path::PathBuf {
    let p = dir.path(file);
    std::fs::write(&p, text).unwrap();
    p
}

/// Chain `b` is deployed next to the running chain `a`, carries traffic,
/// and is removed, ten times over, while `a` runs at 200 kpps: `a` loses
/// nothing (no drop counter moves, nobody restarts, its audit is
/// conserved). ferryd assigns every chain and NF its own id.
#[test]
fn chains_deploy_and_remove_without_disturbing_the_others() {
    if !privileged("deploy_remove") {
        return;
    }
    let dir = TempDir::new("deploy");
    let (rc, _) = start(&dir, &memory_chain("a", 200_000));
    wait_until("traffic in chain a", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 1000));
    let b_file = write(&dir, "b.yaml", &memory_chain("b", 100_000));
    let mut chain_ids = vec![rc.status().unwrap().id];
    let mut nf_ids: Vec<u32> = rc.status().unwrap().nfs.iter().map(|n| n.id).collect();
    for round in 1..=10 {
        let deployed = chainctl::deploy(&rc.admin, &b_file).expect("deploy b");
        assert_eq!((deployed.name.as_str(), deployed.nfs), ("b", 3));
        let b = wait_for("chain b connected and carrying traffic", || {
            chainctl::status(&rc.admin, "b")
                .ok()
                .filter(|s| s.nfs.iter().all(|n| n.connected) && c(s, "snk", "sunk") > 0)
        });
        assert_eq!(b.id, deployed.id);
        // Its NFs outlive the admin connection that deployed them.
        let b = chainctl::status(&rc.admin, "b").unwrap();
        assert!(b.nfs.iter().all(|n| n.connected && n.restarts == 0), "round {round}: b's NFs restarted: {b:?}");
        chain_ids.push(b.id);
        nf_ids.extend(b.nfs.iter().map(|n| n.id));
        let names: Vec<String> = chainctl::list(&rc.admin).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["a", "b"], "round {round}");
        let sunk = c(&rc.status().unwrap(), "snk", "sunk");
        chainctl::remove(&rc.admin, "b").expect("remove b");
        let names: Vec<String> = chainctl::list(&rc.admin).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["a"], "round {round}");
        wait_until("chain a still flowing", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > sunk + 1000));
    }
    let a = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&a));
    assert!(losses(&a).is_empty(), "chain a lost frames: {:?}", losses(&a));
    assert!(a.nfs.iter().all(|n| n.connected && n.restarts == 0), "chain a undisturbed: {a:?}");
    assert_conserved(&rc);
    let mut unique = chain_ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 11, "a new id per deployment: {chain_ids:?}");
    let mut nfs = nf_ids.clone();
    nfs.sort_unstable();
    nfs.dedup();
    assert_eq!(nfs.len(), 33, "a new id per NF: {nf_ids:?}");
    rc.shutdown().unwrap();
}

/// A deploy that cannot be done changes nothing and says why: a name
/// already deployed, a bad file (with file, line and field). The admin
/// socket is root's; the NF socket takes no admin requests.
#[test]
fn bad_deploys_are_refused_and_admin_is_root_only() {
    if !privileged("bad_deploys") {
        return;
    }
    let dir = TempDir::new("baddeploy");
    let (rc, chain) = start(&dir, &memory_chain("a", 1000));
    let e = chainctl::deploy(&rc.admin, &chain).unwrap_err().to_string();
    assert!(e.contains("chain \"a\" is already deployed (id 1)"), "{e}");
    let bad = write(&dir, "bad.yaml", &memory_chain("c", 1000).replace("kind: fwd", "kind: forward"));
    let e = format!("{:#}", chainctl::deploy(&rc.admin, &bad).unwrap_err());
    assert!(
        e.contains(&format!("{}:6:", bad.display())) && e.contains("nfs[1].kind: unknown NF type \"forward\""),
        "{e}"
    );
    let names: Vec<String> = chainctl::list(&rc.admin).unwrap().into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["a"]);
    let e = chainctl::remove(&rc.admin, "nosuch").unwrap_err().to_string();
    assert!(e.contains("no chain \"nosuch\" (deployed: a)"), "{e}");

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&rc.admin).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the admin socket is root's alone");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", FERRY, "chain", "list", "--admin"])
        .arg(&rc.admin)
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("Permission denied"), "uid 65534 listed chains: {err}");
    match proto::request(Path::new(&rc.socket), &Msg::List) {
        Ok(Msg::Error { message }) => assert!(message.contains("on the NF socket"), "{message}"),
        other => panic!("the NF socket answered an admin request: {other:?}"),
    }
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

/// `cpus:` pins an NF's process: ferryd sets the affinity when it starts
/// it (the kernel shows it in /proc), and settles smart polling by the
/// threads that share each NF's CPUs. A CPU the machine does not have is
/// refused at deploy, naming the NF.
#[test]
fn cpus_pin_an_nf_process() {
    if !privileged("cpus") {
        return;
    }
    let dir = TempDir::new("cpus");
    let pinned = memory_chain("pinned", 10_000).replace("kind: source,", "kind: source, cpus: [0],");
    let (rc, _) = start(&dir, &pinned);
    let st = rc.status().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid_of(&st, "src"))).unwrap();
    let allowed = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    assert_eq!(allowed.split_whitespace().nth(1), Some("0"), "{allowed}");
    // Smart polling is settled by threads per CPU: src's one CPU carries
    // three chain threads (its own and the unpinned mid and snk), so it
    // blocks after 3 empty polls; mid and snk may use every CPU ferryd
    // may, and are limited only if those are fewer than 3.
    let idle_polls = |name: &str| st.nfs.iter().find(|n| n.name == name).unwrap().poll.idle_polls;
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(idle_polls("src"), Some(3));
    for nf in ["mid", "snk"] {
        assert_eq!(idle_polls(nf), (cpus < 3).then_some(3), "{nf} with {cpus} CPUs");
    }
    let bad = write(&dir, "bad.yaml", &memory_chain("bad", 10).replace("kind: sink", "kind: sink, cpus: [1023]"));
    let err = chainctl::deploy(&rc.admin, &bad).unwrap_err().to_string();
    assert!(err.contains("NF snk: cpus: [1023] not online"), "{err}");
    rc.shutdown().unwrap();
}
