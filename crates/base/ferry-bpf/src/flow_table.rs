//! A flow monitor's table when the NF runs as a process: a BPF hash map
//! with the pipeline's flow-monitor layout (`ferry_pl_flows`: key
//! [`FlowKey`], value [`PlCount`]), so that ferryd reads the flows of a
//! flow monitor the same way wherever it was placed. Creating a map needs
//! privilege, so ferryd creates it ([`FlowTable::create`]) and passes the
//! fd; the unprivileged NF writes its flows into it ([`FlowTable::from_fd`]).

use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use aya::maps::{HashMap, Map, MapData};

use crate::pipeline::{FlowKey, PlCount};
use crate::BpfError;

/// Its name in a welcome's map fds.
pub const MAP_NAME: &str = "ferry_nf_flows";

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_TYPE_HASH: u32 = 1;

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

pub struct FlowTable {
    map: HashMap<MapData, FlowKey, PlCount>,
    /// Another fd of the map, to hand on.
    fd: OwnedFd,
}

impl FlowTable {
    /// A new, empty table of at most `max_entries` flows.
    pub fn create(max_entries: u32) -> Result<FlowTable, BpfError> {
        let mut map_name = [0u8; 16];
        map_name[..14].copy_from_slice(b"ferry_nf_flows");
        let attr = MapCreate {
            map_type: BPF_MAP_TYPE_HASH,
            key_size: std::mem::size_of::<FlowKey>() as u32,
            value_size: std::mem::size_of::<PlCount>() as u32,
            max_entries,
            map_flags: 0,
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
                what: "BPF_MAP_CREATE (a flow table)",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: the kernel just returned this fd; nothing else owns it.
        FlowTable::from_fd(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// The table behind `fd` (checked: a hash map of this layout).
    pub fn from_fd(fd: OwnedFd) -> Result<FlowTable, BpfError> {
        let dup = |fd: &OwnedFd| {
            fd.as_fd()
                .try_clone_to_owned()
                .map_err(|source| BpfError::Syscall { what: "dup the flow table's fd", source })
        };
        let spare = dup(&fd)?;
        let data = MapData::from_fd(fd).map_err(|source| BpfError::Map { name: MAP_NAME, source })?;
        let map = HashMap::try_from(Map::HashMap(data)).map_err(|source| BpfError::Map { name: MAP_NAME, source })?;
        Ok(FlowTable { map, fd: spare })
    }

    /// A new fd of the table, to pass on.
    pub fn fd(&self) -> Result<OwnedFd, BpfError> {
        self.fd
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| BpfError::Syscall { what: "dup the flow table's fd", source })
    }

    /// Sets one flow's counts.
    pub fn set(&mut self, key: FlowKey, count: PlCount) -> Result<(), BpfError> {
        self.map.insert(key, count, 0).map_err(|source| BpfError::Map { name: MAP_NAME, source })
    }

    /// Every flow in the table: read in batches where the kernel can,
    /// else walked key by key.
    pub fn flows(&self) -> Vec<(FlowKey, PlCount)> {
        crate::batch::lookup_all(self.fd.as_fd()).unwrap_or_else(|_| self.map.iter().filter_map(Result::ok).collect())
    }
}
