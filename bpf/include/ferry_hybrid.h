/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * The hybrid NFs' fast paths as elements of the stage pipeline: eFW, eLB
 * (forward and reply halves), eDPI, eNAT (outbound and inbound halves),
 * and the route element that ends a hybrid path. Each is a global
 * function verified once, like the other elements; each sees the fields
 * the pipeline parsed and answers with a verdict (enum verdict in
 * ferry_elements.h). Misses go to the NF's server part through the
 * pipeline's one slow path; rewrites go through ferry_apply_rewrite.
 */
#ifndef FERRY_HYBRID_H
#define FERRY_HYBRID_H

#include "ferry_elements.h"
#include "ferry_fib.h"
#include "ferry_hybrid_maps.h"

static __always_inline void ferry_hybrid_count(__u32 nf, __u32 slot, __u32 bytes)
{
	__u32 index = nf * FERRY_HYBRID_COUNTERS + slot;
	struct ferry_pl_count *c = bpf_map_lookup_elem(&ferry_hyb_stats, &index);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
}

/* A TCP or UDP frame with its L4 header, IPv4 or IPv6: one with ports to
 * match or balance. */
static __always_inline int ferry_has_ports(const struct ferry_pl_fields *f)
{
	return (f->is_ip4 || f->is_ip6) && f->has_ports;
}

/* The same, IPv4 only: what the eNAT (NAPT44) translates and the eDPI's
 * nDPI server part inspects. */
static __always_inline int ferry_has_ports4(const struct ferry_pl_fields *f)
{
	return f->is_ip4 && f->has_ports;
}

/* Rewrites one endpoint (destination or source) through the one rewrite
 * helper; `addr` is of the frame's family. */
static __always_inline int ferry_hybrid_rewrite(struct xdp_md *ctx, struct ferry_pl_fields *f, int dst,
						const struct ferry_in6 *addr, __be16 port)
{
	struct ferry_pl_rewrite rw = {};

	rw.fields = dst ? FERRY_RW_DST_IP | FERRY_RW_DPORT : FERRY_RW_SRC_IP | FERRY_RW_SPORT;
	rw.dst_ip = *addr;
	rw.src_ip = *addr;
	rw.dport = port;
	rw.sport = port;
	return ferry_apply_rewrite(ctx, &rw, f) == CONTINUE;
}

/* ---- eFW ---- */

