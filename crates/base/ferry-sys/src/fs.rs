//! Directories a daemon keeps to itself.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// Creates `dir` for its owner only (0700), if it is not there yet, and
/// its missing parents as any directory is made (0777 less the umask).
///
/// A recursive create with one mode would make the parents private too:
/// `/run/ferry` made 0700 on the way to `/run/ferry/uids` hides
/// `/run/ferry/ferryd.sock` from every NF, which runs as its own uid.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_the_directory_itself_is_private() {
        let base = std::env::temp_dir().join(format!("ferry-sys-fs-{}", std::process::id()));
        let private = base.join("run/ferry/uids");
        create_private_dir(&private).unwrap();
        create_private_dir(&private).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&private), 0o700);
        // The parents are made as create_dir_all makes any directory.
        let plain = base.join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        assert_eq!(mode(&base.join("run/ferry")), mode(&plain));
        assert_ne!(mode(&base.join("run/ferry")), 0o700, "a parent made private");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
