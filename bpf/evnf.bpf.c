// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * The fast paths of Ferry's hybrid NFs (eVNF): eFW, eLB (forward and
 * reply halves), eDPI and eNAT (outbound and inbound halves). Each is an
 * XDP program of its own; a chain is
 * the order in ferry_ev_next, followed by tail calls through
 * ferry_ev_progs, so it changes with map updates only. The last NF routes
 * the frame out (ferry_ev_route). The control planes live in
 * crates/ferry-evnf.
 */
#include "ferry_evnf.h"

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

/* The subnet rule for the source, else the port rule, else NULL. */
static __always_inline struct ferry_fw_rule *ferry_fw_match(const struct ferry_pkt *p)
{
	struct ferry_fw_subnet_key sk = { .prefixlen = 32, .addr = p->saddr };
	struct ferry_fw_port_key pk = { .proto = p->proto, .port = p->dport };
	struct ferry_fw_rule *rule;

	rule = bpf_map_lookup_elem(&ferry_fw_subnets, &sk);
	if (rule)
		return rule;
	rule = bpf_map_lookup_elem(&ferry_fw_ports, &pk);
	if (rule)
		return rule;
	pk.port = 0;
	return bpf_map_lookup_elem(&ferry_fw_ports, &pk);
}

/*
 * Offloading mode: what a fast rule decides never reaches the kernel;
 * everything else goes up to the kernel stack, where nftables decides.
 */
SEC("xdp")
int ferry_efw(struct xdp_md *ctx)
{
	struct ferry_fw_rule *rule;
	struct ferry_pl_count *hits;
	struct ferry_pkt p;
	__u32 slot, rule_id;
	int action;

	if (!ferry_ev_parse(ctx, &p, FERRY_EV_FW, FERRY_FW_C_MALFORMED)) {
		action = XDP_DROP;
		slot = FERRY_SLOT_MALFORMED;
		goto out;
	}
	if (!p.ip4 && !p.ip6) {
		/* ARP and other non-IP traffic is not the firewall's business. */
		ferry_ev_count(ctx, FERRY_EV_FW, FERRY_FW_C_NOT_IP);
		action = XDP_PASS;
		slot = XDP_PASS;
		goto out;
	}
	/* Fragments carry ports in the first piece only: the kernel, which
	 * reassembles, decides all of them. */
	rule = p.ip4 && !p.fragment ? ferry_fw_match(&p) : NULL;
	if (!rule) {
		ferry_ev_count(ctx, FERRY_EV_FW, FERRY_FW_C_KERNEL);
		action = XDP_PASS;
		slot = XDP_PASS;
		goto out;
	}
	rule_id = rule->rule_id;
	hits = bpf_map_lookup_elem(&ferry_fw_hits, &rule_id);
	if (hits) {
		hits->packets += 1;
		hits->bytes += ctx->data_end - ctx->data;
	}
	if (rule->action == FERRY_FW_DENY) {
		ferry_ev_count(ctx, FERRY_EV_FW, FERRY_FW_C_DENY);
		action = XDP_DROP;
	} else {
		ferry_ev_count(ctx, FERRY_EV_FW, FERRY_FW_C_ALLOW);
		action = ferry_ev_continue(ctx, FERRY_EV_FW);
	}
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

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
	__type(key, struct ferry_ev_flow);
	__type(value, struct ferry_lb_conn);
} ferry_lb_conns SEC(".maps");

/* Backend -> client flows and the VIP to put back as their source. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ferry_ev_flow);
	__type(value, struct ferry_lb_reply);
} ferry_lb_replies SEC(".maps");

/* Packets and bytes sent to each backend: the load the control plane feeds back. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FERRY_LB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct ferry_pl_count);
} ferry_lb_backend_stats SEC(".maps");

/* murmur3's 64-bit finaliser over the 5-tuple. */
static __always_inline __u32 ferry_ev_flow_hash(const struct ferry_ev_flow *f)
{
	__u64 h = ((__u64)f->saddr << 32 | f->daddr) ^ ((__u64)f->sport << 24 | (__u64)f->dport << 8 | f->proto);

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return (__u32)h;
}

/*
 * Rewrites one address and one port of an IPv4 TCP/UDP frame, fixing the
 * IP checksum and the L4 checksum (whose pseudo-header covers addresses).
 * `dst` picks destination (DNAT) or source (reply). Returns 0 when the
 * L4 header is out of bounds.
 */
