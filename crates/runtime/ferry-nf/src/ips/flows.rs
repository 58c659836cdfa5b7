//! The connections the IPS has seen, for `flow:` rules: which side is
//! the client and whether the connection is established.
//!
//! * The client is the side that sent the flow's first packet; for TCP,
//!   the side that sent the SYN (a flow first seen at its SYN+ACK takes
//!   that packet's receiver as the client).
//! * A TCP connection is established from the client's ACK of the
//!   server's SYN+ACK on (that ACK included, as in Snort 3), through FIN,
//!   until a RST; one picked up mid-stream never is, until a SYN starts
//!   it anew.
//! * Any other flow is established once both sides have sent a packet
//!   (the first reply included), as Suricata and Snort 3 read UDP.
//!
//! The table holds at most `capacity` flows: a new flow beyond that
//! evicts the oldest one, counted. State is per IPS thread.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;

use crate::payload::IpPacket;

/// Flows one IPS thread tracks by default.
pub const DEFAULT_CAPACITY: usize = 65_536;

// TCP flag bits (RFC 9293, section 3.1).
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// What a packet's flow says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowState {
    /// Sent by the client (`to_server`).
    pub from_client: bool,
    pub established: bool,
}

type End = (Ipv6Addr, u16);

/// A flow's two ends in a fixed order, and its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    low: End,
    high: End,
    proto: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tcp {
    /// The client's SYN seen.
    SynSent,
    /// The server's SYN+ACK seen.
    SynAcked,
    Established,
    /// Picked up after its handshake: never established.
    Midstream,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    client: End,
    tcp: Tcp,
    client_sent: bool,
    server_sent: bool,
    /// Which insertion of this key the eviction queue's entry is.
    generation: u64,
}

#[derive(Debug)]
pub struct Flows {
    table: HashMap<Key, Entry>,
    /// Keys in insertion order, with the generation they were inserted as.
    order: VecDeque<(Key, u64)>,
    capacity: usize,
    generation: u64,
    evicted: u64,
}

impl Flows {
    pub fn new(capacity: usize) -> Flows {
        let capacity = capacity.max(1);
        Flows { table: HashMap::new(), order: VecDeque::new(), capacity, generation: 0, evicted: 0 }
    }

    /// Flows evicted to make room.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Takes `p` into its flow and says where it stands.
    pub(crate) fn observe(&mut self, p: &IpPacket) -> FlowState {
        let (src, dst) = ((p.src, p.sport), (p.dst, p.dport));
        let key = if src <= dst {
            Key { low: src, high: dst, proto: p.proto }
        } else {
            Key { low: dst, high: src, proto: p.proto }
        };
        let flags = p.tcp_flags;
        let syn = flags.is_some_and(|f| f & (SYN | ACK) == SYN);
        let entry = match self.table.get_mut(&key) {
            // A SYN starts the connection anew (a retransmitted one
            // changes nothing), whatever was seen before.
            Some(e) if syn && !(e.tcp == Tcp::SynSent && e.client == src) => {
                let generation = e.generation;
                *e = Entry { generation, ..first_entry(src, dst, flags) };
                e
            }
            Some(e) => e,
            None => self.insert(key, first_entry(src, dst, flags)),
        };
        let from_client = entry.client == src;
        if from_client {
            entry.client_sent = true;
        } else {
            entry.server_sent = true;
        }
        let established = match flags {
            Some(f) => {
                entry.tcp = next_tcp(entry.tcp, from_client, f);
                entry.tcp == Tcp::Established
            }
            None => entry.client_sent && entry.server_sent,
        };
        if flags.is_some_and(|f| f & RST != 0) {
            self.table.remove(&key);
        }
        FlowState { from_client, established }
    }

    fn insert(&mut self, key: Key, mut entry: Entry) -> &mut Entry {
        while self.table.len() >= self.capacity {
            let Some((old, generation)) = self.order.pop_front() else { break };
            if self.table.get(&old).is_some_and(|e| e.generation == generation) {
                self.table.remove(&old);
                self.evicted += 1;
            }
        }
        // Keys a RST removed stay queued; drop them before they pile up.
        if self.order.len() >= 2 * self.capacity {
            let table = &self.table;
            self.order.retain(|(k, g)| table.get(k).is_some_and(|e| e.generation == *g));
        }
        self.generation += 1;
        entry.generation = self.generation;
        self.order.push_back((key, self.generation));
        self.table.entry(key).or_insert(entry)
    }
}

