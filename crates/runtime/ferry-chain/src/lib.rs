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
//! * [`proto`]: the framed, versioned messages on ferryd's Unix socket.

pub mod classify;
pub mod frames;
pub mod hosts;
pub mod plan;
pub mod proto;
pub mod shm;
pub mod spec;

pub use plan::{ChainPlan, DomainPlan, NfPlan, OutLink, PortPlan, ThreadPlan};
pub use spec::{ChainSpec, LinkMode};

/// A cheap flow hash of an IPv4 packet's addresses, protocol and ports (0 for
/// anything else), used to keep a flow on one thread of a multi-threaded NF.
pub fn flow_hash(frame: &[u8]) -> u32 {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] {
        return 0;
    }
    let ihl = ((frame[14] & 0x0f) as usize) * 4;
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut mix = |v: u64| h = (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    mix(u32::from_be_bytes([frame[26], frame[27], frame[28], frame[29]]) as u64);
    mix(u32::from_be_bytes([frame[30], frame[31], frame[32], frame[33]]) as u64);
    mix(frame[23] as u64);
    let l4 = 14 + ihl;
    if ihl >= 20 && frame.len() >= l4 + 4 {
        mix(u32::from_be_bytes([frame[l4], frame[l4 + 1], frame[l4 + 2], frame[l4 + 3]]) as u64);
    }
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

    #[test]
    fn flow_hash_spreads_flows_that_differ_only_in_a_port() {
        let mut frame = [0u8; 64];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame[23] = 17;
        for n in [2usize, 3, 4, 8] {
            let mut seen = vec![0u32; n];
            for port in 1024u16..1088 {
                frame[34..36].copy_from_slice(&port.to_be_bytes());
                seen[flow_hash(&frame) as usize % n] += 1;
            }
            assert!(seen.iter().all(|&c| c >= 64 / n as u32 / 3), "{n} targets: {seen:?}");
        }
    }
}
