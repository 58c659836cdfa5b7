//! A port: one socket plus the frames it owns, with the bookkeeping every NF
//! loop needs (refill the fill ring, reclaim completions, batch RX and TX).
//! Frames are conserved: each is in exactly one place — the free list, the
//! fill ring, the RX ring, the caller's hands, the TX ring or the completion
//! ring — and [`Port::frames_in_flight`] lets tests check that.

use std::ops::Range;

use crate::sys::XdpDesc;
use crate::{XskError, XskSocket};

/// Counters kept by a port.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames the caller wanted to send but the TX ring had no room for.
    pub tx_ring_full: u64,
    /// Transmitted frames the kernel handed back on the completion ring.
    pub tx_completed: u64,
}

/// A socket and a private range of UMEM frames.
pub struct Port {
    sock: XskSocket,
    free: Vec<u64>,
    frame_mask: u64,
    frame_size: u32,
    owned: u32,
    scratch: Vec<u64>,
    pub counters: PortCounters,
}

impl Port {
    /// Wraps `sock`, giving it UMEM frames `frames`. Up to `rx_frames` of
    /// them are put on the fill ring at once for reception; the rest stay
    /// free for transmission.
    pub fn new(sock: XskSocket, frames: Range<u32>, rx_frames: u32) -> Result<Port, XskError> {
        let cfg = *sock.umem().config();
        if frames.end > cfg.frame_count || frames.is_empty() {
            return Err(XskError::Config { field: "frames", reason: "empty or beyond the UMEM" });
        }
        let free: Vec<u64> = frames.clone().rev().map(|i| sock.umem().frame_addr(i)).collect();
        let mut port = Port {
            sock,
            free,
            frame_mask: !(cfg.frame_size as u64 - 1),
            frame_size: cfg.frame_size,
            owned: frames.len() as u32,
            scratch: Vec::with_capacity(256),
            counters: PortCounters::default(),
        };
        port.refill(rx_frames);
        Ok(port)
    }

    pub fn socket(&self) -> &XskSocket {
        &self.sock
    }

    /// Usable bytes of one frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Moves up to `max` free frames onto the fill ring.
    pub fn refill(&mut self, max: u32) -> u32 {
        let Some(fill) = self.sock.fill.as_mut() else { return 0 };
        let want = (max as usize).min(self.free.len());
        if want == 0 {
            return 0;
        }
        let start = self.free.len() - want;
        let n = fill.produce(&self.free[start..]);
        // produce() takes from the front of the slice; keep the rest.
        self.free.drain(start..start + n);
        n as u32
    }

    /// Returns completed TX frames to the free list.
    pub fn reclaim(&mut self) -> usize {
        let Some(comp) = self.sock.comp.as_mut() else { return 0 };
        self.scratch.clear();
        let n = comp.consume(1024, &mut self.scratch);
        self.counters.tx_completed += n as u64;
        let mask = self.frame_mask;
        self.free.extend(self.scratch.iter().map(|a| a & mask));
        n
    }

    /// Receives up to `max` descriptors into `out`, first topping up the fill
    /// ring so the kernel always has somewhere to put packets.
    pub fn recv(&mut self, max: usize, out: &mut Vec<XdpDesc>) -> usize {
        self.refill(max as u32);
        if self.sock.fill_needs_wakeup() {
            // Copy mode on veth refills from the fill ring in softirq; a poll
            // makes sure the driver is woken when it asked for it.
            self.sock.poll_rx(0);
        }
        let Some(rx) = self.sock.rx.as_mut() else { return 0 };
        let before = out.len();
        let n = rx.consume(max, out);
        for d in &out[before..] {
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += d.len as u64;
        }
        n
    }

    /// The bytes of a frame this port holds.
    pub fn frame_mut(&mut self, desc: &XdpDesc) -> Option<&mut [u8]> {
        // SAFETY: the descriptor came from this port's RX ring or alloc() and
        // has not been sent or released yet, so the caller owns it.
        unsafe { self.sock.umem().slice_mut(desc.addr, desc.len as usize) }
    }

    /// The `meta_len` bytes of XDP metadata the XDP program wrote in front
    /// of a received frame (AF_XDP copies them too), or None when the frame
    /// has no room for them in front of the packet.
    pub fn metadata(&self, desc: &XdpDesc, meta_len: usize) -> Option<&[u8]> {
        let frame_start = desc.addr & self.frame_mask;
        if desc.addr < frame_start + meta_len as u64 {
            return None;
        }
        // SAFETY: the bytes lie in the same UMEM frame as a descriptor this
        // port holds, so nobody else writes them while we read.
        unsafe { self.sock.umem().slice_mut(desc.addr - meta_len as u64, meta_len).map(|s| &*s) }
    }

    /// A free frame for building a packet of `len` bytes, or None.
    pub fn alloc(&mut self, len: u32) -> Option<XdpDesc> {
        if len > self.frame_size {
            return None;
        }
        self.free.pop().map(|addr| XdpDesc { addr, len, options: 0 })
    }

    /// Puts as many of `descs` on the TX ring as fit and kicks the kernel.
    /// Returns how many were accepted; the caller still owns the rest.
    pub fn send(&mut self, descs: &[XdpDesc]) -> Result<usize, XskError> {
        let Some(tx) = self.sock.tx.as_mut() else {
            return Err(XskError::Config { field: "tx ring", reason: "this port has no TX ring" });
        };
        let n = tx.produce(descs);
        for d in &descs[..n] {
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += d.len as u64;
        }
        self.counters.tx_ring_full += (descs.len() - n) as u64;
        if n > 0 || self.sock.tx_needs_wakeup() {
            self.sock.kick_tx_until_sent()?;
        }
        Ok(n)
    }

    /// Gives a frame back (the packet is dropped).
    pub fn release(&mut self, addr: u64) {
        self.free.push(addr & self.frame_mask);
    }

    /// Frames not on the free list (in a ring or in the caller's hands).
    pub fn frames_in_flight(&self) -> u32 {
        self.owned - self.free.len() as u32
    }

    /// Frames on the free list.
    pub fn frames_free(&self) -> u32 {
        self.free.len() as u32
    }
}
