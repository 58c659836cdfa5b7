//! The IPS's alerts: one per rule a packet matched, held until the NF's
//! host takes them ([`crate::PacketNf::drain_alerts`]) and writes them out
//! as EVE JSON lines, the format Suricata's `eve.json` made common.
//!
//! The IPS holds at most [`MAX_PENDING`] (its host takes them after every
//! burst, so only an NF nobody drains fills it) and raises at most
//! [`MAX_PER_PACKET`] per packet, as Snort's event queue does; what does
//! not fit is counted as unlogged, never held.

use std::net::{IpAddr, Ipv6Addr};

use serde::Serialize;

use crate::ips_rules::{Action, Rule};

/// Alerts one packet raises at most (Snort 3's `event_queue.max_queue`
/// default).
pub const MAX_PER_PACKET: usize = 8;

/// Alerts held for the host at most.
pub const MAX_PENDING: usize = 4096;

/// Rule `rule` (its index in the NF's rules) matched a packet of this
/// 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alert {
    pub rule: u32,
    pub proto: u8,
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub sport: u16,
    pub dport: u16,
}

/// An alert as an EVE record (`event_type: alert`), but for the time and
/// where it was raised, which the host adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EveAlert<'a> {
    pub event_type: &'static str,
    pub src_ip: IpAddr,
    pub src_port: u16,
    pub dest_ip: IpAddr,
    pub dest_port: u16,
    pub proto: String,
    pub alert: EveRule<'a>,
}

/// The rule behind an alert, in EVE's names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EveRule<'a> {
    /// `allowed` (an `alert` rule) or `blocked` (a `drop` rule), as
    /// Suricata in IPS mode says.
    pub action: &'static str,
    pub gid: u32,
    pub signature_id: u32,
    pub rev: u32,
    pub signature: &'a str,
    /// The rule's `classtype`: there is no classification file to name
    /// its description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<&'a str>,
    /// The rule's `priority`, else Snort's default for a rule without a
    /// classtype.
    pub severity: u32,
}

/// Snort's priority for a rule that gives none and no classtype.
const DEFAULT_SEVERITY: u32 = 3;

impl Alert {
    /// Rule `rule` matched `p`.
    pub(crate) fn of(rule: u32, p: &crate::payload::IpPacket) -> Alert {
        Alert { rule, proto: p.proto, src: p.src, dst: p.dst, sport: p.sport, dport: p.dport }
    }

    /// The EVE record of this alert of `rule`.
    pub fn eve<'a>(&self, rule: &'a Rule) -> EveAlert<'a> {
        let ip = |a: Ipv6Addr| a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4);
        EveAlert {
            event_type: "alert",
            src_ip: ip(self.src),
            src_port: self.sport,
            dest_ip: ip(self.dst),
            dest_port: self.dport,
            proto: proto_name(self.proto),
            alert: EveRule {
                action: match rule.action {
                    Action::Alert => "allowed",
                    Action::Drop => "blocked",
                },
                gid: rule.meta.gid.max(1),
                signature_id: rule.sid,
                rev: rule.meta.rev,
                signature: &rule.msg,
                category: rule.meta.classtype.as_deref(),
                severity: rule.meta.priority.unwrap_or(DEFAULT_SEVERITY),
            },
        }
    }
}

/// The protocol as EVE names it (Suricata's spelling).
fn proto_name(proto: u8) -> String {
    match proto {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "IPv6-ICMP".into(),
        n => n.to_string(),
    }
}

/// The alerts an IPS holds for its host, bounded.
#[derive(Debug)]
pub(crate) struct Pending {
    alerts: Vec<Alert>,
    /// Alerts that did not fit, since the host last took them.
    unlogged: u64,
}

impl Pending {
    pub fn new() -> Pending {
        Pending { alerts: Vec::with_capacity(MAX_PENDING), unlogged: 0 }
    }

    /// Holds `alert` if there is room (never growing the buffer).
    pub fn push(&mut self, alert: Alert) {
        if self.alerts.len() < MAX_PENDING {
            self.alerts.push(alert);
        } else {
            self.unlogged += 1;
        }
    }

    /// Counts an alert that is not held (past the per-packet bound).
    pub fn skip(&mut self) {
        self.unlogged += 1;
    }

    /// The alerts held, and how many were not, emptied.
    pub fn take(&mut self) -> (std::vec::Drain<'_, Alert>, u64) {
        (self.alerts.drain(..), std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ips_rules::parse_rules;

    #[test]
    fn an_alert_reads_as_eve_says() {
        let rule = &parse_rules(
            "drop tcp any any -> any 80 (msg:\"sh\"; content:\"/bin/sh\"; classtype:attempted-user; sid:7; rev:2;)",
        )
        .unwrap()[0];
        let alert = Alert {
            rule: 0,
            proto: 6,
            src: "::ffff:10.0.0.1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            sport: 40000,
            dport: 80,
        };
        let json = serde_json::to_string(&alert.eve(rule)).unwrap();
        assert_eq!(
            json,
            r#"{"event_type":"alert","src_ip":"10.0.0.1","src_port":40000,"dest_ip":"2001:db8::2","dest_port":80,"proto":"TCP","alert":{"action":"blocked","gid":1,"signature_id":7,"rev":2,"signature":"sh","category":"attempted-user","severity":3}}"#
        );
    }

    #[test]
    fn pending_alerts_are_bounded_and_the_rest_counted() {
        let a = Alert { rule: 0, proto: 17, src: Ipv6Addr::LOCALHOST, dst: Ipv6Addr::LOCALHOST, sport: 1, dport: 2 };
        let mut p = Pending::new();
        for _ in 0..MAX_PENDING + 3 {
            p.push(a);
        }
        p.skip();
        let (held, unlogged) = p.take();
        assert_eq!((held.count(), unlogged), (MAX_PENDING, 4));
        let (held, unlogged) = p.take();
        assert_eq!((held.count(), unlogged), (0, 0));
    }
}
