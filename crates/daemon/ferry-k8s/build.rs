//! Generates the device-plugin API (proto/deviceplugin.proto) with
//! tonic-build: the kubelet's Registration client and server (the server
//! for the test's kubelet stub) and the DevicePlugin server and client.

fn main() {
    println!("cargo:rerun-if-changed=proto/deviceplugin.proto");
    tonic_build::configure().compile_protos(&["proto/deviceplugin.proto"], &["proto"]).unwrap_or_else(|e| {
        panic!("not supported: needs protoc to build the device-plugin API ({e}); run `make deps`")
    });
}
