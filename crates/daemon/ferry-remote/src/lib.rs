//! The control channel between hosts: ferryd's admin protocol
//! ([`ferry_chain::proto`], the same frames as on its root-only Unix
//! socket) over TLS 1.3/1.2 with mutual authentication (rustls).
//!
//! Why mutual TLS: a ferryd's admin requests deploy NFs and XDP programs
//! as root, so the listener must know who asks, not just encrypt. Each
//! host and each operator holds its own key, and there is no password or
//! shared secret. Two CAs sign them: the *hosts* CA signs each host's
//! certificate (what a server shows, and what a host's probes of the
//! other hosts present), the *operators* CA signs the operators'. A
//! server takes only clients one of the two signed, and answers a host
//! only a status request ([`Role::Host`]): a host's key, which must sit on
//! that host, is no key to the others. The client takes only a server
//! whose certificate the hosts CA signed for the host it dialled. rustls
//! over OpenSSL: no C library to keep patched besides ring's primitives,
//! and no legacy protocol versions to turn off.
//!
//! A TLS directory (`ferry tls init DIR --hosts h1,h2`) holds
//! `hosts-ca.pem`/`.key`, `operators-ca.pem`/`.key` (keep both keys
//! offline once every key is issued), `<host>.pem`/`.key` per host, and
//! `admin.pem`/`.key` for the operator. A host needs both CA certificates
//! and its own key; the operator the hosts CA certificate and its key.

mod issue;
mod listen;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferry_chain::proto::{self, Msg, ProtoError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConnection, RootCertStore, ServerConfig, ServerConnection, StreamOwned};

pub use issue::issue;
pub use listen::{serve, Answer, ListenerStats};
pub use rustls::ClientConfig;

/// The operator's identity in a TLS directory.
pub const ADMIN: &str = "admin";
/// The CA that signs hosts' certificates.
pub const HOSTS_CA: &str = "hosts-ca";
/// The CA that signs operators' certificates.
pub const OPERATORS_CA: &str = "operators-ca";

/// Who a client proved to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An operator (the operators CA signed its key): every request.
    Operator,
    /// Another host (the hosts CA signed its key): status only.
    Host,
}

/// How long a peer may take to say something (a request, a reply).
const IDLE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
    #[error("TLS verifier: {0}")]
    Verifier(String),
    #[error("{0:?} is not a host name a certificate can carry")]
    BadName(String),
    #[error("connecting to {addr}: {source}")]
    Connect { addr: String, source: std::io::Error },
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error("host {host} is reached over TLS: a TLS directory is needed")]
    NoTls { host: String },
    #[error("issuing certificates: {0}")]
    Issue(#[from] rcgen::Error),
}

/// A TLS directory.
pub struct TlsDir(PathBuf);

impl TlsDir {
    pub fn new(dir: &Path) -> TlsDir {
        TlsDir(dir.to_path_buf())
    }

    /// Whoever may write the directory chooses whom a server trusts: it
    /// must be this user's, and no one else's to write.
    fn check(&self) -> Result<(), RemoteError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&self.0).map_err(|source| RemoteError::File { path: self.0.clone(), source })?;
        // SAFETY: plain getter.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(RemoteError::Pem {
                path: self.0.clone(),
                reason: format!("not a directory of uid {me} that only it may write: refusing to trust it"),
            });
        }
        Ok(())
    }

    /// The certificates of the CAs `names`.
    fn roots(&self, names: &[&str]) -> Result<RootCertStore, RemoteError> {
        let mut roots = RootCertStore::empty();
        for name in names {
            for cert in certs(&self.0.join(format!("{name}.pem")))? {
                roots.add(cert)?;
            }
        }
        Ok(roots)
    }

    /// `name`'s certificate chain and key.
    fn identity(&self, name: &str) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), RemoteError> {
        let key_path = self.0.join(format!("{name}.key"));
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| RemoteError::Pem { path: key_path.clone(), reason: e.to_string() })?;
        Ok((certs(&self.0.join(format!("{name}.pem")))?, key))
    }

    /// A server of host `host`: its own certificate, and clients either
    /// CA signed, only; with what tells an operator from a host.
    pub fn server(&self, host: &str) -> Result<Server, RemoteError> {
        self.check()?;
        let verifier = |cas: &[&str]| -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, RemoteError> {
            WebPkiClientVerifier::builder(Arc::new(self.roots(cas)?))
                .build()
                .map_err(|e| RemoteError::Verifier(e.to_string()))
        };
        let (chain, key) = self.identity(host)?;
        let config = ServerConfig::builder()
            .with_client_cert_verifier(verifier(&[HOSTS_CA, OPERATORS_CA])?)
            .with_single_cert(chain, key)?;
        Ok(Server { config: Arc::new(config), operators: verifier(&[OPERATORS_CA])? })
    }

    /// A client presenting identity `name`, trusting servers the hosts CA
    /// signed.
    pub fn client(&self, name: &str) -> Result<Arc<ClientConfig>, RemoteError> {
        let (chain, key) = self.identity(name)?;
        Ok(Arc::new(
            ClientConfig::builder()
                .with_root_certificates(self.roots(&[HOSTS_CA])?)
                .with_client_auth_cert(chain, key)?,
        ))
    }
}

