//! Bringing a spec up and tearing it down again.

use crate::cmd::{self, ip};
use crate::error::TestbedError;
use crate::spec::{EndpointSpec, LinkSpec, TestbedSpec};
use crate::state::{self, Marker, StateFile};
use crate::types::RouteDest;
use ferry_wire::MacAddr;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

/// Names of a testbed that is up: logical → real namespace names, plus the
/// queries that only need those names. Both [`Testbed`] (owned, torn down
/// on drop) and [`RunningTestbed`] (detached, torn down explicitly)
/// dereference to it, so the queries are written once.
#[derive(Debug, Clone)]
pub struct TestbedNames {
    name: String,
    instance: String,
    origin: String,
    namespaces: BTreeMap<String, String>,
}

impl TestbedNames {
    fn generate(spec: &TestbedSpec) -> TestbedNames {
        // 24 random bits; retry on the (unlikely) clash with a live testbed.
        loop {
            let instance = format!("fy{:06x}", rand::random::<u32>() & 0xff_ffff);
            let namespaces: BTreeMap<String, String> =
                spec.namespaces.iter().map(|n| (n.name.to_string(), format!("{instance}-{}", n.name))).collect();
            if !namespaces.values().any(|r| state::ns_exists(r)) {
                return TestbedNames { name: spec.name(), instance, origin: spec.origin.clone(), namespaces };
            }
        }
    }

    fn real(&self, logical: &str) -> Result<&str, TestbedError> {
        self.namespaces
            .get(logical)
            .map(String::as_str)
            .ok_or_else(|| TestbedError::UnknownNamespace { name: logical.to_string() })
    }

    /// The spec's name (`name:` or file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The unique `fy??????` prefix of this instance's namespace names.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Logical → real namespace names.
    pub fn namespaces(&self) -> &BTreeMap<String, String> {
        &self.namespaces
    }

