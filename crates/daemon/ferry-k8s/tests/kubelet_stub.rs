//! The device plugin against a kubelet stub: a Registration server on
//! `kubelet.sock` in a directory of the test's own, as the kubelet serves
//! it in /var/lib/kubelet/device-plugins. The test then calls the plugin
//! as the kubelet does (options, ListAndWatch, Allocate), takes "ferryd"'s
//! socket away and back, restarts the "kubelet" by removing the plugin's
//! socket, and stops the plugin. Every
//! wait is for an event; the timeouts only guard against a hang.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ferry_k8s::api::device_plugin_client::DevicePluginClient;
use ferry_k8s::api::registration_server::{Registration, RegistrationServer};
use ferry_k8s::api::*;
use ferry_k8s::{serve, PluginConfig, DEFAULT_RESOURCE, KUBELET_SOCKET};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

const HANG_GUARD: Duration = Duration::from_secs(30);

/// The kubelet's registration service: like the kubelet, it dials the
/// plugin before it accepts (a plugin must serve before it registers),
/// then hands the request to the test.
struct KubeletStub {
    dir: PathBuf,
    requests: mpsc::Sender<RegisterRequest>,
}

#[tonic::async_trait]
impl Registration for KubeletStub {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let req = req.into_inner();
        let mut plugin = DevicePluginClient::new(channel(&self.dir.join(&req.endpoint)).await);
        plugin.get_device_plugin_options(Empty {}).await?;
        self.requests.send(req).await.map_err(|_| Status::unavailable("test gone"))?;
        Ok(Response::new(Empty {}))
    }
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn channel(path: &Path) -> Channel {
    ferry_k8s::unix_channel(path).await.expect("connect to the plugin")
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, f).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test]
async fn the_plugin_serves_the_kubelet_follows_ferryd_and_outlives_a_kubelet_restart() {
    let dir = Dir(std::env::temp_dir().join(format!("ferry-k8s-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (reg_tx, mut registrations) = mpsc::channel(4);
    let kubelet = UnixListener::bind(dir.0.join(KUBELET_SOCKET)).unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(RegistrationServer::new(KubeletStub { dir: dir.0.clone(), requests: reg_tx }))
            .serve_with_incoming(UnixListenerStream::new(kubelet)),
    );

    // "ferryd": a socket in a directory of its own.
    std::fs::create_dir_all(dir.0.join("nf")).unwrap();
    let ferryd_socket = dir.0.join("nf/ferryd.sock");
    let ferryd = std::os::unix::net::UnixListener::bind(&ferryd_socket).unwrap();
    let cfg = PluginConfig {
        resource_name: DEFAULT_RESOURCE.into(),
        slots: 4,
        ferryd_socket: ferryd_socket.clone(),
        plugin_dir: dir.0.clone(),
        endpoint: "ferry.sock".into(),
    };
    let (stop_tx, stop) = watch::channel(false);
    let plugin = tokio::spawn(serve(cfg, stop));

    let r = within("the registration", registrations.recv()).await.expect("a registration");
    assert_eq!(
        (r.version.as_str(), r.endpoint.as_str(), r.resource_name.as_str()),
        ("v1beta1", "ferry.sock", "ferry.io/nf")
    );
    let socket = dir.0.join(&r.endpoint);
    let mut client = DevicePluginClient::new(channel(&socket).await);

    let options = client.get_device_plugin_options(Empty {}).await.unwrap().into_inner();
    assert!(!options.pre_start_required && !options.get_preferred_allocation_available);

    let mut devices = client.list_and_watch(Empty {}).await.unwrap().into_inner();
    let first = within("the device list", devices.message()).await.unwrap().expect("a device list");
    let ids: Vec<(&str, &str)> = first.devices.iter().map(|d| (d.id.as_str(), d.health.as_str())).collect();
    assert_eq!(ids, [("nf-0", "Healthy"), ("nf-1", "Healthy"), ("nf-2", "Healthy"), ("nf-3", "Healthy")]);

    // Two containers of a pod, one slot each.
    let request = AllocateRequest {
        container_requests: vec![
            ContainerAllocateRequest { devices_ids: vec!["nf-0".into()] },
            ContainerAllocateRequest { devices_ids: vec!["nf-2".into(), "nf-3".into()] },
        ],
    };
    let answer = client.allocate(request).await.unwrap().into_inner();
    assert_eq!(answer.container_responses.len(), 2);
    let second = &answer.container_responses[1];
    assert_eq!(second.envs["FERRY_SOCKET"], ferryd_socket.display().to_string());
    assert_eq!(second.envs["FERRY_SLOTS"], "nf-2,nf-3");
    let m = &second.mounts[0];
    let nf_dir = dir.0.join("nf").display().to_string();
    assert_eq!((&m.host_path, &m.container_path, m.read_only), (&nf_dir, &nf_dir, true));
    let unknown =
        AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["nf-4".into()] }] };
    assert_eq!(client.allocate(unknown).await.unwrap_err().code(), tonic::Code::InvalidArgument);

    // ferryd gone: the slots turn unhealthy (no pod is given one), and
    // healthy again when it is back.
    drop(ferryd);
    std::fs::remove_file(&ferryd_socket).unwrap();
    let down = within("the slots unhealthy", devices.message()).await.unwrap().expect("a device list");
    assert!(down.devices.iter().all(|d| d.health == "Unhealthy"), "{down:?}");
    let _ferryd = std::os::unix::net::UnixListener::bind(&ferryd_socket).unwrap();
    let up = within("the slots healthy", devices.message()).await.unwrap().expect("a device list");
    assert!(up.devices.iter().all(|d| d.health == "Healthy") && up.devices.len() == 4, "{up:?}");

    // A restarted kubelet removes every plugin socket: the plugin serves a
    // new one and registers again, and the old stream ends.
    std::fs::remove_file(&socket).unwrap();
    let again = within("the second registration", registrations.recv()).await.expect("a registration");
    assert_eq!(again.endpoint, "ferry.sock");
    assert!(within("the old device stream to end", devices.message()).await.map_or(true, |m| m.is_none()));
    let mut client = DevicePluginClient::new(channel(&socket).await);
    let mut devices = client.list_and_watch(Empty {}).await.unwrap().into_inner();
    assert_eq!(within("the device list", devices.message()).await.unwrap().unwrap().devices.len(), 4);

    stop_tx.send(true).unwrap();
    within("the plugin to stop", plugin).await.unwrap().expect("the plugin stops cleanly");
    assert!(!socket.exists(), "its socket is gone");
}
