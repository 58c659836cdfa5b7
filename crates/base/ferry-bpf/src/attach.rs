//! Loading an embedded object and attaching one of its XDP programs.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::{
    maps::{Array, DevMap, PerCpuArray, XskMap},
    programs::{Xdp, XdpFlags},
    Ebpf,
};

use crate::{abi::Verdicts, BpfError, GenConfig, Object};

/// Where in the stack an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// In the driver (veth supports it); the fast one.
    #[default]
    Driver,
    /// Generic (skb) mode: works on every device, slower.
    Generic,
}

impl AttachMode {
    pub(crate) fn flags(self) -> XdpFlags {
        match self {
            AttachMode::Driver => XdpFlags::DRV_MODE,
            AttachMode::Generic => XdpFlags::SKB_MODE,
        }
    }
}

impl std::str::FromStr for AttachMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "driver" | "drv" | "native" => Ok(AttachMode::Driver),
            "generic" | "skb" => Ok(AttachMode::Generic),
            _ => Err(format!("unknown XDP mode {s:?} (driver|generic)")),
        }
    }
}

/// One device's attachment of a program ([`LoadedXdp::attach_one`]).
#[derive(Debug)]
pub struct Attachment(aya::programs::xdp::XdpLinkId);

/// A loaded object with one program loaded (and maybe attached).
/// Dropping it detaches the program and frees the maps.
pub struct LoadedXdp {
    ebpf: Ebpf,
    object: Object,
    program: String,
}

impl LoadedXdp {
    /// Loads `object` and the XDP program `program` in it, without attaching.
    pub fn load(object: Object, program: &str) -> Result<Self, BpfError> {
        Self::load_sized(object, program, &[])
    }

    /// As [`LoadedXdp::load`], with maps `sizes` (name, entries) resized.
    pub fn load_sized(object: Object, program: &str, sizes: &[(&str, u32)]) -> Result<Self, BpfError> {
        let mut ebpf = load_object_sized(object, sizes)?;
        let prog = xdp_mut(&mut ebpf, object, program)?;
        prog.load().map_err(|source| BpfError::Program { name: program.to_string(), source })?;
        Ok(LoadedXdp { ebpf, object, program: program.to_string() })
    }

    /// Loads and attaches to the device with index `ifindex`.
    pub fn attach(object: Object, program: &str, ifindex: u32, mode: AttachMode) -> Result<Self, BpfError> {
        let mut loaded = Self::load(object, program)?;
        let name = loaded.program.clone();
        let prog = xdp_mut(&mut loaded.ebpf, object, &name)?;
        prog.attach_to_if_index(ifindex, mode.flags()).map_err(|source| attach_error(name, source))?;
        Ok(loaded)
    }

    /// Attaches the already loaded program to one more device.
    pub fn attach_to(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), BpfError> {
        let name = self.program.clone();
        let prog = xdp_mut(&mut self.ebpf, self.object, &name)?;
        prog.attach_to_if_index(ifindex, mode.flags()).map_err(|source| attach_error(name, source))?;
        Ok(())
    }

    /// As [`LoadedXdp::attach_to`], returning the attachment so that
    /// [`LoadedXdp::detach_from`] can take it off that device alone.
    pub fn attach_one(&mut self, ifindex: u32, mode: AttachMode) -> Result<Attachment, BpfError> {
        let name = self.program.clone();
        let prog = xdp_mut(&mut self.ebpf, self.object, &name)?;
        let id = prog.attach_to_if_index(ifindex, mode.flags()).map_err(|source| attach_error(name, source))?;
        Ok(Attachment(id))
    }

    /// Takes the program off the device of `attachment`.
    pub fn detach_from(&mut self, attachment: Attachment) -> Result<(), BpfError> {
        let name = self.program.clone();
        let prog = xdp_mut(&mut self.ebpf, self.object, &name)?;
        prog.detach(attachment.0).map_err(|source| BpfError::Program { name, source })
    }

