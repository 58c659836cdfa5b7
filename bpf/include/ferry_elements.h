/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * The pipeline's elements and their config tables, shared by the stage
 * pipeline (pipeline.bpf.c) and the dedicated one-element programs
 * (elements.bpf.c) that `ferry bench pipeline` compares it with: the same
 * element code runs with and without the pipeline around it.
 */
#ifndef FERRY_ELEMENTS_H
#define FERRY_ELEMENTS_H

#include "ferry_common.h"
#include "ferry_parse.h"
#include "ferry_csum.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct ferry_pl_acl_key);
	__type(value, struct ferry_pl_acl_rule);
} ferry_pl_acl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ferry_pl_acl_meta);
} ferry_pl_acl_meta SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ferry_pl_count);
} ferry_pl_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ferry_pl_flow_key);
	__type(value, struct ferry_pl_count);
} ferry_pl_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ferry_pl_rewrite);
} ferry_pl_rewrites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ferry_pl_policer);
} ferry_pl_policers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ferry_pl_forward);
} ferry_pl_forwards SEC(".maps");

/*
 * What an element or the stages decided, besides a plain XDP action (>= 0).
 * Actions that need a helper which moves packet data or redirects are done
 * by the entry function after the stages, so no stage code ever runs with
 * packet pointers the verifier has invalidated.
 */
enum verdict {
	CONTINUE = -1,	     /* run the next stage */
	RECIRCULATE = -2,    /* tail-call self at st->stage */
	SLOW_NO_RULE = -3,   /* no element-control entry: slow path */
	SLOW_FORWARD = -4,   /* a forward element chose the slow path */
	REDIRECT = -5,	     /* out of the device the forward element named */
	SLOW_MISS_PASS = -6, /* a hybrid NF's table missed: its server part; the stack while it has no socket */
	SLOW_MISS_DROP = -7, /* the same, but dropped while it has no socket */
	ROUTE = -8,	     /* out of the device the kernel's FIB named (bpf_redirect) */
};

/*
 * What the elements see of a packet: fields extracted once by the parser
 * and header offsets. Elements are global (non-inlined) BPF functions,
 * verified once each instead of once per stage and path, which keeps the
 * whole program within the verifier's budget; the ones that write the
 * packet re-derive and re-check their pointers from ctx and the offsets.
 */
struct ferry_pl_fields {
	/* The 128-bit space: IPv4 addresses mapped, w[3] the IPv4 one. */
	struct ferry_in6 saddr;
	struct ferry_in6 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 is_ip4;
	__u8 has_ports;
	__u8 later_fragment;
	__u8 is_ip6;
	/* A fragment (IPv4, or IPv6 by its fragment header), the first
	 * included. */
	__u8 fragment;
	__u16 _pad;
	__u32 l3_off;
	__u32 l4_off;
	/* Where the IP packet ends: the IPv4 total length, or the IPv6
	 * payload length past the fixed header (Ethernet padding after). */
	__u32 ip_end;
	__u32 bytes;
};

/* The directional 5-tuple of a parsed frame, of either family. */
static __always_inline void ferry_flow_of(const struct ferry_pl_fields *f, struct ferry_flow *flow)
{
	__builtin_memset(flow, 0, sizeof(*flow));
	flow->saddr = f->saddr;
	flow->daddr = f->daddr;
	flow->sport = f->sport;
	flow->dport = f->dport;
	flow->proto = f->proto;
}

/* Whether `addr` lies in `net`/`plen`, in the 128-bit space: word by
 * word, each word's mask the part of the prefix inside it. */
static __always_inline int ferry_in6_prefix_match(const struct ferry_in6 *addr, const struct ferry_in6 *net, __u32 plen)
{
	if (plen > 128)
		return 0;
	for (int i = 0; i < 4; i++) {
		__u32 bits = plen > 32 ? 32 : plen, mask;

		mask = bits == 0 ? 0 : bits == 32 ? 0xffffffff : ~(0xffffffffu >> bits);
		if ((bpf_ntohl(addr->w[i]) & mask) != (bpf_ntohl(net->w[i]) & mask))
			return 0;
		plen -= bits;
	}
	return 1;
}

