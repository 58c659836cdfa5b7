//! Ferry's systems: a committed chain file of `examples/peers/`, its
//! placeholders filled, started by ferryd as `ferry chain up` starts it.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use ferry_cli::chainctl::{self, RunningChain};
use ferry_cli::proc::wait_for_xdp;

use super::configs;

/// The chain file with its placeholders filled: `{dut}` the namespace,
/// `{dir}` where [`configs::FERRY_FILES`] are written, `{offload}`,
/// `{cpu}` and `{poll}`.
pub fn fill(template: &str, dut: &str, dir: &Path, offload: &str, cpu: usize, busy: bool) -> Result<String> {
    let filled = template
        .replace("{dut}", dut)
        .replace("{dir}", &dir.display().to_string())
        .replace("{offload}", offload)
        .replace("{cpu}", &cpu.to_string())
        .replace("{poll}", &format!("poll: {{ busy: {busy} }}"));
    if let Some(at) =
        filled.lines().find(|l| !l.starts_with('#') && l.contains("{") && l.contains("}") && has_placeholder(l))
    {
        bail!("a placeholder left unfilled in a peers chain file: {at}");
    }
    Ok(filled)
}

/// Whether `line` holds a `{word}` placeholder (YAML flow maps hold
/// `{ ` with a space).
fn has_placeholder(line: &str) -> bool {
    line.match_indices('{').any(|(i, _)| line[i + 1..].chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
}

/// Writes the chain's files and the filled chain into `dir`, starts the
/// chain (ferryd on a socket in `dir`) and waits until d0 carries its
/// XDP program.
pub fn up(template: &str, dut: &str, dir: &Path, offload: &str, cpu: usize, busy: bool) -> Result<RunningChain> {
    for (name, text) in configs::FERRY_FILES {
        std::fs::write(dir.join(name), text)?;
    }
    let chain = dir.join("chain.yaml");
    std::fs::write(&chain, fill(template, dut, dir, offload, cpu, busy)?)?;
    let rc = chainctl::start(&chain, &dir.join("peers.sock"), true).context("starting ferryd")?;
    wait_for_xdp(dut, "d0", Duration::from_secs(30))?;
    Ok(rc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chain_file_fills_and_parses() {
        let dir = std::env::temp_dir().join(format!("ferry-peers-fill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in configs::FERRY_FILES {
            std::fs::write(dir.join(name), text).unwrap();
        }
        for t in [
            configs::FERRY_FWD,
            configs::FERRY_FIREWALL,
            configs::FERRY_EFW,
            configs::FERRY_ELB,
            configs::FERRY_ENAT,
            configs::FERRY_CHAIN,
        ] {
            let filled = fill(t, "dut-1", &dir, "auto", 1, true).unwrap();
            let spec = ferry_chain::spec::ChainSpec::from_yaml_str(&filled, "peers.yaml", &ferry_catalog::Catalog);
            assert!(spec.is_ok(), "{filled}\n{}", spec.err().map(|e| e.to_string()).unwrap_or_default());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
