//! What deploying a chain needs of this machine, checked before anything
//! is set up, and alone by `ferry chain check --live`: the ports'
//! namespaces and devices and what those must fit ([`devices::check`]),
//! the users NFs name, the programs of `exec` NFs, and the files NFs read,
//! which an allocated uid reaches through "other" permissions only. Each
//! refusal names the chain file's line and field, and the fix.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Result;
use ferry_chain::plan::{ChainPlan, NfPlan};
use ferry_place::Placement;

use crate::devices::{self, located_in};

/// What is missing, at which field of an NF.
use crate::devices::Refusal;

/// Refuses `plan` (placed as `placement`, from chain file `text` named
/// `origin`) if this machine lacks something its deploy needs.
pub fn check(plan: &ChainPlan, placement: &Placement, text: &str, origin: &str) -> Result<()> {
    devices::check(plan, placement, text, origin)?;
    for nf in plan.nfs.iter().filter(|n| n.spawn) {
        let refusal = user_refusal(nf).or_else(|| program_refusal(nf)).or_else(|| file_refusal(nf));
        if let Some((field, message)) = refusal {
            return Err(located_in(text, origin, ("nfs", &nf.name), field, message).into());
        }
    }
    Ok(())
}

/// Why the user `nf` names does not exist here, if it does not.
fn user_refusal(nf: &NfPlan) -> Option<Refusal> {
    let name = nf.user.as_deref()?;
    let message = format!(
        "no user {name:?} on this machine: create it (`useradd --system {name}`), or leave `user:` out and the NF \
         runs as a uid ferryd allocates"
    );
    crate::users::lookup_user(name).is_none().then_some(("user", message))
}

/// Why `nf`'s program (an `exec` NF's) cannot start, if it cannot. It
/// starts in `/`, so a relative path with a `/` is refused; under an
/// allocated uid it must be executable by others.
fn program_refusal(nf: &NfPlan) -> Option<Refusal> {
    let program = nf.exec.as_ref()?.first()?;
    if program.contains('/') && !program.starts_with('/') {
        return Some(("exec", format!("{program}: a relative path, and the NF starts in `/`: give an absolute one")));
    }
    let found = if program.contains('/') { Some(PathBuf::from(program)) } else { on_path(program) };
    let why = match found.as_deref().map(|p| (p, std::fs::metadata(p))) {
        None => "not found on ferryd's PATH".to_string(),
        Some((_, Err(e))) => e.to_string(),
        Some((_, Ok(m))) if !m.is_file() => "not a file".to_string(),
        Some((_, Ok(m))) if m.permissions().mode() & 0o111 == 0 => "not executable".to_string(),
        Some(_) if nf.user.is_some() => return None,
        Some((p, Ok(_))) => match closed_to_others(p, 0o001) {
            None => return None,
            Some(closed) => {
                let message = format!(
                    "{program}: {} is closed to other users, and the NF runs as an unprivileged uid of its own: \
                     `chmod o+x` it and its directories, or give the NF's domain a `user:` who can run it",
                    closed.display()
                );
                return Some(("exec", message));
            }
        },
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
        let closed = closed_to_others(Path::new(file), 0o004)?;
        let message = format!(
            "{file}: {} is closed to other users, and the NF runs as an unprivileged uid of its own: `chmod o+r` the \
             file and `o+x` its directories, or give the NF's domain a `user:` who can read it",
            closed.display()
        );
        Some(("args", message))
    })
}

/// The first of `file` (without the "other" permission bits `bits`:
/// read 0o004, execute 0o001) and its directories (not searchable by
/// others) that keeps a stranger out, if one does; links followed.
pub(crate) fn closed_to_others(file: &Path, bits: u32) -> Option<PathBuf> {
    let file = std::fs::canonicalize(file).ok()?;
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode()).ok();
    let mut dirs: Vec<&Path> = file.ancestors().skip(1).collect();
    dirs.reverse();
    if let Some(d) = dirs.into_iter().find(|d| mode(d).is_some_and(|m| m & 0o001 == 0)) {
        return Some(d.to_path_buf());
    }
    mode(&file).filter(|m| m & bits == 0).map(|_| file.clone())
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
        assert_eq!(closed_to_others(&file, 0o004), None);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(closed_to_others(&file, 0o004), Some(file.clone()));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(closed_to_others(&file, 0o004), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
