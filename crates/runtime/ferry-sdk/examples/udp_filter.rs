//! A small Rust NF: forwards IPv4 UDP on out-link 0, drops everything else.
//!
//! ferryd starts it (chain file: `exec: [/path/to/udp_filter]`) with
//! FERRY_SOCKET and FERRY_NF set. Each received `Packet` is owned: after
//! `send` or `drop_packet` it is gone, so the compiler rejects any later use.

use ferry_sdk::{Nf, NfThread, Packet};

fn is_ipv4_udp(frame: &[u8]) -> bool {
    frame.len() >= 34 && frame[12..14] == [0x08, 0x00] && frame[23] == 17
}

fn run(mut th: NfThread) {
    let (mut udp, mut other) = (0u64, 0u64);
    let mut burst: Vec<Packet> = Vec::with_capacity(32);
    while th.recv_burst(&mut burst, 32).is_ok() {
        for pkt in burst.drain(..) {
            if is_ipv4_udp(pkt.data()) {
                udp += 1;
                th.send(pkt, 0);
            } else {
                other += 1;
                th.drop_packet(pkt);
            }
        }
        th.set_nf_counter(0, udp);
        th.set_nf_counter(1, other);
    }
}

fn main() {
    let nf = match Nf::connect_from_env_with(&["udp", "other"]) {
        Ok(nf) => nf,
        Err(e) => {
            eprintln!("udp_filter: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = nf.run(run) {
        eprintln!("udp_filter: {e}");
        std::process::exit(1);
    }
}
