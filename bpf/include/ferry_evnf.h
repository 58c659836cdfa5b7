/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * What the eVNF programs (bpf/evnf.bpf.c) share: the chain (a program
 * array and a next-NF table), per-NF counters, the slow-path socket map
 * and the chain's end, which routes the frame out.
 */
#ifndef FERRY_EVNF_H
#define FERRY_EVNF_H

#include "ferry_common.h"
#include "ferry_parse.h"
#include "ferry_csum.h"
#include "ferry_fib.h"

/* Slot i holds NF i's program (FERRY_EV_FW ...). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, FERRY_EV_NFS);
	__type(key, __u32);
	__type(value, __u32);
} ferry_ev_progs SEC(".maps");

/* NF id -> the NF after it, or FERRY_EV_END. Set by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_EV_NFS);
	__type(key, __u32);
	__type(value, __u32);
} ferry_ev_next SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (FERRY_EV_NFS + 1) * FERRY_EV_COUNTERS);
	__type(key, __u32);
	__type(value, struct ferry_pl_count);
} ferry_ev_stats SEC(".maps");

/* Slow-path AF_XDP sockets, by receive queue. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} ferry_ev_xsks SEC(".maps");

static __always_inline void ferry_ev_count(struct xdp_md *ctx, __u32 nf, __u32 slot)
{
	__u32 index = nf * FERRY_EV_COUNTERS + slot;
	struct ferry_pl_count *c = bpf_map_lookup_elem(&ferry_ev_stats, &index);

	if (c) {
		c->packets += 1;
		c->bytes += ctx->data_end - ctx->data;
	}
}

/*
 * Parses the frame to L4 into `p`; a frame too short for a header it
 * announces is counted in `nf`'s `malformed_slot` and 0 is returned (the
 * caller drops it).
 */
static __always_inline int ferry_ev_parse(struct xdp_md *ctx, struct ferry_pkt *p, __u32 nf, __u32 malformed_slot)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };

	ferry_parse_l4(&c, p);
	if (!p->ok)
		ferry_ev_count(ctx, nf, malformed_slot);
	return p->ok;
}

/* An IPv4 TCP or UDP frame with its L4 header: one with ports to match,
 * balance, bypass or translate. */
static __always_inline int ferry_ev_has_ports(const struct ferry_pkt *p)
{
	return p->ip4 && p->l4 && (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP);
}

/* The directional 5-tuple of a parsed IPv4 frame. */
static __always_inline void ferry_ev_flow_of(const struct ferry_pkt *p, struct ferry_ev_flow *f)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->saddr = p->saddr;
	f->daddr = p->daddr;
	f->sport = p->sport;
	f->dport = p->dport;
	f->proto = p->proto;
}

/*
 * The end of the chain: route the frame out (XDP_REDIRECT) when the FIB
 * knows where it goes, otherwise hand it to the kernel stack.
 */
static __always_inline int ferry_ev_route(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ferry_cursor c = { data, end };
	struct ethhdr *eth = ferry_parse_eth(&c);
	struct iphdr *ip;
	__u32 ifindex;

	if (!eth || eth->h_proto != bpf_htons(ETH_P_IP))
		goto kernel;
	ip = ferry_parse_ipv4(&c);
	if (!ip)
		goto kernel;
	ifindex = ferry_fib_route(ctx, eth, ip);
	if (!ifindex)
		goto kernel;
	ferry_ev_count(ctx, FERRY_EV_ROUTE, FERRY_RT_C_ROUTED);
	return bpf_redirect(ifindex, 0);
kernel:
	ferry_ev_count(ctx, FERRY_EV_ROUTE, FERRY_RT_C_KERNEL);
	return XDP_PASS;
}

/*
 * Hands the frame to the NF after `nf` by tail call; when `nf` is the
 * last one (or the tail call fails), the frame leaves by ferry_ev_route.
 */
static __always_inline int ferry_ev_continue(struct xdp_md *ctx, __u32 nf)
{
	__u32 *next = bpf_map_lookup_elem(&ferry_ev_next, &nf);

	if (next && *next != FERRY_EV_END)
		bpf_tail_call(ctx, &ferry_ev_progs, *next);
	return ferry_ev_route(ctx);
}

/* The hybrid NFs' slow path: ferry_to_slow_path, naming the NF; `unbound`
 * is what happens while no socket is bound (see there). */
static __always_inline int ferry_ev_to_slow_path(struct xdp_md *ctx, __u32 nf, __u64 unbound)
{
	return ferry_to_slow_path(ctx, &ferry_ev_xsks, FERRY_SLOW_NO_RULE, 0, nf, 0, unbound);
}

#endif
