//! The programming model: what an NF author writes (NFOS Table 2).

use crate::stm::{Abort, Tx};

/// A packet as a handler sees it: the receive port, the time it arrived
/// and its bytes, which the handler may rewrite before sending it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    port: u16,
    timestamp_ns: u64,
    data: Vec<u8>,
}

impl Packet {
    pub fn new(port: u16, timestamp_ns: u64, data: Vec<u8>) -> Packet {
        Packet { port, timestamp_ns, data }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn timestamp_ns(&self) -> u64 {
        self.timestamp_ns
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn data_mut(&mut self) -> &mut Vec<u8> {
        &mut self.data
    }

    /// Makes `self` a copy of `other`, reusing its buffer.
    pub(crate) fn copy_from(&mut self, other: &Packet) {
        self.port = other.port;
        self.timestamp_ns = other.timestamp_ns;
        self.data.clear();
        self.data.extend_from_slice(&other.data);
    }
}

/// A packet the NF sent, released only after its transaction committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPacket {
    pub port: u16,
    pub timestamp_ns: u64,
    pub data: Vec<u8>,
}

/// Spare packet buffers a worker keeps for output (beyond these, buffers
/// are freed): a batch's worth for a few ports.
const MAX_SPARE_BUFFERS: usize = 256;

/// The output of the running attempt, plus spare buffers to build it in:
/// an aborted attempt's packets and (when a run only counts its output)
/// committed ones come back here, so a worker in steady state allocates
/// nothing per packet it sends.
#[derive(Default)]
pub(crate) struct OutputBuffer {
    pub(crate) packets: Vec<OutputPacket>,
    spare: Vec<Vec<u8>>,
}

impl OutputBuffer {
    /// Drops the buffered packets (an attempt starting over), keeping
    /// their buffers.
    pub(crate) fn reset(&mut self) {
        while let Some(packet) = self.packets.pop() {
            self.recycle(packet.data);
        }
    }

    fn recycle(&mut self, data: Vec<u8>) {
        if self.spare.len() < MAX_SPARE_BUFFERS {
            self.spare.push(data);
        }
    }

    fn push(&mut self, port: u16, timestamp_ns: u64, bytes: &[u8]) {
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        self.packets.push(OutputPacket { port, timestamp_ns, data });
    }
}

/// Returned by [`ParallelNf::first_packet`] to make the packet's set live:
/// its state, and how long it may stay without packets before it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSet<S> {
    pub state: S,
    pub idle_timeout_ns: u64,
}

/// What a handler can do besides computing: access aggregate state through
/// [`Ctx::tx`] (passed to the built-in data structures) and send packets.
/// There is nothing here for threads, atomics or locks.
pub struct Ctx<'t, 'a> {
    tx: &'t mut Tx<'a>,
    out: &'t mut OutputBuffer,
    ports: u16,
}

impl<'t, 'a> Ctx<'t, 'a> {
    pub(crate) fn new(tx: &'t mut Tx<'a>, out: &'t mut OutputBuffer, ports: u16) -> Ctx<'t, 'a> {
        Ctx { tx, out, ports }
    }

    /// The transaction the handler runs in; every data-structure call
    /// takes it.
    pub fn tx(&mut self) -> &mut Tx<'a> {
        self.tx
    }

    /// The current time: the packet's arrival time in packet handlers.
    pub fn now_ns(&self) -> u64 {
        self.tx.now_ns()
    }

    /// Sends (a copy of) `packet` out of `port`. Buffered: it leaves only if
    /// the transaction commits. Packets not sent are dropped.
    pub fn send(&mut self, packet: &Packet, port: u16) {
        self.emit(port, packet.timestamp_ns, packet.data());
    }

    /// Sends `packet` out of every port but the one it came in on.
    pub fn flood(&mut self, packet: &Packet) {
        for port in (0..self.ports).filter(|p| *p != packet.port) {
            self.send(packet, port);
        }
    }

    /// Sends a new packet (e.g. a reply the NF built) out of `port`.
    pub fn emit(&mut self, port: u16, timestamp_ns: u64, data: &[u8]) {
        self.out.push(port, timestamp_ns, data);
    }
}

/// A sequential NF. Handlers run inside transactions: every call that
/// touches aggregate state may return [`Abort`], which the handler passes
/// on with `?`; the runtime then re-runs the whole receive batch. So a
/// handler keeps everything it changes either in the data structures, in
/// its packet-set state (which the runtime also rolls back), or in packets
/// it sends through the context.
///
/// Handlers take `&'a self` and a `Ctx<'_, 'a>`: the data structures live
/// in the NF and the transaction borrows them for `'a`.
pub trait ParallelNf: Sync {
    /// Per-set state: plain data, only ever touched on the set's core.
    type SetState: Clone + Send;

    /// Once, before any packet (NF init).
    fn init<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        Ok(())
    }

    /// Once, after the last packet (NF exit).
    fn exit<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        Ok(())
    }

    /// The first packet of a set that is not live. Returning a [`NewSet`]
    /// makes it live; `None` leaves it unregistered (its next packet comes
    /// here again).
    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<Self::SetState>>, Abort>;

    /// A packet of a live set.
    fn packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        state: &mut Self::SetState,
        packet: &mut Packet,
    ) -> Result<(), Abort>;

    /// A live set received nothing for its idle timeout; it is removed
    /// after this returns. It runs when the runtime notices, at that time
    /// ([`Ctx::now_ns`]): at the start of a batch (its first packet's
    /// time; a tick's in live mode), or, for a set whose timeout ran out
    /// within a batch, just before the set's next packet (that packet's
    /// time), which then goes to `first_packet`.
    fn expired<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _state: &Self::SetState) -> Result<(), Abort> {
        Ok(())
    }

    /// A packet that belongs to no set (dropped unless sent).
    fn orphan<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _packet: &mut Packet) -> Result<(), Abort> {
        Ok(())
    }

    /// The periodic timer, on every worker.
    fn periodic<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        Ok(())
    }

    /// The NF's own counters by name, as of each worker's last commit
    /// (outside any transaction; a live host publishes them next to its
    /// own). The names and their order never change: a host declares them
    /// before the NF is built. None by default.
    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
