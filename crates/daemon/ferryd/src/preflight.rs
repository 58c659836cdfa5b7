//! What deploying a chain needs of this machine, checked before anything
//! is set up, and alone by `ferry chain check --live`: the ports'
//! namespaces and devices and what those must fit ([`devices::check`]),
//! the programs of `exec` NFs, and the files NFs read under their own
//! unprivileged uid. Each refusal names the chain file's line and field,
//! and the fix.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Result;
use ferry_chain::plan::{ChainPlan, NfPlan};
use ferry_place::Placement;

use crate::devices::{self, located_in};

/// What is missing, at which field of an NF.
type Refusal = (&'static str, String);

/// Refuses `plan` (placed as `placement`, from chain file `text` named
/// `origin`) if this machine lacks something its deploy needs.
pub fn check(plan: &ChainPlan, placement: &Placement, text: &str, origin: &str) -> Result<()> {
    devices::check(plan, placement, text, origin)?;
    for nf in plan.nfs.iter().filter(|n| n.spawn) {
        if let Some((field, message)) = program_refusal(nf).or_else(|| file_refusal(nf)) {
            return Err(located_in(text, origin, ("nfs", &nf.name), field, message).into());
        }
    }
    Ok(())
}

/// Why `nf`'s program (an `exec` NF's) cannot start, if it cannot.
fn program_refusal(nf: &NfPlan) -> Option<Refusal> {
    let program = nf.exec.as_ref()?.first()?;
    let found = if program.contains('/') { Some(PathBuf::from(program)) } else { on_path(program) };
    let why = match found.as_deref().map(std::fs::metadata) {
        None => "not found on ferryd's PATH".to_string(),
        Some(Err(e)) => e.to_string(),
        Some(Ok(m)) if !m.is_file() => "not a file".to_string(),
        Some(Ok(m)) if m.permissions().mode() & 0o111 == 0 => "not executable".to_string(),
        Some(Ok(_)) => return None,
    };
    Some((
        "exec",
        format!("{program}: {why}: build or install it first (an example's header says how), or give its path"),
    ))
}

/// `program` as a `PATH` lookup finds it.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Why a file `nf` reads when it starts cannot be read by it, if one
/// cannot: it runs as an allocated uid, so only "other" permissions
/// count. An NF running as a named user is not second-guessed.
fn file_refusal(nf: &NfPlan) -> Option<Refusal> {
    if nf.user.is_some() {
        return None;
    }
    let kind = nf.kind.as_deref()?;
    ferry_catalog::files_read(kind, &nf.args).into_iter().find_map(|file| {
        let closed = unreadable_by_others(Path::new(file))?;
        let message = format!(
            "{file}: {} is closed to other users, and the NF runs as an unprivileged uid of its own: `chmod o+r` the \
             file and `o+x` its directories, or give the NF's domain a `user:` who can read it",
            closed.display()
        );
        Some(("args", message))
    })
}

/// The first of `file` (not readable by others) and its directories (not
/// searchable by others) that keeps a stranger out, if one does.
fn unreadable_by_others(file: &Path) -> Option<PathBuf> {
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode()).ok();
    let dirs = file.ancestors().skip(1).filter(|d| !d.as_os_str().is_empty());
    let mut dirs: Vec<&Path> = dirs.collect();
    dirs.reverse();
    if let Some(d) = dirs.into_iter().find(|d| mode(d).is_some_and(|m| m & 0o001 == 0)) {
        return Some(d.to_path_buf());
    }
    mode(file).filter(|m| m & 0o004 == 0).map(|_| file.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_closed_to_others_are_found() {
        let dir = std::env::temp_dir().join(format!("ferry-preflight-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("fw.rules");
        std::fs::write(&file, "default allow\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(unreadable_by_others(&file), None);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(unreadable_by_others(&file), Some(file.clone()));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(unreadable_by_others(&file), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
