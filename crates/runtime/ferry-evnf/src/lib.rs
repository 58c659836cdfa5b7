//! Hybrid NFs (eVNF): each NF has a fast path in XDP (an element of the
//! stage pipeline, `bpf/include/ferry_hybrid.h`, deployed by
//! `ferry_bpf::hybrid`) and a control plane / slow path here.
//!
//! * [`hybrid`]: the framework: fast-path tables with idle expiry, the
//!   [`hybrid::HybridNf`] trait a control plane implements.
//! * [`firewall`] (eFW, offloading to nftables), [`balancer`] (eLB,
//!   proactive), [`dpi`] (eDPI, reactive, nDPI in the slow path), [`nat`]
//!   (eNAT, reactive).
//! * [`config`]: the NFs' configuration file; [`types`]: the hybrid NF
//!   types' descriptors; [`chained`]: their control planes in a ferryd
//!   chain, where they run (the NF host, `ferry-host`).
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
pub mod types;
pub mod weights;

pub use config::{parse, EvnfSpec};

/// Errors of the hybrid NFs.
#[derive(Debug, thiserror::Error)]
pub enum EvnfError {
    #[error(transparent)]
    Bpf(#[from] ferry_bpf::BpfError),
    #[error("nDPI: {0}")]
    Ndpi(#[from] ferry_ndpi::NdpiError),
    #[error("{0}")]
    Config(String),
    #[error("nftables: {0}")]
    Nft(String),
}
