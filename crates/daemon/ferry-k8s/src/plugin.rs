//! The device plugin: a gRPC server on a Unix socket in the kubelet's
//! device-plugin directory, registered with the kubelet (its
//! `kubelet.sock`). It advertises `slots` NF slots, all healthy; an
//! allocation of slots to a container mounts the directory of ferryd's NF
//! socket (the socket and its keys) there, read-only, at the same path,
//! and sets `FERRY_SOCKET`. A directory, not the socket file: a bind mount
//! of a file keeps the old socket after ferryd restarts, and a runtime
//! that finds no file makes a directory in its place, which ferryd could
//! then never bind. The kubelet deletes the plugins' sockets when it
//! restarts: the plugin then serves a new one and registers again.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ferry_chain::proto::{keys_dir, ENV_SOCKET};
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status};

use crate::api::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::api::registration_client::RegistrationClient;
use crate::api::*;

/// The API version the plugin speaks.
pub const API_VERSION: &str = "v1beta1";
/// The kubelet's registration socket, in the device-plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The resource NF pods ask for (`resources.limits`).
pub const DEFAULT_RESOURCE: &str = "ferry.io/nf";
/// ferryd's NF socket in a directory of its own (its keys beside it; its
/// admin socket elsewhere, `ferryd --admin`): what the plugin mounts.
pub const DEFAULT_FERRYD_SOCKET: &str = "/run/ferry/nf/ferryd.sock";
/// How long the plugin waits before it registers again after a failure
/// (the kubelet restarting, its socket not listening yet).
const REGISTER_RETRY: Duration = Duration::from_secs(1);
/// The environment variable naming the slots a container got.
pub const ENV_SLOTS: &str = "FERRY_SLOTS";
/// How often the plugin checks that its socket is still there.
const SOCKET_CHECK: Duration = Duration::from_millis(500);
/// How often a device stream checks that ferryd's NF socket is there.
const HEALTH_CHECK: Duration = Duration::from_millis(500);

/// What the plugin advertises and hands out.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The extended resource, `vendor-domain/name`.
    pub resource_name: String,
    /// How many NF pods the node takes.
    pub slots: u32,
    /// ferryd's NF socket on the host.
    pub ferryd_socket: PathBuf,
    /// The kubelet's device-plugin directory.
    pub plugin_dir: PathBuf,
    /// The plugin's socket name in it.
    pub endpoint: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("device plugin: {field}: {message}")]
    Config { field: &'static str, message: String },
    #[error("device plugin: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("device plugin: connecting to the kubelet at {path}: {source}")]
    Kubelet {
        path: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("device plugin: the kubelet refused the registration of {resource}: {status}")]
    Refused { resource: String, status: Box<Status> },
    #[error("device plugin: serving on {path}: {source}")]
    Serve {
        path: String,
        #[source]
        source: tonic::transport::Error,
    },
}

impl PluginConfig {
    /// The slot ids, `nf-0` to `nf-<slots - 1>`.
    pub fn slot_ids(&self) -> Vec<String> {
        (0..self.slots).map(|i| format!("nf-{i}")).collect()
    }

    fn check(&self) -> Result<(), PluginError> {
        let bad = |field, message: String| Err(PluginError::Config { field, message });
        let (domain, name) = self.resource_name.split_once('/').unwrap_or_default();
        if domain.is_empty() || name.is_empty() || !domain.contains('.') {
            return bad("resource_name", format!("{:?} is not vendor-domain/name", self.resource_name));
        }
        if self.slots == 0 {
            return bad("slots", "0: advertise at least one NF slot".into());
        }
        let dir = self.ferryd_socket.parent().filter(|d| d.parent().is_some());
        if !self.ferryd_socket.is_absolute() || dir.is_none() {
            return bad(
                "ferryd_socket",
                format!(
                    "{}: an absolute path on the host, in a directory of its own (the plugin mounts the directory)",
                    self.ferryd_socket.display()
                ),
            );
        }
        if self.endpoint.is_empty() || self.endpoint.contains('/') || self.endpoint == KUBELET_SOCKET {
            return bad("endpoint", format!("{:?}: a socket name in the plugin directory", self.endpoint));
        }
        Ok(())
    }

    fn socket(&self) -> PathBuf {
        self.plugin_dir.join(&self.endpoint)
    }

