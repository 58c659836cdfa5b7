//! The control channel between hosts: ferryd's admin protocol
//! ([`ferry_chain::proto`], the same frames as on its root-only Unix
//! socket) over TLS 1.3/1.2 with mutual authentication (rustls).
//!
//! Why mutual TLS: a ferryd's admin requests deploy NFs and XDP programs
//! as root, so the listener must know who asks, not just encrypt. Each
//! host and each operator holds its own key; one deployment CA signs them
//! all, so a stolen host key can be revoked by reissuing that host alone.
//! The server takes only clients whose certificate the CA signed (there is
//! no anonymous access, and no password); the client takes only a server
//! whose certificate names the host it dialled. rustls over OpenSSL: no C
//! library to keep patched besides ring's primitives, and no legacy
//! protocol versions to turn off.
//!
//! A TLS directory (`ferry tls init DIR --hosts h1,h2`) holds `ca.pem`,
//! `ca.key` (keep it offline once every key is issued), `<host>.pem` and
//! `<host>.key` per host, and `admin.pem`/`admin.key` for the operator.

mod issue;

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferry_chain::proto::{self, Msg, ProtoError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection, StreamOwned};

pub use issue::issue;

/// The operator's identity in a TLS directory.
pub const ADMIN: &str = "admin";

/// How long a peer may take to say something (a handshake, a request).
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

    fn roots(&self) -> Result<RootCertStore, RemoteError> {
        let path = self.0.join("ca.pem");
        let mut roots = RootCertStore::empty();
        for cert in certs(&path)? {
            roots.add(cert)?;
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

    /// A server of host `host`: its own certificate, and clients the CA
    /// signed, only.
    pub fn server(&self, host: &str) -> Result<Arc<ServerConfig>, RemoteError> {
        let verifier = WebPkiClientVerifier::builder(Arc::new(self.roots()?))
            .build()
            .map_err(|e| RemoteError::Verifier(e.to_string()))?;
        let (chain, key) = self.identity(host)?;
        Ok(Arc::new(ServerConfig::builder().with_client_cert_verifier(verifier).with_single_cert(chain, key)?))
    }

    /// A client presenting identity `name`, trusting servers the CA signed.
    pub fn client(&self, name: &str) -> Result<Arc<ClientConfig>, RemoteError> {
        let (chain, key) = self.identity(name)?;
        Ok(Arc::new(ClientConfig::builder().with_root_certificates(self.roots()?).with_client_auth_cert(chain, key)?))
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
    let config = TlsDir::new(dir).client(me)?;
    let name = ServerName::try_from(host.to_string()).map_err(|_| RemoteError::BadName(host.into()))?;
    let connect = |source| RemoteError::Connect { addr: addr.into(), source };
    let to: SocketAddr =
        addr.to_socket_addrs().map_err(connect)?.next().ok_or_else(|| connect(std::io::Error::other("no address")))?;
    let tcp = TcpStream::connect_timeout(&to, timeout).map_err(connect)?;
    tcp.set_read_timeout(Some(timeout)).map_err(connect)?;
    tcp.set_write_timeout(Some(timeout)).map_err(connect)?;
    let conn = ClientConnection::new(config, name)?;
    let mut tls = StreamOwned::new(conn, tcp);
    proto::write_msg(&mut tls, msg)?;
    Ok(proto::read_msg(&mut tls)?)
}

/// Sends `msg` to host `host`'s ferryd at its control endpoint
/// `control`: `unix:PATH` (a ferryd on this machine: its admin socket,
/// root's) or `ADDR:PORT` over mutual TLS as identity `me` of TLS
/// directory `tls`. Gives up after `timeout` of silence.
pub fn request_control(
    control: &str,
    host: &str,
    tls: Option<(&Path, &str)>,
    msg: &Msg,
    timeout: Duration,
) -> Result<Msg, RemoteError> {
    match control.strip_prefix("unix:") {
        Some(path) => {
            let connect = |source| RemoteError::Connect { addr: control.into(), source };
            let sock = std::os::unix::net::UnixStream::connect(path).map_err(connect)?;
            sock.set_read_timeout(Some(timeout)).map_err(connect)?;
            sock.set_write_timeout(Some(timeout)).map_err(connect)?;
            proto::send(&sock, msg, &[])?;
            Ok(proto::recv(&sock)?.0)
        }
        None => {
            let (dir, me) = tls.ok_or_else(|| RemoteError::NoTls { host: host.into() })?;
            request_as(control, host, dir, me, msg, timeout)
        }
    }
}

/// Serves `listener` until `stop` says so: each connection on a thread of
/// its own, TLS-authenticated against `config`, each request answered by
/// `answer` (refused peers are dropped during the handshake).
pub fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    answer: Arc<dyn Fn(Msg) -> Msg + Send + Sync>,
    stop: Arc<dyn Fn() -> bool + Send + Sync>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("tls-listen".into()).spawn(move || {
        while !stop() {
            match listener.accept() {
                Ok((tcp, _)) => {
                    let (config, answer) = (config.clone(), answer.clone());
                    let _ = std::thread::Builder::new()
                        .name("tls-conn".into())
                        .spawn(move || serve_one(tcp, config, answer.as_ref()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    })?;
    Ok(())
}

/// One connection: requests until it closes; nothing is read before the
/// peer's certificate checked out.
fn serve_one(tcp: TcpStream, config: Arc<ServerConfig>, answer: &(dyn Fn(Msg) -> Msg + Send + Sync)) {
    let _ = tcp.set_nonblocking(false);
    let _ = tcp.set_read_timeout(Some(IDLE));
    let Ok(conn) = ServerConnection::new(config) else { return };
    let mut tls = StreamOwned::new(conn, tcp);
    // The handshake completes (or fails, refusing the peer) on first use.
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            return;
        }
    }
    loop {
        match proto::read_msg(&mut tls) {
            Ok(msg) => {
                if proto::write_msg(&mut tls, &answer(msg)).is_err() {
                    return;
                }
            }
            Err(ProtoError::Closed) => return,
            // A stream that framed badly is out of step: said, and closed.
            Err(e) => {
                let _ = proto::write_msg(&mut tls, &Msg::Error { message: e.to_string() });
                return;
            }
        }
    }
}
