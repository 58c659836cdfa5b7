//! `flow-monitor`: the flow monitor as a process.
//! Each thread counts its flows ([`ferry_nf::FlowMonitor`]) and, every
//! [`EXPORT_EVERY`], writes the flows it counted since into the flow table
//! ferryd made for the NF (a BPF hash map with the XDP flow monitor's
//! layout, passed as an fd; the key's `config` is the thread's index), so
//! `ferry chain show` reads a flow monitor's flows the same way wherever
//! it runs. A restarted process takes its counts over from the table.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use ferry_bpf::flow_table::{FlowTable, MAP_NAME};
use ferry_bpf::hybrid::FlowTuple;
use ferry_bpf::pipeline::{FlowKey as TableKey, PlCount};
use ferry_nf::flow_monitor::{FlowCount, FlowKey};
use ferry_nf::{FlowMonitor, PacketNf, Verdict};
use ferry_sdk::{Nf, NfThread, Packet};

use super::{Launch, BURST};

/// How stale the table ferryd reads may be.
pub const EXPORT_EVERY: Duration = Duration::from_millis(100);

pub fn serve(l: &Launch) -> Result<()> {
    let counters: Vec<&str> = FlowMonitor::new().spec().counters.to_vec();
    let nf = l.hello.connect(&counters)?;
    let tables = thread_tables(&nf)?;
    nf.run(|th| {
        let table = tables[th.index() as usize].lock().expect("tables lock").take().expect("one run per thread");
        count_flows(th, table)
    })?;
    Ok(())
}

/// The flow table ferryd sent the NF, one handle per thread, opened
/// before any thread runs.
pub(crate) fn thread_tables(nf: &Nf) -> Result<Vec<Mutex<Option<FlowTable>>>> {
    let table = nf.take_map(MAP_NAME).ok_or_else(|| anyhow!("ferryd sent no flow table ({MAP_NAME})"))?;
    let mut tables = Vec::new();
    for _ in 0..nf.threads() {
        let fd: OwnedFd = table.as_fd().try_clone_to_owned()?;
        tables.push(Mutex::new(Some(FlowTable::from_fd(fd)?)));
    }
    Ok(tables)
}

/// Writes one thread's flows into the table, at most [`EXPORT_EVERY`]
/// apart; the key's `config` is the thread's index.
pub(crate) struct Exporter {
    table: FlowTable,
    config: u32,
    exported: Instant,
}

impl Exporter {
    /// A flow monitor for thread `config`, with the counts a previous
    /// process of the NF left in `table`.
    pub(crate) fn open(table: FlowTable, config: u32) -> (Exporter, FlowMonitor) {
        let mine = table.flows().into_iter().filter(|(k, _)| k.config == config);
        let nf = FlowMonitor::with_flows(
            mine.map(|(k, c)| (from_table(&k), FlowCount { packets: c.packets, bytes: c.bytes })),
        );
        (Exporter { table, config, exported: Instant::now() }, nf)
    }

    /// Exports what changed if the last export is [`EXPORT_EVERY`] old.
    pub(crate) fn tick(&mut self, nf: &mut FlowMonitor) {
        if self.exported.elapsed() >= EXPORT_EVERY {
            self.export(nf);
        }
    }

    /// Exports what changed.
    pub(crate) fn export(&mut self, nf: &mut FlowMonitor) {
        for (k, c) in nf.take_changed() {
            // A failed write leaves the table behind until the flow's next
            // export; the counts here stay right.
            if let Err(e) = self.table.set(to_table(self.config, &k), PlCount { packets: c.packets, bytes: c.bytes }) {
                tracing::warn!("flow table: {e}");
            }
        }
        self.exported = Instant::now();
    }
}

fn to_table(config: u32, k: &FlowKey) -> TableKey {
    let flow = FlowTuple::new(k.src, k.sport, k.dst, k.dport, k.proto);
    TableKey { config, flow }
}

fn from_table(k: &TableKey) -> FlowKey {
    FlowKey {
        src: k.flow.saddr.to_ipv6(),
        dst: k.flow.daddr.to_ipv6(),
        sport: u16::from_be(k.flow.sport),
        dport: u16::from_be(k.flow.dport),
        proto: k.flow.proto,
    }
}

fn count_flows(mut th: NfThread, table: FlowTable) {
    let (mut exporter, mut nf) = Exporter::open(table, th.index());
    // Wake the thread when no frames come, so the last counts get out.
    let ticker = th.waker().every(EXPORT_EVERY);
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
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
        exporter.tick(&mut nf);
    }
    exporter.export(&mut nf);
    drop(ticker);
}
