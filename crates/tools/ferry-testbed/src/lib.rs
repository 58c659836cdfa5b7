//! Declarative network-namespace + veth testbeds.
//!
//! A YAML file (see `examples/testbeds/`) describes namespaces and veth
//! pairs; [`up`] builds it with iproute2's `ip` and returns a [`Testbed`]
//! that deletes everything when dropped. Namespace names get a unique
//! `fy??????-` prefix, so the same file can be up several times at once
//! (parallel tests) without clashes.
//!
//! Teardown is guaranteed even if the owning process is SIGKILLed: each
//! `Testbed` has a reaper child that deletes the namespaces when its stdin
//! pipe (held only by the owner) closes. Deleting a namespace deletes its
//! veths and any XDP programs attached to them; since both veth ends live in
//! testbed namespaces, nothing is left in the root namespace.
//!
//! For the CLI, which exits after `ferry testbed up`, [`up_detached`]
//! records the real names in a state file that [`down_by_name`] /
//! [`down_file`] read later. [`sweep_stale`] removes namespaces whose
//! creator died without cleaning up (belt and braces for `make test`).
//!
//! ```no_run
//! let spec = ferry_testbed::parse("examples/testbeds/two-hosts.yaml".as_ref())?;
//! let tb = ferry_testbed::up(&spec)?;
//! let ok = tb
//!     .exec("client", "ping", ["-c", "1", "-W", "1", "10.0.1.2"])
//!     .status()?
//!     .success();
//! tb.down()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod apps;
mod cmd;
mod error;
mod spec;
mod state;
mod testbed;
mod types;

pub use cmd::preflight;
pub use error::TestbedError;
pub use spec::{parse, EndpointSpec, LinkSpec, NamespaceSpec, RouteSpec, TestbedSpec};
pub use state::{sweep_stale, STATE_DIR};
pub use testbed::{down_by_name, down_file, find_running, up, up_detached, RunningTestbed, Testbed, TestbedNames};
pub use types::{IfName, IpCidr, Mtu, NsName, QueueCount, RouteDest, SpecName, SysctlKey};
