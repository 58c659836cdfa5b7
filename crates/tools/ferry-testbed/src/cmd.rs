//! Running `ip` and friends, with errors that show the full command line.

use crate::error::TestbedError;
use std::process::{Command, Stdio};

/// Renders a command for error messages (`ip -n fyab12cd-client link set ...`).
pub(crate) fn render(program: &str, args: &[String]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
            s.push_str(&format!("'{}'", a.replace('\'', "'\\''")));
        } else {
            s.push_str(a);
        }
    }
    s
}

/// Runs `program args...` and returns its stdout; a non-zero exit becomes
/// [`TestbedError::Command`] carrying the command line and stderr.
pub(crate) fn run(program: &str, args: &[String]) -> Result<String, TestbedError> {
    let command = render(program, args);
    tracing::debug!(%command, "running");
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TestbedError::Spawn { command: command.clone(), source })?;
    if !out.status.success() {
        return Err(TestbedError::Command {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS...` with string-ish arguments.
pub(crate) fn ip<S: AsRef<str>>(args: &[S]) -> Result<String, TestbedError> {
    let args: Vec<String> = args.iter().map(|s| s.as_ref().to_string()).collect();
    run("ip", &args)
}

/// Checks the preconditions for creating testbeds: effective uid 0 and a
/// working `ip`. Tests call this to decide whether to skip.
pub fn preflight() -> Result<(), TestbedError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(TestbedError::Unsupported { reason: format!("running as uid {euid}, not root") });
    }
    ip(&["-V"]).map_err(|e| TestbedError::Unsupported { reason: e.to_string() })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_quotes() {
        let args = vec!["-c".to_string(), "read _; x".to_string(), "a'b".to_string()];
        assert_eq!(render("sh", &args), "sh -c 'read _; x' 'a'\\''b'");
    }

    #[test]
    fn failing_command_reports_stderr() {
        let e = run("sh", &["-c".into(), "echo oops >&2; exit 3".into()]).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("sh -c 'echo oops >&2; exit 3'"), "{s}");
        assert!(s.contains("oops"), "{s}");
    }
}
