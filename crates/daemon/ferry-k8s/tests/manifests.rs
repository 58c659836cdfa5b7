//! deploy/kubernetes/ checked as a cluster would need it to hold: every
//! document parses; ferryd alone is privileged; the device plugin and the
//! NF pod have no capability; the plugin advertises the resource the pod
//! asks for, in the directory it mounts, for the socket ferryd serves; the
//! chain ferryd deploys is valid and has the pod's NF as one it does not
//! start, in a domain of the user the pod runs as.

use serde_yaml::Value;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../deploy/kubernetes");

fn docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{DEPLOY}/{file}")).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{file}: {e}")))
        .collect()
}

use serde::Deserialize;

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn container<'a>(pod_spec: &'a Value, name: &str) -> &'a Value {
    pod_spec["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn strs(v: &Value) -> Vec<String> {
    v.as_sequence().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// The value of `--flag=value` in `args`.
fn flag(args: &[String], name: &str) -> String {
    let prefix = format!("--{name}=");
    args.iter().find_map(|a| a.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {prefix} in {args:?}")).to_string()
}

fn unprivileged(c: &Value) {
    let sc = &c["securityContext"];
    assert_ne!(sc["privileged"], Value::Bool(true), "{c:?}");
    assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false), "{c:?}");
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"], "{c:?}");
    assert!(sc["capabilities"]["add"].is_null(), "{c:?}");
}

#[test]
fn ferryd_alone_is_privileged_and_the_plugin_serves_what_the_pod_asks_for() {
    let ferryd = docs("ferryd.yaml");
    let pod_docs = docs("nf-pod.yaml");
    let ds = of_kind(&ferryd, "DaemonSet")[0];
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!((spec["hostNetwork"].as_bool(), spec["hostPID"].as_bool()), (Some(true), Some(true)));
    let d = container(spec, "ferryd");
    assert_eq!(d["securityContext"]["privileged"], Value::Bool(true));
    let ferryd_cmd = strs(&d["command"]);
    let socket = &flag(&ferryd_cmd, "socket");
    // The plugin mounts the socket's directory into NF pods: ferryd's
    // admin socket must not be in it.
    let dir = std::path::Path::new(socket).parent().unwrap();
    assert!(!std::path::Path::new(&flag(&ferryd_cmd, "admin")).starts_with(dir), "{ferryd_cmd:?}");
    // Chains outlive a restarted ferryd: its pins need the host's bpffs.
    assert!(ferryd_cmd.iter().any(|a| a == "--persist"), "{ferryd_cmd:?}");
    let bpffs = d["volumeMounts"].as_sequence().unwrap().iter().find(|m| m["mountPath"] == "/sys/fs/bpf");
    let volume = bpffs.and_then(|m| spec["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == m["name"]));
    assert_eq!(volume.map(|v| &v["hostPath"]["path"]), Some(&Value::from("/sys/fs/bpf")), "{spec:?}");

    let plugin = container(spec, "device-plugin");
    unprivileged(plugin);
    let args = strs(&plugin["command"]);
    assert_eq!(args[..3], ["ferry", "k8s", "device-plugin"]);
    assert_eq!(&flag(&args, "ferryd-socket"), socket, "the plugin hands out the socket ferryd serves");
    assert_eq!(flag(&args, "resource"), ferry_k8s::DEFAULT_RESOURCE);
    let mounts = plugin["volumeMounts"].as_sequence().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"].as_str() == Some(flag(&args, "plugin-dir").as_str())), "{mounts:?}");
    // It sees the socket's directory, read-only, and nothing else of ferryd's.
    let sees = mounts.iter().find(|m| m["mountPath"].as_str() == dir.to_str()).expect("the socket's directory");
    assert_eq!(sees["readOnly"], Value::Bool(true));
    assert!(!mounts.iter().any(|m| m["mountPath"] == "/run/ferry"), "{mounts:?}");

    let pod = of_kind(&pod_docs, "Pod")[0];
    assert!(pod["spec"]["hostNetwork"].is_null() && pod["spec"]["hostPID"].is_null());
    let nf = &pod["spec"]["containers"][0];
    unprivileged(nf);
    let sc = &nf["securityContext"];
    assert_eq!(sc["runAsNonRoot"], Value::Bool(true));
    assert_eq!(nf["resources"]["limits"][ferry_k8s::DEFAULT_RESOURCE].as_u64(), Some(1));
    let env = |name: &str| {
        nf["env"].as_sequence().unwrap().iter().find(|e| e["name"] == name).and_then(|e| e["value"].as_str()).unwrap()
    };

    // The chain ferryd deploys: valid, the pod's NF one it does not start,
    // in a domain of the user the image gives the pod's uid.
    let chains = &of_kind(&ferryd, "ConfigMap")[0]["data"];
    let dir = std::env::temp_dir().join(format!("ferry-k8s-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fw.rules"), chains["fw.rules"].as_str().unwrap()).unwrap();
    let text = chains["chain.yaml"]
        .as_str()
        .unwrap()
        .replace("/etc/ferry/fw.rules", &dir.join("fw.rules").display().to_string());
    let chain = ferry_catalog::parse_chain_str(&text, "ferryd.yaml: chain.yaml").unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(chain.name.as_deref(), Some(env("FERRY_CHAIN")));
    let fw = chain.nfs.iter().find(|n| n.name == env("FERRY_NF")).expect("the pod's NF in the chain");
    assert!(!fw.spawn, "ferryd waits for the pod");
    let user = chain.domains.iter().find(|d| d.name == fw.domain).unwrap().user.clone().expect("a named user");
    let uid = sc["runAsUser"].as_u64().unwrap();
    let dockerfile = std::fs::read_to_string(format!("{DEPLOY}/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("useradd -u {uid} -g {uid} -M -s /usr/sbin/nologin {user}")),
        "{user} is uid {uid}"
    );
    let rules = &of_kind(&pod_docs, "ConfigMap")[0]["data"]["fw.rules"];
    assert_eq!(rules, &chains["fw.rules"], "ferryd and the NF read the same rules");
}
