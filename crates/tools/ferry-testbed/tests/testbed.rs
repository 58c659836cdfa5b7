//! Integration tests: real namespaces and veths. They skip (or fail under
//! CI=true) without root; every testbed gets unique names, so they run in
//! parallel with each other and with other test binaries.

mod common;

use common::{example, ns_exists, ping, privileged, wait_until, HANG_GUARD};
use ferry_testbed::{TestbedError, TestbedSpec};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "FERRY_TESTBED_TEST_CHILD";

fn ping_cmd(tb: &ferry_testbed::Testbed, ns: &str, addr: &str) -> bool {
    ping(|| tb.exec(ns, "ping", ["-c", "1", "-W", "5", addr]))
}

#[test]
fn two_hosts_ping_then_drop_removes_everything() {
    if !privileged() {
        return;
    }
    let spec = ferry_testbed::parse(&example("two-hosts.yaml")).unwrap();
    let tb = ferry_testbed::up(&spec).unwrap();
    let (client, server) = (tb.ns_name("client").to_string(), tb.ns_name("server").to_string());
    assert!(client.starts_with(tb.instance()) && client.ends_with("-client"));
    assert!(ns_exists(&client) && ns_exists(&server));

    assert!(ping_cmd(&tb, "client", "10.0.1.2"), "IPv4 ping client -> server");
    assert!(ping_cmd(&tb, "server", "fd00:1::1"), "IPv6 ping server -> client");

    assert_eq!(tb.mac("client", "c0").unwrap().to_string(), "02:00:00:00:01:01");
    assert!(tb.ifindex("server", "s0").unwrap() > 1);
    // Two queues each way, seen from inside the namespace.
    let out = tb.exec("client", "ls", ["/sys/class/net/c0/queues"]).output().unwrap();
    let queues = String::from_utf8_lossy(&out.stdout);
    assert_eq!(queues.split_whitespace().count(), 4, "queues: {queues}");
    // Nothing in the root namespace.
    let root = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let root = String::from_utf8_lossy(&root.stdout);
    assert!(!root.contains(" c0@") && !root.contains(" s0@"), "{root}");

    drop(tb);
    assert!(!ns_exists(&client) && !ns_exists(&server), "drop must delete namespaces");
}

#[test]
fn chain_forwards_through_dut() {
    if !privileged() {
        return;
    }
    let spec = ferry_testbed::parse(&example("chain.yaml")).unwrap();
    let tb = ferry_testbed::up(&spec).unwrap();
    assert!(ping_cmd(&tb, "client", "10.0.2.2"), "client -> server via dut");
    let names: Vec<String> = tb.namespaces().values().cloned().collect();
    assert_eq!(names.len(), 3);
    tb.down().unwrap();
    assert!(names.iter().all(|n| !ns_exists(n)));
}

#[test]
fn same_file_twice_in_parallel_gets_unique_names() {
    if !privileged() {
        return;
    }
    let spec = ferry_testbed::parse(&example("two-hosts.yaml")).unwrap();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let spec = spec.clone();
            std::thread::spawn(move || {
                let tb = ferry_testbed::up(&spec).unwrap();
                assert!(ping_cmd(&tb, "client", "10.0.1.2"));
                tb
            })
        })
        .collect();
    let tbs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_ne!(tbs[0].ns_name("client"), tbs[1].ns_name("client"));
    // Both still up at the same time, same device names inside.
    assert!(ping_cmd(&tbs[0], "client", "10.0.1.2"));
    assert!(ping_cmd(&tbs[1], "client", "10.0.1.2"));
    let all: Vec<String> = tbs.iter().flat_map(|t| t.namespaces().values().cloned()).collect();
    drop(tbs);
    assert!(all.iter().all(|n| !ns_exists(n)));
}

/// Not a test on its own: the body of the child process that
/// `sigkill_owner_reaper_cleans_up` re-executes and kills.
#[test]
fn child_holds_testbed_until_killed() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let spec = ferry_testbed::parse(&example("chain.yaml")).unwrap();
    let tb = ferry_testbed::up(&spec).unwrap();
    let names: Vec<&str> = tb.namespaces().values().map(String::as_str).collect();
    println!("NAMESPACES {}", names.join(" "));
    std::thread::sleep(Duration::from_secs(60));
    panic!("child was not killed within 60 s");
}