/* The subnet rule for the source, else the port rule, else NULL. */
static __always_inline struct ferry_fw_rule *ferry_fw_match(const struct ferry_pl_fields *f)
{
	struct ferry_fw_subnet_key sk = { .prefixlen = 128, .addr = f->saddr };
	struct ferry_fw_port_key pk = { .proto = f->proto, .port = f->dport };
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
__attribute__((noinline)) int ferry_el_efw(struct ferry_pl_fields *f)
{
	struct ferry_fw_rule *rule;
	struct ferry_pl_count *hits;
	__u32 rule_id;

	if (!f)
		return XDP_ABORTED;
	if (!f->is_ip4 && !f->is_ip6) {
		/* ARP and other non-IP traffic is not the firewall's business. */
		ferry_hybrid_count(FERRY_HYBRID_FW, FERRY_FW_C_NOT_IP, f->bytes);
		return XDP_PASS;
	}
	/* Fragments carry ports in the first piece only: the kernel, which
	 * reassembles, decides all of them. */
	rule = !f->fragment ? ferry_fw_match(f) : NULL;
	if (!rule) {
		ferry_hybrid_count(FERRY_HYBRID_FW, FERRY_FW_C_KERNEL, f->bytes);
		return XDP_PASS;
	}
	rule_id = rule->rule_id;
	hits = bpf_map_lookup_elem(&ferry_fw_hits, &rule_id);
	if (hits) {
		hits->packets += 1;
		hits->bytes += f->bytes;
	}
	if (rule->action == FERRY_FW_DENY) {
		ferry_hybrid_count(FERRY_HYBRID_FW, FERRY_FW_C_DENY, f->bytes);
		return XDP_DROP;
	}
	ferry_hybrid_count(FERRY_HYBRID_FW, FERRY_FW_C_ALLOW, f->bytes);
	return CONTINUE;
}

/* ---- eLB ---- */

/* murmur3's 64-bit finaliser over the 5-tuple, the addresses folded
 * word by word. */
static __always_inline __u32 ferry_flow_hash(const struct ferry_flow *f)
{
	__u64 h = (__u64)f->sport << 24 | (__u64)f->dport << 8 | f->proto;

	for (int i = 0; i < 4; i++)
		h ^= ((__u64)f->saddr.w[i] << 32 | f->daddr.w[i]) * (i + 1);

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return (__u32)h;
}

/* The backend for a flow: its conntrack entry, else a new one from the ring. */
static __always_inline __u32 ferry_lb_pick(const struct ferry_flow *flow, __u32 vip_id, __u64 now, __u32 bytes,
					   __u32 *is_new)
{
	struct ferry_lb_conn *conn = bpf_map_lookup_elem(&ferry_lb_conns, flow);
	struct ferry_lb_conn fresh = {};
	__u32 slot, *backend;

	if (conn) {
		conn->last_seen_ns = now;
		__sync_fetch_and_add(&conn->packets, 1);
		__sync_fetch_and_add(&conn->bytes, bytes);
		*is_new = 0;
		return conn->backend;
	}
	slot = vip_id * FERRY_LB_RING + ferry_flow_hash(flow) % FERRY_LB_RING;
	backend = bpf_map_lookup_elem(&ferry_lb_ring, &slot);
	if (!backend || *backend >= FERRY_LB_MAX_BACKENDS)
		return FERRY_LB_NO_BACKEND;
	fresh.backend = *backend;
	fresh.last_seen_ns = now;
	fresh.packets = 1;
	fresh.bytes = bytes;
	bpf_map_update_elem(&ferry_lb_conns, flow, &fresh, BPF_ANY);
	*is_new = 1;
	return fresh.backend;
}

/* Whether a TCP frame closes its connection (FIN or RST): the L4 header
 * re-derived from ctx, as the elements that read the packet do. */
static __always_inline int ferry_tcp_closing(struct xdp_md *ctx, const struct ferry_pl_fields *f)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 off = f->l4_off;
	struct ferry_tcphdr *tcp;

	if (f->proto != IPPROTO_TCP || off > MAX_L4_OFF)
		return 0;
	tcp = data + off;
	if ((void *)(tcp + 1) > end)
		return 0;
	return tcp->flags & (0x01 | 0x04); /* FIN, RST */
}

__attribute__((noinline)) int ferry_el_elb(struct xdp_md *ctx, struct ferry_pl_fields *f)
{
	struct ferry_lb_vip_key vk = {};
	struct ferry_flow flow, back;
	struct ferry_lb_reply reply = {};
	struct ferry_lb_backend *be;
	struct ferry_lb_conn *conn;
	struct ferry_pl_count *load;
	struct ferry_lb_vip *vip;
	__u32 backend, is_new = 0;
	__u64 now;

	if (!f)
		return XDP_ABORTED;
	vk.addr = f->daddr;
	vk.port = f->dport;
	vk.proto = f->proto;
	/* Fragments are not balanced (later pieces carry no ports); they go
	 * on down the chain unchanged. (Katran drops them instead.) */
	vip = (ferry_has_ports(f) && !f->fragment) ? bpf_map_lookup_elem(&ferry_lb_vips, &vk) : NULL;
	if (!vip) {
		ferry_hybrid_count(FERRY_HYBRID_LB, FERRY_LB_C_NOT_VIP, f->bytes);
		return CONTINUE;
	}
	/* Only VIP traffic needs the clock (conntrack stamps). */
	now = bpf_ktime_get_ns();
	ferry_flow_of(f, &flow);
	backend = ferry_lb_pick(&flow, vip->vip_id, now, f->bytes, &is_new);
	be = backend < FERRY_LB_MAX_BACKENDS ? bpf_map_lookup_elem(&ferry_lb_backends, &backend) : NULL;
	if (!be || !(be->addr.w[0] | be->addr.w[1] | be->addr.w[2] | be->addr.w[3])) {
		ferry_hybrid_count(FERRY_HYBRID_LB, FERRY_LB_C_NO_BACKEND, f->bytes);
		return XDP_DROP;
	}
	ferry_hybrid_count(FERRY_HYBRID_LB, is_new ? FERRY_LB_C_NEW : FERRY_LB_C_TRACKED, f->bytes);
	if (is_new) {
		back.saddr = be->addr;
		back.daddr = f->saddr;
		back.sport = be->port;
		back.dport = f->sport;
		back.proto = f->proto;
		__builtin_memset(back._pad, 0, sizeof(back._pad));
		reply.vip = f->daddr;
		reply.vport = f->dport;
		reply.last_seen_ns = now;
		bpf_map_update_elem(&ferry_lb_replies, &back, &reply, BPF_ANY);
	}
	if (ferry_tcp_closing(ctx, f)) {
		conn = bpf_map_lookup_elem(&ferry_lb_conns, &flow);
		if (conn)
			conn->flags |= FERRY_LB_CLOSING;
	}
	load = bpf_map_lookup_elem(&ferry_lb_backend_stats, &backend);
	if (load) {
		load->packets += 1;
		load->bytes += f->bytes;
	}
	if (!ferry_hybrid_rewrite(ctx, f, 1, &be->addr, be->port)) {
		ferry_hybrid_count(FERRY_HYBRID_LB, FERRY_LB_C_MALFORMED, f->bytes);
		return XDP_DROP;
	}
	return CONTINUE;
}

