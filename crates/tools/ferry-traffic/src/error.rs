//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong while building a profile, a schedule or
/// reading/writing captures. Variants carry enough structure for the CLI to
/// print a precise message (which field, which value, why).
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    /// A range or scalar field failed validation.
    #[error("bad {field} {value:?}: {reason}")]
    BadRange {
        /// Profile field (or CLI flag) name.
        field: &'static str,
        /// The offending input, as text.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A field name given to [`crate::TrafficProfile::set`] is unknown.
    #[error("unknown profile field {0:?}")]
    UnknownField(String),
    /// `ferry_wire::build_frame` refused the frame.
    #[error("cannot build frame: {0}")]
    Wire(#[from] ferry_wire::WireError),
    /// The caller's buffer cannot hold a frame.
    #[error("buffer of {have} bytes cannot hold a {need}-byte frame")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Reading or writing a capture file failed.
    #[error("pcap {path}: {source}")]
    Pcap {
        /// The capture file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: PcapErrorKind,
    },
}

/// The cause inside [`TrafficError::Pcap`].
#[derive(Debug, thiserror::Error)]
pub enum PcapErrorKind {
    /// Plain I/O failure (open, write, flush).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The pcap-file crate rejected the data.
    #[error(transparent)]
    Format(#[from] pcap_file::PcapError),
    /// The file starts with neither a pcap nor a pcapng magic number.
    #[error("not a pcap or pcapng file (magic {0:#010x})")]
    UnknownMagic(u32),
    /// A packet's timestamp cannot be represented.
    #[error("timestamp {0} ns out of range for classic pcap")]
    Timestamp(u64),
}

impl TrafficError {
    pub(crate) fn bad(field: &'static str, value: impl ToString, reason: &'static str) -> Self {
        TrafficError::BadRange { field, value: value.to_string(), reason }
    }

    pub(crate) fn pcap(path: &std::path::Path, source: impl Into<PcapErrorKind>) -> Self {
        TrafficError::Pcap { path: path.to_path_buf(), source: source.into() }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = TrafficError> = std::result::Result<T, E>;
