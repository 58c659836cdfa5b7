//! Capture files: write classic pcap, read pcap (µs or ns) and pcapng.
//!
//! We write classic pcap with **nanosecond** timestamps (magic 0xa1b23c4d):
//! the generator and sink work in nanoseconds, and tshark/tcpdump/Wireshark
//! read that variant natively. Timestamps are taken as given (the callers
//! use CLOCK_MONOTONIC), so "dates" shown by Wireshark are time since boot.
//!
//! Reading goes through pcap-file's raw records and converts timestamps
//! ourselves, because pcap-file 2 (a) rejects classic records whose original
//! length exceeds the snaplen, which is exactly what a truncating capture
//! produces, and (b) ignores pcapng's `if_tsresol`, reading every
//! enhanced-packet timestamp as nanoseconds even though the default unit
//! is the microsecond.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::error::{PcapErrorKind, Result, TrafficError};

/// Writes Ethernet frames to a classic nanosecond pcap file.
pub struct PcapWriter {
    path: PathBuf,
    snaplen: u32,
    inner: pcap_file::pcap::PcapWriter<BufWriter<File>>,
    written: u64,
}

impl PcapWriter {
    /// Creates (truncates) `path`. Frames longer than `snaplen` are cut to
    /// it, keeping their original length in the record; 0 means 65535.
    pub fn create(path: impl AsRef<Path>, snaplen: u32) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let snaplen = if snaplen == 0 { 65535 } else { snaplen };
        let file = File::create(&path).map_err(|e| TrafficError::pcap(&path, e))?;
        let header = PcapHeader {
            snaplen,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
            ..PcapHeader::default()
        };
        let inner = pcap_file::pcap::PcapWriter::with_header(BufWriter::new(file), header)
            .map_err(|e| TrafficError::pcap(&path, e))?;
        Ok(PcapWriter { path, snaplen, inner, written: 0 })
    }

    /// Appends one frame captured at `ts_ns`.
    pub fn write(&mut self, frame: &[u8], ts_ns: u64) -> Result<()> {
        if ts_ns / 1_000_000_000 > u64::from(u32::MAX) {
            return Err(TrafficError::pcap(&self.path, PcapErrorKind::Timestamp(ts_ns)));
        }
        let keep = frame.len().min(self.snaplen as usize);
        let orig_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let pkt = PcapPacket { timestamp: Duration::from_nanos(ts_ns), orig_len, data: Cow::Borrowed(&frame[..keep]) };
        self.inner.write_packet(&pkt).map_err(|e| TrafficError::pcap(&self.path, e))?;
        self.written += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes and closes the file. (Dropping also flushes, but silently
    /// loses errors.)
    pub fn finish(self) -> Result<()> {
        let path = self.path;
        let mut w = self.inner.into_writer();
        w.flush().map_err(|e| TrafficError::pcap(&path, e))?;
        w.into_inner()
            .map_err(|e| TrafficError::pcap(&path, e.into_error()))?
            .sync_all()
            .map_err(|e| TrafficError::pcap(&path, e))
    }
}

/// Reads every frame of a pcap or pcapng file as `(ts_ns, bytes)`.
pub fn read_pcap(path: impl AsRef<Path>) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    for_each_packet(path, |ts, data| out.push((ts, data.to_vec())))?;
    Ok(out)
}

/// Streams the frames of a pcap or pcapng file to `f(ts_ns, bytes)`, for
/// files too large to hold in memory. The format is detected from the magic
/// number; all link types are passed through as-is.
pub fn for_each_packet(path: impl AsRef<Path>, mut f: impl FnMut(u64, &[u8])) -> Result<()> {
    let path = path.as_ref();
    let err = |e: PcapErrorKind| TrafficError::pcap(path, e);
    let file = File::open(path).map_err(|e| err(e.into()))?;
    let mut reader = BufReader::new(file);
    let head = reader.fill_buf().map_err(|e| err(e.into()))?;
    let magic = match head.get(..4) {
        Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => return Err(err(PcapErrorKind::UnknownMagic(0))),
    };
    match magic {
        0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
            let mut r = PcapReader::new(reader).map_err(|e| err(e.into()))?;
            let nano = r.header().ts_resolution == TsResolution::NanoSecond;
            while let Some(pkt) = r.next_raw_packet() {
                let pkt = pkt.map_err(|e| err(e.into()))?;
                let frac = u64::from(pkt.ts_frac) * if nano { 1 } else { 1000 };
                f(u64::from(pkt.ts_sec) * 1_000_000_000 + frac, &pkt.data);
            }
        }
        0x0a0d_0d0a => {
            let mut r = PcapNgReader::new(reader).map_err(|e| err(e.into()))?;
            // (if_tsresol, if_tsoffset in s) of each interface of the section.
            let mut ifaces: Vec<(u8, u64)> = Vec::new();
            let iface = |ifaces: &[(u8, u64)], id: u32| ifaces.get(id as usize).copied().unwrap_or((6, 0));
            while let Some(block) = r.next_block() {
                match block.map_err(|e| err(e.into()))? {
                    Block::SectionHeader(_) => ifaces.clear(),
                    Block::InterfaceDescription(idb) => {
                        let mut resol = 6; // default: microseconds
                        let mut offset = 0;
                        for opt in &idb.options {
                            match opt {
                                InterfaceDescriptionOption::IfTsResol(r) => resol = *r,
                                InterfaceDescriptionOption::IfTsOffset(o) => offset = *o,
                                _ => {}
                            }
                        }
                        ifaces.push((resol, offset));
                    }
                    Block::EnhancedPacket(epb) => {
                        // pcap-file stored the raw 64-bit count as "nanos".
                        let raw = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
                        f(to_ns(raw, iface(&ifaces, epb.interface_id)), &epb.data);
                    }
                    Block::Packet(pb) => f(to_ns(pb.timestamp, iface(&ifaces, pb.interface_id.into())), &pb.data),
                    Block::SimplePacket(spb) => f(0, &spb.data),
                    _ => {}
                }
            }
        }
        m => return Err(err(PcapErrorKind::UnknownMagic(m))),
    }
    Ok(())
}

