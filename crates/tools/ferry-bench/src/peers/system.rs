//! The systems `ferry bench peers` compares, as data: each one's
//! scenario, how it is set up, and where the generator addresses frames.

use serde::Serialize;

use super::configs;

/// What the systems of one group do to the generator's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// d0 -> d1, nothing else.
    PortToPort,
    /// FLASH's firewall: 1000 deny rules no frame matches, then allow.
    #[serde(rename = "acl-1000")]
    Acl1000,
    /// A UDP VIP spread over 4 backends.
    #[serde(rename = "lb-4")]
    Lb4,
    /// Source NAT of every flow to one public address.
    Nat,
    /// ACL -> NAT -> forward.
    Chain,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::PortToPort => "port-to-port",
            Scenario::Acl1000 => "acl-1000",
            Scenario::Lb4 => "lb-4",
            Scenario::Nat => "nat",
            Scenario::Chain => "chain",
        }
    }

    /// The generator's overrides of its default profile (UDP from
    /// 10.0.0.0/16 to 10.1.0.0/16, 64 B): the balancer's VIP.
    pub fn gen_overrides(self) -> &'static [&'static str] {
        match self {
            Scenario::Lb4 => &["dst-ip=10.9.9.9/32", "dst-port=80"],
            _ => &[],
        }
    }
}

/// How a system is set up in the testbed's `dut` namespace.
#[derive(Debug, Clone, Copy)]
pub enum Setup {
    /// Open vSwitch, AF_XDP ports d0 (1) and d1 (2), these flows.
    Ovs { flows: &'static str },
    /// The Linux bridge over d0 and d1 (`bridge.sh`).
    Bridge,
    /// `router.sh`, then an nftables ruleset and/or IPVS rules.
    Router { nft: Option<&'static str>, ipvs: Option<&'static str> },
    /// A Ferry chain file, its placeholders filled; `router` for NFs
    /// whose XDP fast path forwards by the kernel's FIB.
    Ferry { chain: &'static str, offload: &'static str, busy: bool, router: bool },
}

macro_rules! systems {
    ($($variant:ident $name:literal $scenario:ident $doc:literal,)*) => {
        /// A system that takes the generator's frames in at d0 and sends
        /// them out of d1.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
        pub enum System { $(#[doc = $doc] #[serde(rename = $name)] $variant,)* }

        impl System {
            pub const ALL: &'static [System] = &[$(System::$variant),*];

            pub fn name(self) -> &'static str {
                match self { $(System::$variant => $name,)* }
            }

            pub fn scenario(self) -> Scenario {
                match self { $(System::$variant => Scenario::$scenario,)* }
            }

            /// What it is, one line for the report.
            pub fn what(self) -> &'static str {
                match self { $(System::$variant => $doc,)* }
            }
        }
    };
}

systems! {
    OvsAfxdp "ovs-afxdp" PortToPort "Open vSwitch userspace datapath, AF_XDP ports (native mode), one in_port flow, PMD on the system's CPU",
    LinuxBridge "linux-bridge" PortToPort "the Linux bridge, learning and flooding off, a static FDB entry, RPS to the system's CPU",
    FerryProcess "ferry-process" PortToPort "fwd as an AF_XDP process on the system's CPU (smart polling)",
    FerryProcessBusy "ferry-process-busy" PortToPort "fwd as an AF_XDP process, busy polling (spins as OVS's PMD does)",
    FerryXdp "ferry-xdp" PortToPort "fwd placed in XDP (offload: auto): d0's stage pipeline redirects out of d1",
    NftLinear "nft-linear" Acl1000 "routing + nftables forward chain of 1000 `ip saddr X drop` rules, RPS",
    NftSet "nft-set" Acl1000 "routing + nftables, the 1000 addresses in one set (`ip saddr @deny drop`), RPS",
    OvsAcl "ovs-afxdp-acl" Acl1000 "Open vSwitch AF_XDP, the 1000 rules as drop flows over the forwarding flow",
    FerryFirewall "ferry-firewall" Acl1000 "firewall NF as a process, bit-vector classifier (the XDP ACL element holds 32 rules)",
    FerryFirewallBusy "ferry-firewall-busy" Acl1000 "the same firewall process, busy polling",
    FerryEfw "ferry-efw" Acl1000 "the hybrid eFW: the 1000 rules in its XDP LPM trie, routed by the FIB from XDP",
    IpvsNat "ipvs-nat" Lb4 "IPVS, NAT mode (ipvsadm), round robin over 4 backends",
    IpvsDr "ipvs-dr" Lb4 "IPVS, direct routing (ipvsadm), round robin over 4 backends",
    NftLb "nft-lb" Lb4 "routing + nftables DNAT to numgen random mod 4 (kube-proxy's nftables mode), conntrack, RPS",
    FerryElb "ferry-elb" Lb4 "the hybrid eLB: backend chosen and rewritten in XDP, routed by the FIB from XDP",
    NftMasquerade "nft-masquerade" Nat "routing + nftables masquerade out of d1 (conntrack), RPS",
    FerryNatSplit "ferry-enat-split" Nat "eNAT split (offload: auto): mappings in XDP, a new endpoint's first frame to its process",
    FerryNatWhole "ferry-enat-whole" Nat "eNAT whole (offload: never): an AF_XDP process",
    NftChain "nft-chain" Chain "routing + nftables: the 1000 addresses as a set in forward, masquerade in postrouting, RPS",
    OvsChain "ovs-afxdp-chain" Chain "Open vSwitch AF_XDP: the 1000 drop flows, then ct(commit,nat(src=...)) and output",
    FerryChain "ferry-chain" Chain "firewall (1000 rules) -> eNAT -> fwd, placed by offload: auto",
}

impl System {
    pub fn setup(self) -> Setup {
        let ferry = |chain, offload, busy| Setup::Ferry { chain, offload, busy, router: false };
        let nft = |file| Setup::Router { nft: Some(file), ipvs: None };
        match self {
            System::OvsAfxdp => Setup::Ovs { flows: configs::OVS_PORT_TO_PORT },
            System::OvsAcl => Setup::Ovs { flows: configs::OVS_ACL_1000 },
            System::OvsChain => Setup::Ovs { flows: configs::OVS_CHAIN },
            System::LinuxBridge => Setup::Bridge,
            System::NftLinear => nft(configs::NFT_ACL_LINEAR),
            System::NftSet => nft(configs::NFT_ACL_SET),
            System::NftLb => nft(configs::NFT_LB),
            System::NftMasquerade => nft(configs::NFT_MASQUERADE),
            System::NftChain => nft(configs::NFT_CHAIN),
            System::IpvsNat => Setup::Router { nft: None, ipvs: Some(configs::IPVS_NAT) },
            System::IpvsDr => Setup::Router { nft: None, ipvs: Some(configs::IPVS_DR) },
            System::FerryProcess => ferry(configs::FERRY_FWD, "never", false),
            System::FerryProcessBusy => ferry(configs::FERRY_FWD, "never", true),
            System::FerryXdp => ferry(configs::FERRY_FWD, "auto", false),
            System::FerryFirewall => ferry(configs::FERRY_FIREWALL, "never", false),
            System::FerryFirewallBusy => ferry(configs::FERRY_FIREWALL, "never", true),
            System::FerryNatSplit => ferry(configs::FERRY_ENAT, "auto", false),
            System::FerryNatWhole => ferry(configs::FERRY_ENAT, "never", false),
            System::FerryChain => ferry(configs::FERRY_CHAIN, "auto", false),
            System::FerryEfw => Setup::Ferry { chain: configs::FERRY_EFW, offload: "auto", busy: false, router: true },
            System::FerryElb => Setup::Ferry { chain: configs::FERRY_ELB, offload: "auto", busy: false, router: true },
        }
    }

