/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Layouts shared between Ferry's BPF programs and user space.
 *
 * This header is the single definition: ferry-bpf's build generates the Rust
 * types from it with bindgen, and crates/base/ferry-bpf/src/abi.rs checks the
 * same sizes this header asserts.
 */
#ifndef FERRY_ABI_H
#define FERRY_ABI_H

#include <linux/types.h>
#include <linux/bpf.h>

/* Payload stamp written by every Ferry generator right after the L4 header. */
#define FERRY_STAMP_MAGIC 0x7946
struct ferry_stamp {
	__u16 magic;
	__u16 stream;
	__u32 seq;
	__u64 tx_ns;
};
_Static_assert(sizeof(struct ferry_stamp) == 16, "ferry_stamp layout");

/*
 * Verdict counters: one slot per XDP action (XDP_ABORTED..XDP_REDIRECT), plus
 * one for frames a program refused as malformed before choosing an action,
 * plus one for frames bound for an AF_XDP socket that arrived on a receive
 * queue with none (what then happens to them is the port's setting: they
 * are dropped, or handed to the kernel only when the chain file says so).
 * Kept in a per-CPU array with one entry, summed by user space.
 */
#define FERRY_VERDICT_SLOTS 7
#define FERRY_SLOT_MALFORMED 5
#define FERRY_SLOT_NO_SOCKET 6
/* What the redirect program does with a frame on a queue with no socket. */
#define FERRY_UNOWNED_DROP 0
#define FERRY_UNOWNED_KERNEL 1
struct ferry_verdicts {
	__u64 packets[FERRY_VERDICT_SLOTS];
	__u64 bytes[FERRY_VERDICT_SLOTS];
};
_Static_assert(sizeof(struct ferry_verdicts) == 112, "ferry_verdicts layout");

/* Configuration of the live-frames generator (xdp_gen.bpf.c), map entry 0. */
#define FERRY_GEN_HEADERS_MAX 64
#define FERRY_GEN_HEADERS_IP 34
#define FERRY_GEN_HEADERS_UDP 42
#define FERRY_GEN_HEADERS_TCP 54
struct ferry_gen_config {
	__u32 ifindex;	    /* device the frames are redirected out of */
	__u16 stream;	    /* stamp stream id of this generator thread */
	__u16 stamp_offset; /* 0: do not stamp */
	__u16 sport_offset; /* 0: do not vary the source port */
	__u16 sport_min;    /* host order */
	__u16 sport_count;  /* number of source ports to cycle through */
	__u16 clock_shift;  /* read the clock every 2^clock_shift frames */
	__u64 interval_ns;  /* pacing: at most one frame per interval (0: none) */
	__u64 limit;	    /* frames to send in all (0: no limit) */
	/* Headers written back into every frame before it goes out: 0, or
	 * FERRY_GEN_HEADERS_IP (Ethernet + IPv4), FERRY_GEN_HEADERS_UDP (and
	 * UDP) or FERRY_GEN_HEADERS_TCP (and TCP) bytes of `headers`. */
	__u32 headers_len;
	__u32 _pad;
	__u8 headers[FERRY_GEN_HEADERS_MAX];
};
_Static_assert(sizeof(struct ferry_gen_config) == 104, "ferry_gen_config layout");

/* Per-CPU generator state (xdp_gen.bpf.c), map entry 0. */
struct ferry_gen_state {
	__u32 seq; /* frames sent */
	__u32 sport_idx;
	__u64 now_ns;  /* last clock reading, reused between readings */
	__u64 next_ns; /* pacing: earliest time of the next frame */
};
_Static_assert(sizeof(struct ferry_gen_state) == 24, "ferry_gen_state layout");

/*
 * The run-time programmable stage pipeline (bpf/pipeline.bpf.c): P4SFC's
 * dynamic data plane on XDP. crates/base/ferry-bpf/src/pipeline.rs names
 * the generated Rust types and checks their sizes.
 */
#define FERRY_PL_STAGES 4
/* next_stage value: the chain ends here (a forward element decides first). */
#define FERRY_PL_END 0xff
/* Most stage passes of one packet (recirculations by tail call + 1). */
#define FERRY_PL_MAX_PASSES 8
#define FERRY_PL_ACL_MAX_RULES 32

