//! ARP responder (RFC 826, Ethernet/IPv4).

use std::net::Ipv4Addr;

use ferry_wire::arp::{arp_op, ArpPacket};
use ferry_wire::ethernet::{ethertype, is_multicast_mac, EthernetFrame};

use crate::{count, NfSpec, PacketNf, Verdict};

const TX: usize = 1;
const PASS: usize = 2;
const DROP_MALFORMED: usize = 3;
const DROP_NOT_FOR_US: usize = 4;
const DROP_UNHANDLED: usize = 5;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "arp-responder",
    counters: &["rx", "tx", "pass", "drop_malformed", "drop_not_for_us", "drop_unhandled"],
};

/// Answers ARP requests for a fixed set of (IPv4, MAC) bindings.
///
/// Rules, in order:
/// - shorter than an Ethernet (+VLAN) header → `drop_malformed`;
/// - not ARP → `Pass` (`pass`);
/// - not Ethernet/IPv4 ARP (htype ≠ 1, ptype ≠ 0x0800, hlen ≠ 6, plen ≠ 4)
///   or shorter than 28 bytes, or a group (multicast) sender MAC →
///   `drop_malformed`;
/// - not a request (replies, RARP, …), or a gratuitous request (sender IP ==
///   target IP: someone announcing, we keep no cache) → `drop_unhandled`;
/// - target IP not ours, or a unicast Ethernet destination that is not the
///   MAC bound to that IP (Linux drops "other host" frames too) →
///   `drop_not_for_us`;
/// - otherwise the frame becomes the reply in place: oper 2, sender = our
///   MAC/IP, target = requester's MAC/IP, Ethernet dst = requester's sender
///   MAC, src = our MAC → `Tx`. ARP probes (sender IP 0.0.0.0, RFC 5227) are
///   answered the same way, as Linux does. VLAN tag and Ethernet padding are
///   kept as they are.
#[derive(Debug)]
pub struct ArpResponder {
    entries: Vec<(Ipv4Addr, [u8; 6])>,
    counters: [u64; 6],
}

impl ArpResponder {
    pub fn new(entries: Vec<(Ipv4Addr, [u8; 6])>) -> Self {
        ArpResponder { entries, counters: [0; 6] }
    }

    pub fn entries(&self) -> &[(Ipv4Addr, [u8; 6])] {
        &self.entries
    }

    fn classify(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let Ok(eth) = EthernetFrame::new_checked(&*frame) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        if eth.ethertype() != ethertype::ARP {
            return (Verdict::Pass, PASS);
        }
        let eth_dst = eth.dst();
        let hl = eth.header_len();
        let Ok(mut arp) = ArpPacket::new_checked(&mut frame[hl..]) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        let (sha, spa, tpa) = (arp.sha(), arp.spa(), arp.tpa());
        if is_multicast_mac(&sha) {
            return (Verdict::Drop, DROP_MALFORMED);
        }
        if arp.oper() != arp_op::REQUEST || spa == tpa {
            return (Verdict::Drop, DROP_UNHANDLED);
        }
        // Linear search: NFs hold a handful of addresses, and a Vec keeps
        // the hot path free of hashing.
        let Some(&(our_ip, our_mac)) = self.entries.iter().find(|(ip, _)| *ip == tpa) else {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        };
        if !is_multicast_mac(&eth_dst) && eth_dst != our_mac {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        }
        arp.set_oper(arp_op::REPLY);
        arp.set_tha(sha);
        arp.set_tpa(spa);
        arp.set_sha(our_mac);
        arp.set_spa(our_ip);
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst(sha);
        eth.set_src(our_mac);
        (Verdict::Tx, TX)
    }
}

impl PacketNf for ArpResponder {
    fn spec(&self) -> &'static NfSpec {
        &SPEC
    }

    fn process(&mut self, frame: &mut [u8]) -> Verdict {
        let r = self.classify(frame);
        count(&mut self.counters, r)
    }

    fn counters(&self) -> &[u64] {
        &self.counters
    }
}
