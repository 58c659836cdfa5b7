//! eFW: a firewall in offloading mode. Source-subnet and destination-port
//! rules run in XDP (allow: on down the chain; deny: dropped there); a frame
//! no fast rule decides goes up to the kernel, where the operator's
//! nftables ruleset (the legacy NF) decides.

use std::io::Write;
use std::process::{Command, Stdio};

use ferry_bpf::hybrid::{FwRule, HybridMaps, FW_ALLOW, FW_DENY};

use crate::config::EvnfSpec;
use crate::config::{FirewallSpec, FwAction};
use crate::hybrid::HybridNf;
use crate::EvnfError;

pub struct Firewall {
    spec: FirewallSpec,
    /// `family name` of each table the nftables ruleset created.
    nft_tables: Vec<String>,
}

impl Firewall {
    pub fn new(spec: FirewallSpec) -> Firewall {
        Firewall { spec, nft_tables: Vec::new() }
    }

    pub fn set_spec(&mut self, spec: FirewallSpec) {
        self.spec = spec;
    }

    /// Applies the kernel half, the nftables ruleset, in the calling
    /// thread's network namespace. It replaces the tables it created
    /// before in one transaction, so a reload never leaves a moment
    /// without them.
    pub fn apply_nftables(&mut self) -> Result<(), EvnfError> {
        let ruleset = self.spec.nftables.clone().unwrap_or_default();
        let new_tables = declared_tables(&ruleset);
        let mut replace = String::new();
        for t in self.nft_tables.iter().chain(&new_tables) {
            // Declaring a table first makes deleting it valid whether or
            // not it exists; nft applies the whole file atomically.
            replace += &format!("table {t} {{}}\ndelete table {t}\n");
        }
        if !replace.is_empty() || !ruleset.is_empty() {
            nft_apply(&(replace + &ruleset))?;
        }
        self.nft_tables = new_tables;
        Ok(())
    }

    /// The tables the ruleset declares that already exist in the calling
    /// thread's namespace (another chain's, or the host's): applying it
    /// would replace them.
    pub fn tables_taken(&self) -> Result<Vec<String>, EvnfError> {
        let out = Command::new("nft")
            .args(["list", "tables"])
            .output()
            .map_err(|e| EvnfError::Nft(format!("not supported: needs nft (apt install nftables): {e}")))?;
        if !out.status.success() {
            return Err(EvnfError::Nft(String::from_utf8_lossy(&out.stderr).trim().to_string()));
        }
        let listed = String::from_utf8_lossy(&out.stdout);
        let present: Vec<&str> = listed.lines().filter_map(|l| l.trim().strip_prefix("table ")).collect();
        let declared = declared_tables(self.spec.nftables.as_deref().unwrap_or_default());
        Ok(declared.into_iter().filter(|t| present.contains(&t.as_str())).collect())
    }

    /// The tables it applied (`family name`).
    pub fn tables(&self) -> &[String] {
        &self.nft_tables
    }

    /// Removes the tables the ruleset created (also on drop).
    pub fn remove_nft_tables(&mut self) {
        for t in self.nft_tables.drain(..) {
            let args: Vec<&str> = ["delete", "table"].into_iter().chain(t.split_whitespace()).collect();
            let _ = Command::new("nft").args(&args).status();
        }
    }
}

/// `family name` of every `table` the ruleset declares.
fn declared_tables(ruleset: &str) -> Vec<String> {
    ruleset
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                // `table NAME {` leaves out the family, which is then ip.
                (Some("table"), Some(name), None | Some("{")) => Some(format!("ip {}", name.trim_end_matches('{'))),
                (Some("table"), Some(family), Some(name)) => {
                    Some(format!("{family} {}", name.trim_end_matches('{').trim()))
                }
                _ => None,
            }
        })
        .collect()
}

/// Applies an nftables ruleset in the calling process's namespace.
pub fn nft_apply(ruleset: &str) -> Result<(), EvnfError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| EvnfError::Nft(format!("not supported: needs nft (apt install nftables): {e}")))?;
    child.stdin.take().expect("piped").write_all(ruleset.as_bytes()).map_err(|e| EvnfError::Nft(e.to_string()))?;
    let out = child.wait_with_output().map_err(|e| EvnfError::Nft(e.to_string()))?;
    if !out.status.success() {
        return Err(EvnfError::Nft(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(())
}

impl HybridNf for Firewall {
    fn name(&self) -> &'static str {
        "firewall"
    }

    /// Rules and the nftables ruleset may change; ferryd re-applies the
    /// ruleset (it needs CAP_NET_ADMIN).
    fn reconfigure(&mut self, spec: &EvnfSpec) -> Result<(), EvnfError> {
        let section = spec.firewall.clone().ok_or_else(|| spec.missing("firewall"))?;
        self.set_spec(section);
        Ok(())
    }

    /// New rules are written over the old ones before stale ones go, so a
    /// reload never leaves a moment without rules. The kernel half is
    /// [`Firewall::apply_nftables`]: it needs CAP_NET_ADMIN, which an
    /// unprivileged control plane does not have.
    fn install(&mut self, fast: &mut HybridMaps) -> Result<(), EvnfError> {
        let (mut subnets, mut ports) = (Vec::new(), Vec::new());
        for (i, r) in self.spec.rules.iter().enumerate() {
            let action = if r.action == FwAction::Allow { FW_ALLOW } else { FW_DENY };
            // Rule ids start at 1 so that id 0 never counts a real rule.
            let rule = FwRule { action, rule_id: i as u32 + 1 };
            match (r.subnet(), r.proto) {
                (Some(subnet), _) => {
                    fast.fw_set_subnet(subnet, rule)?;
                    subnets.push(subnet);
                }
                (None, Some(proto)) => {
                    let port = r.port.unwrap_or(0);
                    fast.fw_set_port(proto.number(), port, rule)?;
                    ports.push((proto.number(), port));
                }
                (None, None) => {}
            }
        }
        fast.fw_retain(&subnets, &ports)?;
        Ok(())
    }

    fn on_tick(&mut self, _fast: &mut HybridMaps, _now_ns: u64) -> Result<(), EvnfError> {
        Ok(())
    }
}

impl Drop for Firewall {
    /// The kernel half goes with the NF, also when starting failed midway.
    fn drop(&mut self) {
        self.remove_nft_tables();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_declared_tables() {
        let rs =
            "table inet ferry_fw {\n  chain input { }\n}\ntable ip nat_x{\n}\n  # table bogus\ntable filter {\n}\n";
        assert_eq!(
            declared_tables(rs),
            vec!["inet ferry_fw".to_string(), "ip nat_x".to_string(), "ip filter".to_string()]
        );
    }
}
