//! A chain over several hosts (`hosts:` in the chain file): deploying it
//! gives each host's ferryd the whole file and lets it take its own part;
//! removing and showing it asks every host.
//!
//! A host's `control` is `unix:PATH` (the admin socket of a ferryd on this
//! machine: root's, checked by the peer's uid) or `ADDR:PORT`, a ferryd's
//! mutual-TLS listener (`ferry tls`), reached with the client certificate
//! in `--tls DIR`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::hosts::HostSpec;
use ferry_chain::proto::{ChainSummary, Msg, Status};
use ferry_chain::ChainSpec;
use ferry_remote::ClientConfig;
use serde::{Deserialize, Serialize};

/// How long a host may stay silent on a request.
const WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// One request to `host`'s ferryd; an error reply is an error.
pub fn request(host: &HostSpec, tls: Option<&Arc<ClientConfig>>, msg: &Msg) -> Result<Msg> {
    let control = host.control.as_deref().ok_or_else(|| anyhow!("host {} has no `control` endpoint", host.name))?;
    // A deploy can take a while (NFs start): a long silence is allowed.
    let reply = ferry_remote::request_control(control, &host.name, tls, msg, WAIT)
        .with_context(|| format!("host {} at {control} (give --tls DIR for hosts reached over TLS)", host.name))?;
    match reply {
        Msg::Error { message } => bail!("host {}: {message}", host.name),
        reply => Ok(reply),
    }
}

/// The operator's TLS client of directory `dir`, made once per command.
fn operator(dir: Option<&Path>) -> Result<Option<Arc<ClientConfig>>> {
    Ok(dir.map(|d| ferry_remote::TlsDir::new(d).client(ferry_remote::ADMIN)).transpose()?)
}

fn read(file: &Path) -> Result<(ChainSpec, String, String)> {
    let (text, origin) = ferry_config::read_file(file)?;
    let spec = ferry_catalog::parse_chain_str(&text, &origin)?;
    if spec.hosts.is_empty() {
        bail!("{origin} names no hosts: deploy it on one ferryd");
    }
    Ok((spec, text, origin))
}

/// Refuses a chain name that is not the one `file` holds (an empty name
/// is that one).
pub fn check_name(file: &Path, name: &str) -> Result<()> {
    let (spec, _, origin) = read(file)?;
    if !name.is_empty() && name != spec.name() {
        bail!("{origin} holds chain {:?}, not {name:?}", spec.name());
    }
    Ok(())
}

/// Whether chain file `file`, filled by `set`, is a chain over hosts.
pub fn spans_hosts(file: &Path, set: &[(String, String)]) -> bool {
    let Ok((text, origin)) = ferry_chain::spec::read_filled(file, set) else { return false };
    ferry_catalog::parse_chain_str(&text, &origin).is_ok_and(|s| !s.hosts.is_empty())
}

/// Deploys each host's part of the chain in `file`: first every host's
/// fabric MAC, then the parts, the hosts in the reverse of the file's
/// order (list them along the path, and nothing is sent to a host before
/// its part is there). A host that
/// refuses its part undoes the deploy on the hosts that took theirs.
pub fn deploy(file: &Path, tls: Option<&Path>) -> Result<Vec<HostDeployed>> {
    let (spec, text, origin) = read(file)?;
    let tls = operator(tls)?;
    let tls = tls.as_ref();
    let mut macs = Vec::new();
    for h in &spec.hosts {
        match request(h, tls, &Msg::Fabric { text: text.clone(), origin: origin.clone() })? {
            Msg::FabricReply { host, mac } if host == h.name => macs.push((host, mac)),
            other => bail!("host {}: unexpected reply {other:?}", h.name),
        }
    }
    let mut done: Vec<HostDeployed> = Vec::new();
    for h in spec.hosts.iter().rev() {
        let msg = Msg::DeployPart { text: text.clone(), origin: origin.clone(), macs: macs.clone() };
        match request(h, tls, &msg) {
            Ok(Msg::Deployed(s)) => done.push(HostDeployed { host: h.name.clone(), deployed: *s }),
            outcome => {
                for d in &done {
                    let host = spec.hosts.iter().find(|x| x.name == d.host).expect("deployed there");
                    let _ = request(host, tls, &Msg::Remove { chain: spec.name() });
                }
                return Err(match outcome {
                    Err(e) => e,
                    Ok(other) => anyhow!("host {}: unexpected reply {other:?}", h.name),
                });
            }
        }
    }
    done.reverse();
    Ok(done)
}

/// Removes the chain in `file` from every host (each one tried).
pub fn remove(file: &Path, tls: Option<&Path>) -> Result<()> {
    let (spec, _, _) = read(file)?;
    let tls = operator(tls)?;
    let tls = tls.as_ref();
    let failed: Vec<String> = spec
        .hosts
        .iter()
        .filter_map(|h| request(h, tls, &Msg::Remove { chain: spec.name() }).err().map(|e| format!("{e:#}")))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
    }
}

/// One host's part of a deploy (`ferry chain deploy --json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostDeployed {
    pub host: String,
    pub deployed: ChainSummary,
}

/// One host's status of a chain over hosts (`ferry chain show --over
/// --json`): its status, or why there is none (a host that is down does
/// not hide the others).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostStatus {
    pub host: String,
    #[serde(default)]
    pub status: Option<Status>,
    #[serde(default)]
    pub error: Option<String>,
}

/// Each host's status of the chain in `file`.
pub fn status(file: &Path, tls: Option<&Path>) -> Result<Vec<HostStatus>> {
    let (spec, _, _) = read(file)?;
    let tls = operator(tls)?;
    let tls = tls.as_ref();
    Ok(spec
        .hosts
        .iter()
        .map(|h| {
            let (status, error) = match request(h, tls, &Msg::Status { chain: spec.name() }) {
                Ok(Msg::StatusReply(s)) => (Some(*s), None),
                Ok(other) => (None, Some(format!("unexpected reply {other:?}"))),
                Err(e) => (None, Some(format!("{e:#}"))),
            };
            HostStatus { host: h.name.clone(), status, error }
        })
        .collect())
}
