/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * The classification rule table (ferry-wire's classify::Table in XDP): the
 * rules map and the first-match walk, for the programs that classify
 * frames (the tenant edge, the NSH classifier). Each object that includes
 * it gets its own rules map.
 */
#ifndef FERRY_CLASSIFY_H
#define FERRY_CLASSIFY_H

#include "ferry_common.h"
#include "ferry_parse.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_CLS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct ferry_cls_rule);
} ferry_cls_rules SEC(".maps");

/* What a rule is matched against (scalars only: a bpf_loop callback gets
 * no packet pointers), and which rule matched first. */
struct ferry_cls_walk {
	struct ferry_in6 saddr;
	struct ferry_in6 daddr;
	__be16 dport;
	__u16 vlan;
	__u16 inner_vlan;
	__u8 ip;
	__u8 ports;
	__u8 tags;
	__u8 _pad[3];
	__u32 hit;
	__u32 out;
};

/* `a` masked equals `net`, over the 128-bit space. */
static __always_inline int ferry_cls_in(const struct ferry_in6 *a, const struct ferry_in6 *net,
					const struct ferry_in6 *mask)
{
	for (int i = 0; i < 4; i++)
		if ((a->w[i] & mask->w[i]) != net->w[i])
			return 0;
	return 1;
}

static long ferry_cls_step(__u32 i, void *data)
{
	struct ferry_cls_walk *w = data;
	struct ferry_cls_rule *r = bpf_map_lookup_elem(&ferry_cls_rules, &i);

	if (!r)
		return 1;
	if ((r->fields & FERRY_CLS_SRC) && (!w->ip || !ferry_cls_in(&w->saddr, &r->src, &r->src_mask)))
		return 0;
	if ((r->fields & FERRY_CLS_DST) && (!w->ip || !ferry_cls_in(&w->daddr, &r->dst, &r->dst_mask)))
		return 0;
	if ((r->fields & FERRY_CLS_VLAN) && (!w->tags || w->vlan != r->vlan))
		return 0;
	if ((r->fields & FERRY_CLS_INNER_VLAN) && (w->tags < 2 || w->inner_vlan != r->inner_vlan))
		return 0;
	if ((r->fields & FERRY_CLS_DPORT) && (!w->ports || w->dport != r->dport))
		return 0;
	w->hit = i;
	w->out = r->out;
	return 1;
}

/* Fills `w` from a parsed frame (`p->ok` must hold). `w->hit` starts at
 * FERRY_CLS_MAX_RULES: no rule. */
static __always_inline void ferry_cls_walk_of(struct ferry_pkt *p, struct ferry_cls_walk *w)
{
	__builtin_memset(w, 0, sizeof(*w));
	w->hit = FERRY_CLS_MAX_RULES;
	w->tags = p->tags;
	w->vlan = p->outer_vid;
	w->inner_vlan = p->inner_vid;
	w->ip = p->ip_version != 0;
	w->saddr = p->saddr;
	w->daddr = p->daddr;
	w->ports = (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) && p->l4;
	w->dport = p->dport;
}

#endif
