//! The admin API: requests on the admin socket (root's) and over mutual
//! TLS, answered from the chains.

use std::os::fd::AsRawFd;

use ferry_chain::proto::{CaptureRequest, ChainSummary};

use super::*;
use crate::capture::Capture;
use crate::spawn;

impl Daemon {
    /// An admin connection: requests until it closes.
    pub(super) fn serve_admin(self: Arc<Self>, stream: UnixStream, seat: Seat) {
        if let Err(e) = require_admin(&stream) {
            let _ = proto::send(&stream, &Msg::Error { message: format!("{e:#}") }, &[]);
            return;
        }
        let mut first = Some(Self::first_message(seat, &stream));
        // Root's own connection: no deadline once it has asked.
        let _ = stream.set_read_timeout(None);
        loop {
            let msg = match first.take().unwrap_or_else(|| proto::recv(&stream)) {
                Ok((m, _fds)) => m,
                Err(ProtoError::Closed) => return,
                Err(e) => {
                    let _ = proto::send(&stream, &Msg::Error { message: e.to_string() }, &[]);
                    return;
                }
            };
            if let Msg::Capture(req) = msg {
                if self.serve_capture(&stream, &req).is_err() {
                    return;
                }
                continue;
            }
            let reply = match self.answer(msg) {
                Ok(m) => m,
                Err(e) => Msg::Error { message: format!("{e:#}") },
            };
            if proto::send(&stream, &reply, &[]).is_err() {
                return;
            }
        }
    }

    pub(super) fn answer(&self, msg: Msg) -> Result<Msg> {
        Ok(match msg {
            Msg::Status { chain } => Msg::StatusReply(Box::new(self.status(&chain)?)),
            Msg::Audit { chain } => {
                Msg::AuditReply { domains: self.chain(&chain)?.domains.iter().map(|d| d.audit(&[])).collect() }
            }
            Msg::Deploy { file, set } => Msg::Deployed(Box::new(self.deploy(Path::new(&file), &set)?)),
            Msg::CheckDeploy { file, set } => Msg::Deployed(Box::new(self.check_deploy(Path::new(&file), &set)?)),
            Msg::Remove { chain } => {
                self.remove(&chain)?;
                Msg::Ok
            }
            Msg::List => {
                // Copied out first: a summary takes each NF's lock, which an
                // admission can hold for a while.
                let chains: Vec<Arc<Chain>> = self.chains.lock().expect("chains lock").clone();
                let mut list: Vec<ChainSummary> = chains.iter().map(|c| c.summary()).collect();
                for (name, _) in self.paths.lock().expect("paths lock").iter() {
                    list.push(ChainSummary { name: name.clone(), placement: "nsh only".into(), ..Default::default() });
                }
                Msg::ListReply { chains: list }
            }
            Msg::Reload { chain } => Msg::Reloaded { nfs: self.reload(&chain)? },
            Msg::Fabric { text, origin } => self.fabric_mac(&text, &origin)?,
            Msg::DeployPart { text, origin, macs } => Msg::Deployed(Box::new(self.deploy_part(&text, &origin, &macs)?)),
            Msg::Info => Msg::InfoReply {
                metrics: self.metrics.lock().expect("metrics lock").map(|a| a.to_string()),
                listen: self.listen.lock().expect("listen lock").map(|a| a.to_string()),
            },
            Msg::Shutdown => {
                self.stop.store(true, Ordering::Release);
                Msg::Ok
            }
            Msg::Capture(_) => bail!("captures are served on root's admin socket only (ferry chain capture, as root)"),
            other => bail!("unexpected message {:?} on the admin socket", kind_name(&other)),
        })
    }
}

impl Daemon {
    /// A capture on root's admin connection: `CaptureStarted` with the
    /// pipe the pcapng comes through, the capture, `CaptureDone`. Only a
    /// failure to answer the client is an error (the connection ends).
    fn serve_capture(&self, stream: &UnixStream, req: &CaptureRequest) -> std::io::Result<()> {
        let started = self.chain(&req.chain).and_then(|chain| {
            let (read, write) = crate::capture::pipe()?;
            Ok((chain, read, write))
        });
        let (chain, read, write) = match started {
            Ok(x) => x,
            Err(e) => return reply(stream, &Msg::Error { message: format!("{e:#}") }, &[]),
        };
        let capture = match Capture::start(&chain, req) {
            Ok(c) => c,
            Err(e) => return reply(stream, &Msg::Error { message: format!("{e:#}") }, &[]),
        };
        let msg = Msg::CaptureStarted { point: capture.point.clone(), sites: capture.sites.clone() };
        let sent = reply(stream, &msg, &[read.as_raw_fd()]);
        drop(read);
        if sent.is_err() {
            // Disarmed as it ends: the client is gone.
            let _ = capture.run(write, stream);
            return sent;
        }
        let ran = capture.run(write, stream);
        if crate::capture::client_stopped(stream) {
            // The stop message, read so the next request is not it.
            let _ = proto::recv(stream);
        }
        match ran {
            Ok(stats) => reply(stream, &Msg::CaptureDone(stats), &[]),
            Err(e) => reply(stream, &Msg::Error { message: format!("capture: {e:#}") }, &[]),
        }
    }

    /// Chain `name`'s status; a part over hosts with no NF here shows the
    /// forwarder's counters alone.
    pub(super) fn status(&self, name: &str) -> Result<proto::Status> {
        if let Some((n, install)) = self.paths.lock().expect("paths lock").iter().find(|(n, _)| n == name) {
            let listeners = self.listener_counters();
            return Ok(proto::Status { chain: n.clone(), nsh: install.counters(), listeners, ..Default::default() });
        }
        Ok(proto::Status { listeners: self.listener_counters(), ..self.chain(name)?.status() })
    }
}

fn reply(stream: &UnixStream, msg: &Msg, fds: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    proto::send(stream, msg, fds).map_err(std::io::Error::other)
}

pub(super) fn require_admin(stream: &UnixStream) -> Result<()> {
    let (_, uid, _) = spawn::peer_cred(stream)?;
    // SAFETY: plain getter.
    if uid != 0 && uid != unsafe { libc::geteuid() } {
        bail!("only root may administer ferryd (peer uid {uid})");
    }
    Ok(())
}

pub(super) fn kind_name(m: &Msg) -> &'static str {
    match m {
        Msg::Hello { .. } => "hello",
        Msg::Welcome(_) => "welcome",
        Msg::Rejoin { .. } => "rejoin",
        Msg::Fabric { .. } => "fabric",
        Msg::FabricReply { .. } => "fabric-reply",
        Msg::DeployPart { .. } => "deploy-part",
        Msg::Status { .. } => "status",
        Msg::StatusReply(_) => "status-reply",
        Msg::Audit { .. } => "audit",
        Msg::AuditReply { .. } => "audit-reply",
        Msg::Deploy { .. } => "deploy",
        Msg::CheckDeploy { .. } => "check-deploy",
        Msg::Deployed(_) => "deployed",
        Msg::Remove { .. } => "remove",
        Msg::List => "list",
        Msg::ListReply { .. } => "list-reply",
        Msg::Info => "info",
        Msg::InfoReply { .. } => "info-reply",
        Msg::Reload { .. } => "reload",
        Msg::Reloaded { .. } => "reloaded",
        Msg::Shutdown => "shutdown",
        Msg::Ok => "ok",
        Msg::Error { .. } => "error",
        Msg::Busy => "busy",
        Msg::Capture(_) => "capture",
        Msg::CaptureStarted { .. } => "capture-started",
        Msg::CaptureDone(_) => "capture-done",
    }
}