enum ferry_pl_element {
	FERRY_EL_NONE = 0,
	FERRY_EL_ACL = 1,
	FERRY_EL_COUNTER = 2,
	FERRY_EL_FLOWMON = 3,
	FERRY_EL_REWRITE = 4,
	FERRY_EL_POLICER = 5,
	FERRY_EL_FORWARD = 6,
	/* The hybrid NFs' fast paths (bpf/include/ferry_hybrid.h): their
	 * config is unused, their tables are one per pipeline object. */
	FERRY_EL_EFW = 7,
	FERRY_EL_ELB = 8,
	FERRY_EL_ELB_REPLY = 9,
	FERRY_EL_EDPI = 10,
	FERRY_EL_ENAT = 11,
	FERRY_EL_ENAT_REPLY = 12,
	/* The end of a hybrid path: out by the kernel's FIB, else to the stack. */
	FERRY_EL_ROUTE = 13,
	/* Payload scan (bpf/include/ferry_scan.h). */
	FERRY_EL_SCAN = 14,
	/* Source and destination MAC swapped (l2fwd's XDP form); no config. */
	FERRY_EL_ETHER_SWAP = 15,
};

/* Where a packet arriving on an ifindex starts: stage-control table. */
struct ferry_pl_entry {
	__u32 chain;
	__u32 nf;
	__u32 stage;
	__u32 _pad;
};

/* Key of every per-stage element-control map and of isolation. */
struct ferry_pl_key {
	__u32 chain;
	__u32 nf;
};

/* Element-control value: what runs at this stage for (chain, nf). */
struct ferry_pl_ctl {
	__u32 element;
	__u32 config;
	__u8 nf_complete;
	__u8 next_stage;
	__u16 _pad;
	__u32 next_nf;
};

/*
 * An address in the flow key's one 128-bit space (ferry-wire's flow and
 * prefix modules): an IPv6 address, or an IPv4 one IPv4-mapped
 * (::ffff:a.b.c.d, RFC 4291 2.5.5.2), so one key, one rule and one hash
 * serve both families. Network order; w[3] holds an IPv4 address.
 */
struct ferry_in6 {
	__be32 w[4];
};
_Static_assert(sizeof(struct ferry_in6) == 16, "ferry_in6 layout");

/* ACL rule; addresses network order, prefix lengths 0..128 in the 128-bit
 * space (an IPv4 /n is 96 + n). */
#define FERRY_ACL_ALLOW 0
#define FERRY_ACL_DENY 1
struct ferry_pl_acl_key {
	__u32 config;
	__u32 rule;
};
struct ferry_pl_acl_rule {
	struct ferry_in6 src;
	struct ferry_in6 dst;
	__u8 src_plen;
	__u8 dst_plen;
	__u8 proto; /* 0 = any */
	__u8 action;
	__u16 sport_lo; /* host order, inclusive */
	__u16 sport_hi;
	__u16 dport_lo;
	__u16 dport_hi;
};
struct ferry_pl_acl_meta {
	__u32 rules;
	__u32 default_action; /* IP frames no rule matches */
	__u32 non_ip_action;  /* frames with no IP header */
	__u32 _pad;
};

struct ferry_pl_count {
	__u64 packets;
	__u64 bytes;
};

/* A directional 5-tuple of either family, network order. */
struct ferry_flow {
	struct ferry_in6 saddr;
	struct ferry_in6 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 _pad[3];
};
_Static_assert(sizeof(struct ferry_flow) == 40, "ferry_flow layout");

/* Flow monitor key: config + 5-tuple. */
struct ferry_pl_flow_key {
	__u32 config;
	struct ferry_flow flow;
};

#define FERRY_RW_SRC_IP (1 << 0)
#define FERRY_RW_DST_IP (1 << 1)
#define FERRY_RW_SPORT (1 << 2)
#define FERRY_RW_DPORT (1 << 3)
#define FERRY_RW_SRC_MAC (1 << 4)
#define FERRY_RW_DST_MAC (1 << 5)
/* A header rewrite: addresses of the frame's family (IPv4 mapped). */
struct ferry_pl_rewrite {
	__u32 fields;
	struct ferry_in6 src_ip;
	struct ferry_in6 dst_ip;
	__be16 sport;
	__be16 dport;
	__u8 src_mac[6];
	__u8 dst_mac[6];
};

/* Token bucket in packets. */
struct ferry_pl_policer {
	struct bpf_spin_lock lock;
	__u32 _pad;
	__u64 rate_pps;
	__u64 burst;
	__u64 tokens_milli; /* thousandths of a token */
	__u64 last_ns;
};