static __always_inline int ferry_ev_nat(struct xdp_md *ctx, struct ferry_pkt *p, int dst, __be32 addr, __be16 port)
{
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = p->ip4;
	__be32 *ip_field;
	__be16 *port_field;
	__sum16 *l4_check = NULL;
	struct ferry_tcphdr *tcp = p->l4;
	struct udphdr *udp = p->l4;

	if (!ip || (void *)(ip + 1) > end)
		return 0;
	if (p->proto == IPPROTO_TCP) {
		if ((void *)(tcp + 1) > end)
			return 0;
		l4_check = &tcp->check;
		port_field = dst ? &tcp->dest : &tcp->source;
	} else {
		if ((void *)(udp + 1) > end)
			return 0;
		if (udp->check)
			l4_check = &udp->check;
		port_field = dst ? &udp->dest : &udp->source;
	}
	ip_field = dst ? &ip->daddr : &ip->saddr;
	ferry_rewrite_addr(&ip->check, l4_check, ip_field, addr);
	ferry_rewrite_port(l4_check, port_field, port);
	if (p->proto == IPPROTO_UDP)
		ferry_udp_csum_fixup(l4_check);
	return 1;
}

static __always_inline int ferry_tcp_closing(const struct ferry_pkt *p, void *end)
{
	struct ferry_tcphdr *tcp = p->l4;

	if (p->proto != IPPROTO_TCP || (void *)(tcp + 1) > end)
		return 0;
	return tcp->flags & (0x01 | 0x04); /* FIN, RST */
}

/* The backend for a flow: its conntrack entry, else a new one from the ring. */
static __always_inline __u32 ferry_lb_pick(struct xdp_md *ctx, const struct ferry_ev_flow *flow, __u32 vip_id,
					   __u64 now, __u32 *is_new)
{
	struct ferry_lb_conn *conn = bpf_map_lookup_elem(&ferry_lb_conns, flow);
	struct ferry_lb_conn fresh = {};
	__u32 slot, *backend;

	if (conn) {
		conn->last_seen_ns = now;
		__sync_fetch_and_add(&conn->packets, 1);
		__sync_fetch_and_add(&conn->bytes, ctx->data_end - ctx->data);
		*is_new = 0;
		return conn->backend;
	}
	slot = vip_id * FERRY_LB_RING + ferry_ev_flow_hash(flow) % FERRY_LB_RING;
	backend = bpf_map_lookup_elem(&ferry_lb_ring, &slot);
	if (!backend || *backend >= FERRY_LB_MAX_BACKENDS)
		return FERRY_LB_NO_BACKEND;
	fresh.backend = *backend;
	fresh.last_seen_ns = now;
	fresh.packets = 1;
	fresh.bytes = ctx->data_end - ctx->data;
	bpf_map_update_elem(&ferry_lb_conns, flow, &fresh, BPF_ANY);
	*is_new = 1;
	return fresh.backend;
}

