//! What a Ferry chain is, shared by `ferryd`, the NF SDK and the CLI.
//!
//! * [`spec`]: the chain file an operator writes (YAML): trust domains,
//!   ports, NFs with their threads and scheduling knobs, and the links
//!   between them.
//! * [`plan`]: the chain file compiled to numbers — thread ids, ring
//!   indices, out-link tables — exactly what an NF thread needs at run time.
//!   ferryd sends each NF its part of the plan when it connects.
//! * [`shm`]: the control words every domain's shared region holds next to
//!   its rings and pool (thread states, pause handshake, counters, the
//!   frame-owner table), defined once for all processes.
//! * [`capture`]: what a capture asks an NF thread to copy, and the copies.
//! * [`proto`]: the framed, versioned messages on ferryd's Unix socket.

pub mod capture;
pub mod classify;
pub mod filter;
pub mod frames;
pub mod hosts;
pub mod plan;
pub mod proto;
pub mod shm;
pub mod spec;

pub use plan::{ChainPlan, DomainPlan, NfPlan, OutLink, PortPlan, ThreadPlan};
pub use spec::{ChainSpec, LinkMode};

/// A cheap flow hash of an IP packet's addresses, protocol and ports (0 for
/// anything else, malformed frames included), used to keep a flow on one
/// thread of a multi-threaded NF. The frame is read by the one flow parser,
/// [`ferry_wire::flow::parse`], as the NFs read it; give it the whole frame
/// (the parse checks the IP lengths against it), not only its headers.
pub fn flow_hash(frame: &[u8]) -> u32 {
    let Some(flow) = ferry_wire::flow::parse(frame).ok().filter(|f| f.ip.is_some()) else {
        return 0;
    };
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut mix = |v: u64| h = (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    for addr in [flow.src, flow.dst] {
        let a = u128::from(addr);
        mix(a as u64);
        mix((a >> 64) as u64);
    }
    mix(flow.proto as u64);
    mix(((flow.sport as u64) << 16) | flow.dport as u64);
    // splitmix64's finaliser: every input bit reaches the low bits that
    // `% threads` looks at.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    h as u32
}

#[cfg(test)]
mod tests {
    use super::flow_hash;

    use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

    fn udp_frame(src_port: u16) -> Vec<u8> {
        udp_frame_of(src_port, 64)
    }

    /// A UDP frame of `len` bytes from 10.0.0.1:`src_port` to 10.0.1.1:9.
    fn udp_frame_of(src_port: u16, len: usize) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: len };
        let tuple = FiveTuple {
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 1, 1].into(),
            src_port,
            dst_port: 9,
            proto: L4Proto::Udp,
        };
        let mut frame = vec![0u8; len];
        build_frame(&spec, &tuple, None, &mut frame).unwrap();
        frame
    }

    #[test]
    fn flow_hash_spreads_flows_that_differ_only_in_a_port() {
        for n in [2usize, 3, 4, 8] {
            let mut seen = vec![0u32; n];
            for port in 1024u16..1088 {
                seen[flow_hash(&udp_frame(port)) as usize % n] += 1;
            }
            assert!(seen.iter().all(|&c| c >= 64 / n as u32 / 3), "{n} targets: {seen:?}");
        }
    }

    #[test]
    fn flow_hash_needs_the_whole_frame() {
        let frame = udp_frame_of(7, 1500);
        assert_ne!(flow_hash(&frame), 0);
        // Its first 64 bytes alone are an IPv4 packet cut short: malformed.
        assert_eq!(flow_hash(&frame[..64]), 0);
    }

    #[test]
    fn flow_hash_is_zero_for_what_is_not_ip_and_for_malformed_frames() {
        let frame = udp_frame(1024);
        assert_ne!(flow_hash(&frame), 0);
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 80 };
        let v6 = |sport| {
            let (src_ip, dst_ip) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
            let t = FiveTuple { src_ip, dst_ip, src_port: sport, dst_port: 9, proto: L4Proto::Udp };
            let mut f = vec![0u8; 80];
            build_frame(&spec, &t, None, &mut f).unwrap();
            f
        };
        assert_ne!(flow_hash(&v6(1)), 0, "IPv6 flows are hashed too");
        assert_ne!(flow_hash(&v6(1)), flow_hash(&v6(2)));
        assert_eq!(flow_hash(&frame[..30]), 0, "cut short");
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(flow_hash(&arp), 0);
        let mut bad_len = frame;
        bad_len[16..18].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(flow_hash(&bad_len), 0, "IPv4 total length beyond the frame");
    }
}
