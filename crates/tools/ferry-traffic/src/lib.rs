//! The pure parts of Ferry's traffic generator (`ferry gen`) and sink
//! (`ferry sink`): what to send and how to count what arrives. No sockets:
//! the AF_XDP and BPF I/O loops call into this crate.
//!
//! Generator side, per transmit queue:
//! ```
//! use ferry_sys::Pacer;
//! use ferry_traffic::{FlowSchedule, TemplateCache, TrafficProfile, split_evenly};
//! use ferry_wire::Stamp;
//!
//! let mut profile = TrafficProfile::default();
//! profile.set("pps", "1000").unwrap();
//! let (queue, nqueues) = (0, 2);
//! let mut sched = FlowSchedule::for_queue(&profile, queue, nqueues).unwrap();
//! let mut cache = TemplateCache::new(profile.frame_spec(), profile.version(), profile.proto.into(), sched.active_flows());
//! let mut pacer = Pacer::new(profile.rate_pps.map(|r| split_evenly(r, queue, nqueues)), profile.burst);
//! let mut buf = [0u8; 2048];
//! let now_ns = 1_000;
//! for seq in 0..pacer.take(now_ns, 32) as u32 {
//!     let pkt = sched.next_packet();
//!     let stamp = Stamp { stream: queue as u16, seq, tx_ns: now_ns };
//!     let len = cache.write_frame(&pkt, &stamp, &mut buf).unwrap();
//!     // ... hand buf[..len] to the NIC ...
//!     # assert_eq!(len, 60);
//! }
//! ```
//! Sink side: one [`SinkStats`] per receive thread, `record` each frame,
//! `merge` them and print the [`SinkReport`].

mod dist;
mod error;
mod pcap;
mod profile;
mod range;
mod report;
mod schedule;
mod sink;
mod template;

pub use dist::{FlowSizeDist, FlowSizeSampler, CAIDA_MEAN_FLOW_PACKETS, DEFAULT_MAX_FLOW_PACKETS};
pub use error::{PcapErrorKind, Result, TrafficError};
pub use pcap::{for_each_packet, read_pcap, PcapWriter};
pub use profile::{Proto, TrafficProfile, BUILTIN_PROFILES, MAX_FRAME_LEN, MIN_FRAME_LEN};
pub use range::{IpRange, PortRange};
pub use report::{LatencyReport, SinkReport, StreamReport};
pub use schedule::{split_evenly, FlowSchedule, ScheduledPacket};
pub use sink::{SinkStats, MAX_LATENCY_NS};
pub use template::TemplateCache;
