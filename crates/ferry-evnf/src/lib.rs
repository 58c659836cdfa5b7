//! Hybrid NFs (eVNF): each NF has a fast path in XDP (an element of the
//! stage pipeline, `bpf/include/ferry_hybrid.h`, deployed by
//! `ferry_bpf::evnf`) and a control plane / slow path here.
//!
//! * [`hybrid`]: the framework: modes, fast-path tables with idle expiry,
//!   the AF_XDP slow path, the [`hybrid::HybridNf`] trait.
//! * [`firewall`] (eFW, offloading to nftables), [`balancer`] (eLB,
//!   proactive), [`dpi`] (eDPI, reactive, nDPI in the slow path).
//! * [`config`]: the YAML file; [`runner`]: runs one file's NFs.
//!
//! No P4 switch or SmartNIC here: the programmable data plane of the
//! papers is XDP on the device where frames arrive.

pub mod balancer;
pub mod chained;
pub mod config;
pub mod dpi;
pub mod firewall;
pub mod hybrid;
pub mod nat;
pub mod runner;
pub mod types;
pub mod weights;

pub use config::{parse, EvnfSpec};
pub use runner::Runner;

/// Errors of the hybrid NFs.
#[derive(Debug, thiserror::Error)]
pub enum EvnfError {
    #[error(transparent)]
    Bpf(#[from] ferry_bpf::BpfError),
    #[error(transparent)]
    Xsk(#[from] ferry_xsk::XskError),
    #[error("nDPI: {0}")]
    Ndpi(#[from] ferry_ndpi::NdpiError),
    #[error("{0}")]
    Config(String),
    #[error("nftables: {0}")]
    Nft(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// `nf`'s fast-path counters as a JSON object of packet counts.
pub fn counters_json(fast: &ferry_bpf::evnf::EvnfMaps, nf: ferry_bpf::evnf::EvNf) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = fast
        .counters(nf)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, c)| (name.to_string(), serde_json::json!(c.packets)))
        .collect();
    serde_json::Value::Object(map)
}
