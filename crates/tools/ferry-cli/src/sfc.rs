//! The SFC testbed (`examples/testbeds/sfc.yaml`) and eVNF's chains on
//! it, run by a ferryd, as the hybrid-NF tests and benchmarks use them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_testbed::{Testbed, TestbedNames, TestbedSpec};

use crate::chainctl::{self, RunningChain};
use crate::util::Scratch;

pub const SFC_TESTBED: &str = include_str!("../../../../examples/testbeds/sfc.yaml");
pub const SFC1: &str = include_str!("../../../../examples/evnf/sfc1.yaml");
/// SFC 1 over IPv6: the same firewall rules and ruleset, the IPv6 VIP
/// [`VIP6`] and backends.
pub const SFC1_IPV6: &str = include_str!("../../../../examples/evnf/sfc1-ipv6.yaml");
pub const SFC2: &str = include_str!("../../../../examples/evnf/sfc2.yaml");
pub const PROTOCOLS: &str = include_str!("../../../../examples/evnf/protos.txt");
pub const VIP: &str = "10.10.9.9";
pub const VIP6: &str = "2001:db8:9::9";

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

/// eVNF's SFC 1 (eFW -> eLB) and SFC 2 (eFW -> eDPI) as chain files, with
/// `{dut}` and the configuration file's path to fill in.
pub const EDGE: &str = include_str!("../../../../examples/chains/edge.yaml");
pub const EDGE_DPI: &str = include_str!("../../../../examples/chains/edge-dpi.yaml");

/// A ferryd in the testbed's root namespace running one of eVNF's chains
/// on the `dut` ports, with its configuration file in a scratch directory
/// (and `protos.txt` next to it).
pub struct SfcChain {
    pub rc: RunningChain,
    config: PathBuf,
    _dir: Scratch,
}

impl SfcChain {
    /// Starts `chain` ([`EDGE`] or [`EDGE_DPI`]) with `config` as its
    /// hybrid NFs' file, each NF's process pinned to `cpu` if given, and
    /// waits until every NF runs.
    pub fn start(tb: &TestbedNames, chain: &str, config: &str, cpu: Option<usize>) -> Result<SfcChain> {
        let dir = Scratch::new("sfc")?;
        dir.write("protos.txt", PROTOCOLS)?;
        let config_path = dir.write("evnf.yaml", config)?;
        let mut text = chain.replace("{dut}", tb.ns_name("dut"));
        for name in ["sfc1.yaml", "sfc2.yaml"] {
            text = text.replace(&format!("{{examples}}/../evnf/{name}"), &config_path.display().to_string());
        }
        if let Some(cpu) = cpu {
            text = text.replace("domain: main, kind:", &format!("domain: main, cpus: [{cpu}], kind:"));
        }
        let chain_path = dir.write("chain.yaml", &text)?;
        let rc = chainctl::start(&chain_path, &dir.path().join("ferryd.sock"), true)?;
        // Running: each NF took its welcome (and its maps) and looped.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = rc.status()?;
            if s.nfs.iter().all(|n| n.connected && n.rings.iter().all(|r| r.loops >= 2)) {
                break;
            }
            if Instant::now() > deadline {
                bail!("the chain's NFs did not all run within 60 s: {s:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(SfcChain { rc, config: config_path, _dir: dir })
    }

    /// The pid of NF `nf`'s process.
    pub fn pid(&self, nf: &str) -> Result<u32> {
        let s = self.rc.status()?;
        s.nfs.iter().find(|n| n.name == nf).and_then(|n| n.pid).ok_or_else(|| anyhow!("NF {nf} is not running"))
    }

    /// Rewrites the configuration file and has every NF apply it
    /// (`ferry chain reload`).
    pub fn reload(&self, config: &str) -> Result<()> {
        std::fs::write(&self.config, config).with_context(|| format!("{}", self.config.display()))?;
        let outcomes = chainctl::reload(&self.rc.admin, &self.rc.name)?;
        if let Some(r) = outcomes.iter().find(|r| r.outcome != "applied") {
            bail!("reload: NF {}: {}", r.nf, r.outcome);
        }
        Ok(())
    }

    pub fn stop(self) -> Result<()> {
        self.rc.shutdown()
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
