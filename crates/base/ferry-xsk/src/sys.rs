//! The parts of `<linux/if_xdp.h>` and socket options Ferry uses, written
//! out so the crate does not depend on a particular libc version.

pub const AF_XDP: libc::c_int = 44;
pub const SOL_XDP: libc::c_int = 283;

pub const XDP_MMAP_OFFSETS: libc::c_int = 1;
pub const XDP_RX_RING: libc::c_int = 2;
pub const XDP_TX_RING: libc::c_int = 3;
pub const XDP_UMEM_REG: libc::c_int = 4;
pub const XDP_UMEM_FILL_RING: libc::c_int = 5;
pub const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
pub const XDP_STATISTICS: libc::c_int = 7;

pub const XDP_SHARED_UMEM: u16 = 1 << 0;
pub const XDP_COPY: u16 = 1 << 1;
pub const XDP_ZEROCOPY: u16 = 1 << 2;
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;

/// Set by the kernel in a ring's flags word when user space must kick it.
pub const XDP_RING_NEED_WAKEUP: u32 = 1;

pub const XDP_PGOFF_RX_RING: libc::off_t = 0;
pub const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
pub const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
pub const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

pub const SO_BUSY_POLL: libc::c_int = 46;
pub const SO_PREFER_BUSY_POLL: libc::c_int = 69;
pub const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpRingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpMmapOffsets {
    pub rx: XdpRingOffset,
    pub tx: XdpRingOffset,
    pub fr: XdpRingOffset,
    pub cr: XdpRingOffset,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpUmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct SockaddrXdp {
    pub family: u16,
    pub flags: u16,
    pub ifindex: u32,
    pub queue_id: u32,
    pub shared_umem_fd: u32,
}

/// One descriptor of the RX or TX ring.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// Kernel-side drop and error counters of one socket.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

pub fn setsockopt<T>(fd: libc::c_int, level: libc::c_int, name: libc::c_int, value: &T) -> std::io::Result<()> {
    // SAFETY: value points to a live T of the given size.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, value as *const T as *const libc::c_void, std::mem::size_of::<T>() as u32)
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn getsockopt<T: Default>(fd: libc::c_int, level: libc::c_int, name: libc::c_int) -> std::io::Result<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: value is a live T and len its size.
    let rc = unsafe { libc::getsockopt(fd, level, name, &mut value as *mut T as *mut libc::c_void, &mut len) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

/// `SIOCETHTOOL`, the ioctl behind `ethtool`.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GCHANNELS`: a device's channel counts.
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct EthtoolChannels {
    pub cmd: u32,
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_other: u32,
    pub max_combined: u32,
    pub rx_count: u32,
    pub tx_count: u32,
    pub other_count: u32,
    pub combined_count: u32,
}

/// `struct ifreq` with `ifr_data`.
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Device `name`'s channel counts (`ethtool -l`), None when its driver
/// does not report them.
pub fn channels(name: &str) -> std::io::Result<Option<EthtoolChannels>> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from_raw_os_error(libc::ENODEV));
    }
    let mut ch = EthtoolChannels { cmd: ETHTOOL_GCHANNELS, ..Default::default() };
    let mut req =
        IfreqData { name: [0; libc::IFNAMSIZ], data: (&mut ch as *mut EthtoolChannels).cast(), _pad: [0; 16] };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a datagram socket we close below; the ioctl reads req and
    // writes ch, both alive across the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        match rc {
            0 => Ok(Some(ch)),
            _ if err.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(err),
        }
    }
}
