//! The SFC testbed (`examples/testbeds/sfc.yaml`) and a `ferry evnf run`
//! process in its `dut` namespace, as the eVNF tests and benchmarks use
//! them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_testbed::{Testbed, TestbedNames, TestbedSpec};
use serde_json::Value;

use crate::proc::{spawn_exe, NsProcess};

pub const SFC_TESTBED: &str = include_str!("../../../examples/testbeds/sfc.yaml");
pub const SFC1: &str = include_str!("../../../examples/evnf/sfc1.yaml");
pub const SFC2: &str = include_str!("../../../examples/evnf/sfc2.yaml");
pub const PROTOCOLS: &str = include_str!("../../../examples/evnf/protos.txt");
pub const VIP: &str = "10.10.9.9";

/// Brings the SFC testbed up and prepares the end hosts' veths: checksums
/// computed in software (the NFs rewrite headers, and a partial checksum
/// left for an offload would be wrong on the far side), and GRO on, which
/// lets a veth accept frames other devices XDP-redirect into it.
pub fn sfc_testbed() -> Result<Testbed> {
    let spec = TestbedSpec::from_yaml_str(SFC_TESTBED, "examples/testbeds/sfc.yaml")?;
    let tb = ferry_testbed::up(&spec)?;
    for (ns, dev) in [("client", "c0"), ("b1", "e0"), ("b2", "e0")] {
        let out = tb.exec(ns, "ethtool", ["-K", dev, "tx", "off", "gro", "on"]).output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => bail!("ethtool -K {dev} in {ns}: {}", String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => bail!("not supported: needs ethtool (apt install ethtool): {e}"),
        }
    }
    Ok(tb)
}

/// A private directory for config files, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Result<Scratch> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos();
        let dir = std::env::temp_dir().join(format!("ferry-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let p = self.0.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ferry evnf run` in `dut`, with its config and status files.
pub struct EvnfProc {
    proc: Option<NsProcess>,
    config: PathBuf,
    status: PathBuf,
    _dir: Scratch,
}

impl EvnfProc {
    /// Writes `config` (and `protos.txt` next to it), starts the NFs and
    /// waits until their first status report (at most 10 s).
    pub fn start(ferry: &Path, tb: &TestbedNames, config: &str, cpu: Option<usize>) -> Result<EvnfProc> {
        let dir = Scratch::new("evnf")?;
        dir.write("protos.txt", PROTOCOLS)?;
        let config_path = dir.write("evnf.yaml", config)?;
        let status = dir.path().join("status.json");
        let args =
            ["evnf", "run", config_path.to_str().unwrap_or_default(), "--status", status.to_str().unwrap_or_default()];
        let proc = spawn_exe(ferry, tb.ns_name("dut"), &args, cpu)?;
        let mut p = EvnfProc { proc: Some(proc), config: config_path, status, _dir: dir };
        p.wait_generation(1, Duration::from_secs(60))?;
        Ok(p)
    }

    pub fn pid(&self) -> u32 {
        self.proc.as_ref().map_or(0, NsProcess::pid)
    }

    /// The latest status report.
    pub fn status(&self) -> Result<Value> {
        let text = std::fs::read_to_string(&self.status).with_context(|| format!("{}", self.status.display()))?;
        Ok(serde_json::from_str(&text)?)
    }

    fn wait_generation(&mut self, generation: u64, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(s) = self.status() {
                if s["generation"].as_u64().unwrap_or(0) >= generation {
                    return Ok(s);
                }
            }
            let proc = self.proc.as_mut().ok_or_else(|| anyhow!("evnf process already stopped"))?;
            if !proc.running() {
                let err = self.proc.take().map(|p| p.stop()).and_then(Result::err);
                bail!("ferry evnf run exited before its report: {err:?}");
            }
            if Instant::now() >= deadline {
                bail!("ferry evnf run: no status generation {generation} within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rewrites the config file and reloads it (SIGHUP); returns the
    /// status after the reload.
    pub fn reload(&mut self, config: &str) -> Result<Value> {
        let before = self.status()?;
        let errors = |s: &Value| s["reload_errors"].as_array().map_or(0, Vec::len);
        std::fs::write(&self.config, config)?;
        self.proc.as_ref().ok_or_else(|| anyhow!("evnf process already stopped"))?.signal(libc::SIGHUP);
        let generation = before["generation"].as_u64().unwrap_or(0) + 1;
        let s = self.wait_generation(generation, Duration::from_secs(60))?;
        if errors(&s) > errors(&before) {
            bail!("reload failed: {}", s["reload_errors"][errors(&s) - 1]);
        }
        Ok(s)
    }

    /// Stops the NFs and returns the final report.
    pub fn stop(mut self) -> Result<Value> {
        self.proc.take().ok_or_else(|| anyhow!("evnf process already stopped"))?.stop()
    }
}

/// Runs `cmd` in namespace `ns` of `tb`; error with its stderr on failure.
pub fn run_in(tb: &TestbedNames, ns: &str, program: &str, args: &[&str]) -> Result<String> {
    let out = tb.exec(ns, program, args).output().with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Established TCP connections in `ns` whose local port is `port`, as
/// (local, peer) address strings.
pub fn established(tb: &TestbedNames, ns: &str, port: u16) -> Result<Vec<(String, String)>> {
    let filter = format!("( sport = :{port} )");
    let out = run_in(tb, ns, "ss", &["-Htn", "state", "established", &filter])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| (f[f.len() - 2].to_string(), f[f.len() - 1].to_string()))
        })
        .collect())
}