/*
 * Payload scan: the first FERRY_SCAN_WINDOW bytes of a TCP or UDP payload
 * (IPv4 or IPv6) searched for up to FERRY_SCAN_MAX_PATTERNS byte strings of 1 to
 * FERRY_SCAN_MAX_LEN bytes; a match counts in ferry_pl_counters[counter]
 * and drops or passes the frame. Indexed by config (an array).
 */
#define FERRY_SCAN_MAX_PATTERNS 16
#define FERRY_SCAN_MAX_LEN 32
#define FERRY_SCAN_WINDOW 256
#define FERRY_SCAN_CONFIGS 64
#define FERRY_SCAN_DROP 0
#define FERRY_SCAN_PASS 1
struct ferry_pl_scan {
	__u32 patterns;
	__u32 action;
	__u32 counter;
	__u32 _pad;
	/* Bit b set: some pattern starts with byte b (a filter per offset). */
	__u8 first[32];
	__u8 len[FERRY_SCAN_MAX_PATTERNS];
	__u8 bytes[FERRY_SCAN_MAX_PATTERNS][FERRY_SCAN_MAX_LEN];
};

/*
 * Tenant classification at the edge (classify.bpf.c): a table of rules,
 * the first match wins. A rule matches on the fields its `fields` bits
 * name; `out` is the tenant entry, a key of the classifier's DEVMAP. The
 * table is ferry-wire's classify::Table, which the router NF runs.
 */
#define FERRY_CLS_MAX_RULES 64
#define FERRY_CLS_SRC 1
#define FERRY_CLS_DST 2
#define FERRY_CLS_VLAN 4
#define FERRY_CLS_DPORT 8
#define FERRY_CLS_INNER_VLAN 16
struct ferry_cls_rule {
	/* Prefixes in the 128-bit space (IPv4 mapped), masks in full. */
	struct ferry_in6 src;
	struct ferry_in6 src_mask;
	struct ferry_in6 dst;
	struct ferry_in6 dst_mask;
	__u16 vlan;	  /* the outer (or only) tag's VLAN id, host order */
	__u16 inner_vlan; /* the inner tag's, with two tags */
	__be16 dport;
	__u16 fields;
	__u16 out;
	__u16 _pad;
};
_Static_assert(sizeof(struct ferry_cls_rule) == 76, "ferry_cls_rule layout");

/* The table's header, map entry 0: how many rules are live and what a
 * frame no rule takes gets (XDP_DROP or XDP_PASS). */
struct ferry_cls_config {
	__u32 rules;
	__u32 default_action;
};
_Static_assert(sizeof(struct ferry_cls_config) == 8, "ferry_cls_config layout");

/*
 * The NSH service function forwarder (nsh_sff.bpf.c, RFC 8300 / 7665).
 * Each device it runs on has a role: the classifier pushes NSH on what a
 * rule matches, a fabric device takes NSH frames from other hosts, a
 * proxy return takes what an NSH-unaware NF sends back and restores its
 * header. Then the forwarding table, keyed by (SPI << 8 | SI), says where
 * the frame goes next.
 */
#define FERRY_NSH_ROLE_CLASSIFY 1
#define FERRY_NSH_ROLE_FABRIC 2
#define FERRY_NSH_ROLE_RETURN 3
struct ferry_nsh_port {
	__u32 role;
	__u32 spi_si; /* RETURN: the header pushed (SI already the next hop's) */
	__u32 ttl;    /* RETURN: its TTL */
	__be32 addr;  /* FABRIC: this host's address for VXLAN-GPE (0: none taken) */
	__u32 vni;    /* FABRIC: the VNI VXLAN-GPE frames must carry */
	__u32 _pad;
};
_Static_assert(sizeof(struct ferry_nsh_port) == 24, "ferry_nsh_port layout");

