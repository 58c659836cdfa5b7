//! The redirect program attached through a bpf_link pinned in bpffs, with
//! its maps pinned beside it, so that it outlives the process that
//! attached it: a restarted ferryd opens the pins and goes on registering
//! sockets in the same XSKMAP, while the frames never stopped flowing.
//!
//! The pin directory holds three files: `link` (the XDP link on the
//! device), `xsks` (the XSKMAP) and `verdicts` (the per-CPU counters).
//! Removing the directory's pins is what detaches the program.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use aya::maps::{Map, MapData, PerCpuArray, XskMap};
use aya::programs::links::{FdLink, PinnedLink};

use crate::attach::{load_object_sized, xdp_mut};
use crate::{abi::Verdicts, AttachMode, BpfError, Object};

const PROGRAM: &str = "ferry_xsk_redirect";
const XSKS: &str = "ferry_xsks";
const VERDICTS: &str = "ferry_verdicts";

/// Where bpffs must be mounted for pins.
pub const BPFFS: &str = "/sys/fs/bpf";

/// A pinned `ferry_xsk_redirect` on one device. Dropping it removes the
/// pins (the program leaves the device), unless [`PinnedRedirect::keep`]
/// said it is to outlive this process.
pub struct PinnedRedirect {
    dir: PathBuf,
    keep: bool,
    _link: PinnedLink,
    xsks: XskMap<MapData>,
    verdicts: PerCpuArray<MapData, Verdicts>,
}

fn pin_err(path: &Path, reason: impl ToString) -> BpfError {
    BpfError::Pin { path: path.to_path_buf(), reason: reason.to_string() }
}

impl PinnedRedirect {
    /// Loads the redirect program, attaches it to `ifindex` (in the
    /// calling thread's network namespace) and pins link and maps in
    /// `dir`, which must not exist yet (bpffs is mounted if it is not).
    /// Frames on a queue with no socket go to the kernel with
    /// `unowned_to_kernel`, else they are dropped; counted either way.
    pub fn attach(
        ifindex: u32,
        mode: AttachMode,
        dir: &Path,
        unowned_to_kernel: bool,
    ) -> Result<PinnedRedirect, BpfError> {
        ensure_bpffs()?;
        std::fs::create_dir_all(dir).map_err(|e| pin_err(dir, e))?;
        let pinned = Self::attach_in(ifindex, mode, dir, unowned_to_kernel);
        if pinned.is_err() {
            remove_pins(dir);
        }
        pinned
    }

    fn attach_in(ifindex: u32, mode: AttachMode, dir: &Path, to_kernel: bool) -> Result<PinnedRedirect, BpfError> {
        let mut ebpf = load_object_sized(Object::XskRedirect, &[])?;
        crate::attach::set_unowned_queues(&mut ebpf, to_kernel)?;
        let prog = xdp_mut(&mut ebpf, Object::XskRedirect, PROGRAM)?;
        let program = |source| BpfError::Program { name: PROGRAM.into(), source };
        prog.load().map_err(program)?;
        let id = prog
            .attach_to_if_index(ifindex, mode.flags())
            .map_err(|e| crate::attach::attach_error(PROGRAM.into(), e))?;
        let link = prog.take_link(id).map_err(program)?;
        let link = FdLink::try_from(link).map_err(|e| BpfError::NotSupported {
            need: "XDP through a bpf_link (Linux 5.9)",
            source: std::io::Error::other(e.to_string()),
        })?;
        let link = link.pin(dir.join("link")).map_err(|e| pin_err(&dir.join("link"), e))?;
        for (name, file) in [(XSKS, "xsks"), (VERDICTS, "verdicts")] {
            let map = ebpf.map(name).ok_or(BpfError::NoMap { name })?;
            map.pin(dir.join(file)).map_err(|e| pin_err(&dir.join(file), e))?;
        }
        drop(link);
        Self::open(dir)
    }

