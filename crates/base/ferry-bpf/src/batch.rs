//! Reading a whole BPF hash map in a few system calls.
//!
//! Walking a map key by key (`BPF_MAP_GET_NEXT_KEY`, then a lookup) costs
//! two calls per entry, and restarts from the first key whenever the data
//! path deletes the key the walk stands on (an LRU map evicting under new
//! flows): a control plane that reads a busy table every tick spends its
//! CPU there. `BPF_MAP_LOOKUP_BATCH` (Linux 5.6) returns entries a bucket
//! at a time and resumes from a bucket, not a key.

use std::io;
use std::marker::PhantomData;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use aya::Pod;

/// `BPF_MAP_LOOKUP_BATCH` and `BPF_OBJ_GET_INFO_BY_FD` in `enum bpf_cmd`
/// (include/uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `enum bpf_map_type`: the maps these reads accept.
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
/// Entries asked for per call: far more than a hash bucket holds, so the
/// kernel never answers ENOSPC (a bucket larger than `count`).
const CHUNK: usize = 4096;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// The head of `struct bpf_map_info`: what the kernel says a map is.
#[repr(C)]
#[derive(Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
}

/// The `info` member of `union bpf_attr`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Refuses a map that is not one of `types` with keys of `K` and values
/// of `V`: the kernel writes by the map's sizes, so the buffers must fit.
fn check<K, V>(fd: BorrowedFd<'_>, types: &[u32]) -> io::Result<()> {
    let mut info = MapInfo::default();
    let attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<MapInfo>() as u32,
        info: &mut info as *mut MapInfo as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes into `info`.
    let ret = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, &attr as *const InfoAttr, size_of::<InfoAttr>())
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    let fits = info.key_size as usize == size_of::<K>() && info.value_size as usize == size_of::<V>();
    if !types.contains(&info.map_type) || !fits {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "map type {} with {}-byte keys and {}-byte values, not what was asked for",
                info.map_type, info.key_size, info.value_size
            ),
        ));
    }
    Ok(())
}

/// Every entry of the hash map (plain or LRU) behind `fd`, whose keys are
/// `K` and values `V` (checked against the map). An error of the kernel
/// (EINVAL on a kernel without the command) is returned as it gave it,
/// for the caller to fall back to a walk.
pub fn lookup_all<K: Pod, V: Pod>(fd: BorrowedFd<'_>) -> io::Result<Vec<(K, V)>> {
    check::<K, V>(fd, &[BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LRU_HASH])?;
    let (mut keys, mut values) = (Vec::<K>::with_capacity(CHUNK), Vec::<V>::with_capacity(CHUNK));
    // The kernel's resume token: a bucket index for hash maps (a u32);
    // room for more, as libbpf gives it.
    let (mut token_in, mut token_out) = (0u64, 0u64);
    let mut entries = Vec::new();
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            // NULL: from the first bucket.
            in_batch: if first { 0 } else { &token_in as *const u64 as u64 },
            out_batch: &mut token_out as *mut u64 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: `attr` points at buffers of CHUNK keys and values, the
        // count the kernel may fill; the kernel writes `count` back.
        let ret = unsafe {
            libc::syscall(libc::SYS_bpf, BPF_MAP_LOOKUP_BATCH, &mut attr as *mut BatchAttr, size_of::<BatchAttr>())
        };
        let done = match ret {
            // A batch that returns nothing without ENOENT would loop.
            0 if attr.count == 0 => return Err(io::Error::other("an empty batch before the map's end")),
            0 => false,
            _ => match io::Error::last_os_error() {
                e if e.raw_os_error() == Some(libc::ENOENT) => true,
                e => return Err(e),
            },
        };
        let n = (attr.count as usize).min(CHUNK);
        // SAFETY: the kernel filled the first `n` keys and values, plain
        // data (Pod) of the map's sizes.
        unsafe {
            keys.set_len(n);
            values.set_len(n);
        }
        entries.extend(keys.drain(..).zip(values.drain(..)));
        if done {
            return Ok(entries);
        }
        token_in = token_out;
        first = false;
    }
}

/// A per-CPU array of `V` values whose rows are read in batches: checked
/// once, when made (map type, key and value sizes, `V` a multiple of 8
/// bytes, the kernel's per-CPU stride), so a reader on a hot path pays one
/// system call per read.
pub struct PerCpuRows<V> {
    fd: OwnedFd,
    cpus: usize,
    value: PhantomData<V>,
}

impl<V: Pod> PerCpuRows<V> {
    /// The array behind `fd` (a duplicate of it is kept).
    pub fn new(fd: BorrowedFd<'_>) -> io::Result<Self> {
        if size_of::<V>() % 8 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "per-CPU values must be a multiple of 8 bytes"));
        }
        check::<u32, V>(fd, &[BPF_MAP_TYPE_PERCPU_ARRAY])?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        Ok(PerCpuRows { fd: fd.try_clone_to_owned()?, cpus, value: PhantomData })
    }

    /// Rows `first..first + n`, each summed by `add` over the possible
    /// CPUs: one call where reading row by row costs one each.
    pub fn read(&self, first: u32, n: u32, add: impl Fn(V, V) -> V) -> io::Result<Vec<V>> {
        let cpus = self.cpus;
        let (mut keys, mut values) =
            (Vec::<u32>::with_capacity(n as usize), Vec::<V>::with_capacity(n as usize * cpus));
        // An array's batch token is the key before the first one read.
        let before = first.wrapping_sub(1);
        let mut token_out = 0u64;
        let mut attr = BatchAttr {
            in_batch: if first == 0 { 0 } else { &before as *const u32 as u64 },
            out_batch: &mut token_out as *mut u64 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: n,
            map_fd: self.fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: room for `n` keys and `n * cpus` values, what `count`
        // lets the kernel write; the map's layout was checked in `new`.
        let ret = unsafe {
            libc::syscall(libc::SYS_bpf, BPF_MAP_LOOKUP_BATCH, &mut attr as *mut BatchAttr, size_of::<BatchAttr>())
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        let got = (attr.count as usize).min(n as usize);
        // SAFETY: the kernel filled `got` rows of `cpus` values each.
        unsafe { values.set_len(got * cpus) };
        let zero = || -> V {
            // SAFETY: Pod data is valid all zero.
            unsafe { std::mem::zeroed() }
        };
        Ok(values.chunks(cpus).map(|row| row.iter().fold(zero(), |a, &v| add(a, v))).collect())
    }
}