#define FERRY_NSH_FORWARD 1	    /* on to the next SFF: TTL - 1, outer MACs set */
#define FERRY_NSH_PROXY 2	    /* to a local NSH-unaware NF: the header stripped */
#define FERRY_NSH_END 3		    /* the path's end: the header popped */
#define FERRY_NSH_ENCAP_ETHERNET 0  /* NSH right after Ethernet (0x894F) */
#define FERRY_NSH_ENCAP_VXLAN_GPE 1 /* in VXLAN-GPE over IPv4/UDP 4790 */
struct ferry_nsh_hop {
	__u32 action;
	__u32 dev;	 /* the DEVMAP slot the frame leaves by */
	__u8 dst_mac[6]; /* FORWARD: the next SFF's (or the next IP hop's) */
	__u8 src_mac[6]; /* FORWARD: this host's, on that device */
	__u32 encap;	 /* FORWARD: FERRY_NSH_ENCAP_* */
	__be32 src_ip;	 /* VXLAN-GPE: this host's address */
	__be32 dst_ip;	 /* VXLAN-GPE: the next SFF's */
	__u32 vni;	 /* VXLAN-GPE: 24 bits */
};
_Static_assert(sizeof(struct ferry_nsh_hop) == 36, "ferry_nsh_hop layout");

/* The classifier's rules (ferry_classify.h) pick path `out`: its SPI. */
#define FERRY_NSH_PATHS 64
#define FERRY_NSH_MAX_HOPS 4096
/* Counters (a per-CPU array). How a frame without NSH came in: classified
 * (or unclassified: to the kernel), returned from a proxied NF, or not NSH
 * on a fabric device (to the kernel); frames with NSH from the fabric have
 * no entry counter. How each frame that reached the forwarding step left:
 * forwarded .. refused, exactly one. */
#define FERRY_NSH_CLASSIFIED 0
#define FERRY_NSH_UNCLASSIFIED 1 /* to the kernel */
#define FERRY_NSH_RETURNED 2
#define FERRY_NSH_FORWARDED 3
#define FERRY_NSH_PROXIED 4
#define FERRY_NSH_ENDED 5
#define FERRY_NSH_NO_HOP 6
#define FERRY_NSH_TTL_EXPIRED 7
#define FERRY_NSH_SI_EXPIRED 8
#define FERRY_NSH_MALFORMED 9
#define FERRY_NSH_NOT_ETHERNET 10
#define FERRY_NSH_NOT_NSH 11 /* a fabric device's other frames: to the kernel */
#define FERRY_NSH_REFUSED 12 /* NSH on a device that is not the fabric's */
#define FERRY_NSH_NO_DEV 13  /* the hop's device slot is empty */
#define FERRY_NSH_COUNTERS 14

#define FERRY_FWD_DROP 0
#define FERRY_FWD_TX 1
#define FERRY_FWD_REDIRECT 2
#define FERRY_FWD_XSK 3
#define FERRY_FWD_PASS 4
struct ferry_pl_forward {
	__u32 action;
	__u32 ifindex; /* FERRY_FWD_REDIRECT: key in ferry_pl_devs */
};

/*
 * Written in front of every frame an XDP program hands to an AF_XDP slow
 * path (XDP metadata), by the stage pipeline (ferry_to_slow_path in
 * ferry_common.h): why, and which chain, NF and stage sent it.
 */
#define FERRY_SLOW_NO_RULE 1
#define FERRY_SLOW_FORWARDED 2
/* A hybrid NF's table missed: its server part decides and installs. */
#define FERRY_SLOW_MISS 3
struct ferry_slow_meta {
	__u32 reason;
	__u32 chain;
	__u32 nf;
	__u32 stage;
};
_Static_assert(sizeof(struct ferry_slow_meta) == 16, "ferry_slow_meta layout");

/* What ferry_parse_probe (elements.bpf.c) writes in front of a frame as
 * XDP metadata: ferry_parse_l4's answer, for the differential test that
 * holds it to ferry-wire's flow parser. Ports and addresses in network
 * order; l4_off is 0 when no L4 header was parsed. */
struct ferry_parse_result {
	__u8 ok;
	__u8 proto;
	__u8 later_fragment;
	__u8 fragment;
	__u8 ip_version; /* 4, 6, or 0 for no IP header */
	__u8 tags;	 /* VLAN tags unwrapped: 0, 1 or 2 */
	__be16 ethertype;
	__u16 outer_vid; /* host order */
	__u16 inner_vid;
	__be16 sport;
	__be16 dport;
	__u16 l3_off;
	__u16 l4_off;
	struct ferry_in6 saddr;
	struct ferry_in6 daddr;
};
_Static_assert(sizeof(struct ferry_parse_result) == 52, "ferry_parse_result layout");

/* What ferry_nsh_probe (elements.bpf.c) writes in front of a frame as XDP
 * metadata: where ferry_parse_nsh found an NSH header and what it read,
 * for the differential test that holds it to ferry-wire's NSH parser.
 * SPI in host order. */
