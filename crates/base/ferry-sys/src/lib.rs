//! Ferry's OS plumbing, written once for every layer above it.
//!
//! - [`netns`]: running code inside a named network namespace.
//! - [`devattr`]: a device's sysfs attributes, in its own namespace.
//! - [`link`]: network devices and their addresses over rtnetlink;
//!   [`tap`]: TAP devices, to hand frames back to the kernel stack.
//! - [`users`]: accounts by name.
//! - [`affinity`]: CPU sets, for threads and for children between fork and
//!   exec.
//! - [`clock`]: the monotonic clock BPF programs stamp with, and
//!   [`pacer`]: a token bucket on that clock for senders.
//!
//! Nothing here knows about chains or NFs; the crates above call these
//! instead of `libc` directly.

pub mod affinity;
pub mod clock;
pub mod devattr;
pub mod fs;
pub mod link;
pub mod netns;
pub mod pacer;
pub mod tap;
pub mod users;

pub use affinity::{pin_thread, CpuSet};
pub use clock::monotonic_ns;
pub use netns::in_netns;
pub use pacer::Pacer;
pub use users::lookup_user;