SEC("xdp")
int ferry_elb(struct xdp_md *ctx)
{
	struct ferry_lb_vip_key vk = {};
	struct ferry_ev_flow flow, back;
	struct ferry_lb_reply reply = {};
	struct ferry_lb_backend *be;
	struct ferry_lb_conn *conn;
	struct ferry_pl_count *load;
	struct ferry_lb_vip *vip;
	struct ferry_pkt p;
	__u32 backend, is_new = 0, slot;
	__u64 now;
	int action;

	if (!ferry_ev_parse(ctx, &p, FERRY_EV_LB, FERRY_LB_C_MALFORMED)) {
		action = XDP_DROP;
		slot = FERRY_SLOT_MALFORMED;
		goto out;
	}
	vk.addr = p.daddr;
	vk.port = p.dport;
	vk.proto = p.proto;
	/* Fragments are not balanced (later pieces carry no ports); they go
	 * on down the chain unchanged. (Katran drops them instead.) */
	vip = (ferry_ev_has_ports(&p) && !p.fragment) ? bpf_map_lookup_elem(&ferry_lb_vips, &vk) : NULL;
	if (!vip) {
		ferry_ev_count(ctx, FERRY_EV_LB, FERRY_LB_C_NOT_VIP);
		action = ferry_ev_continue(ctx, FERRY_EV_LB);
		goto counted;
	}
	/* Only VIP traffic needs the clock (conntrack stamps). */
	now = bpf_ktime_get_ns();
	ferry_ev_flow_of(&p, &flow);
	backend = ferry_lb_pick(ctx, &flow, vip->vip_id, now, &is_new);
	be = backend < FERRY_LB_MAX_BACKENDS ? bpf_map_lookup_elem(&ferry_lb_backends, &backend) : NULL;
	if (!be || !be->addr) {
		ferry_ev_count(ctx, FERRY_EV_LB, FERRY_LB_C_NO_BACKEND);
		action = XDP_DROP;
		goto counted;
	}
	ferry_ev_count(ctx, FERRY_EV_LB, is_new ? FERRY_LB_C_NEW : FERRY_LB_C_TRACKED);
	if (is_new) {
		back.saddr = be->addr;
		back.daddr = p.saddr;
		back.sport = be->port;
		back.dport = p.sport;
		back.proto = p.proto;
		__builtin_memset(back._pad, 0, sizeof(back._pad));
		reply.vip = p.daddr;
		reply.vport = p.dport;
		reply.last_seen_ns = now;
		bpf_map_update_elem(&ferry_lb_replies, &back, &reply, BPF_ANY);
	}
	if (ferry_tcp_closing(&p, (void *)(long)ctx->data_end)) {
		conn = bpf_map_lookup_elem(&ferry_lb_conns, &flow);
		if (conn)
			conn->flags |= FERRY_LB_CLOSING;
	}
	load = bpf_map_lookup_elem(&ferry_lb_backend_stats, &backend);
	if (load) {
		load->packets += 1;
		load->bytes += ctx->data_end - ctx->data;
	}
	if (!ferry_ev_nat(ctx, &p, 1, be->addr, be->port)) {
		ferry_ev_count(ctx, FERRY_EV_LB, FERRY_LB_C_MALFORMED);
		action = XDP_DROP;
		goto counted;
	}
	action = ferry_ev_continue(ctx, FERRY_EV_LB);
counted:
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

/* The reply half, on the backend-facing ports: SNAT back to the VIP. */
SEC("xdp")
int ferry_elb_reply(struct xdp_md *ctx)
{
	struct ferry_lb_reply *reply = NULL;
	struct ferry_ev_flow flow;
	struct ferry_pkt p;
	__u32 slot;
	int action;

	if (!ferry_ev_parse(ctx, &p, FERRY_EV_LB_REPLY, FERRY_LBR_C_MALFORMED)) {
		action = XDP_DROP;
		slot = FERRY_SLOT_MALFORMED;
		goto out;
	}
	if (ferry_ev_has_ports(&p)) {
		ferry_ev_flow_of(&p, &flow);
		reply = bpf_map_lookup_elem(&ferry_lb_replies, &flow);
	}
	if (!reply) {
		ferry_ev_count(ctx, FERRY_EV_LB_REPLY, FERRY_LBR_C_NOT_TRACKED);
	} else {
		reply->last_seen_ns = bpf_ktime_get_ns();
		if (!ferry_ev_nat(ctx, &p, 0, reply->vip, reply->vport)) {
			ferry_ev_count(ctx, FERRY_EV_LB_REPLY, FERRY_LBR_C_MALFORMED);
			action = XDP_DROP;
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		ferry_ev_count(ctx, FERRY_EV_LB_REPLY, FERRY_LBR_C_REWRITTEN);
	}
	action = ferry_ev_continue(ctx, FERRY_EV_LB_REPLY);
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

/* ---- eDPI: bypass rules for classified elephant flows ---- */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ferry_ev_flow);
	__type(value, struct ferry_dpi_bypass);
} ferry_dpi_bypass SEC(".maps");

/*
 * Reactive mode: flows with a bypass rule skip inspection; every other
 * TCP/UDP frame goes to the slow path (nDPI), which installs the rule once
 * it has classified an elephant flow.
 */
SEC("xdp")
int ferry_edpi(struct xdp_md *ctx)
{
	struct ferry_dpi_bypass *rule;
	struct ferry_ev_flow flow;
	struct ferry_pkt p;
	__u32 slot;
	int action;

	if (!ferry_ev_parse(ctx, &p, FERRY_EV_DPI, FERRY_DPI_C_MALFORMED)) {
		action = XDP_DROP;
		slot = FERRY_SLOT_MALFORMED;
		goto out;
	}
	if (!ferry_ev_has_ports(&p)) {
		ferry_ev_count(ctx, FERRY_EV_DPI, FERRY_DPI_C_NOT_INSPECTED);
		action = ferry_ev_continue(ctx, FERRY_EV_DPI);
		goto counted;
	}
	ferry_ev_flow_of(&p, &flow);
	rule = bpf_map_lookup_elem(&ferry_dpi_bypass, &flow);
	if (rule) {
		rule->last_seen_ns = bpf_ktime_get_ns();
		__sync_fetch_and_add(&rule->packets, 1);
		__sync_fetch_and_add(&rule->bytes, ctx->data_end - ctx->data);
		ferry_ev_count(ctx, FERRY_EV_DPI, FERRY_DPI_C_BYPASS);
		action = ferry_ev_continue(ctx, FERRY_EV_DPI);
		goto counted;
	}
	ferry_ev_count(ctx, FERRY_EV_DPI, FERRY_DPI_C_TO_SLOW);
	action = ferry_ev_to_slow_path(ctx, FERRY_EV_DPI, XDP_PASS);
counted:
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

/* ---- eNAT: endpoint-independent NAT, mappings made by the slow path ---- */

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

/*
 * Outbound, on the inside port: a frame whose inside endpoint has a
 * mapping leaves with the public endpoint as its source; the first frame
 * of an endpoint goes to the slow path, which makes the mapping (both
 * halves), translates the frame and hands it to the stack.
 */
SEC("xdp")
int ferry_enat(struct xdp_md *ctx)
{
	struct ferry_nat_entry *e;
	struct ferry_nat_key key;
	struct ferry_pkt p;
	__u32 slot;
	int action;

	if (!ferry_ev_parse(ctx, &p, FERRY_EV_NAT, FERRY_NAT_C_MALFORMED)) {
		action = XDP_DROP;
		slot = FERRY_SLOT_MALFORMED;
		goto out;
	}
	/* Later fragments carry no ports, so no fragment is translated, and
	 * none may leave with an inside source address. */
	if (p.ip4 && p.fragment) {
		ferry_ev_count(ctx, FERRY_EV_NAT, FERRY_NAT_C_FRAGMENT);
		action = XDP_DROP;
		goto counted;
	}
	if (!ferry_ev_has_ports(&p)) {
		ferry_ev_count(ctx, FERRY_EV_NAT, FERRY_NAT_C_NOT_NATTED);
		action = ferry_ev_continue(ctx, FERRY_EV_NAT);
		goto counted;
	}
	key.addr = p.saddr;
	key.port = p.sport;
	key.proto = p.proto;
	key.dir = FERRY_NAT_OUT;
	e = bpf_map_lookup_elem(&ferry_nat_map, &key);
	if (!e) {
		ferry_ev_count(ctx, FERRY_EV_NAT, FERRY_NAT_C_TO_SLOW);
		/* Untranslated, it must not leave: dropped while the process
		 * that translates it is not there. */
		action = ferry_ev_to_slow_path(ctx, FERRY_EV_NAT, XDP_DROP);
		goto counted;
	}
	e->last_seen_ns = bpf_ktime_get_ns();
	if (!ferry_ev_nat(ctx, &p, 0, e->addr, e->port)) {
		ferry_ev_count(ctx, FERRY_EV_NAT, FERRY_NAT_C_MALFORMED);
		action = XDP_DROP;
		goto counted;
	}
	ferry_ev_count(ctx, FERRY_EV_NAT, FERRY_NAT_C_REWRITTEN);
	action = ferry_ev_continue(ctx, FERRY_EV_NAT);
counted:
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

/*
 * Inbound, on the outside ports: a frame to a mapped public endpoint, from
 * any remote endpoint (endpoint-independent filtering), is translated
 * back; anything else is not the NAT's and goes on unchanged.
 */
SEC("xdp")
int ferry_enat_reply(struct xdp_md *ctx)
{
	struct ferry_nat_entry *e = NULL;
	struct ferry_nat_key key;
	struct ferry_pkt p;
	__u32 slot;
	int action;

	if (!ferry_ev_parse(ctx, &p, FERRY_EV_NAT_REPLY, FERRY_NATR_C_MALFORMED)) {
		action = XDP_DROP;
		slot = FERRY_SLOT_MALFORMED;
		goto out;
	}
	if (ferry_ev_has_ports(&p) && !p.fragment) {
		key.addr = p.daddr;
		key.port = p.dport;
		key.proto = p.proto;
		key.dir = FERRY_NAT_IN;
		e = bpf_map_lookup_elem(&ferry_nat_map, &key);
	}
	if (!e) {
		ferry_ev_count(ctx, FERRY_EV_NAT_REPLY, FERRY_NATR_C_NOT_MAPPED);
	} else {
		if (!ferry_ev_nat(ctx, &p, 1, e->addr, e->port)) {
			ferry_ev_count(ctx, FERRY_EV_NAT_REPLY, FERRY_NATR_C_MALFORMED);
			action = XDP_DROP;
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		ferry_ev_count(ctx, FERRY_EV_NAT_REPLY, FERRY_NATR_C_REWRITTEN);
	}
	action = ferry_ev_continue(ctx, FERRY_EV_NAT_REPLY);
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
