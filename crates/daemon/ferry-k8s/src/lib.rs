//! Ferry on Kubernetes. A Ferry NF runs in a pod with no privileges: it
//! needs only ferryd's NF socket (and its key, readable by its uid alone),
//! as any NF that ferryd does not start (`spawn: false`). The device
//! plugin ([`plugin`]) advertises NF slots to the kubelet as an extended
//! resource and, when a pod is given slots, has the kubelet mount the
//! socket and the keys and set the environment the SDK reads
//! (`FERRY_SOCKET`; the pod sets `FERRY_NF`, its name in the chain file).
//! ferryd itself runs as a DaemonSet (`deploy/kubernetes/`).

pub mod plugin;

/// The kubelet's device-plugin API v1beta1 (`proto/deviceplugin.proto`).
pub mod api {
    #![allow(clippy::all)]
    tonic::include_proto!("v1beta1");
}

pub use plugin::{
    run, serve, unix_channel, PluginConfig, PluginError, DEFAULT_FERRYD_SOCKET, DEFAULT_RESOURCE, KUBELET_SOCKET,
};
