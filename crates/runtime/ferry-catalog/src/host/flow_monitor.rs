//! `flow-monitor`: the flow monitor as a process.
//! Each thread counts its flows ([`ferry_nf::FlowMonitor`]) and, every
//! [`EXPORT_EVERY`], writes the flows it counted since into the flow table
//! ferryd made for the NF (a BPF hash map with the XDP flow monitor's
//! layout, passed as an fd; the key's `config` is the thread's index), so
//! `ferry chain show` reads a flow monitor's flows the same way wherever
//! it runs. A restarted process takes its counts over from the table.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use ferry_bpf::flow_table::{FlowTable, MAP_NAME};
use ferry_bpf::hybrid::FlowTuple;
use ferry_bpf::pipeline::{FlowKey as TableKey, PlCount};
use ferry_nf::flow_monitor::{FlowCount, FlowKey};
use ferry_nf::{FlowMonitor, PacketNf, Verdict};
use ferry_sdk::{NfThread, Packet};

use super::{Launch, BURST};

/// How stale the table ferryd reads may be.
pub const EXPORT_EVERY: Duration = Duration::from_millis(100);

pub fn serve(l: &Launch) -> Result<()> {
    let counters: Vec<&str> = FlowMonitor::new().spec().counters.to_vec();
    let nf = l.hello.connect(&counters)?;
    let table = nf.take_maps().into_iter().find(|(name, _)| name == MAP_NAME).map(|(_, fd)| fd);
    let table = table.ok_or_else(|| anyhow!("ferryd sent no flow table ({MAP_NAME})"))?;
    // One handle per thread, opened before any thread runs.
    let mut tables = Vec::new();
    for _ in 0..nf.threads() {
        let fd: OwnedFd = table.as_fd().try_clone_to_owned()?;
        tables.push(Mutex::new(Some(FlowTable::from_fd(fd)?)));
    }
    nf.run(|th| {
        let table = tables[th.index() as usize].lock().expect("tables lock").take().expect("one run per thread");
        count_flows(th, table)
    })?;
    Ok(())
}

fn to_table(config: u32, k: &FlowKey) -> TableKey {
    let flow = FlowTuple::new(Ipv4Addr::from(k.src), k.sport, Ipv4Addr::from(k.dst), k.dport, k.proto);
    TableKey { config, flow }
}

fn from_table(k: &TableKey) -> FlowKey {
    FlowKey {
        src: u32::from(Ipv4Addr::from(u32::from_be(k.flow.saddr))),
        dst: u32::from(Ipv4Addr::from(u32::from_be(k.flow.daddr))),
        sport: u16::from_be(k.flow.sport),
        dport: u16::from_be(k.flow.dport),
        proto: k.flow.proto,
    }
}

fn count_flows(mut th: NfThread, mut table: FlowTable) {
    let config = th.index();
    let mine = table.flows().into_iter().filter(|(k, _)| k.config == config);
    let mut nf =
        FlowMonitor::with_flows(mine.map(|(k, c)| (from_table(&k), FlowCount { packets: c.packets, bytes: c.bytes })));
    // Wake the thread when no frames come, so the last counts get out.
    let ticker = th.waker().every(EXPORT_EVERY);
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut exported = Instant::now();
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for mut pkt in burst.drain(..) {
            match nf.process(pkt.data_mut()) {
                Verdict::Pass | Verdict::Tx => th.send(pkt, 0),
                Verdict::Drop => th.drop_packet(pkt),
            }
        }
        for (i, &v) in nf.counters().iter().enumerate() {
            th.set_nf_counter(i, v);
        }
        if exported.elapsed() >= EXPORT_EVERY {
            export(&mut nf, &mut table, config);
            exported = Instant::now();
        }
    }
    export(&mut nf, &mut table, config);
    drop(ticker);
}

fn export(nf: &mut FlowMonitor, table: &mut FlowTable, config: u32) {
    for (k, c) in nf.take_changed() {
        // A failed write leaves the table behind until the flow's next
        // export; the counts here stay right.
        if let Err(e) = table.set(to_table(config, &k), PlCount { packets: c.packets, bytes: c.bytes }) {
            tracing::warn!("flow table: {e}");
        }
    }
}
