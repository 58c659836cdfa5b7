//! The peers' and Ferry's configurations, as committed in
//! `examples/peers/`: what the bench runs is what the repository shows.
//!
//! The 1000-rule ACL is FLASH's firewall (`examples/chains/
//! flash-fw-1000.rules`); its nftables, OpenFlow and eFW forms are
//! converted from it here, and a test holds the committed files to the
//! conversion (`FERRY_BLESS=1 cargo test -p ferry-bench` rewrites them).

macro_rules! peers_file {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/peers/", $file))
    };
}

pub const ROUTER: &str = peers_file!("router.sh");
pub const ROUTER_DOWN: &str = peers_file!("router-down.sh");
pub const BRIDGE: &str = peers_file!("bridge.sh");
pub const BRIDGE_DOWN: &str = peers_file!("bridge-down.sh");
pub const NFT_ACL_LINEAR: &str = peers_file!("acl-1000-linear.nft");
pub const NFT_ACL_SET: &str = peers_file!("acl-1000-set.nft");
pub const NFT_LB: &str = peers_file!("lb-4.nft");
pub const NFT_MASQUERADE: &str = peers_file!("nat-masquerade.nft");
pub const NFT_CHAIN: &str = peers_file!("chain.nft");
pub const IPVS_NAT: &str = peers_file!("ipvs-nat.rules");
pub const IPVS_DR: &str = peers_file!("ipvs-dr.rules");
pub const OVS_PORT_TO_PORT: &str = peers_file!("ovs-port-to-port.flows");
pub const OVS_ACL_1000: &str = peers_file!("ovs-acl-1000.flows");
pub const OVS_CHAIN: &str = peers_file!("ovs-chain.flows");
pub const FERRY_FWD: &str = peers_file!("ferry-fwd.yaml");
pub const FERRY_FIREWALL: &str = peers_file!("ferry-firewall.yaml");
pub const FERRY_EFW: &str = peers_file!("ferry-efw.yaml");
pub const FERRY_ELB: &str = peers_file!("ferry-elb.yaml");
pub const FERRY_ENAT: &str = peers_file!("ferry-enat.yaml");
pub const FERRY_CHAIN: &str = peers_file!("ferry-chain.yaml");

/// Files Ferry's chains name by `{dir}/NAME`: written next to the filled
/// chain file before it starts.
pub const FERRY_FILES: [(&str, &str); 4] = [
    ("acl-1000.rules", FLASH_RULES),
    ("efw-acl-1000.yaml", peers_file!("efw-acl-1000.yaml")),
    ("elb-4.yaml", peers_file!("elb-4.yaml")),
    ("enat.yaml", peers_file!("enat.yaml")),
];

/// FLASH's 1000-rule firewall in Ferry's rule language.
pub const FLASH_RULES: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/chains/flash-fw-1000.rules"));

/// The source addresses FLASH's rules deny, in order (`deny src A/32`).
pub fn acl_sources() -> impl Iterator<Item = &'static str> {
    FLASH_RULES.lines().filter_map(|l| l.strip_prefix("deny src")?.trim().strip_suffix("/32"))
}

const GENERATED: &str = "Generated from examples/chains/flash-fw-1000.rules (FLASH's 1000 rules); a test checks it.";

/// The ACL as an nftables forward chain: a rule per address (`set:
/// false`), or one rule over a set of them, what nftables users write.
pub fn nft_acl(set: bool) -> String {
    let what = if set { "the 1000 addresses in one set" } else { "one rule per address, in order" };
    let mut t = format!("# FLASH's firewall in nftables' forward path: {what}.\n# {GENERATED}\n");
    t += "table ip ferry_peers {\n";
    if set {
        t += &deny_set();
    }
    t += "  chain forward {\n    type filter hook forward priority filter; policy accept;\n";
    if set {
        t += "    ip saddr @deny drop\n";
    } else {
        acl_sources().for_each(|a| t += &format!("    ip saddr {a} drop\n"));
    }
    t + "  }\n}\n"
}

fn deny_set() -> String {
    let elements: Vec<&str> = acl_sources().collect();
    format!("  set deny {{\n    type ipv4_addr\n    elements = {{ {} }}\n  }}\n", elements.join(", "))
}

