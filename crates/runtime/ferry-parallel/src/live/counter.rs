//! `counter`: a small NF for the live mode's tests and demos. It counts
//! packets per destination address (IPv4 or IPv6) in a [`Map`] (aggregate state, so
//! workers that see the same destination conflict and the STM sorts it
//! out), counts each flow's packets in its set state, and forwards every
//! packet unchanged: from port `p` out of port `(p + 1) % ports` (with one
//! out-link, everything goes to out-link 0).
//!
//! Packet sets: the 5-tuple (IPv4 or IPv6) on every port; other frames
//! are orphans (counted under destination `::`, forwarded the same way).
//!
//! Arguments: `buckets=N` (Map buckets, default 1024), `idle_ms=N` (set
//! idle timeout, default 10 000), `work_ns=N` (CPU burnt per packet, to
//! make the NF slow on purpose; default 0), `exit_marker=1` and
//! `expiry_marker=1` (the exit handler, and the expiry handler of every
//! set, send a [`marker`] frame out of port 0, so that a test can see when
//! they ran).

use std::time::Instant;

use ferry_nf::model::{Element, Offload};
use ferry_wire::five_tuple;
use ferry_wire::prefix::to_flow_space;

use super::registry::{NfEnv, NfSetup, RegisteredNf};
use crate::ds::{DefaultBucketHash, Map};
use crate::packet_set::{Field, PacketSetDef, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf};
use crate::stm::{Abort, Stm};
use ferry_nf::args::{ArgError, NfArgs};

/// Ports that get a packet-set rule (frames on higher ports are orphans).
pub const SET_PORTS: u16 = 8;

const ORPHAN_KEY: [u8; 16] = [0; 16];

/// EtherType of [`marker`] frames (IEEE local experimental).
pub const MARKER_ETHERTYPE: u16 = 0x88b5;
/// [`marker`] kinds (the frame's byte 14).
pub const MARKER_EXPIRY: u8 = 1;
pub const MARKER_EXIT: u8 = 2;

/// A marker frame: broadcast from 02:00:00:00:00:fe, [`MARKER_ETHERTYPE`],
/// then `kind`, then zeros.
pub fn marker(kind: u8) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xfe]);
    f[12..14].copy_from_slice(&MARKER_ETHERTYPE.to_be_bytes());
    f[14] = kind;
    f
}

pub struct DstCounter {
    per_destination: Map<[u8; 16], u64>,
    ports: u16,
    idle_timeout_ns: u64,
    work_ns: u64,
    exit_marker: bool,
    expiry_marker: bool,
}

impl DstCounter {
    pub fn new(stm: &Stm, ports: u16, buckets: usize, idle_timeout_ns: u64, work_ns: u64) -> Result<Self, ArgError> {
        let per_destination = Map::new(stm, "per_destination", buckets, DefaultBucketHash)
            .map_err(|e| ArgError::Build { nf: "counter", message: e.to_string() })?;
        Ok(DstCounter {
            per_destination,
            ports: ports.max(1),
            idle_timeout_ns,
            work_ns,
            exit_marker: false,
            expiry_marker: false,
        })
    }

    /// The IPv4 5-tuple on ports `0..SET_PORTS`.
    pub fn packet_sets() -> PacketSetDef {
        let fields = vec![Field::SrcIp, Field::DstIp, Field::IpProto, Field::SrcPort, Field::DstPort];
        let rules = (0..SET_PORTS)
            .map(|port| PortRule { port, protocol: None, fields: fields.clone(), symmetric: false })
            .collect();
        PacketSetDef::new(rules).expect("a valid definition")
    }

    /// Packets counted for `destination` so far (a transaction of its own).
    pub fn count_of(&self, stm: &Stm, worker: usize, destination: [u8; 16]) -> u64 {
        let mut w = stm.worker(worker).expect("a free worker");
        w.atomically(0, |tx| self.per_destination.get(tx, &destination)).unwrap_or(0)
    }

    fn count_and_forward<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, key: [u8; 16], packet: &Packet) -> Result<(), Abort> {
        let seen = self.per_destination.get(ctx.tx(), &key)?.unwrap_or(0);
        self.per_destination.set(ctx.tx(), key, seen + 1)?;
        if self.work_ns > 0 {
            let start = Instant::now();
            while (start.elapsed().as_nanos() as u64) < self.work_ns {
                std::hint::spin_loop();
            }
        }
        ctx.send(packet, (packet.port() + 1) % self.ports);
        Ok(())
    }
}

/// The destination in the 128-bit space (IPv4 mapped).
fn destination(packet: &Packet) -> [u8; 16] {
    five_tuple(packet.data()).map_or(ORPHAN_KEY, |t| to_flow_space(t.dst_ip).octets())
}

impl ParallelNf for DstCounter {
    /// Packets of the flow so far.
    type SetState = u64;

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<u64>>, Abort> {
        self.count_and_forward(ctx, destination(packet), packet)?;
        Ok(Some(NewSet { state: 1, idle_timeout_ns: self.idle_timeout_ns }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, count: &mut u64, packet: &mut Packet) -> Result<(), Abort> {
        *count += 1;
        self.count_and_forward(ctx, destination(packet), packet)
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        self.count_and_forward(ctx, ORPHAN_KEY, packet)
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _count: &u64) -> Result<(), Abort> {
        if self.expiry_marker {
            let now = ctx.now_ns();
            ctx.emit(0, now, &marker(MARKER_EXPIRY));
        }
        Ok(())
    }

    fn exit<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        if self.exit_marker {
            let now = ctx.now_ns();
            ctx.emit(0, now, &marker(MARKER_EXIT));
        }
        Ok(())
    }
}

impl RegisteredNf for DstCounter {
    const SUMMARY: &'static str = "counts packets per destination and forwards them (tests, demos)";
    const IP: &'static str = "IPv4 and IPv6 destinations alike (128-bit keys), through up to two VLAN tags";
    const ELEMENTS: &'static [Element] = &[Element { name: "counter", offload: Offload::Full }];
    const ARGS: &'static [&'static str] = &["buckets", "idle_ms", "work_ns", "exit_marker", "expiry_marker"];

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        let buckets = args.u64_or("buckets", 1024)?;
        let idle_ms = args.u64_or("idle_ms", 10_000)?;
        let work_ns = args.u64_or("work_ns", 0)?;
        let mut nf = DstCounter::new(stm, env.ports, buckets as usize, idle_ms.saturating_mul(1_000_000), work_ns)?;
        nf.exit_marker = args.u64_or("exit_marker", 0)? != 0;
        nf.expiry_marker = args.u64_or("expiry_marker", 0)? != 0;
        Ok((nf, NfSetup { packet_sets: Self::packet_sets(), periodic_ns: None }))
    }
}
