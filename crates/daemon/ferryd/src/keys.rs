//! Keys of the NFs ferryd does not start itself (`spawn: false`, or
//! ferryd's `--no-spawn`). ferryd cannot vouch for their pid, so such an
//! NF proves who it is with a secret: 32 random bytes, fresh for each
//! deploy (a persistent ferryd keeps them across its restarts, in its
//! state), in a file only the NF's user can read
//! ([`ferry_chain::proto::key_path`]). The SDK reads it and sends it in
//! hello.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("writing NF key {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("getrandom: {0}")]
    Random(std::io::Error),
}

/// A secret, kept as the hex text the NF sends back.
pub struct NfKey(String);

impl NfKey {
    /// A fresh key written to `path` (`<socket>.keys/<chain>/<nf>`; the
    /// directories root's), readable only by `uid`.
    pub fn issue(path: &Path, uid: u32, gid: u32) -> Result<NfKey, KeyError> {
        let werr = |source| KeyError::Write { path: path.to_path_buf(), source };
        let mut raw = [0u8; 32];
        // SAFETY: getrandom fills the buffer it is given.
        let n = unsafe { libc::getrandom(raw.as_mut_ptr().cast(), raw.len(), 0) };
        if n != raw.len() as isize {
            return Err(KeyError::Random(std::io::Error::last_os_error()));
        }
        let text: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        // `<socket>.keys/` lists the chains (0755: an NF started without
        // FERRY_CHAIN finds its chain there); `<chain>/` only lets an NF
        // reach its own file (0711: no listing).
        if let Some(chain_dir) = path.parent() {
            if let Some(keys_dir) = chain_dir.parent() {
                std::fs::DirBuilder::new().recursive(true).mode(0o755).create(keys_dir).map_err(werr)?;
            }
            std::fs::DirBuilder::new().recursive(true).mode(0o711).create(chain_dir).map_err(werr)?;
        }
        // A stale file of an earlier ferryd may belong to another user.
        let _ = std::fs::remove_file(path);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o400).open(path).map_err(werr)?;
        f.write_all(text.as_bytes()).map_err(werr)?;
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid)).map_err(werr)?;
        Ok(NfKey(text))
    }

    /// A key an earlier ferryd issued, as its state kept it: a persistent
    /// ferryd adopting a chain keeps its NFs' keys (not read back from the
    /// file, which its NF's user owns).
    pub fn known(text: &str) -> NfKey {
        NfKey(text.to_string())
    }

    /// The key's text, for the state of a persistent ferryd.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this key; in time that does not depend on where
    /// they differ.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_key_is_its_users_alone_and_matches_only_itself() {
        let dir = std::env::temp_dir().join(format!("ferry-keys-{}", std::process::id()));
        let path = dir.join("nf");
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let key = NfKey::issue(&path, uid, gid).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.uid()), (0o400, uid));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), 64);
        assert!(key.matches(&text));
        assert!(!key.matches(""));
        assert!(!key.matches(&text[..63]));
        let mut other = text.clone().into_bytes();
        other[63] = if other[63] == b'0' { b'1' } else { b'0' };
        assert!(!key.matches(std::str::from_utf8(&other).unwrap()));
        let again = NfKey::issue(&path, uid, gid).unwrap();
        assert!(!again.matches(&text), "each issue is fresh");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