/// A host's server side: its TLS configuration, and the verifier of the
/// operators CA alone.
pub struct Server {
    config: Arc<ServerConfig>,
    operators: Arc<dyn rustls::server::danger::ClientCertVerifier>,
}

impl Server {
    /// The role of the client of an established connection.
    fn role(&self, conn: &ServerConnection) -> Option<Role> {
        let (end, rest) = conn.peer_certificates()?.split_first()?;
        let now = rustls::pki_types::UnixTime::now();
        Some(if self.operators.verify_client_cert(end, rest, now).is_ok() { Role::Operator } else { Role::Host })
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, RemoteError> {
    let pem = |reason: String| RemoteError::Pem { path: path.to_path_buf(), reason };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem("no certificate".into()));
    }
    Ok(certs)
}

/// Sends `msg` to the ferryd of host `host` at `addr` (as the operator of
/// TLS directory `dir`) and returns its reply.
pub fn request(addr: &str, host: &str, dir: &Path, msg: &Msg) -> Result<Msg, RemoteError> {
    request_as(addr, host, dir, ADMIN, msg, IDLE)
}

/// As [`request`], presenting identity `me` of `dir`, and giving up after
/// `timeout` of silence (connecting included).
pub fn request_as(
    addr: &str,
    host: &str,
    dir: &Path,
    me: &str,
    msg: &Msg,
    timeout: Duration,
) -> Result<Msg, RemoteError> {
    request_with(&TlsDir::new(dir).client(me)?, addr, host, msg, timeout)
}

/// As [`request_as`], with a client configuration made once
/// ([`TlsDir::client`]) for many requests: no key files read per request.
pub fn request_with(
    config: &Arc<ClientConfig>,
    addr: &str,
    host: &str,
    msg: &Msg,
    timeout: Duration,
) -> Result<Msg, RemoteError> {
    let name = ServerName::try_from(host.to_string()).map_err(|_| RemoteError::BadName(host.into()))?;
    let connect = |source| RemoteError::Connect { addr: addr.into(), source };
    let to: SocketAddr =
        addr.to_socket_addrs().map_err(connect)?.next().ok_or_else(|| connect(std::io::Error::other("no address")))?;
    let tcp = TcpStream::connect_timeout(&to, timeout).map_err(connect)?;
    tcp.set_read_timeout(Some(timeout)).map_err(connect)?;
    tcp.set_write_timeout(Some(timeout)).map_err(connect)?;
    let conn = ClientConnection::new(config.clone(), name)?;
    let mut tls = StreamOwned::new(conn, tcp);
    proto::write_msg(&mut tls, msg)?;
    Ok(proto::read_msg(&mut tls)?)
}

/// Sends `msg` to host `host`'s ferryd at its control endpoint
/// `control`: `unix:PATH` (a ferryd on this machine: its admin socket,
/// root's) or `ADDR:PORT` over mutual TLS with client configuration
/// `tls`. Gives up after `timeout` of silence.
pub fn request_control(
    control: &str,
    host: &str,
    tls: Option<&Arc<ClientConfig>>,
    msg: &Msg,
    timeout: Duration,
) -> Result<Msg, RemoteError> {
    match control.strip_prefix("unix:") {
        Some(path) => {
            let connect = || {
                let sock = std::os::unix::net::UnixStream::connect(path)?;
                sock.set_read_timeout(Some(timeout))?;
                sock.set_write_timeout(Some(timeout))?;
                Ok(sock)
            };
            let connect = || connect().map_err(|source| RemoteError::Connect { addr: control.into(), source });
            Ok(proto::ask(connect, msg)?.reply)
        }
        None => {
            let config = tls.ok_or_else(|| RemoteError::NoTls { host: host.into() })?;
            request_with(config, control, host, msg, timeout)
        }
    }
}
