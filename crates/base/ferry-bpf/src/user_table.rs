//! Tables an NF process fills and ferryd reads: BPF hash maps used as
//! shared memory between two user-space processes. Creating a map needs
//! privilege, so ferryd creates each ([`UserTable::create`]) and passes the
//! NF an fd in its welcome; the unprivileged NF writes through it
//! ([`UserTable::from_fd`]). No BPF program reads them.
//!
//! Two layouts: a flow monitor's flows ([`crate::flow_table`]) and an
//! IPS's alerts per rule ([`crate::alert_table`]).

use std::marker::PhantomData;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use aya::maps::{HashMap, Map, MapData};
use aya::Pod;

use crate::BpfError;

/// A table's name (its name in a welcome's map fds, and the kernel's
/// map name: at most 15 bytes) and its key and value types.
pub trait Layout {
    const NAME: &'static str;
    type Key: Pod;
    type Value: Pod;
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_TYPE_HASH: u32 = 1;
/// Entries allocated as they are inserted: a table sized for the worst
/// case costs what it holds.
const BPF_F_NO_PREALLOC: u32 = 1;

/// The part of `union bpf_attr` that BPF_MAP_CREATE reads (up to the name).
#[repr(C)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

pub struct UserTable<L: Layout> {
    map: HashMap<MapData, L::Key, L::Value>,
    /// Another fd of the map, to hand on.
    fd: OwnedFd,
    layout: PhantomData<L>,
}

impl<L: Layout> UserTable<L> {
    /// A new, empty table of at most `max_entries` entries.
    pub fn create(max_entries: u32) -> Result<UserTable<L>, BpfError> {
        let mut map_name = [0u8; 16];
        let name = &L::NAME.as_bytes()[..L::NAME.len().min(15)];
        map_name[..name.len()].copy_from_slice(name);
        let attr = MapCreate {
            map_type: BPF_MAP_TYPE_HASH,
            key_size: std::mem::size_of::<L::Key>() as u32,
            value_size: std::mem::size_of::<L::Value>() as u32,
            max_entries,
            map_flags: BPF_F_NO_PREALLOC,
            inner_map_fd: 0,
            numa_node: 0,
            map_name,
        };
        // SAFETY: bpf(2) reads `size_of::<MapCreate>()` bytes of an
        // attribute we own; the rest of bpf_attr is taken as zero.
        let fd = unsafe {
            libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, &attr as *const MapCreate, std::mem::size_of::<MapCreate>())
        };
        if fd < 0 {
            return Err(BpfError::Syscall {
                what: "BPF_MAP_CREATE (an NF's table)",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: the kernel just returned this fd; nothing else owns it.
        UserTable::from_fd(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// The table behind `fd` (checked: a hash map of this layout).
    pub fn from_fd(fd: OwnedFd) -> Result<UserTable<L>, BpfError> {
        let spare = fd
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| BpfError::Syscall { what: "dup an NF table's fd", source })?;
        let map_err = |source| BpfError::Map { name: L::NAME, source };
        let data = MapData::from_fd(fd).map_err(map_err)?;
        let map = HashMap::try_from(Map::HashMap(data)).map_err(map_err)?;
        Ok(UserTable { map, fd: spare, layout: PhantomData })
    }

    /// A new fd of the table, to pass on.
    pub fn fd(&self) -> Result<OwnedFd, BpfError> {
        self.fd
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| BpfError::Syscall { what: "dup an NF table's fd", source })
    }

    /// Sets one entry.
    pub fn set(&mut self, key: L::Key, value: L::Value) -> Result<(), BpfError> {
        self.map.insert(key, value, 0).map_err(|source| BpfError::Map { name: L::NAME, source })
    }

    /// Every entry: read in batches where the kernel can, else walked key
    /// by key.
    pub fn entries(&self) -> Vec<(L::Key, L::Value)> {
        crate::batch::lookup_all(self.fd.as_fd()).unwrap_or_else(|_| self.map.iter().filter_map(Result::ok).collect())
    }
}
