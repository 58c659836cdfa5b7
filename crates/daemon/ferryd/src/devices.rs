//! What a chain's receiving ports ask of their devices, checked before
//! anything is set up, with errors that name the chain file's line, the
//! field and the fix:
//!
//! * **The device is there.** Every port's namespace and device exist.
//! * **Every receive queue has a socket.** A device spreads flows over
//!   its receive queues (RSS on a NIC; a veth by its sender's transmit
//!   queue), and the port's NF has one socket per thread, on queues
//!   `0..threads`. A frame on any other queue would reach no NF, so a
//!   device with more queues is refused, unless the port hands those
//!   frames to the kernel (`unowned_queues: kernel`). Why refuse rather
//!   than shrink the device (`ethtool -L`) for the operator: ferryd would
//!   change a shared NIC behind the kernel's back and must then restore
//!   it even when it crashes; the operator chooses the queue count once.
//! * **A received frame fits one UMEM frame.** In copy mode the kernel
//!   writes a frame after `XDP_PACKET_HEADROOM` bytes of its chunk; one
//!   that does not fit is dropped. Frames spanning chunks need AF_XDP
//!   multi-buffer (`XDP_USE_SG`), which Ferry's sockets do not use.

use anyhow::{anyhow, Result};
use ferry_chain::plan::{ChainPlan, NfPlan, PortPlan};
use ferry_config::{locate, path_string, Seg, YamlError};
use ferry_place::Placement;

use crate::netdev::link_in;

/// Bytes the kernel keeps in front of every frame it writes to a chunk.
const XDP_PACKET_HEADROOM: u32 = 256;
/// An Ethernet header with one VLAN tag.
const L2_HEADER: u32 = 18;