/// ACL -> NAT -> forward in nftables: the set in forward, masquerade out
/// of d1.
pub fn nft_chain() -> String {
    let mut t = format!(
        "# ACL -> NAT -> forward in nftables: FLASH's 1000 addresses as a set, then masquerade.\n# {GENERATED}\n"
    );
    t += "table ip ferry_peers {\n";
    t += &deny_set();
    t += "  chain forward {\n    type filter hook forward priority filter; policy accept;\n    ip saddr @deny drop\n  }\n";
    t += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname \"d1\" masquerade\n  }\n";
    t + "}\n"
}

/// The ACL as OpenFlow flows (ovs-ofctl add-flows): a drop flow per
/// address over the forwarding flow.
pub fn ovs_acl() -> String {
    let mut t = format!("# FLASH's firewall as OpenFlow flows over port 1 -> 2.\n# {GENERATED}\n");
    acl_sources().for_each(|a| t += &format!("priority=100,ip,in_port=1,nw_src={a},actions=drop\n"));
    t + "priority=1,in_port=1,actions=output:2\n"
}

/// ACL -> NAT -> forward in OVS: the drop flows, then the userspace
/// conntrack's source NAT (the address and range the eNAT uses), then
/// port 2.
pub fn ovs_chain() -> String {
    let mut t =
        format!("# ACL -> NAT -> forward in Open vSwitch: FLASH's drop flows, conntrack NAT, output.\n# {GENERATED}\n");
    acl_sources().for_each(|a| t += &format!("priority=100,ip,in_port=1,nw_src={a},actions=drop\n"));
    t += "priority=10,ip,in_port=1,actions=ct(commit,table=1,nat(src=10.9.0.254:1024-65535))\n";
    t + "table=1,priority=10,ip,actions=output:2\n"
}

/// The ACL as the hybrid eFW's section: a deny rule per address (its
/// XDP LPM trie), then allow UDP, the generator's protocol.
pub fn efw_acl() -> String {
    let mut t =
        format!("# FLASH's firewall as the eFW's fast rules (its XDP LPM trie), then allow UDP.\n# {GENERATED}\n");
    t += "firewall:\n  rules:\n";
    acl_sources().for_each(|a| t += &format!("    - {{ src: {a}/32, action: deny }}\n"));
    t + "    - { proto: udp, action: allow }\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_configs_are_the_conversion_of_flashs_rules() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/peers/");
        let bless = std::env::var_os("FERRY_BLESS").is_some();
        let files = [
            ("acl-1000-linear.nft", nft_acl(false), NFT_ACL_LINEAR),
            ("acl-1000-set.nft", nft_acl(true), NFT_ACL_SET),
            ("chain.nft", nft_chain(), NFT_CHAIN),
            ("ovs-acl-1000.flows", ovs_acl(), OVS_ACL_1000),
            ("ovs-chain.flows", ovs_chain(), OVS_CHAIN),
            ("efw-acl-1000.yaml", efw_acl(), FERRY_FILES[1].1),
        ];
        for (name, made, committed) in files {
            if bless {
                std::fs::write(format!("{dir}{name}"), &made).unwrap();
            } else {
                assert!(
                    made == committed,
                    "examples/peers/{name} differs from its conversion: FERRY_BLESS=1 rewrites it"
                );
            }
        }
    }

    #[test]
    fn every_committed_file_is_read_by_the_bench_and_listed_in_the_readme() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/peers/");
        let (source, readme) = (include_str!("configs.rs"), include_str!("../../../../../examples/peers/README.md"));
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name != "README.md" {
                assert!(source.contains(&format!("\"{name}\"")), "examples/peers/{name} is not read by the bench");
                assert!(readme.contains(&format!("`{name}`")), "examples/peers/README.md does not list {name}");
            }
        }
    }

    #[test]
    fn the_acl_is_flashs_1000_addresses() {
        assert_eq!(acl_sources().count(), 1000);
        assert_eq!(acl_sources().next(), Some("192.168.0.1"));
        assert_eq!(ovs_acl().lines().filter(|l| l.ends_with("actions=drop")).count(), 1000);
    }
}
