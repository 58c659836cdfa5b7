//! The RSS checker: can a NIC's receive-side scaling serve a packet-set
//! definition, i.e. send every packet of a set to the same queue (core)?
//!
//! A NIC hashes one of a few fixed field sets per protocol. Every packet of
//! a set agrees on the set's fields, hence on any subset of them, so RSS
//! serves a rule when some hashable field set is a subset of the rule's
//! fields; the checker picks the largest (best spreading). Rules that put
//! both directions of a flow in one set (symmetric, or swapped across two
//! ports) also need a hash that is the same both ways: a symmetric key
//! (`6d5a` repeated) or the NIC's symmetric hashing mode.

use crate::packet_set::{Field, PacketSetDef};

/// What a NIC's RSS can hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssCapability {
    /// The field sets it can hash on (order is irrelevant).
    pub field_sets: Vec<Vec<Field>>,
    /// Whether it can hash symmetrically.
    pub symmetric: bool,
}

impl RssCapability {
    /// What mainstream 100G NICs (ConnectX-5, E810) offer for IPv4: the
    /// address pair, or addresses and L4 ports; symmetric with a symmetric
    /// key.
    pub fn mainstream_nic() -> RssCapability {
        RssCapability {
            field_sets: vec![
                vec![Field::SrcIp, Field::DstIp],
                vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort],
            ],
            symmetric: true,
        }
    }
}

/// How RSS will serve one port's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssChoice {
    pub port: u16,
    /// The fields to configure the NIC to hash.
    pub hash_fields: Vec<Field>,
    /// Whether the hash must be symmetric.
    pub symmetric: bool,
}

/// Why RSS cannot serve a definition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RssCheckError {
    #[error("port {port}: the NIC cannot hash {}", names(.fields))]
    UnsupportedFields { port: u16, fields: Vec<Field> },
    #[error("port {port}: no field set the NIC can hash lies within the packet-set fields {}", names(.set_fields))]
    NoHashableSubset { port: u16, set_fields: Vec<Field> },
    #[error("port {port}: both directions of a flow form one set, but the NIC cannot hash symmetrically")]
    NeedsSymmetricHash { port: u16 },
}

fn names(fields: &[Field]) -> String {
    fields.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// Checks every rule of `def` against `nic`; the RSS configuration per port
/// when all can be served.
pub fn check_rss(def: &PacketSetDef, nic: &RssCapability) -> Result<Vec<RssChoice>, RssCheckError> {
    let needs_symmetric = def.rules().iter().any(|r| r.symmetric || r.is_swapped());
    let mut choices = Vec::new();
    for rule in def.rules() {
        let port = rule.port;
        if needs_symmetric && !nic.symmetric {
            return Err(RssCheckError::NeedsSymmetricHash { port });
        }
        let best =
            nic.field_sets.iter().filter(|set| set.iter().all(|f| rule.fields.contains(f))).max_by_key(|set| set.len());
        match best {
            Some(set) => choices.push(RssChoice { port, hash_fields: set.clone(), symmetric: needs_symmetric }),
            None => {
                let unsupported: Vec<Field> =
                    rule.fields.iter().copied().filter(|f| !nic.field_sets.iter().any(|s| s.contains(f))).collect();
                if unsupported.is_empty() {
                    return Err(RssCheckError::NoHashableSubset { port, set_fields: rule.fields.clone() });
                }
                return Err(RssCheckError::UnsupportedFields { port, fields: unsupported });
            }
        }
    }
    Ok(choices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet_set::PortRule;
    use ferry_wire::L4Proto;

    fn def(fields: Vec<Field>, symmetric: bool) -> PacketSetDef {
        PacketSetDef::new(vec![PortRule { port: 0, protocol: Some(L4Proto::Tcp), fields, symmetric }]).unwrap()
    }

    #[test]
    fn picks_the_largest_hashable_subset() {
        let nic = RssCapability::mainstream_nic();
        let five = def(vec![Field::SrcIp, Field::DstIp, Field::IpProto, Field::SrcPort, Field::DstPort], false);
        let choice = &check_rss(&five, &nic).unwrap()[0];
        assert_eq!(choice.hash_fields.len(), 4);
        // A set per host pair is served by hashing the addresses only.
        let pair = def(vec![Field::DstIp, Field::SrcIp], false);
        assert_eq!(check_rss(&pair, &nic).unwrap()[0].hash_fields, vec![Field::SrcIp, Field::DstIp]);
    }

    #[test]
    fn reports_fields_the_nic_cannot_hash() {
        let nic = RssCapability::mainstream_nic();
        assert_eq!(
            check_rss(&def(vec![Field::SrcMac], false), &nic),
            Err(RssCheckError::UnsupportedFields { port: 0, fields: vec![Field::SrcMac] })
        );
        // Per-destination sets: dst_ip alone is hashable nowhere on its own.
        assert_eq!(
            check_rss(&def(vec![Field::DstIp], false), &nic),
            Err(RssCheckError::NoHashableSubset { port: 0, set_fields: vec![Field::DstIp] })
        );
    }

    #[test]
    fn two_way_sets_need_a_symmetric_hash() {
        let mut nic = RssCapability::mainstream_nic();
        let two_way = def(vec![Field::SrcIp, Field::DstIp], true);
        assert!(check_rss(&two_way, &nic).unwrap()[0].symmetric);
        nic.symmetric = false;
        assert_eq!(check_rss(&two_way, &nic), Err(RssCheckError::NeedsSymmetricHash { port: 0 }));
    }
}