__attribute__((noinline)) int ferry_el_acl(__u32 config, struct ferry_pl_fields *f)
{
	struct ferry_pl_acl_meta *meta;
	struct ferry_pl_acl_key k = { .config = config };
	__u16 sport, dport;
	__u32 action, n;

	if (!f)
		return XDP_ABORTED;
	/* The firewall NF's decision table (crates/runtime/ferry-nf/src/firewall.rs):
	 * a frame with no IP header gets the non-IP action; a later fragment
	 * has no ports to match and passing it would let a denied flow
	 * through in pieces. */
	meta = bpf_map_lookup_elem(&ferry_pl_acl_meta, &config);
	if (!meta)
		return XDP_DROP;
	if (!f->is_ip4 && !f->is_ip6)
		return meta->non_ip_action == FERRY_ACL_ALLOW ? CONTINUE : XDP_DROP;
	if (f->later_fragment)
		return XDP_DROP;
	sport = bpf_ntohs(f->sport);
	dport = bpf_ntohs(f->dport);
	action = meta->default_action;
	n = meta->rules;
	for (__u32 i = 0; i < FERRY_PL_ACL_MAX_RULES; i++) {
		struct ferry_pl_acl_rule *r;

		if (i >= n)
			break;
		k.rule = i;
		r = bpf_map_lookup_elem(&ferry_pl_acl, &k);
		if (!r)
			continue;
		if (r->proto && r->proto != f->proto)
			continue;
		if (!ferry_in6_prefix_match(&f->saddr, &r->src, r->src_plen) ||
		    !ferry_in6_prefix_match(&f->daddr, &r->dst, r->dst_plen))
			continue;
		if (sport < r->sport_lo || sport > r->sport_hi || dport < r->dport_lo || dport > r->dport_hi)
			continue;
		action = r->action;
		break;
	}
	return action == FERRY_ACL_ALLOW ? CONTINUE : XDP_DROP;
}

__attribute__((noinline)) int ferry_el_counter(__u32 config, __u32 bytes)
{
	struct ferry_pl_count *c = bpf_map_lookup_elem(&ferry_pl_counters, &config);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
	return CONTINUE;
}

/* Swaps the frame's MACs and goes on: what l2fwd does to every frame
 * (the parser already refused one shorter than an Ethernet header). */
__attribute__((noinline)) int ferry_el_ether_swap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	ferry_swap_macs(eth);
	return CONTINUE;
}

__attribute__((noinline)) int ferry_el_flowmon(__u32 config, struct ferry_pl_fields *f)
{
	struct ferry_pl_flow_key k = { .config = config };
	struct ferry_pl_count *c;

	if (!f)
		return XDP_ABORTED;
	ferry_flow_of(f, &k.flow);
	c = bpf_map_lookup_elem(&ferry_pl_flows, &k);
	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		__sync_fetch_and_add(&c->bytes, f->bytes);
	} else {
		struct ferry_pl_count init = { .packets = 1, .bytes = f->bytes };

		/* Another CPU may have created it meanwhile: count there. */
		if (bpf_map_update_elem(&ferry_pl_flows, &k, &init, BPF_NOEXIST)) {
			c = bpf_map_lookup_elem(&ferry_pl_flows, &k);
			if (c) {
				__sync_fetch_and_add(&c->packets, 1);
				__sync_fetch_and_add(&c->bytes, f->bytes);
			}
		}
	}
	return CONTINUE;
}

/* Largest L3/L4 offsets the elements accept: two VLAN tags, then IPv4
 * with options or IPv6 with as many extension headers as the parser
 * walks (each at most 2048 bytes). */
#define MAX_L3_OFF 22
#define MAX_L4_OFF (MAX_L3_OFF + 40 + FERRY_IPV6_MAX_EXT * 2048)

/* The address fields `rw` names in the IPv4 header at `l3`; its checksum
 * and the L4 checksum `l4` follow. An address of the other version (not
 * IPv4-mapped) is not written. Nonzero when the header is out of
 * bounds. */
static __always_inline int ferry_rewrite_ip4(void *data, void *end, __u32 l3, const struct ferry_pl_rewrite *rw,
					     __sum16 *l4, struct ferry_pl_fields *f)
{
	struct iphdr *ip = data + l3;

	if ((void *)(ip + 1) > end)
		return -1;
	if ((rw->fields & FERRY_RW_SRC_IP) && ferry_in6_is_v4mapped((const __u8 *)&rw->src_ip)) {
		ferry_rewrite_addr(&ip->check, l4, &ip->saddr, rw->src_ip.w[3]);
		f->saddr = rw->src_ip;
	}
	if ((rw->fields & FERRY_RW_DST_IP) && ferry_in6_is_v4mapped((const __u8 *)&rw->dst_ip)) {
		ferry_rewrite_addr(&ip->check, l4, &ip->daddr, rw->dst_ip.w[3]);
		f->daddr = rw->dst_ip;
	}
	return 0;
}

