use std::net::Ipv4Addr;

use ferry_wire::{build_frame, FiveTuple, FrameSpec};

use super::*;

fn frame(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: L4Proto) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
    let tuple = FiveTuple {
        src_ip: Ipv4Addr::from(src).into(),
        dst_ip: Ipv4Addr::from(dst).into(),
        src_port: sport,
        dst_port: dport,
        proto,
    };
    let mut buf = vec![0u8; 64];
    build_frame(&spec, &tuple, None, &mut buf).unwrap();
    buf
}

fn five_tuple_rule(port: u16, symmetric: bool) -> PortRule {
    PortRule {
        port,
        protocol: Some(L4Proto::Tcp),
        fields: vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort],
        symmetric,
    }
}

#[test]
fn the_key_is_the_fields_in_rule_order_and_hashes_like_a_nic() {
    let def = PacketSetDef::new(vec![five_tuple_rule(0, false)]).unwrap();
    let key = def.classify(0, &frame([66, 9, 149, 187], 2794, [161, 142, 100, 80], 1766, L4Proto::Tcp)).unwrap();
    assert_eq!(key.as_bytes(), &[66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6]);
    // Microsoft's RSS verification vector, with ports.
    assert_eq!(key.rss_hash(), 0x51cc_c178);
}

#[test]
fn addresses_only_match_the_verification_vector_without_ports() {
    let rule = PortRule { port: 0, protocol: None, fields: vec![Field::SrcIp, Field::DstIp], symmetric: false };
    let def = PacketSetDef::new(vec![rule]).unwrap();
    let key = def.classify(0, &frame([66, 9, 149, 187], 2794, [161, 142, 100, 80], 1766, L4Proto::Udp)).unwrap();
    assert_eq!(key.rss_hash(), 0x323e_8fc2);
}

#[test]
fn other_ports_and_protocols_are_orphans() {
    let def = PacketSetDef::new(vec![five_tuple_rule(0, false)]).unwrap();
    let udp = frame([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, L4Proto::Udp);
    let tcp = frame([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, L4Proto::Tcp);
    assert!(def.classify(0, &udp).is_none());
    assert!(def.classify(1, &tcp).is_none());
    assert!(def.classify(0, &tcp[..20]).is_none(), "truncated frames are orphans");
    assert!(PacketSetDef::none().classify(0, &tcp).is_none());
}

#[test]
fn symmetric_rules_put_both_directions_in_one_set() {
    let def = PacketSetDef::new(vec![five_tuple_rule(0, true)]).unwrap();
    let ab = def.classify(0, &frame([10, 0, 0, 1], 1000, [10, 0, 0, 2], 80, L4Proto::Tcp)).unwrap();
    let ba = def.classify(0, &frame([10, 0, 0, 2], 80, [10, 0, 0, 1], 1000, L4Proto::Tcp)).unwrap();
    let other = def.classify(0, &frame([10, 0, 0, 2], 81, [10, 0, 0, 1], 1000, L4Proto::Tcp)).unwrap();
    assert_eq!(ab, ba);
    assert_ne!(ab, other);
}

#[test]
fn swapped_rules_on_two_ports_put_both_directions_in_one_set() {
    let mut reply_rule = five_tuple_rule(1, false);
    reply_rule.fields = vec![Field::DstIp, Field::SrcIp, Field::DstPort, Field::SrcPort];
    assert!(reply_rule.is_swapped());
    let def = PacketSetDef::new(vec![five_tuple_rule(0, false), reply_rule]).unwrap();
    let request = def.classify(0, &frame([10, 0, 0, 1], 1000, [10, 0, 0, 2], 80, L4Proto::Tcp)).unwrap();
    let reply = def.classify(1, &frame([10, 0, 0, 2], 80, [10, 0, 0, 1], 1000, L4Proto::Tcp)).unwrap();
    assert_eq!(request, reply);
}

#[test]
fn mac_only_rules_need_no_ip_header() {
    let rule = PortRule { port: 0, protocol: None, fields: vec![Field::SrcMac], symmetric: false };
    let def = PacketSetDef::new(vec![rule]).unwrap();
    let mut arp = vec![0u8; 60];
    arp[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(def.classify(0, &arp).unwrap().as_bytes(), &[2, 0, 0, 0, 0, 9]);
}

#[test]
fn invalid_definitions_are_refused() {
    let rule = |fields: Vec<Field>, symmetric| PortRule { port: 3, protocol: None, fields, symmetric };
    assert_eq!(PacketSetDef::new(vec![rule(vec![], false)]), Err(PacketSetError::NoFields { port: 3 }));
    assert!(matches!(
        PacketSetDef::new(vec![rule(vec![Field::SrcIp, Field::SrcIp], false)]),
        Err(PacketSetError::DuplicateField { .. })
    ));
    assert!(matches!(
        PacketSetDef::new(vec![rule(vec![Field::SrcIp], true)]),
        Err(PacketSetError::UnpairedSymmetricField { field: Field::SrcIp, counterpart: Field::DstIp, .. })
    ));
    let all =
        vec![Field::SrcMac, Field::DstMac, Field::SrcIp, Field::DstIp, Field::IpProto, Field::SrcPort, Field::DstPort];
    assert!(PacketSetDef::new(vec![rule(all, false)]).is_ok(), "33 bytes fit");
    assert!(matches!(
        PacketSetDef::new(vec![rule(vec![Field::SrcIp], false), rule(vec![Field::DstIp], false)]),
        Err(PacketSetError::DuplicatePort { port: 3 })
    ));
}
