//! Per-flow frame templates.
//!
//! All frames of a flow are identical except for the stamp, so the
//! generator builds one frame per flow slot when the flow starts and, per
//! packet, copies it and writes the stamp. UDP frames carry checksum 0 (see
//! `ferry_wire::frame`), so stamping them is a plain 16-byte write; TCP and
//! ICMP checksums are patched with the RFC 1624 incremental update against
//! the template's all-zero stamp area, without re-parsing the frame.
//!
//! Cost (release build, 2-core dev VM, 60-byte UDP): with 1024 flows per
//! queue a packet costs ~9 ns of scheduling plus ~20 ns of copy-and-stamp,
//! against ~37 ns for `build_frame` from scratch. With 65536 flows per
//! queue the templates (4 MiB) no longer fit in cache and the random slot
//! access makes copying *slower* than building (~140 vs ~80 ns); above a
//! few thousand flows per queue, calling `ferry_wire::build_frame` directly
//! is the better choice.

use ferry_wire::flow::IpVersion;
use ferry_wire::{build_frame, checksum, stamp_offset, FrameSpec, L4Proto, Stamp, STAMP_LEN};

use crate::error::{Result, TrafficError};
use crate::schedule::ScheduledPacket;

/// Slot marker for "no template built yet".
const EMPTY: u64 = u64::MAX;

/// One frame template per flow slot, in a single contiguous buffer.
#[derive(Debug, Clone)]
pub struct TemplateCache {
    spec: FrameSpec,
    proto: L4Proto,
    /// Where the stamp goes; None when the frame is too short for one.
    stamp_at: Option<usize>,
    /// Offset of the L4 checksum, for TCP and ICMP.
    csum_at: Option<usize>,
    /// Flow id each slot's template was built for.
    ids: Vec<u64>,
    /// Distance between templates: frame_len rounded up to a cache line,
    /// so a 60-byte template is one line, not two (matters with many flows).
    stride: usize,
    /// Offset of the first template in `buf`, cache-line aligned.
    base: usize,
    buf: Vec<u8>,
}

impl TemplateCache {
    /// A cache for `slots` flows (the schedule's `active_flows()`), building
    /// frames of `spec` for protocol `proto` over IP `version`.
    pub fn new(spec: FrameSpec, version: IpVersion, proto: L4Proto, slots: usize) -> Self {
        let stamp_at = stamp_offset(version, proto);
        let l4 = stamp_at - proto.header_len();
        let stride = spec.frame_len.next_multiple_of(64);
        // 63 spare bytes to start on a cache line whatever malloc returns.
        let buf = vec![0; slots * stride + 63];
        TemplateCache {
            spec,
            proto,
            stamp_at: ferry_wire::has_stamp_room(version, proto, spec.frame_len).then_some(stamp_at),
            // IPv4 UDP goes without a checksum; IPv6 must carry one.
            csum_at: match (proto, version) {
                (L4Proto::Udp, IpVersion::V4) => None,
                (L4Proto::Udp, IpVersion::V6) => Some(l4 + 6),
                (L4Proto::Tcp, _) => Some(l4 + 16),
                (L4Proto::Icmp, _) => Some(l4 + 2),
            },
            ids: vec![EMPTY; slots],
            stride,
            base: buf.as_ptr().align_offset(64).min(63),
            buf,
        }
    }

    /// Frame length of every template.
    pub fn frame_len(&self) -> usize {
        self.spec.frame_len
    }

    /// Offset of the stamp in each frame, or None when frames are too short
    /// to carry one (they are then sent unstamped).
    pub fn stamp_offset(&self) -> Option<usize> {
        self.stamp_at
    }

