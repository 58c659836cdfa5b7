//! ferryd restarted while its chains forward (`ferryd --persist`): the
//! NF processes outlive it, a new ferryd adopts their memory from them
//! and the ports' pinned programs, and they rejoin it. Nothing is lost.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::chain::*;
use common::*;
use ferry_chain::proto::{self, Msg, Status};
use ferry_cli::chainctl::{self, RunningChain};

/// A `ferryd --persist` on `socket`, deploying `chain` if given (else it
/// adopts what the ferryd before it left); returns once it serves chain
/// `name`.
fn persistent_ferryd(socket: &Path, chain: Option<&Path>, name: &str) -> RunningChain {
    persistent_ferryd_in(None, socket, chain, name)
}

/// As [`persistent_ferryd`], in the mount namespace of `mounts` if given.
fn persistent_ferryd_in(
    mounts: Option<&PrivateMounts>,
    socket: &Path,
    chain: Option<&Path>,
    name: &str,
) -> RunningChain {
    let ferryd = chainctl::ferryd_bin().expect("ferryd");
    let mut cmd = match mounts {
        Some(m) => m.command(&ferryd),
        None => Command::new(ferryd),
    };
    cmd.args(chain)
        .arg("--socket")
        .arg(socket)
        .args(["--persist", "--metrics", "127.0.0.1:0"])
        .env("FERRY_HOST", chainctl::host_bin().expect("ferry-host"))
        .stdin(Stdio::null());
    let child = cmd.spawn().expect("starting ferryd");
    let mut rc =
        RunningChain { child, socket: socket.to_path_buf(), admin: proto::admin_socket(socket), name: name.into() };
    wait_until("ferryd serving the chain", || {
        assert!(rc.child.try_wait().unwrap().is_none(), "ferryd exited before it served {name}");
        rc.status().is_ok()
    });
    // An adopting ferryd: every running NF rejoins it.
    wait_until("every NF rejoined", || rc.status().is_ok_and(|s| s.nfs.iter().all(|n| !n.awaiting_rejoin)));
    rc
}

/// A mount namespace of its own with nothing mounted on /sys/fs/bpf, as
/// on many a fresh VM or container, held open by a process while the
/// test runs its ferryds in it (`nsenter -m`, which execs in place: the
/// child is ferryd itself). Dropping it ends the holder; the namespace,
/// and the bpffs a ferryd mounted there, go with its last process.
struct PrivateMounts {
    holder: std::process::Child,
}