    /// Real namespace name for a logical one. Panics on an unknown name:
    /// that is a bug in the calling test, not a runtime condition.
    pub fn ns_name(&self, logical: &str) -> &str {
        self.real(logical).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `ip netns exec REAL program args...`, ready to spawn. Panics on an
    /// unknown logical namespace (see [`TestbedNames::ns_name`]).
    pub fn exec<I, S>(&self, logical: &str, program: impl AsRef<OsStr>, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns_name(logical)]).arg(program).args(args);
        c
    }

    fn link_json(&self, logical: &str, dev: &str) -> Result<serde_json::Value, TestbedError> {
        let real = self.real(logical)?;
        let args = ["-j", "-n", real, "link", "show", "dev", dev];
        let out = ip(&args)?;
        let bad = |message: String| TestbedError::Output { command: format!("ip {}", args.join(" ")), message };
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| bad(e.to_string()))?;
        v.get(0).cloned().ok_or_else(|| bad("empty list".into()))
    }

    /// Interface index of `dev` inside namespace `logical`.
    pub fn ifindex(&self, logical: &str, dev: &str) -> Result<u32, TestbedError> {
        let v = self.link_json(logical, dev)?;
        v["ifindex"].as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(|| TestbedError::Output {
            command: format!("ip -j link show dev {dev}"),
            message: format!("no ifindex in {v}"),
        })
    }

    /// Current MAC address of `dev` inside namespace `logical`.
    pub fn mac(&self, logical: &str, dev: &str) -> Result<MacAddr, TestbedError> {
        let v = self.link_json(logical, dev)?;
        v["address"].as_str().and_then(|s| s.parse().ok()).ok_or_else(|| TestbedError::Output {
            command: format!("ip -j link show dev {dev}"),
            message: format!("no unicast address in {v}"),
        })
    }

    /// A Linux bridge `name` in namespace `logical` over its devices
    /// `ports`, each given with the MAC that lives behind it: those are
    /// in its forwarding table from the start, so no first frame is
    /// flooded to the other ports. (A fabric of several hosts.)
    pub fn bridge(&self, logical: &str, name: &str, ports: &[(&str, MacAddr)]) -> Result<(), TestbedError> {
        let real = self.real(logical)?;
        ip(&["-n", real, "link", "add", name, "type", "bridge"])?;
        for (port, mac) in ports {
            ip(&["-n", real, "link", "set", "dev", port, "master", name])?;
            let mac = mac.to_string();
            crate::cmd::run(
                "bridge",
                &["-n", real, "fdb", "add", &mac, "dev", port, "master", "static"].map(String::from),
            )?;
        }
        ip(&["-n", real, "link", "set", "dev", name, "up"])?;
        Ok(())
    }

    /// Deletes every namespace that exists; reports the first failure but
    /// keeps going so one stuck namespace does not leak the others.
    fn delete_all(&self) -> Result<(), TestbedError> {
        let mut first = None;
        for real in self.namespaces.values() {
            if let Err(e) = state::delete_ns(real) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// A child `sh` that deletes the namespaces when its stdin reaches EOF
/// without having read `done`. We hold the only write end of that pipe, so
/// the kernel closes it when this process dies for any reason, SIGKILL
/// included — the one teardown path that needs no cooperation from us.
struct Reaper {
    child: Child,
    stdin: Option<ChildStdin>,
}

const REAPER_SCRIPT: &str = r#"IFS= read -r line
[ "$line" = done ] && exit 0
dir=$1; shift
for ns in "$@"; do ip netns del "$ns"; rm -f "$dir/$ns.pid"; done
exit 0"#;

impl Reaper {
    fn spawn(names: &TestbedNames) -> Result<Reaper, TestbedError> {
        let marker_dir = state::marker_dir();
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(REAPER_SCRIPT)
            .arg("ferry-testbed-reaper")
            .arg(&marker_dir)
            .args(names.namespaces.values())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe and touches no Rust state. A new
        // session (and process group) keeps the reaper out of signals sent to
        // our group, e.g. Ctrl-C in a terminal or `kill -- -PGID`.
        unsafe {
            c.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // std creates the pipe with O_CLOEXEC, so our end is never inherited
        // by other children (other `ip` commands, other reapers); if it were,
        // a long-lived child would keep the reaper from ever seeing EOF.
        let mut child =
            c.spawn().map_err(|source| TestbedError::Spawn { command: "sh -c <reaper script>".into(), source })?;
        let stdin = child.stdin.take();
        Ok(Reaper { child, stdin })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tells the reaper it has nothing to do and waits for it to exit.
    fn dismiss(mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"done\n");
        }
        // Drop waits.
    }
}

impl Drop for Reaper {
    /// Closing stdin without `done` makes the reaper delete the namespaces
    /// (a second attempt after ours failed); either way we reap the child.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A testbed owned by this process. Dropping it (or calling [`Testbed::down`])
/// deletes its namespaces; if the process dies, its reaper does.
#[derive(Debug)]
pub struct Testbed {
    names: TestbedNames,
    reaper: Option<Reaper>,
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reaper(pid {})", self.pid())
    }
}

/// Creates the testbed described by `spec`, owned by the returned value.
///
/// On failure everything created so far is deleted before returning.
pub fn up(spec: &TestbedSpec) -> Result<Testbed, TestbedError> {
    cmd::preflight()?;
    let names = TestbedNames::generate(spec);
    for real in names.namespaces.values() {
        state::write_marker(real, &Marker::current(None))?;
    }
    // The reaper exists before the first namespace does: there is no window
    // in which a SIGKILL leaks anything.
    let reaper = match Reaper::spawn(&names) {
        Ok(r) => r,
        Err(e) => {
            names.namespaces.values().for_each(|r| state::remove_marker(r));
            return Err(e);
        }
    };
    let mut tb = Testbed { names, reaper: Some(reaper) };
    if let Err(e) = build(spec, &tb.names) {
        if let Err(cleanup) = tb.teardown() {
            tracing::warn!(error = %cleanup, "cleanup after failed up");
        }
        return Err(e);
    }
    Ok(tb)
}

impl Testbed {
    /// PID of the reaper process (for tests).
    pub fn reaper_pid(&self) -> Option<u32> {
        self.reaper.as_ref().map(Reaper::pid)
    }

    /// Deletes the testbed, reporting failures (dropping does the same but
    /// can only log them).
    pub fn down(mut self) -> Result<(), TestbedError> {
        self.teardown()
    }

    /// Idempotent: the second call finds no namespaces and no reaper.
    fn teardown(&mut self) -> Result<(), TestbedError> {
        let result = self.names.delete_all();
        if let Some(reaper) = self.reaper.take() {
            match &result {
                Ok(()) => reaper.dismiss(),
                // Let the reaper retry on its own.
                Err(_) => drop(reaper),
            }
        }
        result
    }
}

impl std::ops::Deref for Testbed {
    type Target = TestbedNames;
    fn deref(&self) -> &TestbedNames {
        &self.names
    }
}

impl std::ops::Deref for RunningTestbed {
    type Target = TestbedNames;
    fn deref(&self) -> &TestbedNames {
        &self.names
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::error!(testbed = %self.names.name, error = %e, "testbed teardown failed");
        }
    }
}

/// A detached testbed: created by [`up_detached`] for a process that exits
/// (the CLI), recorded in a state file, deleted by [`down_by_name`].
#[derive(Debug, Clone)]
pub struct RunningTestbed {
    names: TestbedNames,
}

impl RunningTestbed {
    /// The JSON state file recording this testbed.
    pub fn state_file(&self) -> std::path::PathBuf {
        state::state_file(&self.names.name)
    }
    /// Deletes the namespaces, then the state file.
    pub fn down(self) -> Result<(), TestbedError> {
        self.names.delete_all()?;
        state::remove_state(&self.names.name);
        Ok(())
    }

    fn to_state(&self) -> StateFile {
        StateFile {
            name: self.names.name.clone(),
            instance: self.names.instance.clone(),
            origin: self.names.origin.clone(),
            namespaces: self.names.namespaces.clone(),
        }
    }

    fn from_state(s: StateFile) -> RunningTestbed {
        RunningTestbed {
            names: TestbedNames { name: s.name, instance: s.instance, origin: s.origin, namespaces: s.namespaces },
        }
    }
}

/// Like [`up`], but the testbed outlives this process: no reaper, and
/// `/run/ferry/testbeds/<name>.json` records the real names. Fails with
/// [`TestbedError::AlreadyUp`] if a testbed of that name is still up (a
/// state file whose namespaces are all gone is replaced).
pub fn up_detached(spec: &TestbedSpec) -> Result<RunningTestbed, TestbedError> {
    cmd::preflight()?;
    let rt = RunningTestbed { names: TestbedNames::generate(spec) };
    let name = rt.names.name.clone();
    // The state file doubles as a lock; retry once after removing a stale one.
    let mut created = state::create_state(&rt.to_state())?;
    if !created {
        let old = state::read_state(&name)?;
        let alive = old.as_ref().is_some_and(|s| s.namespaces.values().any(|r| state::ns_exists(r)));
        if alive {
            return Err(TestbedError::AlreadyUp { name: name.clone(), state_file: state::state_file(&name) });
        }
        if let Some(s) = old {
            s.namespaces.values().for_each(|r| state::remove_marker(r));
        }
        state::remove_state(&name);
        created = state::create_state(&rt.to_state())?;
    }
    if !created {
        return Err(TestbedError::AlreadyUp { name: name.clone(), state_file: state::state_file(&name) });
    }
    let result = (|| {
        for real in rt.names.namespaces.values() {
            state::write_marker(real, &Marker::current(Some(name.clone())))?;
        }
        build(spec, &rt.names)
    })();
    if let Err(e) = result {
        if let Err(cleanup) = rt.names.delete_all() {
            tracing::warn!(error = %cleanup, "cleanup after failed up_detached");
        }
        state::remove_state(&name);
        return Err(e);
    }
    Ok(rt)
}

/// Looks up a detached testbed by its spec name.
pub fn find_running(name: &str) -> Result<RunningTestbed, TestbedError> {
    match state::read_state(name)? {
        Some(s) => Ok(RunningTestbed::from_state(s)),
        None => Err(TestbedError::NotUp { name: name.to_string(), state_file: state::state_file(name) }),
    }
}

/// Tears down the detached testbed called `name`.
pub fn down_by_name(name: &str) -> Result<(), TestbedError> {
    find_running(name)?.down()
}

/// Tears down the detached testbed described by the spec file at `path`.
pub fn down_file(path: &Path) -> Result<(), TestbedError> {
    down_by_name(&crate::spec::parse(path)?.name())
}

/// Creates namespaces, links, addresses, sysctls and routes, in that order:
/// addresses need the devices, sysctls may name devices, and routes through
/// a gateway need the link up with an address on it.
fn build(spec: &TestbedSpec, names: &TestbedNames) -> Result<(), TestbedError> {
    let real = |logical: &str| names.ns_name(logical).to_string();
    for ns in &spec.namespaces {
        let r = real(ns.name.as_str());
        ip(&["netns", "add", &r])?;
        ip(&["-n", &r, "link", "set", "lo", "up"])?;
    }
    for link in &spec.links {
        ip(&veth_args(link, &real(link.a.ns.as_str()), &real(link.b.ns.as_str())))?;
    }
    for ns in &spec.namespaces {
        let r = real(ns.name.as_str());
        for (key, value) in &ns.sysctls {
            // Written from inside the namespace: /proc/sys/net is per netns.
            let args = ["netns", "exec", &r, "sh", "-c", r#"printf '%s\n' "$1" > "$2""#, "sh", value, &key.proc_path()];
            ip(&args)?;
        }
    }
    for link in &spec.links {
        for ep in [&link.a, &link.b] {
            configure_endpoint(ep, &real(ep.ns.as_str()))?;
        }
    }
    for ns in &spec.namespaces {
        let r = real(ns.name.as_str());
        for route in &ns.routes {
            let v6 = match (route.to, route.via) {
                (RouteDest::Net(c), _) => c.addr().is_ipv6(),
                (RouteDest::Default, Some(via)) => via.is_ipv6(),
                (RouteDest::Default, None) => false,
            };
            let mut args = vec!["-n".to_string(), r.clone()];
            if v6 {
                args.push("-6".into());
            }
            args.extend(["route".into(), "add".into(), String::from(route.to)]);
            if let Some(via) = route.via {
                args.extend(["via".into(), via.to_string()]);
            }
            if let Some(dev) = &route.dev {
                args.extend(["dev".into(), dev.to_string()]);
            }
            ip(&args)?;
        }
    }
    Ok(())
}

/// `ip link add` creating both veth ends directly in their namespaces, so
/// nothing ever appears in the root namespace.
fn veth_args(link: &LinkSpec, real_a: &str, real_b: &str) -> Vec<String> {
    let end = |ep: &EndpointSpec, real: &str| {
        let mut v = vec!["name".to_string(), ep.dev.to_string()];
        if let Some(mac) = ep.mac {
            v.extend(["address".into(), mac.to_string()]);
        }
        if let Some(mtu) = link.mtu {
            v.extend(["mtu".into(), mtu.get().to_string()]);
        }
        if let Some(q) = link.queues {
            let q = q.get().to_string();
            v.extend(["numtxqueues".into(), q.clone(), "numrxqueues".into(), q]);
        }
        v.extend(["netns".into(), real.to_string()]);
        v
    };
    let mut args = vec!["link".to_string(), "add".to_string()];
    args.extend(end(&link.a, real_a));
    args.extend(["type".into(), "veth".into(), "peer".into()]);
    args.extend(end(&link.b, real_b));
    args
}

fn configure_endpoint(ep: &EndpointSpec, real: &str) -> Result<(), TestbedError> {
    let dev = ep.dev.as_str();
    for addr in &ep.addrs {
        let a = addr.to_string();
        let mut args = vec!["-n", real, "addr", "add", &a, "dev", dev];
        if addr.addr().is_ipv6() {
            // Skip duplicate address detection: the address is usable at
            // once instead of after ~2 s of "tentative".
            args.push("nodad");
        }
        ip(&args)?;
    }
    ip(&["-n", real, "link", "set", dev, "up"])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_command_line() {
        let spec = TestbedSpec::from_yaml_str(
            "namespaces: [{name: a}, {name: b}]\n\
             links:\n  - a: {ns: a, dev: a0, mac: \"02:00:00:00:00:01\"}\n    \
             b: {ns: b, dev: b0}\n    queues: 4\n    mtu: 9000\n",
            "t.yaml",
        )
        .unwrap();
        let args = veth_args(&spec.links[0], "fy000000-a", "fy000000-b");
        assert_eq!(
            cmd::render("ip", &args),
            "ip link add name a0 address 02:00:00:00:00:01 mtu 9000 numtxqueues 4 \
             numrxqueues 4 netns fy000000-a type veth peer name b0 mtu 9000 \
             numtxqueues 4 numrxqueues 4 netns fy000000-b"
        );
    }

    #[test]
    fn generated_names_are_short_and_prefixed() {
        let spec =
            TestbedSpec::from_yaml_str(&format!("namespaces: [{{name: {}}}]\n", "n".repeat(21)), "t.yaml").unwrap();
        let names = TestbedNames::generate(&spec);
        let real = names.ns_name(&"n".repeat(21));
        assert!(real.len() <= 30, "{real}");
        assert!(state::is_ours(real), "{real}");
        assert!(real.starts_with(&format!("{}-", names.instance)));
    }
}