fn first_entry(src: End, dst: End, flags: Option<u8>) -> Entry {
    let syn_ack = flags.is_some_and(|f| f & (SYN | ACK) == SYN | ACK);
    let tcp = match flags {
        Some(f) if f & (SYN | ACK) == SYN => Tcp::SynSent,
        Some(_) if syn_ack => Tcp::SynAcked,
        _ => Tcp::Midstream,
    };
    let client = if syn_ack { dst } else { src };
    Entry { client, tcp, client_sent: false, server_sent: false, generation: 0 }
}

fn next_tcp(now: Tcp, from_client: bool, f: u8) -> Tcp {
    let syn_ack = f & (SYN | ACK) == SYN | ACK;
    match now {
        Tcp::SynSent if !from_client && syn_ack => Tcp::SynAcked,
        Tcp::SynAcked if from_client && f & (SYN | ACK | RST) == ACK => Tcp::Established,
        // FIN goes on as established, as the engines count FIN_WAIT.
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIN: u8 = 0x01;

    fn packet(from: u16, to: u16, flags: Option<u8>) -> IpPacket<'static> {
        let host = |port: u16| {
            if port < 1024 {
                Ipv6Addr::from(0xffff_0a00_0002u128)
            } else {
                Ipv6Addr::from(0xffff_0a00_0001u128)
            }
        };
        IpPacket {
            proto: if flags.is_some() { 6 } else { 17 },
            src: host(from),
            dst: host(to),
            sport: from,
            dport: to,
            tcp_flags: flags,
            payload: &[],
        }
    }

    fn st(from_client: bool, established: bool) -> FlowState {
        FlowState { from_client, established }
    }

    #[test]
    fn a_tcp_handshake_establishes_from_the_clients_ack() {
        let mut f = Flows::new(8);
        let (c, s) = (40000, 80);
        assert_eq!(f.observe(&packet(c, s, Some(SYN))), st(true, false));
        assert_eq!(f.observe(&packet(s, c, Some(SYN | ACK))), st(false, false));
        assert_eq!(f.observe(&packet(c, s, Some(ACK))), st(true, true), "the handshake's ACK");
        assert_eq!(f.observe(&packet(c, s, Some(ACK | 0x08))), st(true, true));
        assert_eq!(f.observe(&packet(s, c, Some(ACK))), st(false, true));
        assert_eq!(f.observe(&packet(s, c, Some(FIN | ACK))), st(false, true), "FIN stays established");
        assert_eq!(f.observe(&packet(c, s, Some(RST))), st(true, true));
        assert!(f.is_empty(), "a RST ends the flow");
        assert_eq!(f.observe(&packet(c, s, Some(ACK))), st(true, false), "after it, mid-stream: never established");
        assert_eq!(f.observe(&packet(s, c, Some(SYN))), st(true, false), "a SYN starts it anew, its sender the client");
        assert_eq!(f.observe(&packet(s, c, Some(SYN))), st(true, false), "a retransmitted SYN");
        assert_eq!(f.observe(&packet(c, s, Some(SYN | ACK))), st(false, false));
        assert_eq!(f.observe(&packet(s, c, Some(ACK))), st(true, true));
    }

    #[test]
    fn a_syn_ack_first_makes_its_receiver_the_client() {
        let mut f = Flows::new(8);
        assert_eq!(f.observe(&packet(80, 40000, Some(SYN | ACK))), st(false, false));
        assert_eq!(f.observe(&packet(40000, 80, Some(ACK))), st(true, true));
    }

    #[test]
    fn other_flows_are_established_by_a_reply() {
        let mut f = Flows::new(8);
        assert_eq!(f.observe(&packet(5353, 53, None)), st(true, false));
        assert_eq!(f.observe(&packet(5353, 53, None)), st(true, false));
        assert_eq!(f.observe(&packet(53, 5353, None)), st(false, true), "the first reply");
        assert_eq!(f.observe(&packet(5353, 53, None)), st(true, true));
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_oldest() {
        let mut f = Flows::new(4);
        for port in 2000..2010 {
            f.observe(&packet(port, 53, None));
        }
        assert_eq!((f.len(), f.evicted()), (4, 6));
        // The newest flows are still known: a reply establishes them.
        assert_eq!(f.observe(&packet(53, 2009, None)), st(false, true));
        // An evicted one starts again, its reply side now the client.
        assert_eq!(f.observe(&packet(53, 2000, None)), st(true, false));
        // RST-removed keys do not grow the queue without bound.
        for _ in 0..100 {
            f.observe(&packet(40000, 80, Some(SYN)));
            f.observe(&packet(40000, 80, Some(RST)));
        }
        assert!(f.order.len() <= 8, "{}", f.order.len());
    }
}