    /// Opens the pins an earlier process left in `dir`.
    pub fn open(dir: &Path) -> Result<PinnedRedirect, BpfError> {
        let link = PinnedLink::from_pin(dir.join("link")).map_err(|e| pin_err(&dir.join("link"), e))?;
        let map = |file: &str, name: &'static str| {
            MapData::from_pin(dir.join(file)).map_err(|source| BpfError::Map { name, source })
        };
        let xsks =
            XskMap::try_from(Map::XskMap(map("xsks", XSKS)?)).map_err(|source| BpfError::Map { name: XSKS, source })?;
        let verdicts = PerCpuArray::try_from(Map::PerCpuArray(map("verdicts", VERDICTS)?))
            .map_err(|source| BpfError::Map { name: VERDICTS, source })?;
        Ok(PinnedRedirect { dir: dir.to_path_buf(), keep: false, _link: link, xsks, verdicts })
    }

    /// Registers an AF_XDP socket for receive queue `queue`.
    pub fn register_xsk(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<(), BpfError> {
        self.xsks.set(queue, socket.as_raw_fd(), 0).map_err(|source| BpfError::Map { name: XSKS, source })
    }

    /// The program's verdict counters, summed over CPUs.
    pub fn verdicts(&self) -> Result<Verdicts, BpfError> {
        crate::attach::sum_verdicts(&self.verdicts, VERDICTS)
    }

    /// The pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pins stay when this handle goes: the program outlives the
    /// process, for the next one to open.
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for PinnedRedirect {
    /// Unpins link and maps, unless kept: the program leaves the device
    /// once this handle's fds close, which is now.
    fn drop(&mut self) {
        if !self.keep {
            remove_pins(&self.dir);
        }
    }
}

/// Removes the pins of `dir` and the directory (what an earlier process
/// left there too).
pub fn remove_pins(dir: &Path) {
    for file in ["link", "xsks", "verdicts"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let _ = std::fs::remove_dir(dir);
}

/// Mounts bpffs at [`BPFFS`] unless one is mounted there already, as
/// systemd does at boot and Cilium's agent does when it starts: many VMs
/// and containers have the directory but nothing on it. Mode 0700, so
/// only root walks the pins. An error only when the mount itself fails
/// (no CAP_SYS_ADMIN, a read-only /sys).
pub fn ensure_bpffs() -> Result<(), BpfError> {
    let root = Path::new(BPFFS);
    if is_bpffs(root) {
        return Ok(());
    }
    let mount_err = |source: std::io::Error| BpfError::Pin {
        path: root.to_path_buf(),
        reason: format!("mounting bpffs: {source}"),
    };
    std::fs::create_dir_all(root).map_err(mount_err)?;
    let (source, fstype, target, data) = (c"bpf", c"bpf", c"/sys/fs/bpf", c"mode=0700");
    // SAFETY: NUL-terminated constant strings; data is bpffs's option text.
    let rc = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data.as_ptr().cast()) };
    if rc != 0 {
        return Err(mount_err(std::io::Error::last_os_error()));
    }
    if !same_mount_namespace_as_init() {
        // As Cilium warns: pins in a bpffs that only this namespace sees
        // go with it (a container restarted, a unit with PrivateMounts).
        tracing::warn!(
            "mounted bpffs on {BPFFS} in a mount namespace of its own: pinned programs outlive this process \
             only while the namespace does; give it the host's /sys/fs/bpf (Kubernetes: a hostPath with \
             mountPropagation: Bidirectional)"
        );
    }
    Ok(())
}

/// Whether this process shares PID 1's mount namespace (the host's, on a
/// host; false in a container or a private mount namespace).
fn same_mount_namespace_as_init() -> bool {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    matches!((ns("self"), ns("1")), (Some(a), Some(b)) if a == b)
}

/// Whether `path` is a mounted bpffs.
fn is_bpffs(path: &Path) -> bool {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs into a zeroed struct we own, on a NUL-terminated path.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC
    }
}
