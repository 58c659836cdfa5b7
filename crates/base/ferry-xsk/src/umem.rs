//! UMEM: the packet buffer area shared by the kernel and every process of a
//! trust domain. It lives in a sealed memfd so another process can map the
//! same memory from an fd received over a Unix socket, without privilege.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::XskError;

/// Geometry of a UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UmemConfig {
    /// Number of frames.
    pub frame_count: u32,
    /// Bytes per frame (2048 or 4096 for aligned mode).
    pub frame_size: u32,
    /// Bytes the kernel leaves free in front of each received packet.
    pub headroom: u32,
}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig { frame_count: 4096, frame_size: 2048, headroom: 0 }
    }
}

impl UmemConfig {
    /// Validates the geometry: the kernel wants power-of-two frames
    /// between 2048 and the page size in aligned mode.
    pub fn validate(&self) -> Result<(), XskError> {
        if !(self.frame_size == 2048 || self.frame_size == 4096) {
            return Err(XskError::Config { field: "frame_size", reason: "must be 2048 or 4096" });
        }
        if self.frame_count == 0 || !self.frame_count.is_power_of_two() {
            return Err(XskError::Config { field: "frame_count", reason: "must be a power of two" });
        }
        if self.headroom >= self.frame_size / 2 {
            return Err(XskError::Config { field: "headroom", reason: "must be under half a frame" });
        }
        Ok(())
    }

    /// Total bytes of the area.
    pub fn len(&self) -> usize {
        self.frame_count as usize * self.frame_size as usize
    }

    /// True when the area has no frames (never for a validated config).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A mapped UMEM area backed by a memfd.
pub struct Umem {
    fd: OwnedFd,
    base: *mut u8,
    config: UmemConfig,
}

// SAFETY: the mapping is plain shared memory; ownership of individual frames
// is managed by the rings, not by this type.
unsafe impl Send for Umem {}
unsafe impl Sync for Umem {}

impl Umem {
    /// Creates a new sealed memfd of the configured size and maps it.
    pub fn create(name: &str, config: UmemConfig) -> Result<Umem, XskError> {
        config.validate()?;
        let cname = CString::new(name).map_err(|_| XskError::Config { field: "name", reason: "contains NUL" })?;
        // SAFETY: plain syscalls on a fresh fd.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(XskError::sys("memfd_create"));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if unsafe { libc::ftruncate(fd.as_raw_fd(), config.len() as libc::off_t) } < 0 {
            return Err(XskError::sys("ftruncate umem"));
        }
        // Sealing the size means a peer can never shrink the area under the
        // kernel or another process (which would SIGBUS them).
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(XskError::sys("seal umem"));
        }
        Self::map(fd, config)
    }

    /// Maps a UMEM received from another process. Checks that the memfd is
    /// sealed against shrinking and large enough for `config`.
    pub fn from_fd(fd: OwnedFd, config: UmemConfig) -> Result<Umem, XskError> {
        config.validate()?;
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(XskError::Config { field: "umem fd", reason: "not a memfd sealed against shrinking" });
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return Err(XskError::sys("fstat umem"));
        }
        if (st.st_size as usize) < config.len() {
            return Err(XskError::Config { field: "umem fd", reason: "smaller than the configured frames" });
        }
        Self::map(fd, config)
    }

    fn map(fd: OwnedFd, config: UmemConfig) -> Result<Umem, XskError> {
        // SAFETY: mapping a memfd we hold, of at least config.len() bytes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                config.len(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(XskError::sys("mmap umem"));
        }
        Ok(Umem { fd, base: base as *mut u8, config })
    }

    pub fn config(&self) -> &UmemConfig {
        &self.config
    }

    /// Start of the mapped area.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Address (offset into the UMEM) of frame `index`.
    pub fn frame_addr(&self, index: u32) -> u64 {
        index as u64 * self.config.frame_size as u64
    }

    /// The bytes at `addr..addr+len`, or None when out of range.
    ///
    /// # Safety
    /// The caller must own the frame holding these bytes (it came from the
    /// RX ring or the caller's free list and was not handed back since), so
    /// that nobody else writes it meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let end = addr.checked_add(len as u64)?;
        if end > self.config.len() as u64 {
            return None;
        }
        Some(std::slice::from_raw_parts_mut(self.base.add(addr as usize), len))
    }
}

impl AsFd for Umem {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmapping the area mapped in `map`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.config.len()) };
    }
}