    /// ferryd's NF socket is there (a socket, not a leftover of another
    /// kind).
    fn ferryd_up(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(&self.ferryd_socket).is_ok_and(|m| m.file_type().is_socket())
    }

    fn devices(&self, up: bool) -> ListAndWatchResponse {
        let health = if up { "Healthy" } else { "Unhealthy" };
        let devices =
            self.slot_ids().into_iter().map(|id| Device { id, health: health.into(), topology: None }).collect();
        ListAndWatchResponse { devices }
    }

    /// What a container given `ids` gets: the socket, the keys (read-only;
    /// each key is readable by its NF's uid alone), the environment.
    fn allocation(&self, ids: &[String]) -> Result<ContainerAllocateResponse, String> {
        let known = self.slot_ids();
        if let Some(id) = ids.iter().find(|id| !known.contains(id)) {
            return Err(format!("no NF slot {id:?} (this node has {})", self.slots));
        }
        // Connecting to a socket needs no write access to its mount; the
        // keys beside it are readable by their NF's uid alone.
        let dir = self.ferryd_socket.parent().expect("checked");
        debug_assert!(keys_dir(&self.ferryd_socket).starts_with(dir));
        let dir = dir.display().to_string();
        let socket = self.ferryd_socket.display().to_string();
        Ok(ContainerAllocateResponse {
            envs: [(ENV_SOCKET.to_string(), socket), (ENV_SLOTS.to_string(), ids.join(","))].into_iter().collect(),
            mounts: vec![Mount { container_path: dir.clone(), host_path: dir, read_only: true }],
            ..Default::default()
        })
    }
}

