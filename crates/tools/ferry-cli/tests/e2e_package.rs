//! The Debian package (`make deb`, FERRY_DEB) installed into a fresh root
//! with dpkg: every file where an operator looks for it; the installed
//! ferryd, confined to the systemd unit's capability bounding set and
//! NoNewPrivileges, runs the demo chain on a testbed, answers ping through
//! it and tells a listener on $NOTIFY_SOCKET it is ready only once the
//! chain is up; then the package is purged and leaves no file behind.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use ferry_cli::chainctl;

const UNIT: &str = "lib/systemd/system/ferryd.service";

/// The package `make test` built: FERRY_DEB, which must name a file.
fn package() -> Option<PathBuf> {
    let deb = PathBuf::from(std::env::var_os("FERRY_DEB")?);
    assert!(deb.is_file(), "FERRY_DEB={} is no file: build it with `make deb`", deb.display());
    Some(deb)
}

fn dpkg(root: &Path, args: &[&str]) -> String {
    let out = Command::new("dpkg").arg(format!("--root={}", root.display())).args(args).output().expect("dpkg");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dpkg {args:?}: {text}");
    text
}

/// A root with nothing but an empty dpkg database.
fn fresh_root(dir: &TempDir) -> PathBuf {
    let root = dir.path("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["var/lib/dpkg/status", "var/lib/dpkg/available"] {
        std::fs::write(root.join(f), "").unwrap();
    }
    root
}

/// Every file under `root` but dpkg's own database and log.
fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel.starts_with("var/lib/dpkg") || rel.starts_with("var/log") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// The unit's `CapabilityBoundingSet=`, as setpriv's --bounding-set.
fn bounding_set(unit: &str) -> String {
    let line = unit.lines().find_map(|l| l.strip_prefix("CapabilityBoundingSet=")).expect("a bounding set");
    let caps: Vec<String> =
        line.split_whitespace().map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase())).collect();
    format!("-all,{}", caps.join(","))
}

#[test]
fn the_package_installs_runs_the_demo_under_its_unit_and_purges_clean() {
    let Some(deb) = package() else {
        eprintln!("skipped: FERRY_DEB is not set (make test builds the package and sets it)");
        return;
    };
    if !privileged("package") {
        return;
    }
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("ferry_") && name.ends_with("_amd64.deb"), "{name}");
    let dir = TempDir::new("package");
    let root = fresh_root(&dir);
    // The fresh root has no libc package to satisfy the dependencies: the
    // binaries run with this machine's libraries.
    dpkg(&root, &["--force-depends", "-i", deb.to_str().unwrap()]);
    let installed = files_under(&root);
    for f in [
        "usr/bin/ferry",
        "usr/bin/ferryd",
        "usr/bin/ferry-host",
        "usr/bin/ferry-bench",
        "usr/lib/ferry/bpf/pipeline.bpf.o",
        "usr/lib/ferry/bpf/xsk_redirect.bpf.o",
        UNIT,
        "usr/share/man/man1/ferry.1.gz",
        "usr/share/man/man8/ferryd.8.gz",
        "usr/share/bash-completion/completions/ferry",
        "usr/share/zsh/vendor-completions/_ferry",
        "usr/share/fish/vendor_completions.d/ferry.fish",
        "usr/share/doc/ferry/examples/chains/demo.yaml",
        "usr/share/doc/ferry/grafana/ferry.json",
        "etc/ferry/chains/README",
    ] {
        assert!(installed.iter().any(|i| i == f), "{f} not installed; installed: {installed:#?}");
    }
    let unit = std::fs::read_to_string(root.join(UNIT)).unwrap();
    for line in ["Type=notify", "KillMode=process", "ExecReload=/usr/bin/ferry chain reload", "NoNewPrivileges=yes"] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    if Path::new("/usr/bin/systemd-analyze").exists() {
        // The unit as systemd reads it, its binaries resolved in the root
        // (which has no systemd units of its own to depend on, nor man).
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no", "--recursive-errors=no", "--root"])
            .arg(&root)
            .arg(format!("/{UNIT}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.trim().is_empty(), "systemd-analyze verify: {text}");
    }
    run_installed_ferryd(&root, &dir, &bounding_set(&unit));
    dpkg(&root, &["--purge", "ferry"]);
    assert_eq!(files_under(&root), Vec::<String>::new(), "files left after the purge");
}

/// The installed ferryd on the demo testbed, as the unit starts it: the
/// demo chain from the package's examples, a NOTIFY_SOCKET listener, the
/// unit's capabilities only.
fn run_installed_ferryd(root: &Path, dir: &TempDir, caps: &str) {
    let tb = testbed(ferry_cli::demo::DEMO_TESTBED, "package-demo.yaml");
    let dut = tb.ns_name("dut").to_string();
    let chains = dir.path("chains");
    std::fs::create_dir_all(&chains).unwrap();
    let demo = std::fs::read_to_string(root.join("usr/share/doc/ferry/examples/chains/demo.yaml")).unwrap();
    std::fs::write(chains.join("demo.yaml"), demo.replace("{dut}", &dut)).unwrap();
    let notify_path = dir.path("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let socket = dir.path("ferryd.sock");
    let mut ferryd = Command::new("setpriv");
    ferryd
        .args(["--bounding-set", caps, "--inh-caps=-all", "--no-new-privs", "--"])
        .arg(root.join("usr/bin/ferryd"))
        .args(["--no-metrics", "--socket"])
        .arg(&socket)
        .arg(&chains)
        .env("NOTIFY_SOCKET", &notify_path);
    let ferryd = Ferry::spawn_cmd(ferryd, "the installed ferryd under the unit's capabilities".into());
    let mut buf = [0u8; 512];
    let Ok(n) = notify.recv(&mut buf) else {
        let _ = chainctl::shutdown(&proto_admin(&socket));
        let done = ferryd.finish(Duration::from_secs(10));
        panic!("no READY=1 from ferryd within {HANG_GUARD:?} ({}); its stderr:\n{}", done.status, done.stderr);
    };
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "READY=1"), "{message}");
    assert!(message.contains("STATUS=1 chains up: demo"), "{message}");
    // Ready means up: every NF was connected when ferryd said so.
    let admin = proto_admin(&socket);
    let st = chainctl::status(&admin, "demo").unwrap();
    assert!(!st.nfs.is_empty() && st.nfs.iter().all(|n| n.connected), "{st:?}");
    let (ok, out) = ping(&tb, "gen", "10.0.1.2", 3);
    assert!(ok, "ping through the installed ferryd's chain: {out}");
    chainctl::shutdown(&admin).unwrap();
    let done = ferryd.finish(Duration::from_secs(30));
    assert!(done.status.success(), "{}", done.stderr);
    // Sent before it exited: the next datagram, there already.
    let n = notify.recv(&mut buf).expect("STOPPING=1 from ferryd");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "STOPPING=1"), "{message}");
    down_and_check(tb);
}

fn proto_admin(socket: &Path) -> PathBuf {
    ferry_chain::proto::admin_socket(socket)
}