#[test]
fn sigkill_owner_reaper_cleans_up() {
    if std::env::var_os(CHILD_ENV).is_some() || !privileged() {
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holds_testbed_until_killed", "--nocapture"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("NAMESPACES "))
        .expect("child printed its namespaces");
    let names: Vec<String> = line.split_whitespace().skip(1).map(String::from).collect();
    assert_eq!(names.len(), 3);
    assert!(names.iter().all(|n| ns_exists(n)), "{names:?} exist while child lives");

    child.kill().unwrap(); // SIGKILL: no destructor runs in the child
    child.wait().unwrap();
    assert!(
        wait_until(HANG_GUARD, || names.iter().all(|n| !ns_exists(n))),
        "reaper did not delete {names:?} within {HANG_GUARD:?} of SIGKILL"
    );
    let marker = |n: &String| std::path::Path::new(ferry_testbed::STATE_DIR).join("by-ns").join(format!("{n}.pid"));
    assert!(wait_until(HANG_GUARD, || names.iter().all(|n| !marker(n).exists())), "reaper left marker files behind");
}

#[test]
fn reaper_is_own_session_and_its_pipe_is_not_inherited() {
    if !privileged() {
        return;
    }
    let spec = TestbedSpec::from_yaml_str("namespaces: [{name: solo}]\n", "solo.yaml").unwrap();
    let tb = ferry_testbed::up(&spec).unwrap();
    let reaper = tb.reaper_pid().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{reaper}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    assert_eq!(fields[3], reaper.to_string(), "reaper must lead its own session (setsid)");

    let pipe = std::fs::read_link(format!("/proc/{reaper}/fd/0")).unwrap();
    assert!(pipe.to_string_lossy().starts_with("pipe:"), "{pipe:?}");
    let mut other = Command::new("sleep").arg("5").spawn().unwrap();
    let fds = std::fs::read_dir(format!("/proc/{}/fd", other.id())).unwrap();
    for fd in fds {
        let target = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert_ne!(target, pipe, "another child inherited the reaper pipe");
    }
    other.kill().unwrap();
    other.wait().unwrap();

    tb.down().unwrap();
    // Dismissed by `down`: the reaper has exited and was waited for.
    assert!(!std::path::Path::new(&format!("/proc/{reaper}")).exists());
}

#[test]
fn failed_up_removes_what_it_created() {
    if !privileged() {
        return;
    }
    // Valid YAML, but the gateway is not on any connected subnet.
    let text = "namespaces:\n  - name: failcase\n    routes: [{ to: 10.9.0.0/16, via: 10.8.0.1 }]\n";
    let spec = TestbedSpec::from_yaml_str(text, "fail.yaml").unwrap();
    let err = ferry_testbed::up(&spec).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TestbedError::Command { .. }), "{msg}");
    assert!(msg.contains("route add 10.9.0.0/16 via 10.8.0.1"), "{msg}");
    assert!(msg.to_lowercase().contains("gateway") || msg.contains("unreachable"), "{msg}");
    let left: Vec<_> =
        std::fs::read_dir("/run/netns").map(|rd| rd.filter_map(|e| e.ok()).collect()).unwrap_or_default();
    assert!(
        !left.iter().any(|e| e.file_name().to_string_lossy().ends_with("-failcase")),
        "failed up leaked a namespace"
    );
}

#[test]
fn detached_up_then_down_by_name() {
    if !privileged() {
        return;
    }
    let name = format!("itest-detached-{}", std::process::id());
    let text = format!(
        "name: {name}\nnamespaces: [{{name: a}}, {{name: b}}]\n\
         links: [{{a: {{ns: a, dev: a0, addrs: [10.0.3.1/24]}}, b: {{ns: b, dev: b0, addrs: [10.0.3.2/24]}}}}]\n"
    );
    let spec = TestbedSpec::from_yaml_str(&text, "detached.yaml").unwrap();
    let rt = ferry_testbed::up_detached(&spec).unwrap();
    assert!(rt.state_file().exists());
    let real_a = rt.ns_name("a").to_string();
    assert!(ns_exists(&real_a));
    assert!(ping(|| rt.exec("a", "ping", ["-c", "1", "-W", "5", "10.0.3.2"])));

    // A second `up` of the same name is refused while the first is up.
    match ferry_testbed::up_detached(&spec) {
        Err(TestbedError::AlreadyUp { .. }) => {}
        other => panic!("expected AlreadyUp, got {other:?}"),
    }
    // Another "process" finds it through the state file.
    let found = ferry_testbed::find_running(&name).unwrap();
    assert_eq!(found.ns_name("a"), real_a);
    // The owner pid is alive, so a sweep must leave it alone.
    ferry_testbed::sweep_stale().unwrap();
    assert!(ns_exists(&real_a));

    ferry_testbed::down_by_name(&name).unwrap();
    assert!(!ns_exists(&real_a));
    assert!(!rt.state_file().exists());
    assert!(matches!(ferry_testbed::down_by_name(&name), Err(TestbedError::NotUp { .. })));

    // A state file whose namespaces vanished (reboot-like) does not block `up`.
    let stale = ferry_testbed::up_detached(&spec).unwrap();
    for real in stale.namespaces().values() {
        assert!(Command::new("ip").args(["netns", "del", real]).status().unwrap().success());
    }
    let fresh = ferry_testbed::up_detached(&spec).unwrap();
    assert_ne!(fresh.instance(), stale.instance());
    // `ferry testbed down FILE` path: the name comes from the file.
    let file = std::env::temp_dir().join(format!("{name}.yaml"));
    std::fs::write(&file, &text).unwrap();
    ferry_testbed::down_file(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    assert!(fresh.namespaces().values().all(|n| !ns_exists(n)));
}

#[test]
fn sweep_removes_orphans_but_not_live_testbeds() {
    if !privileged() {
        return;
    }
    let spec = TestbedSpec::from_yaml_str("namespaces: [{name: live}]\n", "live.yaml").unwrap();
    let tb = ferry_testbed::up(&spec).unwrap();
    // An orphan: our naming pattern but no marker (its creator crashed).
    let orphan = format!("fy{:06x}-orphan", std::process::id() & 0xff_ffff);
    let st = Command::new("ip").args(["netns", "add", &orphan]).status().unwrap();
    assert!(st.success());

    let deleted = ferry_testbed::sweep_stale().unwrap();
    let orphan_gone = !ns_exists(&orphan);
    if !orphan_gone {
        let _ = Command::new("ip").args(["netns", "del", &orphan]).status();
    }
    assert!(orphan_gone && deleted.contains(&orphan), "{deleted:?}");
    assert!(ns_exists(tb.ns_name("live")), "sweep deleted a live testbed");
}