struct NfSlots {
    cfg: Arc<PluginConfig>,
    stop: watch::Receiver<bool>,
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for NfSlots {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions::default()))
    }

    /// The slots, healthy while ferryd's NF socket is there and unhealthy
    /// while it is not (no pod is given a slot then), again whenever that
    /// changes; the stream stays open until the plugin stops (the kubelet
    /// reads a closed stream as the plugin gone) or the kubelet hangs up.
    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<DeviceStream>, Status> {
        let (tx, rx) = mpsc::channel(1);
        let (cfg, mut stop) = (self.cfg.clone(), self.stop.clone());
        tokio::spawn(async move {
            let mut sent = None;
            loop {
                let up = cfg.ferryd_up();
                if sent != Some(up) {
                    if tx.send(Ok(cfg.devices(up))).await.is_err() {
                        return;
                    }
                    sent = Some(up);
                }
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(HEALTH_CHECK) => {}
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        Err(Status::unimplemented("any NF slots do (get_preferred_allocation_available is false)"))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let container_responses = req
            .into_inner()
            .container_requests
            .iter()
            .map(|c| self.cfg.allocation(&c.devices_ids))
            .collect::<Result<_, _>>()
            .map_err(Status::invalid_argument)?;
        Ok(Response::new(AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// A gRPC channel over the Unix socket at `path` (the kubelet's, or a
/// plugin's).
pub async fn unix_channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    let connector = tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    });
    // The URI is required and unused: the connector dials the socket.
    Endpoint::from_static("http://[::]:0").connect_with_connector(connector).await
}

/// Registers the plugin with the kubelet at `kubelet` (its socket).
async fn register(cfg: &PluginConfig, kubelet: &Path) -> Result<(), PluginError> {
    let channel = unix_channel(kubelet)
        .await
        .map_err(|source| PluginError::Kubelet { path: kubelet.display().to_string(), source })?;
    let request = RegisterRequest {
        version: API_VERSION.into(),
        endpoint: cfg.endpoint.clone(),
        resource_name: cfg.resource_name.clone(),
        options: Some(DevicePluginOptions::default()),
    };
    RegistrationClient::new(channel)
        .register(request)
        .await
        .map_err(|status| PluginError::Refused { resource: cfg.resource_name.clone(), status: Box::new(status) })?;
    Ok(())
}

/// Serves the plugin and registers it, again whenever its socket goes
/// (a restarted kubelet removes them all), until `stop` turns true.
pub async fn serve(cfg: PluginConfig, stop: watch::Receiver<bool>) -> Result<(), PluginError> {
    cfg.check()?;
    let cfg = Arc::new(cfg);
    let socket = cfg.socket();
    while !*stop.borrow() {
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .map_err(|source| PluginError::Io { what: format!("binding {}", socket.display()), source })?;
        let (gone_tx, gone_rx) = watch::channel(false);
        let plugin = NfSlots { cfg: cfg.clone(), stop: gone_rx.clone() };
        let mut until = stop.clone();
        let mut socket_gone = gone_rx.clone();
        let server = Server::builder().add_service(DevicePluginServer::new(plugin)).serve_with_incoming_shutdown(
            UnixListenerStream::new(listener),
            async move {
                tokio::select! {
                    _ = until.wait_for(|s| *s) => {}
                    _ = socket_gone.wait_for(|g| *g) => {}
                }
            },
        );
        let server = tokio::spawn(server);
        let mut until = stop.clone();
        // Serving first, then registered: the kubelet dials the plugin as
        // it accepts the registration. Until a (restarted) kubelet listens,
        // try again.
        loop {
            match register(&cfg, &cfg.plugin_dir.join(KUBELET_SOCKET)).await {
                Ok(()) => {
                    tracing::info!("registered {} ({} slots) on {}", cfg.resource_name, cfg.slots, socket.display());
                    break;
                }
                Err(e) => tracing::warn!("{e}; again in {REGISTER_RETRY:?}"),
            }
            tokio::select! {
                _ = until.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(REGISTER_RETRY) => {}
            }
        }
        loop {
            tokio::select! {
                _ = until.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(SOCKET_CHECK) => {
                    if !socket.exists() {
                        tracing::info!("{} is gone (the kubelet restarted): serving and registering again", socket.display());
                        break;
                    }
                }
            }
        }
        let _ = gone_tx.send(true);
        server
            .await
            .map_err(|e| PluginError::Io { what: "the server task".into(), source: std::io::Error::other(e) })?
            .map_err(|source| PluginError::Serve { path: socket.display().to_string(), source })?;
    }
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

/// Runs the plugin on a runtime of its own until `stopped()` says so.
pub fn run(cfg: PluginConfig, stopped: impl Fn() -> bool + Send + 'static) -> Result<(), PluginError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| PluginError::Io { what: "starting the runtime".into(), source })?;
    runtime.block_on(async move {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            while !stopped() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = tx.send(true);
        });
        serve(cfg, rx).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PluginConfig {
        PluginConfig {
            resource_name: DEFAULT_RESOURCE.into(),
            slots: 2,
            ferryd_socket: DEFAULT_FERRYD_SOCKET.into(),
            plugin_dir: "/var/lib/kubelet/device-plugins".into(),
            endpoint: "ferry.sock".into(),
        }
    }

    #[test]
    fn bad_settings_name_their_field() {
        let field = |c: PluginConfig| match c.check() {
            Err(PluginError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(PluginConfig { resource_name: "nf".into(), ..cfg() }), "resource_name");
        assert_eq!(field(PluginConfig { slots: 0, ..cfg() }), "slots");
        assert_eq!(field(PluginConfig { ferryd_socket: "ferryd.sock".into(), ..cfg() }), "ferryd_socket");
        assert_eq!(field(PluginConfig { ferryd_socket: "/ferryd.sock".into(), ..cfg() }), "ferryd_socket");
        assert_eq!(field(PluginConfig { endpoint: KUBELET_SOCKET.into(), ..cfg() }), "endpoint");
        assert!(cfg().check().is_ok());
    }

    #[test]
    fn an_allocation_mounts_the_sockets_directory_read_only() {
        let a = cfg().allocation(&["nf-1".into()]).unwrap();
        assert_eq!(a.envs[ENV_SOCKET], DEFAULT_FERRYD_SOCKET);
        assert_eq!(a.envs[ENV_SLOTS], "nf-1");
        let mounts: Vec<(&str, &str, bool)> =
            a.mounts.iter().map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.read_only)).collect();
        assert_eq!(mounts, [("/run/ferry/nf", "/run/ferry/nf", true)], "the socket and its keys, at the same path");
        assert!(a.devices.is_empty(), "no device node: nothing but a socket");
        assert!(cfg().allocation(&["nf-2".into()]).unwrap_err().contains("no NF slot \"nf-2\""));
    }
}