#define FERRY_NSH_IN_ETHERNET 1
#define FERRY_NSH_IN_VXLAN_GPE 2
struct ferry_nsh_result {
	__u8 ok;    /* a well-formed NSH header */
	__u8 encap; /* FERRY_NSH_IN_*, 0: no NSH there */
	__u8 md_type;
	__u8 next_proto;
	__u8 ttl;
	__u8 si;
	__u8 oam;
	__u8 hdr_len; /* bytes */
	__u32 spi;
	__u16 nsh_off;
	__u16 _pad;
};
_Static_assert(sizeof(struct ferry_nsh_result) == 16, "ferry_nsh_result layout");

/* Per-CPU state carried across a recirculation (tail call). */
struct ferry_pl_state {
	__u32 chain;
	__u32 nf;
	__u32 stage;
	__u32 passes;
	__u32 recirculating;
	/* A capture's tap is set on this chain (ferry_pl_tap). */
	__u32 tapping;
};

/*
 * A capture's tap on a stage pipeline (bpf/include/ferry_capture.h): entry
 * `slot` of ferry_pl_tap (FERRY_TAP_SLOTS captures at once). While `where`
 * is not FERRY_TAP_OFF, copies of the frames entering (FERRY_TAP_IN) or
 * leaving (FERRY_TAP_OUT) NF `nf` of chain `chain` go to the slot's ring
 * buffer, ferry_pl_capture<slot>, each a struct ferry_cap_hdr and `len`
 * bytes; a copy that finds the ring full is counted in `lost` and the
 * frame goes on.
 */
#define FERRY_TAP_SLOTS 2
#define FERRY_TAP_OFF 0
#define FERRY_TAP_IN 1
#define FERRY_TAP_OUT 2
/* The largest copy of one frame (a jumbo frame's 9216 bytes). */
#define FERRY_CAP_MAX 9216

struct ferry_pl_tap {
	__u32 where;
	__u32 chain;
	__u32 nf;
	/* Bytes kept of each frame (0: up to FERRY_CAP_MAX). */
	__u32 snaplen;
	__u32 session;
	__u32 _pad;
	__u64 taken;
	__u64 lost;
};
_Static_assert(sizeof(struct ferry_pl_tap) == 40, "ferry_pl_tap layout");

struct ferry_cap_hdr {
	/* bpf_ktime_get_ns(): CLOCK_MONOTONIC. */
	__u64 ts_ns;
	__u32 session;
	/* The whole frame's length, and the bytes that follow. */
	__u32 orig_len;
	__u32 len;
	__u32 _pad;
};
_Static_assert(sizeof(struct ferry_cap_hdr) == 24, "ferry_cap_hdr layout");

/*
 * eVNF hybrid NFs (bpf/include/ferry_hybrid.h): eFW, eLB (forward and
 * reply halves), eDPI and eNAT (outbound and inbound halves), elements of
 * the stage pipeline like any other, chained by its stage tables. The
 * numbers below are their rows in ferry_hyb_stats (their NF ids in the
 * stage tables are these + 0xffffff00, HybridElement::id). Named in
 * crates/base/ferry-bpf/src/hybrid.rs.
 */
#define FERRY_HYBRID_FW 0
#define FERRY_HYBRID_LB 1
#define FERRY_HYBRID_LB_REPLY 2
#define FERRY_HYBRID_DPI 3
#define FERRY_HYBRID_NAT 4
#define FERRY_HYBRID_NAT_REPLY 5
#define FERRY_HYBRID_NFS 6
/* Counter slots per NF in ferry_hyb_stats (index nf * FERRY_HYBRID_COUNTERS + slot). */
#define FERRY_HYBRID_COUNTERS 8

/* eFW counters. */
#define FERRY_FW_C_ALLOW 0
#define FERRY_FW_C_DENY 1
#define FERRY_FW_C_KERNEL 2 /* no fast rule decided: nftables decides */
#define FERRY_FW_C_NOT_IP 3
#define FERRY_FW_C_MALFORMED 4

#define FERRY_FW_ALLOW 0
#define FERRY_FW_DENY 1
#define FERRY_FW_MAX_RULES 1024
/* Source-subnet matcher (LPM trie key), in the 128-bit space: an IPv4
 * subnet /n is its IPv4-mapped /(96 + n). */
