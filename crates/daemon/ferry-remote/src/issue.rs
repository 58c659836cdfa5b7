//! `ferry tls init`: the two CAs (hosts, operators), and a key and
//! certificate for each host and for the operator, each certificate
//! naming its holder (a DNS name: what a client checks a server against).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

use crate::{RemoteError, ADMIN, HOSTS_CA, OPERATORS_CA};

/// Writes a new file (never over one, never through a symlink).
fn write(path: &Path, text: &str, mode: u32) -> Result<(), RemoteError> {
    use std::io::Write;
    let err = |source| RemoteError::File { path: path.to_path_buf(), source };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

fn ca(name: &str) -> Result<(rcgen::Certificate, KeyPair), RemoteError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, format!("ferry {name}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok((params.self_signed(&key)?, key))
}

/// Writes both CAs and the keys of `hosts` (signed by the hosts CA) and of
/// the operator (signed by the operators CA) into `dir`, which must not
/// hold any of them yet (keys mode 0600). Host names are DNS labels, and
/// none may be a CA's or the operator's name.
pub fn issue(dir: &Path, hosts: &[String]) -> Result<(), RemoteError> {
    for name in hosts {
        let label =
            !name.is_empty() && name.len() <= 63 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !label || [ADMIN, HOSTS_CA, OPERATORS_CA].contains(&name.as_str()) {
            return Err(RemoteError::BadName(name.clone()));
        }
    }
    ferry_sys::fs::create_private_dir(dir).map_err(|source| RemoteError::File { path: dir.to_path_buf(), source })?;
    let (hosts_ca, hosts_key) = ca(HOSTS_CA)?;
    let (operators_ca, operators_key) = ca(OPERATORS_CA)?;
    for (name, cert, key) in [(HOSTS_CA, &hosts_ca, &hosts_key), (OPERATORS_CA, &operators_ca, &operators_key)] {
        write(&dir.join(format!("{name}.pem")), &cert.pem(), 0o644)?;
        write(&dir.join(format!("{name}.key")), &key.serialize_pem(), 0o600)?;
    }
    let signed =
        hosts.iter().map(|h| (h.as_str(), &hosts_ca, &hosts_key)).chain([(ADMIN, &operators_ca, &operators_key)]);
    for (name, ca_cert, ca_key) in signed {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_string()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, ca_cert, ca_key)?;
        write(&dir.join(format!("{name}.pem")), &cert.pem(), 0o644)?;
        write(&dir.join(format!("{name}.key")), &key.serialize_pem(), 0o600)?;
    }
    Ok(())
}
