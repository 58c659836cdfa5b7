//! Hybrid NFs in a ferryd chain. A chain file names them by kind (`efw`,
//! `elb`, `edpi`, `enat`) with `config=FILE`, an eVNF file whose section of the
//! NF's own it reads. ferryd does the privileged half: it loads the fast
//! paths, chains and attaches them, applies the firewall's nftables
//! ruleset, and creates the eDPI's and eNAT's slow-path sockets. The control plane
//! ([`control_plane`]) runs in the NF host (`ferry-host`) as the NF's unprivileged
//! user, on the map fds ferryd sent it (and, for the eDPI and eNAT,
//! receives the slow path's frames as an NF thread and hands them to a
//! kernel hop).

use std::path::Path;

use ferry_bpf::hybrid::HybridMaps;

use crate::balancer::Balancer;
use crate::config::EvnfSpec;
use crate::dpi::Dpi;
use crate::firewall::Firewall;
use crate::hybrid::HybridNf;
use crate::nat::Nat;
use crate::EvnfError;

/// Reads and checks `path` for hybrid NF type `kind`: the file parses
/// (its errors name its line and field) and has the NF's section. The
/// path is absolute: ferryd starts NFs in `/`.
pub fn config(kind: &str, path: &Path) -> Result<EvnfSpec, String> {
    let name = crate::types::find(kind).ok_or_else(|| format!("{kind} is not a hybrid NF type"))?.section;
    if !path.is_absolute() {
        return Err(format!("config={}: give an absolute path (NFs run with / as working directory)", path.display()));
    }
    let spec = crate::config::parse(path).map_err(|e| e.to_string())?;
    let present = match name {
        "firewall" => spec.firewall.is_some(),
        "balancer" => spec.balancer.is_some(),
        "dpi" => spec.dpi.is_some(),
        _ => spec.nat.is_some(),
    };
    if !present {
        return Err(format!("{}: no `{name}:` section, which {kind} reads", path.display()));
    }
    Ok(spec)
}

/// The control plane of hybrid NF type `kind` over `maps`; it installs
/// its rules when [`HybridNf::install`] is called.
pub fn control_plane(kind: &str, spec: &EvnfSpec, maps: &HybridMaps) -> Result<Box<dyn HybridNf>, EvnfError> {
    match kind {
        "efw" => Ok(Box::new(Firewall::new(spec.firewall.clone().ok_or_else(|| spec.missing("firewall"))?))),
        "elb" => Ok(Box::new(Balancer::new(maps, spec.balancer.clone().ok_or_else(|| spec.missing("balancer"))?)?)),
        "edpi" => Ok(Box::new(Dpi::new(maps, spec.dpi.clone().ok_or_else(|| spec.missing("dpi"))?)?)),
        "enat" => Ok(Box::new(Nat::new(maps, spec.nat.clone().ok_or_else(|| spec.missing("nat"))?)?)),
        _ => Err(EvnfError::Config(format!("{kind}: no control plane runs under ferryd"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_needs_an_absolute_path_and_the_section() {
        assert!(config("efw", Path::new("rel.yaml")).unwrap_err().contains("absolute path"));
        let dir = std::env::temp_dir().join(format!("ferry-chained-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fw.yaml");
        std::fs::write(&file, "firewall:\n  rules:\n    - { src: 10.0.0.0/8, action: deny }\n").unwrap();
        assert!(config("efw", &file).is_ok());
        let err = config("elb", &file).unwrap_err();
        assert!(err.contains("no `balancer:` section"), "{err}");
        std::fs::write(&file, "firewall:\n  rules:\n    - { src: 10.0.0.0/33, action: deny }\n").unwrap();
        let err = config("efw", &file).unwrap_err();
        assert!(err.contains("fw.yaml:3:") && err.contains("firewall.rules[0].src"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
