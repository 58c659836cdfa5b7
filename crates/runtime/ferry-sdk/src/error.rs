use ferry_chain::proto::ProtoError;

#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    #[error("{var} is not set: start this NF from ferryd, or set {var}")]
    MissingEnv { var: &'static str },
    #[error("cannot reach ferryd at {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ferryd refused NF {nf:?}: {message}")]
    Refused { nf: String, message: String },
    #[error("protocol: {0}")]
    Proto(#[from] ProtoError),
    #[error("cannot make the NF non-dumpable (prctl PR_SET_DUMPABLE): {0}")]
    Undumpable(std::io::Error),
    #[error("ferryd sent {got} fds for {want} roles")]
    FdCount { got: usize, want: usize },
    #[error("shared memory: {0}")]
    Ring(#[from] ferry_ring::RingError),
    #[error("AF_XDP: {0}")]
    Xsk(#[from] ferry_xsk::XskError),
    /// ferryd asked the NF to stop, or went away: the NF should exit.
    #[error("stopped: {reason}")]
    Stopped { reason: &'static str },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