/* The reply half, on the backend-facing ports: SNAT back to the VIP. */
__attribute__((noinline)) int ferry_el_elb_reply(struct xdp_md *ctx, struct ferry_pl_fields *f)
{
	struct ferry_lb_reply *reply = NULL;
	struct ferry_flow flow;

	if (!f)
		return XDP_ABORTED;
	if (ferry_has_ports(f)) {
		ferry_flow_of(f, &flow);
		reply = bpf_map_lookup_elem(&ferry_lb_replies, &flow);
	}
	if (!reply) {
		ferry_hybrid_count(FERRY_HYBRID_LB_REPLY, FERRY_LBR_C_NOT_TRACKED, f->bytes);
		return CONTINUE;
	}
	reply->last_seen_ns = bpf_ktime_get_ns();
	if (!ferry_hybrid_rewrite(ctx, f, 0, &reply->vip, reply->vport)) {
		ferry_hybrid_count(FERRY_HYBRID_LB_REPLY, FERRY_LBR_C_MALFORMED, f->bytes);
		return XDP_DROP;
	}
	ferry_hybrid_count(FERRY_HYBRID_LB_REPLY, FERRY_LBR_C_REWRITTEN, f->bytes);
	return CONTINUE;
}

/* ---- eDPI ---- */

/*
 * Reactive mode: flows with a bypass rule skip inspection; every other
 * TCP/UDP frame goes to the server part (nDPI), which installs the rule
 * once it has classified an elephant flow.
 */
__attribute__((noinline)) int ferry_el_edpi(struct ferry_pl_fields *f)
{
	struct ferry_dpi_bypass *rule;
	struct ferry_flow flow;

	if (!f)
		return XDP_ABORTED;
	if (!ferry_has_ports4(f)) {
		ferry_hybrid_count(FERRY_HYBRID_DPI, FERRY_DPI_C_NOT_INSPECTED, f->bytes);
		return CONTINUE;
	}
	ferry_flow_of(f, &flow);
	rule = bpf_map_lookup_elem(&ferry_dpi_bypass, &flow);
	if (rule) {
		rule->last_seen_ns = bpf_ktime_get_ns();
		__sync_fetch_and_add(&rule->packets, 1);
		__sync_fetch_and_add(&rule->bytes, f->bytes);
		ferry_hybrid_count(FERRY_HYBRID_DPI, FERRY_DPI_C_BYPASS, f->bytes);
		return CONTINUE;
	}
	ferry_hybrid_count(FERRY_HYBRID_DPI, FERRY_DPI_C_TO_SLOW, f->bytes);
	/* Inspection only: while no process inspects, the stack has it. */
	return SLOW_MISS_PASS;
}

/* ---- eNAT ---- */

/*
 * Outbound, on the inside port: a frame whose inside endpoint has a
 * mapping leaves with the public endpoint as its source; the first frame
 * of an endpoint goes to the server part, which makes the mapping (both
 * halves), translates the frame and hands it on.
 */