    /// The loaded object, for typed map access by the program's own module.
    pub(crate) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    pub(crate) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// The program's fd, for BPF_PROG_RUN.
    pub fn program_fd(&self) -> Result<BorrowedFd<'_>, BpfError> {
        let prog: &Xdp = self
            .ebpf
            .program(&self.program)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| BpfError::NoProgram { object: self.object, name: self.program.clone() })?;
        let fd = prog.fd().map_err(|source| BpfError::Program { name: self.program.clone(), source })?;
        Ok(fd.as_fd())
    }

    /// Sums the per-CPU verdict counters of this object.
    pub fn verdicts(&self) -> Result<Verdicts, BpfError> {
        const NAME: &str = "ferry_verdicts";
        let map = self.ebpf.map(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let arr: PerCpuArray<_, Verdicts> =
            PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        sum_verdicts(&arr, NAME)
    }

    /// Registers an AF_XDP socket for receive queue `queue` (XskRedirect only).
    pub fn register_xsk(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<(), BpfError> {
        const NAME: &str = "ferry_xsks";
        let map = self.ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut xsks = XskMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        xsks.set(queue, socket.as_raw_fd(), 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// What frames on a receive queue with no registered socket get
    /// (XskRedirect only): counted in [`crate::SLOT_NO_SOCKET`] either way,
    /// then dropped, or handed to the kernel stack with `to_kernel`.
    pub fn set_unowned_queues(&mut self, to_kernel: bool) -> Result<(), BpfError> {
        set_unowned_queues(&mut self.ebpf, to_kernel)
    }

    /// Writes the generator configuration (Gen only).
    pub fn set_gen_config(&mut self, config: GenConfig) -> Result<(), BpfError> {
        const NAME: &str = "ferry_gen_config";
        let map = self.ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut arr: Array<_, GenConfig> =
            Array::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        arr.set(0, config, 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Makes `ferry_redirect` forward every frame out of device `ifindex`
    /// (Redirect only). The kernel resolves `ifindex` in the network
    /// namespace of the calling thread, so call this from the namespace
    /// the device lives in.
    pub fn set_redirect_target(&mut self, ifindex: u32) -> Result<(), BpfError> {
        const NAME: &str = "ferry_redirect_devs";
        let map = self.ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut devs = DevMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        devs.set(0, ifindex, None, 0).map_err(|source| BpfError::XdpMap { name: NAME, source })
    }
}

/// Why program `name` could not be attached. A device whose MTU takes
/// frames larger than a page refuses an XDP program without multi-buffer
/// support (ERANGE: veth in driver mode, most NIC drivers): said plainly.
pub(crate) fn attach_error(name: String, source: aya::programs::ProgramError) -> BpfError {
    match &source {
        aya::programs::ProgramError::SyscallError(e) if e.io_error.raw_os_error() == Some(libc::ERANGE) => {
            BpfError::NotSupported {
                need: "a device MTU of at most about 3.5 kB: XDP above that needs multi-buffer programs, which \
                       Ferry's are not (lower the MTU, or attach in generic mode)",
                source: std::io::Error::from_raw_os_error(libc::ERANGE),
            }
        }
        _ => BpfError::Program { name, source },
    }
}

/// Writes the xsk-redirect program's `ferry_xsk_unowned` setting.
pub(crate) fn set_unowned_queues(ebpf: &mut Ebpf, to_kernel: bool) -> Result<(), BpfError> {
    const NAME: &str = "ferry_xsk_unowned";
    let map = ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
    let mut arr: Array<_, u32> = Array::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
    let action = if to_kernel { crate::abi::UNOWNED_KERNEL } else { crate::abi::UNOWNED_DROP };
    arr.set(0, action, 0).map_err(|source| BpfError::Map { name: NAME, source })
}

/// A verdict-counter array (`name` in errors), summed over CPUs.
pub(crate) fn sum_verdicts<T: std::borrow::Borrow<aya::maps::MapData>>(
    arr: &PerCpuArray<T, Verdicts>,
    name: &'static str,
) -> Result<Verdicts, BpfError> {
    let per_cpu = arr.get(&0, 0).map_err(|source| BpfError::Map { name, source })?;
    let mut sum = Verdicts::default();
    for v in per_cpu.iter() {
        sum.add(v);
    }
    Ok(sum)
}

/// Entries `indices` of the per-CPU `u64` array `name` of `ebpf`, each
/// summed over CPUs (a program's own counters).
pub(crate) fn per_cpu_sums(
    ebpf: &Ebpf,
    name: &'static str,
    indices: impl Iterator<Item = u32>,
) -> Result<Vec<u64>, BpfError> {
    let map = ebpf.map(name).ok_or(BpfError::NoMap { name })?;
    let arr: PerCpuArray<_, u64> = PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name, source })?;
    indices.map(|i| Ok(arr.get(&i, 0).map_err(|source| BpfError::Map { name, source })?.iter().sum())).collect()
}

/// An independent handle (a dup'd fd) on map `name` of `ebpf`, for the
/// state library (`crate::state`) and control planes that outlive a borrow.
pub(crate) fn map_handle(ebpf: &Ebpf, name: &'static str) -> Result<aya::maps::Map, BpfError> {
    dup_map(ebpf.map(name).ok_or(BpfError::NoMap { name })?, name)
}

/// A second handle on `map` (named `name` in errors), on a dup'd fd.
pub(crate) fn dup_map(map: &aya::maps::Map, name: &'static str) -> Result<aya::maps::Map, BpfError> {
    use aya::maps::{Map, MapData};
    let dup = |d: &MapData| -> Result<MapData, BpfError> {
        let fd =
            d.fd().as_fd().try_clone_to_owned().map_err(|source| BpfError::Syscall { what: "dup map fd", source })?;
        MapData::from_fd(fd).map_err(|source| BpfError::Map { name, source })
    };
    Ok(match map {
        Map::HashMap(d) => Map::HashMap(dup(d)?),
        Map::LruHashMap(d) => Map::LruHashMap(dup(d)?),
        Map::PerCpuArray(d) => Map::PerCpuArray(dup(d)?),
        Map::Array(d) => Map::Array(dup(d)?),
        Map::LpmTrie(d) => Map::LpmTrie(dup(d)?),
        Map::RingBuf(d) => Map::RingBuf(dup(d)?),
        _ => return Err(BpfError::NoMap { name }),
    })
}

/// Loads an embedded object's maps (no program yet), with maps `sizes`
/// (name, entries) resized.
pub(crate) fn load_object_sized(object: Object, sizes: &[(&str, u32)]) -> Result<Ebpf, BpfError> {
    raise_memlock_limit();
    let mut loader = aya::EbpfLoader::new();
    for (name, entries) in sizes {
        loader.set_max_entries(name, *entries);
    }
    loader.load(object.bytes()).map_err(|source| match &source {
        aya::EbpfError::MapError(aya::maps::MapError::CreateError { io_error, .. })
            if io_error.raw_os_error() == Some(libc::EPERM) =>
        {
            BpfError::NotSupported {
                need: "CAP_BPF and CAP_NET_ADMIN (run as root or through ferryd)",
                source: std::io::Error::from_raw_os_error(libc::EPERM),
            }
        }
        _ => BpfError::Load { object, source },
    })
}

pub(crate) fn xdp_mut<'a>(ebpf: &'a mut Ebpf, object: Object, name: &str) -> Result<&'a mut Xdp, BpfError> {
    ebpf.program_mut(name)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| BpfError::NoProgram { object, name: name.to_string() })
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; raising it is
/// harmless on newer ones, and failing to raise it is not fatal.
fn raise_memlock_limit() {
    let limit = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads a valid rlimit struct.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) };
}