    /// The template for `pkt`'s flow, built on the flow's first use of the
    /// slot. The stamp area is all zeros.
    pub fn template(&mut self, pkt: &ScheduledPacket) -> Result<&[u8]> {
        let slot = pkt.slot as usize;
        let len = self.spec.frame_len;
        let Some(id) = self.ids.get_mut(slot) else {
            return Err(TrafficError::bad("slot", slot, "beyond the cache's slots"));
        };
        let frame = &mut self.buf[self.base + slot * self.stride..][..len];
        if *id != pkt.flow_id {
            debug_assert_eq!(pkt.tuple.proto, self.proto, "schedule and cache disagree on protocol");
            build_frame(&self.spec, &pkt.tuple, None, frame)?;
            *id = pkt.flow_id;
        }
        Ok(frame)
    }

    /// Writes `pkt`'s frame, stamped with `stamp` when there is room, into
    /// `out` and returns its length. This is the generator's per-packet
    /// work: one memcpy and a 16-byte write (plus a checksum patch for TCP
    /// and ICMP).
    pub fn write_frame(&mut self, pkt: &ScheduledPacket, stamp: &Stamp, out: &mut [u8]) -> Result<usize> {
        let len = self.spec.frame_len;
        if out.len() < len {
            return Err(TrafficError::BufferTooSmall { need: len, have: out.len() });
        }
        let (stamp_at, csum_at) = (self.stamp_at, self.csum_at);
        let out = &mut out[..len];
        out.copy_from_slice(self.template(pkt)?);
        if let Some(at) = stamp_at {
            stamp.write(&mut out[at..at + STAMP_LEN]);
            if let Some(c) = csum_at {
                let old = u16::from_be_bytes([out[c], out[c + 1]]);
                let mut new = checksum::update_bytes(old, &[0; STAMP_LEN], &out[at..at + STAMP_LEN]);
                // UDP sends a computed 0 as 0xffff (RFC 768; 0 means none).
                if self.proto == L4Proto::Udp && new == 0 {
                    new = 0xffff;
                }
                out[c..c + 2].copy_from_slice(&new.to_be_bytes());
            }
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlowSchedule, Proto, TrafficProfile};

    fn run(proto: Proto, frame_len: usize) {
        let p = TrafficProfile { proto, frame_len, active_flows: 8, seed: 3, ..Default::default() };
        let mut sched = FlowSchedule::new(&p).unwrap();
        let mut cache = TemplateCache::new(p.frame_spec(), p.version(), proto.into(), sched.active_flows());
        assert_eq!(cache.stamp_offset().is_some(), p.stamp_fits());
        let mut out = vec![0u8; 9000];
        for seq in 0..500u32 {
            let pkt = sched.next_packet();
            let stamp = Stamp { stream: 2, seq, tx_ns: 1_000_000 + u64::from(seq) };
            let n = cache.write_frame(&pkt, &stamp, &mut out).unwrap();
            let frame = &out[..n];
            assert_eq!(n, frame_len);
            // Identical to building from scratch, checksums valid.
            let mut fresh = vec![0u8; frame_len];
            let st = p.stamp_fits().then_some(&stamp);
            build_frame(&p.frame_spec(), &pkt.tuple, st, &mut fresh).unwrap();
            if proto == Proto::Udp || !p.stamp_fits() {
                assert_eq!(frame, &fresh[..], "{proto} seq {seq}");
            }
            assert!(ferry_wire::verify_checksums(frame).unwrap(), "{proto} seq {seq}");
            assert_eq!(ferry_wire::five_tuple(frame), Some(pkt.tuple));
            assert_eq!(ferry_wire::find_stamp(frame), st.copied());
        }
    }

    #[test]
    fn stamped_frames_match_and_verify() {
        for proto in [Proto::Udp, Proto::Tcp, Proto::Icmp] {
            run(proto, 60);
            run(proto, 1514);
        }
    }

    #[test]
    fn small_output_buffer() {
        let p = TrafficProfile { frame_len: 128, ..Default::default() };
        let mut sched = FlowSchedule::new(&p).unwrap();
        let mut cache = TemplateCache::new(p.frame_spec(), p.version(), p.proto.into(), sched.active_flows());
        let e = cache.write_frame(&sched.next_packet(), &Stamp::default(), &mut [0u8; 100]).unwrap_err();
        assert!(matches!(e, TrafficError::BufferTooSmall { need: 128, have: 100 }));
    }
}