impl PrivateMounts {
    fn new() -> PrivateMounts {
        let script = "while umount /sys/fs/bpf 2>/dev/null; do :; done; echo ready; exec sleep 600";
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare -m");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the private mount namespace is set up");
        PrivateMounts { holder }
    }

    /// `program` to run in the namespace.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.holder.id().to_string(), "-m", "--"]).arg(program);
        cmd
    }

    /// Whether `path` exists as the namespace sees it.
    fn exists(&self, path: &Path) -> bool {
        self.command(Path::new("test")).arg("-e").arg(path).status().unwrap().success()
    }

    /// The file system type of /sys/fs/bpf in the namespace.
    fn bpf_dir_type(&self) -> String {
        let out = self.command(Path::new("stat")).args(["-f", "-c", "%T", "/sys/fs/bpf"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for PrivateMounts {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Ends ferryd with `signal` and waits for it to exit.
fn end_ferryd(mut rc: RunningChain, signal: i32) {
    // SAFETY: plain kill of our child.
    assert_eq!(unsafe { libc::kill(rc.child.id() as i32, signal) }, 0);
    rc.child.wait().unwrap();
}

fn pids(s: &Status) -> Vec<(String, Option<u32>)> {
    s.nfs.iter().map(|n| (n.name.clone(), n.pid)).collect()
}

/// Kills what a failed test leaves running (NFs outlive ferryd here):
/// every process whose environment names this test's socket, and the pins
/// of this test's ferryds.
struct Reaper {
    socket: PathBuf,
    ferryds: Vec<u32>,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let mine = format!("FERRY_SOCKET={}", self.socket.display());
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if environ.split(|&b| b == 0).any(|v| v == mine.as_bytes()) {
                // SAFETY: plain kill of a leftover NF of this test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for pid in &self.ferryds {
            for d in std::fs::read_dir("/sys/fs/bpf/ferry").into_iter().flatten().flatten() {
                if d.file_name().to_string_lossy().starts_with(&format!("{pid}-")) {
                    for port in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                        ferry_bpf::pinned::remove_pins(&port.path());
                    }
                    let _ = std::fs::remove_dir(d.path());
                }
            }
        }
    }
}

const MADE: u64 = 1_200_000;

/// Frames a copy link can hold when ferryd is killed: what it copied and
/// has not queued yet (a burst), which the next ferryd reclaims.
const COPY_LINK_HOLDS: u64 = 64;

/// src -> mid -> snk, src making MADE frames at 200 kpps; `snk` in domain
/// `snk_domain` (a copy link from mid when it is not `main`).
fn counted_chain(name: &str, snk_domain: &str) -> String {
    let other = if snk_domain == "main" { String::new() } else { format!(", {{ name: {snk_domain} }}") };
    format!(
        r#"
name: {name}
domains: [ {{ name: main, frames: 4096, ring_size: 512 }}{other} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["rate=200000", "count={MADE}"] }}
  - {{ name: mid, domain: main, kind: fwd }}
  - {{ name: snk, domain: {snk_domain}, kind: sink }}
links:
  - {{ from: src, to: mid }}
  - {{ from: mid, to: snk }}
"#
    )
}

/// Runs `yaml` (chain `name`) under a persistent ferryd and ends ferryd
/// once per `signals` while frames flow, each time replaced by a new one.
/// Block backpressure drops nothing, so every frame made must be sunk,
/// but for what `may_lose` allows (a killed ferryd's copy link's burst): the
/// same processes all along, every one rejoined, counters that kept
/// counting, a conserved audit.
fn restart_under_load(name: &str, yaml: &str, signals: &[i32], may_lose: u64) {
    let dir = TempDir::new(name);
    let chain = dir.path("chain.yaml");
    std::fs::write(&chain, yaml).unwrap();
    let socket = dir.path("ferryd.sock");
    let mut rc = persistent_ferryd(&socket, Some(&chain), name);
    let first = rc.wait_connected(HANG_GUARD).expect("NFs connected");
    let procs = pids(&first);
    let mut reaper = Reaper { socket: socket.clone(), ferryds: vec![rc.child.id()] };
    let sunk = |rc: &RunningChain| rc.status().map_or(0, |s| c(&s, "snk", "sunk"));
    for (round, &signal) in signals.iter().enumerate() {
        let share = (round as u64 + 1) * MADE / (signals.len() as u64 + 2);
        wait_until("traffic before ferryd goes", || sunk(&rc) > share);
        let at_stop = sunk(&rc);
        end_ferryd(rc, signal);
        // (That they forward meanwhile is shown on veth ports below.)
        assert!(procs.iter().all(|(_, p)| !gone(p.unwrap())), "NFs outlive ferryd ({signal})");
        rc = persistent_ferryd(&socket, None, name);
        reaper.ferryds.push(rc.child.id());
        let st = rc.status().unwrap();
        assert_eq!(pids(&st), procs, "the new ferryd adopted the same processes");
        assert!(st.nfs.iter().all(|n| n.connected && n.restarts == 0), "{st:?}");
        assert!(c(&st, "snk", "sunk") >= at_stop, "counters kept counting across the restart");
        // Only the NFs' own processes may rejoin.
        let impostor =
            proto::request(&socket, &Msg::Rejoin { chain: name.into(), nf: "mid".into(), key: String::new() })
                .expect("an answer");
        assert!(
            matches!(&impostor, Msg::Error { message } if message.contains("is not the running NF")),
            "{impostor:?}"
        );
    }
    wait_until("every frame made to be sunk", || sunk(&rc) + may_lose >= MADE);
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert_eq!(c(&st, "src", "made"), MADE);
    let reclaimed: u64 = st.domains.iter().map(|d| d.reclaimed).sum();
    assert!(may_lose > 0 || reclaimed == 0, "nothing to reclaim without a killed copy link: {:?}", st.domains);
    for nf in ["src", "mid", "snk"] {
        for drop in ["drop_full", "drop_down", "drop_malformed"] {
            assert_eq!(c(&st, nf, drop), 0, "{nf} {drop}");
        }
    }
    assert_eq!(pids(&st), procs, "no NF was restarted");
    for d in &st.domains {
        assert_eq!((d.lost, d.duplicated), (0, 0), "{d:?}");
    }
    assert_conserved(&rc);
    let state = dir.path("ferryd.sock.admin.state").join(format!("{name}.json"));
    assert!(state.exists(), "the state file is kept current");
    // What cannot outlive ferryd yet is refused, saying so.
    let flows = dir.path("flows.yaml");
    std::fs::write(&flows, counted_chain("flows", "main").replace("kind: fwd", "kind: flow-monitor")).unwrap();
    let refused = chainctl::deploy(&rc.admin, &flows).expect_err("a flow monitor under --persist");
    assert!(format!("{refused:#}").contains("not supported with ferryd --persist yet"), "{refused:#}");
    rc.shutdown().unwrap();
    wait_until("the NFs stopped with the chain", || procs.iter().all(|(_, p)| gone(p.unwrap())));
    assert!(!state.exists(), "a stopped chain leaves no state");
}

/// One domain: ferryd stopped (SIGTERM), then killed (SIGKILL).
#[test]
fn ferryd_restarts_under_200_kpps_and_loses_no_frame() {
    if !privileged("ferryd_restarts") {
        return;
    }
    restart_under_load("persist", &counted_chain("persist", "main"), &[libc::SIGTERM, libc::SIGKILL], 0);
}

/// A copy link: a ferryd thread. Stopped (SIGTERM), it
/// hands on what it copied; killed (SIGKILL), it may lose the burst it
/// held, which the next ferryd reclaims before it starts the copy link
/// again on the same ring.
#[test]
fn a_copy_link_survives_ferryd_restarts() {
    if !privileged("copy_link_restarts") {
        return;
    }
    let chain = counted_chain("linked", "other");
    restart_under_load("linked", &chain, &[libc::SIGTERM, libc::SIGKILL], COPY_LINK_HOLDS);
}

/// Writes chain `name`: in (d0 of `dut`) -> a (fwd) -> b (l2fwd) -> out (d1),
/// both kept processes (`offload: never`): what outlives ferryd.
fn two_port_chain(dir: &TempDir, name: &str, dut: &str) -> PathBuf {
    let chain = dir.path("chain.yaml");
    std::fs::write(
        &chain,
        format!(
            r#"
name: {name}
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
  - {{ name: out, netns: {dut}, netdev: d1 }}
nfs:
  - {{ name: a, domain: main, kind: fwd, offload: never }}
  - {{ name: b, domain: main, kind: l2fwd, offload: never }}
links:
  - {{ from: in, to: a }}
  - {{ from: a, to: b }}
  - {{ from: b, to: out }}
"#
        ),
    )
    .unwrap();
    chain
}

/// A chain between two veth ports: its redirect program is pinned, so it
/// stays on d0 and frames keep reaching the NFs' sockets while no ferryd
/// runs. The new ferryd registers a restarted NF's fresh socket in the
/// same pinned XSKMAP. Removing the chain takes program and pins away.
#[test]
fn pinned_ports_keep_forwarding_while_ferryd_is_away() {
    if !privileged("pinned_ports") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "restart-e2e.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("pinned");
    let chain = two_port_chain(&dir, "pinned", &dut);
    let socket = dir.path("ferryd.sock");
    let mut rc = persistent_ferryd(&socket, Some(&chain), "pinned");
    rc.wait_connected(HANG_GUARD).expect("NFs connected");
    let mut reaper = Reaper { socket: socket.clone(), ferryds: vec![rc.child.id()] };
    let pins = [Path::new("/sys/fs/bpf/ferry").join(format!("{}-1", rc.child.id())).join("port0")];
    assert!(pins[0].join("link").exists(), "port in's program is pinned in {}", pins[0].display());
    let sink = spawn_sink(&tb, "sink", "s0", &["--idle-exit", "2s"]);
    // Flowing until stopped, whatever the restarts take.
    let args =
        ["gen", "xsk", "--dev", "g0", "--count", "100000000", "--rate", "10000", "--dst-mac", "02:00:00:00:01:02"];
    let gen = Ferry::spawn(&tb, "gen", &[&args[..], &["--set", "flows=64"]].concat());
    wait_until("traffic through the chain", || rc.status().is_ok_and(|s| c(&s, "b", "tx_port") > 5000));
    end_ferryd(rc, libc::SIGTERM);
    assert!(xdp_attached(&dut, "d0"), "the pinned program stays on d0 without ferryd");
    let out = link_packets(&dut, "d1", "tx");
    wait_until("frames forwarded while no ferryd runs", || link_packets(&dut, "d1", "tx") > out + 2000);
    let rc = persistent_ferryd(&socket, None, "pinned");
    reaper.ferryds.push(rc.child.id());
    // A restarted NF gets fresh sockets, registered in the pinned XSKMAP.
    let a = pid_of(&rc.status().unwrap(), "a");
    // SAFETY: plain kill of the NF process.
    assert_eq!(unsafe { libc::kill(a as i32, libc::SIGKILL) }, 0);
    wait_until("a restarted by the new ferryd", || {
        rc.status().is_ok_and(|s| s.nfs.iter().any(|n| n.name == "a" && n.connected && n.restarts == 1))
    });
    let through = c(&rc.status().unwrap(), "b", "tx_port");
    wait_until("traffic through the restarted a", || rc.status().is_ok_and(|s| c(&s, "b", "tx_port") > through + 2000));
    drop(gen);
    let report = sink.wait_json(HANG_GUARD);
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert_eq!(c(&st, "b", "tx_port"), u(&report, "/packets"), "b's counter survived both ferryds: {report:#}");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    assert!(!xdp_attached(&dut, "d0"), "the chain's removal takes the program away");
    assert!(!pins[0].exists(), "and its pins");
    down_and_check(tb);
}

/// `ferryd --persist` on a machine with nothing mounted on /sys/fs/bpf
/// (a private mount namespace stands in for one): ferryd mounts bpffs
/// itself, pins the port's program there, and a second ferryd in the same
/// namespace adopts the pins while frames keep flowing.
#[test]
fn persist_mounts_bpffs_where_none_is_mounted() {
    if !privileged("persist_mounts_bpffs") {
        return;
    }
    // The testbed first: its namespaces' mounts under /run/netns are
    // copied into the private namespace, not propagated to it later.
    let tb = testbed(PORTS_TESTBED, "restart-bpffs.yaml");
    let mounts = PrivateMounts::new();
    assert_ne!(mounts.bpf_dir_type(), "bpf_fs", "nothing on /sys/fs/bpf to begin with");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("bpffs");
    let chain = two_port_chain(&dir, "bpffs", &dut);
    let socket = dir.path("ferryd.sock");
    let mut rc = persistent_ferryd_in(Some(&mounts), &socket, Some(&chain), "bpffs");
    let _reaper = Reaper { socket: socket.clone(), ferryds: vec![] };
    rc.wait_connected(HANG_GUARD).expect("NFs connected");
    assert_eq!(mounts.bpf_dir_type(), "bpf_fs", "ferryd mounted bpffs");
    let pin = Path::new("/sys/fs/bpf/ferry").join(format!("{}-1", rc.child.id())).join("port0").join("link");
    assert!(mounts.exists(&pin), "port in's program is pinned at {}", pin.display());
    let args =
        ["gen", "xsk", "--dev", "g0", "--count", "100000000", "--rate", "10000", "--dst-mac", "02:00:00:00:01:02"];
    let gen = Ferry::spawn(&tb, "gen", &args);
    wait_until("traffic through the chain", || rc.status().is_ok_and(|s| c(&s, "b", "tx_port") > 2000));
    end_ferryd(rc, libc::SIGTERM);
    assert!(xdp_attached(&dut, "d0"), "the pinned program stays on d0 without ferryd");
    let out = link_packets(&dut, "d1", "tx");
    wait_until("frames forwarded while no ferryd runs", || link_packets(&dut, "d1", "tx") > out + 2000);
    let rc = persistent_ferryd_in(Some(&mounts), &socket, None, "bpffs");
    let through = c(&rc.status().unwrap(), "b", "tx_port");
    wait_until("traffic through the adopted chain", || {
        rc.status().is_ok_and(|s| c(&s, "b", "tx_port") > through + 2000)
    });
    drop(gen);
    rc.shutdown().unwrap();
    assert!(!xdp_attached(&dut, "d0"), "the chain's removal takes the program away");
    assert!(!mounts.exists(&pin), "and its pins");
    down_and_check(tb);
}
