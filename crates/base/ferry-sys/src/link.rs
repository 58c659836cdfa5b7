//! Synchronous rtnetlink operations on links and addresses.
//!
//! Every call opens its own NETLINK_ROUTE socket on the calling thread, so it
//! acts in the network namespace that thread is in *at that moment* (a
//! netlink socket stays bound to the netns it was created in). No runtime,
//! no background thread.

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage as Rtm};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// One network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mtu: u32,
    /// `None` when IFLA_ADDRESS is absent or not 6 bytes (e.g. tunnels).
    pub mac: Option<[u8; 6]>,
    pub num_rx_queues: u32,
    pub num_tx_queues: u32,
    /// IFLA_INFO_KIND for virtual devices ("veth", "bridge", ...); `None`
    /// for a physical device.
    pub kind: Option<String>,
}

/// The kernel refused a request (NLMSG_ERROR with a negative errno).
///
/// It travels inside the returned `io::Error` (whose `kind()` matches the
/// errno) because std cannot carry both an errno and our own message; get the
/// errno back with [`errno`].
#[derive(Debug, thiserror::Error)]
#[error("{op} {dev}: {source}{}", extack_suffix(.extack))]
pub struct KernelError {
    pub op: &'static str,
    pub dev: String,
    /// `io::Error::from_raw_os_error(errno)`.
    pub source: io::Error,
    /// The kernel's extended-ACK text, e.g. "Invalid number of transmit queues", when it sent one.
    pub extack: Option<String>,
}

fn extack_suffix(extack: &Option<String>) -> String {
    extack.as_ref().map(|m| format!(" ({m})")).unwrap_or_default()
}

/// The errno of an error from this module: a kernel refusal or a socket error.
pub fn errno(err: &io::Error) -> Option<i32> {
    let kernel = || err.get_ref()?.downcast_ref::<KernelError>();
    err.raw_os_error().or_else(|| kernel()?.source.raw_os_error())
}

fn kernel_error(op: &'static str, dev: &str, errno: i32, extack: Option<String>) -> io::Error {
    let source = io::Error::from_raw_os_error(errno);
    let kind = source.kind();
    let dev = dev.to_string();
    io::Error::new(kind, KernelError { op, dev, source, extack })
}

/// All links in the current netns.
pub fn links() -> io::Result<Vec<Link>> {
    let replies = request(Rtm::GetLink(LinkMessage::default()), NLM_F_DUMP, "dump links", "")?;
    Ok(replies.into_iter().filter_map(as_link).collect())
}

/// The link called `name`, or `None` if there is none (ENODEV).
pub fn link(name: &str) -> io::Result<Option<Link>> {
    match request(Rtm::GetLink(by_name(name)), 0, "get link", name) {
        Ok(replies) => Ok(replies.into_iter().find_map(as_link)),
        Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates veth pair `name` <-> `peer`; both ends get the same queue count and mtu.
pub fn add_veth(name: &str, peer: &str, queues: Option<u32>, mtu: Option<u32>) -> io::Result<()> {
    // The peer is a whole ifinfomsg + attributes nested in
    // IFLA_LINKINFO/IFLA_INFO_DATA/VETH_INFO_PEER. It does not inherit the
    // outer attributes: without its own it gets mtu 1500 and one queue per
    // possible CPU.
    let mut peer_msg = by_name(peer);
    peer_msg.attributes.extend(sizing(queues, mtu));
    let mut msg = by_name(name);
    msg.attributes.extend(sizing(queues, mtu));
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
    ]));
    // CREATE makes a missing link; EXCL turns "already exists" into EEXIST
    // instead of trying to modify the existing link.
    ack(Rtm::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL, "add veth", name)
}

/// Deletes link `name` (for a veth, the kernel removes both ends).
pub fn delete(name: &str) -> io::Result<()> {
    ack(Rtm::DelLink(by_name(name)), 0, "delete link", name)
}

/// Sets IFF_UP on `name`.
pub fn set_up(name: &str) -> io::Result<()> {
    let mut msg = by_name(name);
    // change_mask limits the change to IFF_UP; other flags stay as they are.
    msg.header.flags = LinkFlags::Up;
    msg.header.change_mask = LinkFlags::Up;
    ack(Rtm::SetLink(msg), 0, "set up", name)
}

/// Sets the Ethernet address of `name`.
pub fn set_mac(name: &str, mac: [u8; 6]) -> io::Result<()> {
    let mut msg = by_name(name);
    msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
    ack(Rtm::SetLink(msg), 0, "set mac", name)
}

/// Adds `addr/prefix_len` to `name` (IPv4 or IPv6).
pub fn add_address(name: &str, addr: IpAddr, prefix_len: u8) -> io::Result<()> {
    let op = "add address";
    // RTM_NEWADDR has no by-name lookup: it needs the ifindex.
    let index = link(name)?.ok_or_else(|| kernel_error(op, name, libc::ENODEV, None))?.index;
    let mut msg = AddressMessage::default();
    msg.header.family = match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    msg.header.prefix_len = prefix_len;
    msg.header.index = index;
    // Like iproute2: IFA_LOCAL is our address, IFA_ADDRESS the prefix/peer
    // address; on non point-to-point links both are the same.
    msg.attributes = vec![AddressAttribute::Local(addr), AddressAttribute::Address(addr)];
    ack(Rtm::NewAddress(msg), NLM_F_CREATE | NLM_F_EXCL, op, name)
}