__attribute__((noinline)) int ferry_el_enat(struct xdp_md *ctx, struct ferry_pl_fields *f)
{
	struct ferry_nat_entry *e;
	struct ferry_nat_key key = {};
	struct ferry_in6 public;

	if (!f)
		return XDP_ABORTED;
	/* Later fragments carry no ports, so no fragment is translated, and
	 * none may leave with an inside source address. */
	if (f->is_ip4 && f->fragment) {
		ferry_hybrid_count(FERRY_HYBRID_NAT, FERRY_NAT_C_FRAGMENT, f->bytes);
		return XDP_DROP;
	}
	if (!ferry_has_ports4(f)) {
		ferry_hybrid_count(FERRY_HYBRID_NAT, FERRY_NAT_C_NOT_NATTED, f->bytes);
		return CONTINUE;
	}
	key.addr = f->saddr.w[3];
	key.port = f->sport;
	key.proto = f->proto;
	key.dir = FERRY_NAT_OUT;
	e = bpf_map_lookup_elem(&ferry_nat_map, &key);
	if (!e) {
		ferry_hybrid_count(FERRY_HYBRID_NAT, FERRY_NAT_C_TO_SLOW, f->bytes);
		/* Untranslated, it must not leave: dropped while the process
		 * that translates it is not there. */
		return SLOW_MISS_DROP;
	}
	e->last_seen_ns = bpf_ktime_get_ns();
	ferry_in6_of_v4(&public, e->addr);
	if (!ferry_hybrid_rewrite(ctx, f, 0, &public, e->port)) {
		ferry_hybrid_count(FERRY_HYBRID_NAT, FERRY_NAT_C_MALFORMED, f->bytes);
		return XDP_DROP;
	}
	ferry_hybrid_count(FERRY_HYBRID_NAT, FERRY_NAT_C_REWRITTEN, f->bytes);
	return CONTINUE;
}

/*
 * Inbound, on the outside ports: a frame to a mapped public endpoint, from
 * any remote endpoint (endpoint-independent filtering), is translated
 * back; anything else is not the NAT's and goes on unchanged.
 */
__attribute__((noinline)) int ferry_el_enat_reply(struct xdp_md *ctx, struct ferry_pl_fields *f)
{
	struct ferry_nat_entry *e = NULL;
	struct ferry_nat_key key = {};
	struct ferry_in6 inside;

	if (!f)
		return XDP_ABORTED;
	if (ferry_has_ports4(f) && !f->fragment) {
		key.addr = f->daddr.w[3];
		key.port = f->dport;
		key.proto = f->proto;
		key.dir = FERRY_NAT_IN;
		e = bpf_map_lookup_elem(&ferry_nat_map, &key);
	}
	if (!e) {
		ferry_hybrid_count(FERRY_HYBRID_NAT_REPLY, FERRY_NATR_C_NOT_MAPPED, f->bytes);
		return CONTINUE;
	}
	ferry_in6_of_v4(&inside, e->addr);
	if (!ferry_hybrid_rewrite(ctx, f, 1, &inside, e->port)) {
		ferry_hybrid_count(FERRY_HYBRID_NAT_REPLY, FERRY_NATR_C_MALFORMED, f->bytes);
		return XDP_DROP;
	}
	ferry_hybrid_count(FERRY_HYBRID_NAT_REPLY, FERRY_NATR_C_REWRITTEN, f->bytes);
	return CONTINUE;
}

/* ---- the end of a hybrid path ---- */

/*
 * Routes the frame out the way the kernel's router would (ROUTE, with the
 * egress device in *ifindex) when the FIB knows where it goes; otherwise
 * the stack has it.
 */
__attribute__((noinline)) int ferry_el_route(struct xdp_md *ctx, struct ferry_pl_fields *f, __u32 *ifindex)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u32 l3, out;

	if (!f || !ifindex)
		return XDP_ABORTED;
	l3 = f->l3_off;
	/* Untagged IPv4 only: the FIB knows nothing of VLAN tags. */
	if (!f->is_ip4 || l3 != sizeof(*eth))
		goto kernel;
	ip = data + sizeof(*eth);
	if ((void *)(ip + 1) > end)
		goto kernel;
	out = ferry_fib_route(ctx, eth, ip);
	if (!out)
		goto kernel;
	ferry_hybrid_count(FERRY_HYBRID_ROUTE, FERRY_RT_C_ROUTED, f->bytes);
	*ifindex = out;
	return ROUTE;
kernel:
	ferry_hybrid_count(FERRY_HYBRID_ROUTE, FERRY_RT_C_KERNEL, f->bytes);
	return XDP_PASS;
}

#endif