    pub fn is_ferry(self) -> bool {
        matches!(self.setup(), Setup::Ferry { .. })
    }

    /// Whether it forwards in the kernel's stack, which RPS can move to
    /// the system's CPU (the kernel's documented way to spread a one-queue
    /// device's receive work).
    pub fn uses_stack(self) -> bool {
        matches!(self.setup(), Setup::Bridge | Setup::Router { .. })
    }

    /// Whether it forwards in d0's XDP hook, which runs in d0's NAPI poll:
    /// threaded NAPI gives it the system's CPU, as RPS gives the stack
    /// systems theirs (on a NIC, the IRQ's CPU would run it).
    pub fn forwards_in_xdp(self) -> bool {
        matches!(self, System::FerryXdp | System::FerryEfw | System::FerryElb | System::FerryNatSplit)
    }

    /// Whether it routes: the generator's frames go to d0's MAC.
    pub fn routes(self) -> bool {
        matches!(self.setup(), Setup::Router { .. } | Setup::Ferry { router: true, .. })
    }
}

/// Parses `--systems`.
pub fn parse_system(s: &str) -> Result<System, String> {
    System::ALL.iter().copied().find(|x| x.name() == s).ok_or_else(|| {
        let names: Vec<&str> = System::ALL.iter().map(|x| x.name()).collect();
        format!("unknown system {s:?} ({})", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_has_a_peer_and_a_ferry_system() {
        for sc in [Scenario::PortToPort, Scenario::Acl1000, Scenario::Lb4, Scenario::Nat, Scenario::Chain] {
            let of = |ferry: bool| System::ALL.iter().any(|s| s.scenario() == sc && s.is_ferry() == ferry);
            assert!(of(true) && of(false), "{}", sc.name());
        }
    }

    #[test]
    fn scenarios_have_one_name_in_the_table_and_the_json() {
        for sc in [Scenario::PortToPort, Scenario::Acl1000, Scenario::Lb4, Scenario::Nat, Scenario::Chain] {
            assert_eq!(serde_json::to_value(sc).unwrap(), sc.name());
        }
    }

    #[test]
    fn names_parse_back() {
        for &s in System::ALL {
            assert_eq!(parse_system(s.name()), Ok(s));
        }
        assert!(parse_system("vpp").unwrap_err().contains("ovs-afxdp"));
    }
}
