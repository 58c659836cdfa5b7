//! Where an alerting NF's alerts go (the IPS's: [`PacketNf::drain_alerts`]):
//! each as an EVE JSON line, to the file its `eve=PATH` names (ferryd
//! opened it, for appending, and passed it) or else to the NF's log; and
//! counted per rule into the alert table ferryd made for the NF (keyed by
//! thread, gid and sid), which ferryd sums into its metrics.
//!
//! A thread takes its NF's alerts after every burst and writes them in
//! one `write` (whole lines, appended: threads' lines never interleave);
//! it exports its per-rule counts at most [`EXPORT_EVERY`] apart.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use ferry_bpf::alert_table::{AlertKey, AlertTable, MAP_NAME};
use ferry_nf::{EveAlert, PacketNf};
use ferry_sdk::Nf;
use serde::Serialize;

use super::flow_monitor::EXPORT_EVERY;

/// One EVE line: the time, the alert, and where Ferry raised it.
#[derive(Serialize)]
struct EveLine<'a> {
    timestamp: String,
    #[serde(flatten)]
    alert: EveAlert<'a>,
    ferry: Origin<'a>,
}

#[derive(Clone, Copy, Serialize)]
struct Origin<'a> {
    chain: &'a str,
    nf: &'a str,
    thread: u32,
}

/// What ferryd handed an alerting NF, shared by its threads.
pub(crate) struct AlertSinks {
    eve: Option<Arc<File>>,
    table: Option<OwnedFd>,
    chain: String,
    nf: String,
}

impl AlertSinks {
    /// Takes the EVE file and alert table ferryd sent `nf`. Without a
    /// table (an NF not started by this ferryd), alerts are still written,
    /// but not counted per rule.
    pub fn take(nf: &Nf) -> AlertSinks {
        let mut files = nf.take_files();
        if files.len() > 1 {
            let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            tracing::warn!("{}: one EVE file per NF: writing every alert to {}, not to {paths:?}", nf.name(), paths[0]);
        }
        let eve = (!files.is_empty()).then(|| Arc::new(File::from(files.swap_remove(0).1)));
        let table = nf.take_map(MAP_NAME);
        if table.is_none() {
            tracing::warn!("{}: ferryd sent no alert table ({MAP_NAME}): alerts are not counted per rule", nf.name());
        }
        AlertSinks { eve, table, chain: nf.chain().to_string(), nf: nf.name().to_string() }
    }

    /// A writer for each of `threads` threads, for each to take.
    pub fn per_thread(&self, threads: usize) -> Result<Vec<std::sync::Mutex<Option<AlertOut>>>> {
        (0..threads).map(|t| Ok(std::sync::Mutex::new(Some(self.for_thread(t as u32)?)))).collect()
    }

    /// Thread `thread`'s writer, with the counts a previous process of
    /// the NF left for it in the table.
    fn for_thread(&self, thread: u32) -> Result<AlertOut> {
        let table = match &self.table {
            Some(fd) => Some(AlertTable::from_fd(fd.as_fd().try_clone_to_owned()?).context("the alert table")?),
            None => None,
        };
        let counts = table.iter().flat_map(|t| t.entries()).filter(|(k, _)| k.thread == thread).collect();
        Ok(AlertOut {
            eve: self.eve.clone(),
            table,
            chain: self.chain.clone(),
            nf: self.nf.clone(),
            thread,
            counts,
            changed: false,
            exported: Instant::now(),
            warned: None,
            line: String::new(),
        })
    }
}

/// One thread's alert writer.
pub(crate) struct AlertOut {
    eve: Option<Arc<File>>,
    table: Option<AlertTable>,
    chain: String,
    nf: String,
    thread: u32,
    counts: BTreeMap<AlertKey, u64>,
    changed: bool,
    exported: Instant,
    /// When this thread last warned (a warning a burst would flood the log).
    warned: Option<Instant>,
    /// The lines of one drain.
    line: String,
}

impl AlertOut {
    /// Writes and counts the alerts `nf` raised since the last call, and
    /// exports the counts if the last export is [`EXPORT_EVERY`] old.
    pub fn collect(&mut self, nf: &mut dyn PacketNf) {
        let mut timestamp = None;
        let (thread, to_log) = (self.thread, self.eve.is_none());
        let (counts, line, changed) = (&mut self.counts, &mut self.line, &mut self.changed);
        let origin = Origin { chain: &self.chain, nf: &self.nf, thread };
        let unlogged = nf.drain_alerts(&mut |alert| {
            let key = AlertKey { thread, gid: alert.alert.gid, sid: alert.alert.signature_id };
            *counts.entry(key).or_default() += 1;
            *changed = true;
            let eve = EveLine { timestamp: timestamp.get_or_insert_with(now).clone(), alert, ferry: origin };
            let json = serde_json::to_string(&eve).expect("an EVE line serializes");
            if to_log {
                tracing::info!(target: "ferry::eve", "{json}");
            } else {
                line.push_str(&json);
                line.push('\n');
            }
        });
        if unlogged > 0 {
            self.warn(&format!("{unlogged} alerts not logged: more than a packet (8) or the buffer (4096) holds"));
        }
        self.write_lines();
        if self.exported.elapsed() >= EXPORT_EVERY {
            self.export();
        }
    }

    fn write_lines(&mut self) {
        if let (Some(file), false) = (&self.eve, self.line.is_empty()) {
            if let Err(e) = (&**file).write_all(self.line.as_bytes()) {
                self.warn(&format!("writing EVE alerts: {e}"));
            }
        }
        self.line.clear();
    }

    /// Logs `what`, unless this thread warned less than [`EXPORT_EVERY`]
    /// ago.
    fn warn(&mut self, what: &str) {
        if self.warned.map_or(true, |t| t.elapsed() >= EXPORT_EVERY) {
            tracing::warn!("{}: {what}", self.nf);
            self.warned = Some(Instant::now());
        }
    }

    /// Exports the per-rule counts, if any changed.
    pub fn export(&mut self) {
        let mut failed = None;
        if let (Some(table), true) = (&mut self.table, std::mem::take(&mut self.changed)) {
            for (&key, &n) in &self.counts {
                // A failed write leaves the table behind until the next
                // export; the counts here stay right.
                if let Err(e) = table.set(key, n) {
                    failed = Some(e);
                }
            }
        }
        if let Some(e) = failed {
            self.warn(&format!("alert table: {e}"));
        }
        self.exported = Instant::now();
    }
}

/// The time now, as EVE writes it (RFC 3339, UTC, microseconds).
fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    let micros = t.replace_nanosecond(t.microsecond() * 1000).unwrap_or(t);
    micros.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}