/// A link message that names its target by IFLA_IFNAME (ifindex 0).
fn by_name(name: &str) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    msg
}

fn sizing(queues: Option<u32>, mtu: Option<u32>) -> Vec<LinkAttribute> {
    let mut attrs = Vec::new();
    if let Some(q) = queues {
        attrs.push(LinkAttribute::NumTxQueues(q));
        attrs.push(LinkAttribute::NumRxQueues(q));
    }
    attrs.extend(mtu.map(LinkAttribute::Mtu));
    attrs
}

fn as_link(msg: Rtm) -> Option<Link> {
    let Rtm::NewLink(msg) = msg else { return None };
    let mut link = Link {
        index: msg.header.index,
        name: String::new(),
        mtu: 0,
        mac: None,
        num_rx_queues: 0,
        num_tx_queues: 0,
        kind: None,
    };
    for attr in msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => link.name = n,
            LinkAttribute::Mtu(m) => link.mtu = m,
            LinkAttribute::Address(a) => link.mac = a.as_slice().try_into().ok(),
            LinkAttribute::NumRxQueues(n) => link.num_rx_queues = n,
            LinkAttribute::NumTxQueues(n) => link.num_tx_queues = n,
            LinkAttribute::LinkInfo(infos) => {
                link.kind = infos.into_iter().find_map(|i| match i {
                    LinkInfo::Kind(k) => Some(k.to_string()),
                    _ => None,
                })
            }
            _ => {}
        }
    }
    Some(link)
}

/// A request whose only answer is the ACK.
fn ack(msg: Rtm, flags: u16, op: &'static str, dev: &str) -> io::Result<()> {
    request(msg, flags, op, dev).map(drop)
}

/// Sends one request on a fresh socket and collects the replies until the
/// ACK (plain requests: we always set NLM_F_ACK, so success is explicit) or
/// NLMSG_DONE (dumps: the kernel sends DONE and no ACK).
fn request(msg: Rtm, flags: u16, op: &'static str, dev: &str) -> io::Result<Vec<Rtm>> {
    let socket = open()?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    header.sequence_number = 1; // private socket: nothing else to tell apart
    let mut req = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    req.finalize(); // fills in nlmsg_len and nlmsg_type
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    socket.send_to(&buf, &SocketAddr::new(0, 0), 0)?;
    let mut replies = Vec::new();
    loop {
        let (datagram, _) = socket.recv_from_full()?;
        if read_datagram(&datagram, &mut replies, op, dev)? {
            return Ok(replies);
        }
    }
}

fn open() -> io::Result<Socket> {
    let socket = Socket::new(NETLINK_ROUTE)?;
    // Best effort (Linux >= 4.12 / 4.2): error text in ACKs, and ACKs that
    // don't echo the whole request back.
    let _ = socket.set_ext_ack(true);
    let _ = socket.set_cap_ack(true);
    Ok(socket)
}

/// Parses the netlink messages packed in one datagram; true once finished.
fn read_datagram(mut data: &[u8], replies: &mut Vec<Rtm>, op: &'static str, dev: &str) -> io::Result<bool> {
    while !data.is_empty() {
        let msg = NetlinkMessage::<Rtm>::deserialize(data)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{op} {dev}: bad netlink reply: {e}")))?;
        // Messages are 4-byte aligned; deserialize checked length >= 16.
        let len = (msg.header.length as usize + 3) & !3;
        data = &data[len.min(data.len())..];
        let flags = msg.header.flags;
        match msg.payload {
            NetlinkPayload::InnerMessage(m) => replies.push(m),
            NetlinkPayload::Error(e) => match e.code {
                None => return Ok(true), // the ACK
                Some(code) => {
                    let extack = extack_msg(flags, &e.header);
                    return Err(kernel_error(op, dev, -code.get(), extack));
                }
            },
            // A dump can fail midway: DONE then carries the negative errno.
            NetlinkPayload::Done(d) if d.code < 0 => return Err(kernel_error(op, dev, -d.code, None)),
            NetlinkPayload::Done(_) => return Ok(true),
            _ => {}
        }
    }
    Ok(false)
}

/// NLMSGERR_ATTR_MSG from an error's extended-ACK TLVs, which follow the
/// echoed request: just its 16-byte header if NLM_F_CAPPED, else all of it.
fn extack_msg(flags: u16, payload: &[u8]) -> Option<String> {
    const NLMSGERR_ATTR_MSG: u16 = 1;
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let echoed = match flags & NLM_F_CAPPED {
        0 => u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?) as usize,
        _ => 16,
    };
    let tlvs = payload.get(echoed..)?;
    let msg = NlasIterator::new(tlvs).flatten().find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)?;
    Some(String::from_utf8_lossy(msg.value()).trim_end_matches('\0').to_string())
}
