//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong parsing, creating or destroying a testbed.
///
/// Variants are structured so callers (the CLI, tests) can match on them;
/// the `Display` text is meant to be shown to a person as is.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// Reading or writing a file (spec, state file, marker) failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The spec is malformed (syntax, unknown field, bad value) or
    /// semantically invalid (dangling reference, duplicate device).
    /// `field` is a path like `links[0].a.mac`; empty for the document root.
    #[error("{origin}{}: {}{message}", fmt_loc(*.line, *.column), fmt_field(field))]
    Spec { origin: String, line: Option<usize>, column: Option<usize>, field: String, message: String },

    /// An external command could not be started at all.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },

    /// An external command (usually `ip`) exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },

    /// A command succeeded but printed something we could not understand.
    #[error("unexpected output from `{command}`: {message}")]
    Output { command: String, message: String },

    /// A logical namespace name that the testbed does not have.
    #[error("testbed has no namespace named {name:?}")]
    UnknownNamespace { name: String },

    /// Creating namespaces needs root (CAP_SYS_ADMIN) and iproute2.
    #[error("testbeds need root and iproute2's `ip`: {reason}")]
    Unsupported { reason: String },

    /// `up_detached` found a state file for a testbed that is still up.
    #[error("testbed {name:?} is already up (state file {})", state_file.display())]
    AlreadyUp { name: String, state_file: PathBuf },

    /// `down_by_name` found no state file.
    #[error("testbed {name:?} is not up (no state file {})", state_file.display())]
    NotUp { name: String, state_file: PathBuf },

    /// A state file exists but cannot be parsed.
    #[error("corrupt state file {}: {message}", path.display())]
    State { path: PathBuf, message: String },
}

fn fmt_loc(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

fn fmt_field(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl TestbedError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TestbedError::Io { path: path.into(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_error_display() {
        let e = TestbedError::Spec {
            origin: "examples/x.yaml".into(),
            line: Some(7),
            column: Some(9),
            field: "links[0].a.mac".into(),
            message: "invalid MAC address \"zz\"".into(),
        };
        assert_eq!(e.to_string(), "examples/x.yaml:7:9: links[0].a.mac: invalid MAC address \"zz\"");
    }
}