/// Converts a pcapng timestamp in interface units to nanoseconds.
/// `if_tsresol`: high bit clear = 10^-n s, set = 2^-n s.
fn to_ns(raw: u64, (resol, offset_s): (u8, u64)) -> u64 {
    let n = u32::from(resol & 0x7f);
    let raw = u128::from(raw);
    let ns = if resol & 0x80 != 0 {
        (raw * 1_000_000_000) >> n.min(127)
    } else if n <= 9 {
        raw * 10u128.pow(9 - n)
    } else {
        raw / 10u128.pow((n - 9).min(38))
    };
    u64::try_from(ns + u128::from(offset_s) * 1_000_000_000).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferry-traffic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    fn frames() -> Vec<(u64, Vec<u8>)> {
        (0..5u8)
            .map(|i| (1_700_000_000_123_456_789 + u64::from(i) * 1001, vec![i; 60 + usize::from(i) * 100]))
            .collect()
    }

    #[test]
    fn nanosecond_round_trip() {
        let path = tmp("rt.pcap");
        let mut w = PcapWriter::create(&path, 0).unwrap();
        for (ts, f) in frames() {
            w.write(&f, ts).unwrap();
        }
        assert_eq!(w.written(), 5);
        w.finish().unwrap();
        assert_eq!(read_pcap(&path).unwrap(), frames());
    }

    #[test]
    fn snaplen_truncates_and_still_reads() {
        let path = tmp("snap.pcap");
        let mut w = PcapWriter::create(&path, 128).unwrap();
        for (ts, f) in frames() {
            w.write(&f, ts).unwrap();
        }
        w.finish().unwrap();
        let back = read_pcap(&path).unwrap();
        for ((ts, f), (bts, bf)) in frames().iter().zip(&back) {
            assert_eq!(ts, bts);
            assert_eq!(&f[..f.len().min(128)], &bf[..]);
        }
    }

    #[test]
    fn reads_microsecond_pcap() {
        let path = tmp("micro.pcap");
        let header = PcapHeader { endianness: Endianness::Big, ..PcapHeader::default() };
        let mut w = pcap_file::pcap::PcapWriter::with_header(File::create(&path).unwrap(), header).unwrap();
        let data = [7u8; 64];
        w.write_packet(&PcapPacket::new(Duration::new(12, 345_678_000), 64, &data)).unwrap();
        drop(w);
        assert_eq!(read_pcap(&path).unwrap(), vec![(12_345_678_000, data.to_vec())]);
    }

    #[test]
    fn reads_pcapng_with_and_without_tsresol() {
        let path = tmp("x.pcapng");
        let mut w = PcapNgWriter::new(File::create(&path).unwrap()).unwrap();
        let data = [9u8; 60];
        // Interface 0: default resolution (µs); interface 1: ns.
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535)).unwrap();
        let mut idb = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535);
        idb.options.push(InterfaceDescriptionOption::IfTsResol(9));
        w.write_pcapng_block(idb).unwrap();
        for (iface, raw) in [(0u32, 5_000_001u64), (1, 5_000_001)] {
            let epb = EnhancedPacketBlock {
                interface_id: iface,
                timestamp: Duration::from_nanos(raw),
                original_len: 60,
                data: Cow::Borrowed(&data),
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        drop(w);
        let back = read_pcap(&path).unwrap();
        assert_eq!(back, vec![(5_000_001_000, data.to_vec()), (5_000_001, data.to_vec())]);
    }

    #[test]
    fn resolution_conversion() {
        assert_eq!(to_ns(3, (6, 0)), 3_000);
        assert_eq!(to_ns(3, (9, 2)), 2_000_000_003);
        assert_eq!(to_ns(3_000, (12, 0)), 3);
        assert_eq!(to_ns(1 << 20, (0x80 | 20, 0)), 1_000_000_000);
    }

    #[test]
    fn errors_name_the_file() {
        let path = tmp("garbage.pcap");
        std::fs::write(&path, b"hello world").unwrap();
        let e = read_pcap(&path).unwrap_err();
        assert!(matches!(&e, TrafficError::Pcap { source: PcapErrorKind::UnknownMagic(_), .. }), "{e}");
        assert!(e.to_string().contains("garbage.pcap"), "{e}");
        let e = read_pcap(tmp("missing.pcap")).unwrap_err();
        assert!(matches!(e, TrafficError::Pcap { source: PcapErrorKind::Io(_), .. }));
        let mut w = PcapWriter::create(tmp("ts.pcap"), 0).unwrap();
        assert!(w.write(&[0; 60], u64::MAX).is_err());
    }
}
