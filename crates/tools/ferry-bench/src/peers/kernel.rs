//! The kernel's own forwarders as peers: the Linux bridge, and routing
//! with nftables or IPVS, set up by the committed scripts and rulesets
//! of `examples/peers/` in the system's namespace.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

use super::configs;

/// Runs `script` with `sh -e` in namespace `ns`; an error carries its
/// stderr.
pub fn sh(ns: &str, script: &str) -> Result<()> {
    let out = Command::new("ip").args(["netns", "exec", ns, "sh", "-ec", script]).output()?;
    if !out.status.success() {
        let first = script.lines().find(|l| !l.starts_with('#')).unwrap_or_default();
        bail!("in netns {ns}: `{first}`…: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

pub fn bridge_up(ns: &str) -> Result<()> {
    sh(ns, configs::BRIDGE)
}

pub fn bridge_down(ns: &str) -> Result<()> {
    sh(ns, configs::BRIDGE_DOWN)
}

/// `router.sh`, then the nftables ruleset (`nft -f`) and the IPVS rules
/// (`ipvsadm -R`), each from a file in `dir` so errors name its line.
pub fn router_up(ns: &str, dir: &Path, nft: Option<&str>, ipvs: Option<&str>) -> Result<()> {
    sh(ns, configs::ROUTER)?;
    if let Some(ruleset) = nft {
        let file = dir.join("ruleset.nft");
        std::fs::write(&file, ruleset)?;
        sh(ns, &format!("nft -f {}", file.display()))?;
    }
    if let Some(rules) = ipvs {
        let file = dir.join("ipvs.rules");
        std::fs::write(&file, rules)?;
        sh(ns, &format!("ipvsadm -R < {}", file.display()))?;
    }
    Ok(())
}

pub fn router_down(ns: &str) -> Result<()> {
    sh(ns, configs::ROUTER_DOWN)
}

/// IPVS needs the kernel's IP_VS and ipvsadm: "not supported: needs X"
/// as ipvsadm says it.
pub fn probe_ipvs() -> Result<()> {
    let out = Command::new("ipvsadm").arg("-Ln").output();
    match out {
        Err(_) => bail!("not supported: needs ipvsadm (`make deps` installs it)"),
        Ok(o) if !o.status.success() => bail!(
            "not supported: needs a kernel with IP_VS (ipvsadm: {})",
            String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or_default().trim()
        ),
        Ok(_) => Ok(()),
    }
}

/// nftables: "not supported: needs nft" if missing.
pub fn probe_nft() -> Result<()> {
    match Command::new("nft").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => bail!("not supported: needs nft (`make deps` installs nftables)"),
    }
}