/* The same in the IPv6 header at `l3`, which has no checksum; an
 * IPv4-mapped address is not written. */
static __always_inline int ferry_rewrite_ip6(void *data, void *end, __u32 l3, const struct ferry_pl_rewrite *rw,
					     __sum16 *l4, struct ferry_pl_fields *f)
{
	struct ferry_ipv6hdr *ip6 = data + l3;

	if ((void *)(ip6 + 1) > end)
		return -1;
	if ((rw->fields & FERRY_RW_SRC_IP) && !ferry_in6_is_v4mapped((const __u8 *)&rw->src_ip)) {
		ferry_rewrite_addr6(l4, (__be32 *)ip6->saddr, rw->src_ip.w);
		f->saddr = rw->src_ip;
	}
	if ((rw->fields & FERRY_RW_DST_IP) && !ferry_in6_is_v4mapped((const __u8 *)&rw->dst_ip)) {
		ferry_rewrite_addr6(l4, (__be32 *)ip6->daddr, rw->dst_ip.w);
		f->daddr = rw->dst_ip;
	}
	return 0;
}

/*
 * The one header rewrite of every fast path (the rewrite element, the
 * eLB's and eNAT's translations), IPv4 or IPv6: the fields `rw` names,
 * with the IPv4 header checksum and the L4 checksum (TCP, UDP, ICMPv6)
 * fixed incrementally, and `f` updated so later elements see the new
 * values. An address of the other version than the frame's is left
 * alone (a rewrite never changes the version). XDP_DROP when a header it
 * must change is out of bounds.
 */
__attribute__((noinline)) int ferry_apply_rewrite(struct xdp_md *ctx, const struct ferry_pl_rewrite *rw,
						  struct ferry_pl_fields *f)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__sum16 *l4 = NULL;
	__be16 *ports = NULL;
	__u32 l3, l4off;
	int bad;

	if (!rw || !f)
		return XDP_DROP;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	if (rw->fields & FERRY_RW_SRC_MAC)
		__builtin_memcpy(eth->h_source, rw->src_mac, ETH_ALEN);
	if (rw->fields & FERRY_RW_DST_MAC)
		__builtin_memcpy(eth->h_dest, rw->dst_mac, ETH_ALEN);
	if (!f->is_ip4 && !f->is_ip6)
		return CONTINUE;
	l3 = f->l3_off;
	l4off = f->l4_off;
	if (l3 > MAX_L3_OFF || l4off > MAX_L4_OFF)
		return XDP_DROP;
	if (f->has_ports && data + l4off + 4 <= end) {
		ports = data + l4off;
		if (f->proto == IPPROTO_TCP && data + l4off + sizeof(struct ferry_tcphdr) <= end)
			l4 = &((struct ferry_tcphdr *)(data + l4off))->check;
		else if (f->proto == IPPROTO_UDP && data + l4off + sizeof(struct udphdr) <= end &&
			 ((struct udphdr *)(data + l4off))->check)
			l4 = &((struct udphdr *)(data + l4off))->check;
	} else if (f->is_ip6 && f->proto == FERRY_NH_ICMPV6 && l4off &&
		   data + l4off + sizeof(struct ferry_icmphdr) <= end) {
		/* ICMPv6's checksum covers the pseudo-header, so the addresses
		 * (ICMP's does not). */
		l4 = &((struct ferry_icmphdr *)(data + l4off))->checksum;
	}
	if (f->is_ip4)
		bad = ferry_rewrite_ip4(data, end, l3, rw, l4, f);
	else
		bad = ferry_rewrite_ip6(data, end, l3, rw, l4, f);
	if (bad)
		return XDP_DROP;
	if (ports && (rw->fields & FERRY_RW_SPORT)) {
		ferry_rewrite_port(l4, &ports[0], rw->sport);
		f->sport = rw->sport;
	}
	if (ports && (rw->fields & FERRY_RW_DPORT)) {
		ferry_rewrite_port(l4, &ports[1], rw->dport);
		f->dport = rw->dport;
	}
	if (f->proto == IPPROTO_UDP)
		ferry_udp_csum_fixup(l4);
	return CONTINUE;
}

