/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * The hybrid NFs' tables (eFW, eLB, eDPI, eNAT) and their counters, in the
 * stage pipeline's object. Their control planes (crates/runtime/ferry-evnf) hold
 * these maps by fd; the layouts are in ferry_abi.h.
 */
#ifndef FERRY_HYBRID_MAPS_H
#define FERRY_HYBRID_MAPS_H

#include "ferry_common.h"

/* Row per hybrid NF (FERRY_HYBRID_*) and one for the route element
 * (FERRY_HYBRID_ROUTE), FERRY_HYBRID_COUNTERS slots each. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (FERRY_HYBRID_NFS + 1) * FERRY_HYBRID_COUNTERS);
	__type(key, __u32);
	__type(value, struct ferry_pl_count);
} ferry_hyb_stats SEC(".maps");

/* ---- eFW: source-subnet and destination-port matchers ---- */

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ferry_fw_subnet_key);
	__type(value, struct ferry_fw_rule);
} ferry_fw_subnets SEC(".maps");

/* (proto, port) rules; port 0 stands for every port of the protocol. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ferry_fw_port_key);
	__type(value, struct ferry_fw_rule);
} ferry_fw_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FERRY_FW_MAX_RULES);
	__type(key, __u32);
	__type(value, struct ferry_pl_count);
} ferry_fw_hits SEC(".maps");

/* ---- eLB: VIP -> weighted server-selection array, conntrack, DNAT ---- */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FERRY_LB_MAX_VIPS);
	__type(key, struct ferry_lb_vip_key);
	__type(value, struct ferry_lb_vip);
} ferry_lb_vips SEC(".maps");

/* vip_id * FERRY_LB_RING + slot -> backend index (FERRY_LB_NO_BACKEND if none). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_LB_RING_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} ferry_lb_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_LB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct ferry_lb_backend);
} ferry_lb_backends SEC(".maps");

/* Client -> VIP flows and the backend each was given. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ferry_flow);
	__type(value, struct ferry_lb_conn);
} ferry_lb_conns SEC(".maps");

/* Backend -> client flows and the VIP to put back as their source. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ferry_flow);
	__type(value, struct ferry_lb_reply);
} ferry_lb_replies SEC(".maps");

/* Packets and bytes sent to each backend: the load the control plane feeds back. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FERRY_LB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct ferry_pl_count);
} ferry_lb_backend_stats SEC(".maps");

/* ---- eDPI: bypass rules for classified elephant flows ---- */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ferry_flow);
	__type(value, struct ferry_dpi_bypass);
} ferry_dpi_bypass SEC(".maps");

/* ---- eNAT: endpoint-independent mappings, made by the server part ---- */

/*
 * Both halves of every mapping. A plain hash, not an LRU: evicting one
 * half would leave the other working, or live traffic refreshing a
 * mapping whose way back is gone. Room for every port of both protocols,
 * both halves (the process refuses a range larger than that).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FERRY_NAT_MAP_ENTRIES);
	__type(key, struct ferry_nat_key);
	__type(value, struct ferry_nat_entry);
} ferry_nat_map SEC(".maps");

#endif
