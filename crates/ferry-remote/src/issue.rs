//! `ferry tls init`: a deployment CA, and a key and certificate for each
//! host and for the operator, each certificate naming its holder (a DNS
//! name: what a client checks a server against).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

use crate::{RemoteError, ADMIN};

fn write(path: &Path, text: &str, mode: u32) -> Result<(), RemoteError> {
    use std::io::Write;
    let err = |source| RemoteError::File { path: path.to_path_buf(), source };
    let mut f =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

/// Writes a new CA and the keys of `hosts` and of the operator into `dir`
/// (keys mode 0600). Names must be valid DNS labels.
pub fn issue(dir: &Path, hosts: &[String]) -> Result<(), RemoteError> {
    std::fs::create_dir_all(dir).map_err(|source| RemoteError::File { path: dir.to_path_buf(), source })?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "ferry deployment CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    write(&dir.join("ca.pem"), &ca_cert.pem(), 0o644)?;
    write(&dir.join("ca.key"), &ca_key.serialize_pem(), 0o600)?;
    for name in hosts.iter().map(String::as_str).chain([ADMIN]) {
        if name.is_empty() || name.len() > 63 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(RemoteError::BadName(name.into()));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_string()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
        write(&dir.join(format!("{name}.pem")), &cert.pem(), 0o644)?;
        write(&dir.join(format!("{name}.key")), &key.serialize_pem(), 0o600)?;
    }
    Ok(())
}