__attribute__((noinline)) int ferry_el_rewrite(struct xdp_md *ctx, __u32 config, struct ferry_pl_fields *f)
{
	struct ferry_pl_rewrite *rw = bpf_map_lookup_elem(&ferry_pl_rewrites, &config);

	if (!rw)
		return XDP_DROP;
	return ferry_apply_rewrite(ctx, rw, f);
}

__attribute__((noinline)) int ferry_el_policer(__u32 config)
{
	struct ferry_pl_policer *pol = bpf_map_lookup_elem(&ferry_pl_policers, &config);
	__u64 now = bpf_ktime_get_ns(), cap, tokens;
	int pass;

	if (!pol)
		return XDP_DROP;
	bpf_spin_lock(&pol->lock);
	cap = pol->burst * 1000;
	tokens = pol->tokens_milli + (now - pol->last_ns) * pol->rate_pps / 1000000;
	if (tokens > cap)
		tokens = cap;
	pol->last_ns = now;
	pass = tokens >= 1000;
	pol->tokens_milli = pass ? tokens - 1000 : tokens;
	bpf_spin_unlock(&pol->lock);
	return pass ? CONTINUE : XDP_DROP;
}

/* The forward element: an XDP action, or a code the entry function
 * carries out (REDIRECT with the device in *ifindex, SLOW_FORWARD). */
__attribute__((noinline)) int ferry_el_forward(struct xdp_md *ctx, __u32 config, __u32 *ifindex)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ferry_pl_forward *f = bpf_map_lookup_elem(&ferry_pl_forwards, &config);
	struct ethhdr *eth = data;

	if (!f || !ifindex)
		return XDP_DROP;
	switch (f->action) {
	case FERRY_FWD_TX:
		if ((void *)(eth + 1) > end)
			return XDP_DROP;
		ferry_swap_macs(eth);
		return XDP_TX;
	case FERRY_FWD_REDIRECT:
		*ifindex = f->ifindex;
		return REDIRECT;
	case FERRY_FWD_XSK:
		return SLOW_FORWARD;
	case FERRY_FWD_PASS:
		return XDP_PASS;
	}
	return XDP_DROP;
}

/* Fills the element view of a parsed frame. */
static __always_inline void ferry_pl_fields_of(struct xdp_md *ctx, struct ferry_pkt *p, struct ferry_pl_fields *f)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->saddr = p->saddr;
	f->daddr = p->daddr;
	f->sport = p->sport;
	f->dport = p->dport;
	f->proto = p->proto;
	f->is_ip4 = p->ip_version == 4;
	f->is_ip6 = p->ip_version == 6;
	f->fragment = p->fragment;
	f->later_fragment = p->later_fragment;
	f->has_ports = (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) && p->l4;
	if (p->ip4) {
		f->l3_off = (void *)p->ip4 - (void *)(long)ctx->data;
		f->ip_end = f->l3_off + bpf_ntohs(p->ip4->tot_len);
	} else if (p->ip6) {
		f->l3_off = (void *)p->ip6 - (void *)(long)ctx->data;
		f->ip_end = f->l3_off + sizeof(*p->ip6) + bpf_ntohs(p->ip6->payload_len);
	}
	if (p->l4)
		f->l4_off = p->l4 - (void *)(long)ctx->data;
	f->bytes = ctx->data_end - ctx->data;
}

/*
 * Parses the frame into the element view; 0 when it is malformed. A
 * global function, verified once: its caller goes on with scalars only,
 * whichever of the parse's many paths (tags, IPv6 extension headers) the
 * frame took, so the paths do not multiply the caller's states.
 */
__attribute__((noinline)) int ferry_pl_parse(struct xdp_md *ctx, struct ferry_pl_fields *f)
{
	struct ferry_cursor c;
	struct ferry_pkt p;

	if (!f)
		return 0;
	c.pos = (void *)(long)ctx->data;
	c.end = (void *)(long)ctx->data_end;
	ferry_parse_l4(&c, &p);
	if (!p.ok)
		return 0;
	ferry_pl_fields_of(ctx, &p, f);
	return 1;
}

#endif