/// Why a port does not fit its device: the chain file's field at fault,
/// and what is wrong and how to fix it.
/// A refused field of a plan's entry and why.
pub(crate) type Refusal = (&'static str, String);

/// Refuses a plan whose receiving ports' devices have queues without a
/// socket, or frames larger than a UMEM frame. `text` is the chain file
/// (`origin`), for the errors' positions; `placement` tells the ports
/// with XDP parts.
pub fn check(plan: &ChainPlan, placement: &Placement, text: &str, origin: &str) -> Result<()> {
    for port in plan.ports.iter().filter(|p| !p.netdev.is_empty()) {
        if let Some((field, message)) = absence(port.netns.as_deref(), &port.netdev) {
            return Err(located(text, origin, &port.name, field, message).into());
        }
    }
    // Devices ferryd makes itself (a tenant entry's, an NSH attachment's)
    // have no name yet, and get the queues their NFs need; so does the
    // loop device in front of a port with post-server NFs, where that
    // port's sockets are, and those of its split NF's miss port.
    let on_loop_device =
        |name: &str| placement.post.iter().any(|post| post.port == name || post.miss_port().is_some_and(|m| m == name));
    let ports = plan.ports.iter().filter(|p| p.classify.is_none() && !p.netdev.is_empty());
    for port in ports.filter(|p| !on_loop_device(&p.name)) {
        let Some(nf) = port.nf.map(|i| &plan.nfs[i]) else { continue };
        let xdp_parts =
            placement.xdp.iter().any(|x| x.port == port.name) || placement.hybrid.iter().any(|h| h.port == port.name);
        let frame_size = plan.domains[nf.domain].frame_size;
        if let Some((field, message)) = port_refusal(port, nf, frame_size, xdp_parts)? {
            return Err(located(text, origin, &port.name, field, message).into());
        }
    }
    Ok(())
}

/// Why a port cannot have device `dev` of namespace `ns`, if one of them
/// is missing.
fn absence(ns: Option<&str>, dev: &str) -> Option<Refusal> {
    if let Some(ns) = ns.filter(|ns| !std::path::Path::new("/run/netns").join(ns).exists()) {
        let message = format!(
            "no network namespace {ns:?} (/run/netns/{ns}): name one `ip netns list` shows, or make it (`ip netns \
             add {ns}`; a testbed's `ferry testbed up FILE` makes its own and prints their names)"
        );
        return Some(("netns", message));
    }
    match ferry_sys::in_netns(ns, || ferry_sys::link::link(dev)) {
        Ok(Ok(Some(_))) => None,
        Ok(Ok(None)) => {
            let (listed, within) = match ns {
                Some(ns) => (format!("ip -n {ns} link"), format!("namespace {ns}")),
                None => ("ip link".to_string(), "ferryd's namespace".to_string()),
            };
            Some(("netdev", format!("no device {dev:?} in {within}: name one `{listed}` lists, or make it first")))
        }
        // Not ours to diagnose: the setup that follows reports it.
        Ok(Err(_)) | Err(_) => None,
    }
}

/// Why `port` (its NF `nf`, `frame_size` bytes a UMEM frame) does not
/// fit its device, if it does not.
fn port_refusal(port: &PortPlan, nf: &NfPlan, frame_size: u32, xdp_parts: bool) -> Result<Option<Refusal>> {
    if port.unowned_to_kernel && xdp_parts {
        let message = "`kernel` is for a port whose frames go straight to its NF's sockets: this port's NFs placed \
                       in XDP hand their frames on themselves, and drop what reaches a queue with no socket (counted \
                       as no_socket). Give the NF a thread per queue, or keep the NFs in front of it out of XDP \
                       (`offload: never`)";
        return Ok(Some(("unowned_queues", message.to_string())));
    }
    let (ns, dev) = (port.netns.as_deref(), port.netdev.as_str());
    let (rx, tx) = queues(ns, dev)?;
    if let Some(refusal) = queue_refusal(port, nf, rx, tx) {
        return Ok(Some(refusal));
    }
    if !port.rx {
        return Ok(None);
    }
    Ok(mtu_refusal(dev, link_in(ns, dev)?.mtu, frame_size))
}

/// Why `port`'s device, with `rx` receive and `tx` transmit queues, does
/// not fit the sockets of `nf`'s threads (thread i on queue i), if not.
fn queue_refusal(port: &PortPlan, nf: &NfPlan, rx: u32, tx: u32) -> Option<Refusal> {
    let (dev, sockets) = (&port.netdev, nf.threads.len() as u32);
    if rx.min(tx) < sockets {
        return Some((
            "queues",
            format!(
                "NF {:?} has {sockets} threads, each with a socket on its own queue of {dev}, but {dev} has {rx} \
                 receive and {tx} transmit queue(s). Give it {sockets} (`ethtool -L {dev} rx {sockets} tx \
                 {sockets}`, `combined {sockets}` on most NICs), or the NF fewer `threads`",
                nf.name
            ),
        ));
    }
    if !port.rx || rx <= sockets || port.unowned_to_kernel {
        return None;
    }
    let owned = match sockets {
        1 => "a socket on queue 0".to_string(),
        n => format!("sockets on queues 0 to {}", n - 1),
    };
    Some((
        "queues",
        format!(
            "{dev} receives on {rx} queues, but NF {:?} has {sockets} thread(s), so port {:?} has {owned} only: \
             frames on the others would reach no NF. Give the NF `threads: {rx}` (and the port `queues: {rx}`), or \
             shrink the device (`ethtool -L {dev} rx {sockets} tx {sockets}`, `combined {sockets}` on most NICs), \
             or hand the other queues' frames to the kernel with `unowned_queues: kernel`",
            nf.name, port.name
        ),
    ))
}

/// Why a receiving device `dev` of MTU `mtu` does not fit UMEM frames of
/// `frame_size` bytes, if not.
fn mtu_refusal(dev: &str, mtu: u32, frame_size: u32) -> Option<Refusal> {
    let room = frame_size - XDP_PACKET_HEADROOM;
    if mtu + L2_HEADER <= room {
        return None;
    }
    let fits = room - L2_HEADER;
    let more = if frame_size < 4096 { "; or `frame_size: 4096` on its domain (MTU up to 3822)" } else { "" };
    Some((
        "netdev",
        format!(
            "{dev}'s MTU {mtu} lets frames of {} bytes arrive, more than the {room} a {frame_size}-byte UMEM frame \
             holds after the kernel's {XDP_PACKET_HEADROOM}-byte headroom (frames spanning several, AF_XDP \
             multi-buffer, are not supported). Lower it to {fits} or less (`ip link set {dev} mtu {fits}`){more}",
            mtu + L2_HEADER
        ),
    ))
}

/// The (receive, transmit) queues `dev` uses, in namespace `ns`: its
/// channels, or (a driver that does not report them) what netlink counts.
pub fn queues(ns: Option<&str>, dev: &str) -> Result<(u32, u32)> {
    let name = dev.to_string();
    let channels = ferry_sys::in_netns(ns, move || ferry_xsk::queues(&name))?
        .map_err(|e| anyhow!("reading {dev}'s channels: {e}"))?;
    if let Some((rx, tx)) = channels {
        return Ok((rx.max(1), tx.max(1)));
    }
    let link = link_in(ns, dev)?;
    Ok((link.num_rx_queues, link.num_tx_queues))
}

/// An error at field `field` of the port named `port` in the chain file
/// (at the port itself when the field is left to its default).
pub(crate) fn located(text: &str, origin: &str, port: &str, field: &'static str, message: String) -> YamlError {
    located_in(text, origin, ("ports", port), field, message)
}

/// An error at field `field` of the entry named `name` of the chain
/// file's list `list` (`ports`, `nfs`), or at the entry.
pub(crate) fn located_in(
    text: &str,
    origin: &str,
    (list, name): (&'static str, &str),
    field: &'static str,
    message: String,
) -> YamlError {
    let at = |path: &[Seg]| locate(text, path);
    let (path, loc) = match entry_index(text, list, name) {
        Some(i) => {
            let full = vec![Seg::Key(list), Seg::Index(i), Seg::Key(field)];
            let entry = vec![Seg::Key(list), Seg::Index(i)];
            match at(&full) {
                Some(l) => (full, Some(l)),
                None => (full, at(&entry)),
            }
        }
        None => (vec![Seg::Key(list)], None),
    };
    YamlError {
        origin: origin.to_string(),
        line: loc.map(|l| l.0),
        column: loc.map(|l| l.1),
        field: path_string(&path),
        message,
    }
}

/// The index of the entry named `name` among the file's `list` (`ports`
/// or `nfs`).
fn entry_index(text: &str, list: &str, name: &str) -> Option<usize> {
    let spec = ferry_catalog::parse_chain_str(text, "").ok()?;
    match list {
        "ports" => spec.ports.iter().position(|p| p.name == name),
        _ => spec.nfs.iter().position(|n| n.name == name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port of `threads` sockets, receiving or not.
    fn port_and_nf(threads: u32, rx: bool, unowned_to_kernel: bool) -> (PortPlan, NfPlan) {
        let text = format!(
            "name: t\ndomains: [ {{ name: main }} ]\nports: [ {{ name: in, netdev: d0, queues: {threads} }} ]\n\
             nfs: [ {{ name: fwd, domain: main, kind: fwd, threads: {threads} }} ]\n\
             links: [ {{ from: in, to: fwd }}, {{ from: fwd, to: in }} ]\n"
        );
        let plan = ChainPlan::compile(&ferry_catalog::parse_chain_str(&text, "t.yaml").unwrap());
        let port = PortPlan { rx, unowned_to_kernel, ..plan.ports[0].clone() };
        (port, plan.nfs[0].clone())
    }

    #[test]
    fn a_receiving_port_needs_a_socket_on_every_queue() {
        let (port, nf) = port_and_nf(1, true, false);
        let (field, message) = queue_refusal(&port, &nf, 4, 4).expect("refused");
        assert_eq!(field, "queues");
        assert!(message.starts_with("d0 receives on 4 queues") && message.contains("threads: 4"), "{message}");
        assert_eq!(queue_refusal(&port, &nf, 1, 1), None);
        let (shared, _) = port_and_nf(1, true, true);
        assert_eq!(queue_refusal(&shared, &nf, 4, 4), None, "unowned_queues: kernel");
        let (sending, _) = port_and_nf(1, false, false);
        assert_eq!(queue_refusal(&sending, &nf, 4, 4), None, "a port that only sends");
        let (four, nf4) = port_and_nf(4, true, false);
        assert_eq!(queue_refusal(&four, &nf4, 4, 4), None);
        let (field, message) = queue_refusal(&four, &nf4, 4, 2).expect("a socket per thread");
        assert!(field == "queues" && message.contains("4 receive and 2 transmit"), "{message}");
    }

    #[test]
    fn kernel_for_unowned_queues_only_where_frames_go_straight_to_sockets() {
        let (shared, nf) = port_and_nf(1, true, true);
        // Refused before any device is looked at: d0 need not exist.
        let (field, message) = port_refusal(&shared, &nf, 2048, true).unwrap().expect("refused");
        assert!(field == "unowned_queues" && message.contains("offload: never"), "{message}");
    }

    #[test]
    fn a_received_frame_must_fit_a_umem_frame() {
        assert_eq!(mtu_refusal("d0", 1500, 2048), None);
        assert_eq!(mtu_refusal("d0", 1774, 2048), None, "1774 + 18 = 2048 - 256");
        let (field, message) = mtu_refusal("d0", 9000, 2048).expect("jumbo");
        assert_eq!(field, "netdev");
        assert!(message.contains("Lower it to 1774") && message.contains("frame_size: 4096"), "{message}");
        assert_eq!(mtu_refusal("d0", 3822, 4096), None);
        assert!(mtu_refusal("d0", 3823, 4096).is_some_and(|(_, m)| !m.contains("frame_size: 4096")));
    }
}