struct ferry_fw_subnet_key {
	__u32 prefixlen;
	struct ferry_in6 addr;
};
/* Destination-port matcher. */
struct ferry_fw_port_key {
	__u8 proto;
	__u8 _pad;
	__be16 port;
};
struct ferry_fw_rule {
	__u32 action;
	__u32 rule_id; /* index into ferry_fw_hits */
};

/* eLB counters (forward half). */
#define FERRY_LB_C_NEW 0
#define FERRY_LB_C_TRACKED 1
#define FERRY_LB_C_NOT_VIP 2
#define FERRY_LB_C_NO_BACKEND 3
#define FERRY_LB_C_MALFORMED 4
/* eLB reply-half counters. */
#define FERRY_LBR_C_REWRITTEN 0
#define FERRY_LBR_C_NOT_TRACKED 1
#define FERRY_LBR_C_MALFORMED 2
/*
 * Counters of the chain's end (row FERRY_HYBRID_ROUTE of ferry_hyb_stats):
 * frames routed out by XDP_REDIRECT after a FIB lookup, and frames left
 * to the kernel stack (local destination, no route or neighbour yet).
 */
#define FERRY_HYBRID_ROUTE FERRY_HYBRID_NFS
#define FERRY_RT_C_ROUTED 0
#define FERRY_RT_C_KERNEL 1

#define FERRY_LB_MAX_VIPS 16
#define FERRY_LB_RING 1024 /* server-selection slots per VIP */
#define FERRY_LB_RING_SLOTS (FERRY_LB_MAX_VIPS * FERRY_LB_RING)
#define FERRY_LB_MAX_BACKENDS 256
#define FERRY_LB_NO_BACKEND 0xffffffff
/* VIPs and backends of either family (IPv4 mapped); a backend is of its
 * VIP's family. */
struct ferry_lb_vip_key {
	struct ferry_in6 addr;
	__be16 port;
	__u8 proto;
	__u8 _pad;
};
struct ferry_lb_vip {
	__u32 vip_id;
	__u32 _pad;
};
struct ferry_lb_backend {
	struct ferry_in6 addr;
	__be16 port;
	__u16 _pad;
};
#define FERRY_LB_CLOSING 1 /* FIN or RST seen */
struct ferry_lb_conn {
	__u32 backend;
	__u32 flags;
	__u64 last_seen_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 packets;
	__u64 bytes;
};
/* Reply half: keyed by (backend -> client) flow. */
struct ferry_lb_reply {
	struct ferry_in6 vip;
	__be16 vport;
	__u16 _pad;
	__u32 _pad2;
	__u64 last_seen_ns;
};

/* eDPI counters. */
#define FERRY_DPI_C_BYPASS 0
#define FERRY_DPI_C_TO_SLOW 1
#define FERRY_DPI_C_NOT_INSPECTED 2
#define FERRY_DPI_C_MALFORMED 3
struct ferry_dpi_bypass {
	__u32 app; /* nDPI protocol id the slow path found */
	__u32 _pad;
	__u64 last_seen_ns;
	__u64 packets;
	__u64 bytes;
};

/* eNAT counters (outbound half, on the inside port). */
#define FERRY_NAT_C_REWRITTEN 0
#define FERRY_NAT_C_TO_SLOW 1	 /* no mapping yet: the slow path makes one */
#define FERRY_NAT_C_NOT_NATTED 2 /* not IPv4 TCP/UDP: on unchanged */
#define FERRY_NAT_C_FRAGMENT 3	 /* not translatable: dropped */
#define FERRY_NAT_C_MALFORMED 4
/* eNAT inbound-half counters (outside ports). */
#define FERRY_NATR_C_REWRITTEN 0
#define FERRY_NATR_C_NOT_MAPPED 1 /* no mapping: the stack decides */
#define FERRY_NATR_C_MALFORMED 2
#define FERRY_NAT_OUT 0
#define FERRY_NAT_IN 1
/* ferry_nat_map's size: 2 halves x 2 protocols x 65536 ports. */
#define FERRY_NAT_MAP_ENTRIES 262144
/*
 * A NAT mapping's key: the inside endpoint (FERRY_NAT_OUT) or the public
 * one (FERRY_NAT_IN), network order. Endpoint-independent (RFC 4787): no
 * remote endpoint in it.
 */
struct ferry_nat_key {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 dir;
};
/* What the key's endpoint becomes: the public endpoint, or the inside one. */
struct ferry_nat_entry {
	__be32 addr;
	__be16 port;
	__u16 _pad;
	__u64 last_seen_ns;
};

#endif
