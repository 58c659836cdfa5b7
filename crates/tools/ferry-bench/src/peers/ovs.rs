//! Open vSwitch as a peer: its userspace datapath with AF_XDP ports, as
//! OVS's `Documentation/intro/install/afxdp.rst` sets it up, run from a
//! private directory so it touches no system OVS.
//!
//! - ovsdb-server runs in the root namespace; ovs-vswitchd must run in the
//!   namespace that holds the ports (`ip netns exec`), or it cannot open
//!   them.
//! - `xdp-mode=native`: veth has no zero-copy AF_XDP
//!   (`native-with-zerocopy` fails with "Operation not supported").
//! - `ofport_request` pins the OpenFlow port numbers: a port re-added after
//!   an error gets a new number, and a flow naming the old one would match
//!   nothing.
//! - One PMD thread on the system's CPU (`pmd-cpu-mask`), each port's one
//!   queue assigned to it (`pmd-rxq-affinity`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// OVS's binaries and AF_XDP support: "not supported: needs X" if missing.
pub fn probe() -> Result<()> {
    for bin in ["ovsdb-server", "ovsdb-tool", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"] {
        if which(bin).is_none() {
            bail!("ovs-afxdp: not supported: needs Open vSwitch ({bin} not found; `make deps` installs openvswitch-switch)");
        }
    }
    if !Path::new(SCHEMA).exists() {
        bail!("ovs-afxdp: not supported: needs {SCHEMA} (openvswitch-common)");
    }
    Ok(())
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.exists())
}

/// A running OVS (database and switch) of its own directory.
pub struct Ovs {
    dir: PathBuf,
    torn_down: bool,
}

impl Ovs {
    /// Starts OVS with d0 (port 1) and d1 (port 2) of namespace `ns` as
    /// AF_XDP ports and `flows` (an `ovs-ofctl add-flows` file), its PMD
    /// on `cpu`.
    pub fn up(dir: &Path, ns: &str, cpu: usize, flows: &str) -> Result<Ovs> {
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["run", "db", "log", "etc"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let ovs = Ovs { dir: dir.to_path_buf(), torn_down: false };
        let db = dir.join("db/conf.db");
        ovs.run(ovs.cmd("ovsdb-tool").arg("create").arg(&db).arg(SCHEMA))?;
        let remote = format!("--remote=punix:{}", ovs.db_sock().display());
        ovs.run(ovs.cmd("ovsdb-server").arg(&db).args([&remote, "--pidfile", "--detach", "--log-file", "--no-chdir"]))?;
        ovs.vsctl(&["--no-wait", "init"])?;
        ovs.vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            &format!("other_config:pmd-cpu-mask={:#x}", 1u64 << cpu),
        ])?;
        let port = |dev: &str, n: u32| {
            format!(
                "add-port br0 {dev} -- set Interface {dev} type=afxdp ofport_request={n} options:xdp-mode=native \
                 options:n_rxq=1 other_config:pmd-rxq-affinity=0:{cpu}"
            )
        };
        let script = format!(
            "--no-wait add-br br0 -- set Bridge br0 datapath_type=netdev fail-mode=secure -- {} -- {}",
            port("d0", 1),
            port("d1", 2)
        );
        ovs.vsctl(&script.split(' ').collect::<Vec<_>>())?;
        let mut vswitchd = Command::new("ip");
        vswitchd.args(["netns", "exec", ns, "ovs-vswitchd"]).arg(format!("unix:{}", ovs.db_sock().display()));
        vswitchd.args(["--pidfile", "--detach", "--log-file", "--no-chdir", "--disable-system"]);
        ovs.run(ovs.env(&mut vswitchd))?;
        ovs.wait_ports()?;
        ovs.run(ovs.cmd("ovs-ofctl").args(["del-flows", "br0"]))?;
        let file = dir.join("flows.txt");
        std::fs::write(&file, flows)?;
        ovs.run(ovs.cmd("ovs-ofctl").args(["add-flows", "br0"]).arg(&file))?;
        Ok(ovs)
    }

    fn db_sock(&self) -> PathBuf {
        self.dir.join("run/db.sock")
    }

    /// A command with this OVS's directories in its environment.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        self.env(&mut c);
        c
    }

    fn env<'a>(&self, c: &'a mut Command) -> &'a mut Command {
        c.env("OVS_RUNDIR", self.dir.join("run"))
            .env("OVS_DBDIR", self.dir.join("db"))
            .env("OVS_LOGDIR", self.dir.join("log"))
            .env("OVS_SYSCONFDIR", self.dir.join("etc"))
    }

    fn run(&self, c: &mut Command) -> Result<String> {
        let out = c.output().with_context(|| format!("running {c:?}"))?;
        if !out.status.success() {
            bail!("ovs-afxdp: {c:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn vsctl(&self, args: &[&str]) -> Result<String> {
        let db = format!("--db=unix:{}", self.db_sock().display());
        self.run(self.cmd("ovs-vsctl").arg(db).args(args))
    }

    /// Waits until both ports hold their OpenFlow numbers; an interface
    /// error (AF_XDP refused, say) is returned as OVS wrote it.
    fn wait_ports(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut ready = true;
            for (dev, want) in [("d0", "1"), ("d1", "2")] {
                let error = self.vsctl(&["get", "Interface", dev, "error"]).unwrap_or_default();
                let error = error.trim().trim_matches('"');
                if !error.is_empty() && error != "[]" {
                    bail!("ovs-afxdp: interface {dev}: {error}");
                }
                ready &= self.vsctl(&["get", "Interface", dev, "ofport"]).is_ok_and(|p| p.trim() == want);
            }
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "ovs-afxdp: ports d0 and d1 did not come up within 30 s (log: {})",
                    self.dir.join("log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the switch (which detaches its XDP programs) and the database.
    pub fn down(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        // Read before asking them to exit: an exiting daemon removes its
        // pidfile, and one that does not exit must still be stopped (a
        // vswitchd left in the namespace would keep it, and its XDP, alive).
        let pids: Vec<i32> = ["ovs-vswitchd", "ovsdb-server"]
            .iter()
            .filter_map(|d| std::fs::read_to_string(self.dir.join(format!("run/{d}.pid"))).ok()?.trim().parse().ok())
            .collect();
        let switch = self.run(self.cmd("ovs-appctl").args(["-t", "ovs-vswitchd", "exit", "--cleanup"]));
        let db = self.run(self.cmd("ovs-appctl").args(["-t", "ovsdb-server", "exit"]));
        for pid in pids {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if Path::new(&format!("/proc/{pid}")).exists() {
                // SAFETY: kill(2) on the daemon this OVS started, still
                // running after it was asked to exit.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        switch.and(db).map(|_| ())
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
