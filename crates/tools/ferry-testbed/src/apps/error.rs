//! The error type of [`crate::apps`].

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong starting, running or measuring an
/// application. Each variant names the application (`app`: `nginx[b1]`,
/// `haproxy`, `wrk`, `iperf3`, `nft`, `curl`, `cpu-meter`, …) and says
/// what failed; the `Display` text is meant to be shown as is.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The options cannot work (threads > connections, CPU not available,
    /// bad name), found before anything was started.
    #[error("{app}: invalid options: {message}")]
    InvalidOptions { app: String, message: String },

    /// Creating the temporary directory or a file in it failed.
    #[error("{app}: cannot write {what} {}: {source}", path.display())]
    Io {
        app: String,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The program could not be started at all (not installed, pre-exec
    /// setup such as CPU pinning failed).
    #[error("{app}: cannot run `{command}`: {source}")]
    Spawn {
        app: String,
        command: String,
        #[source]
        source: std::io::Error,
    },

    /// A server exited, or did not listen in time, during start-up.
    /// `log_tail` is the end of its stderr and log files.
    #[error("{app} did not start: {reason}\n  command: {command}\n  log tail:\n{log_tail}")]
    StartFailed { app: String, command: String, reason: String, log_tail: String },

    /// A client program exited unsuccessfully.
    #[error("{app}: `{command}` failed ({status}): {stderr}")]
    Failed { app: String, command: String, status: String, stderr: String },

    /// A client program ran longer than its wall-clock limit and was killed.
    #[error("{app}: `{command}` did not finish within {limit:?} and was killed; stderr: {stderr}")]
    Timeout { app: String, command: String, limit: Duration, stderr: String },

    /// The program succeeded but reported an error in its output (iperf3
    /// reports a refused connection in its JSON and may still exit 0).
    #[error("{app}: `{command}` reported: {message}")]
    Reported { app: String, command: String, message: String },

    /// The program's output could not be understood.
    #[error("{app}: cannot parse {what}: {message}\n  output tail:\n{output_tail}")]
    Parse { app: String, what: &'static str, message: String, output_tail: String },

    /// `curl_many` saw more than one TCP connection for its URLs.
    #[error("curl: expected one TCP connection for {urls:?}, num_connects per transfer was {per_transfer:?}")]
    ConnectionNotReused { urls: Vec<String>, per_transfer: Vec<u32> },

    /// `curl_many` got a non-2xx answer.
    #[error("curl: GET {url} returned HTTP {status}")]
    HttpStatus { url: String, status: u16 },

    /// Reading `/proc` for the CPU meter failed.
    #[error("cpu-meter: {}: {message}", path.display())]
    Proc { path: PathBuf, message: String },
}

/// The last `max` bytes of `bytes`, lossily decoded, starting at a line
/// boundary when one is near.
pub(crate) fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    let mut s = &bytes[start..];
    if start > 0 {
        if let Some(nl) = s.iter().position(|&b| b == b'\n') {
            s = &s[nl + 1..];
        }
    }
    String::from_utf8_lossy(s).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_cuts_at_a_line() {
        assert_eq!(tail(b"one\ntwo\nthree\n", 100), "one\ntwo\nthree");
        assert_eq!(tail(b"one\ntwo\nthree\n", 8), "three");
        assert_eq!(tail(b"", 8), "");
    }

    #[test]
    fn start_failed_display_names_app_and_log() {
        let e = AppError::StartFailed {
            app: "nginx[b1]".into(),
            command: "ip netns exec x nginx".into(),
            reason: "exited with status 1".into(),
            log_tail: "bind() failed".into(),
        };
        let s = e.to_string();
        assert!(s.starts_with("nginx[b1] did not start: exited with status 1"), "{s}");
        assert!(s.contains("bind() failed"), "{s}");
    }
}
