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
	__be32 saddr;
	__be32 daddr;
	__be16 dport;
	__u16 vlan;
	__u8 ip4;
	__u8 ports;
	__u8 tagged;
	__u8 _pad;
	__u32 hit;
	__u32 out;
};

static long ferry_cls_step(__u32 i, void *data)
{
	struct ferry_cls_walk *w = data;
	struct ferry_cls_rule *r = bpf_map_lookup_elem(&ferry_cls_rules, &i);

	if (!r)
		return 1;
	if ((r->fields & FERRY_CLS_SRC) && (!w->ip4 || (w->saddr & r->src_mask) != r->src))
		return 0;
	if ((r->fields & FERRY_CLS_DST) && (!w->ip4 || (w->daddr & r->dst_mask) != r->dst))
		return 0;
	if ((r->fields & FERRY_CLS_VLAN) && (!w->tagged || w->vlan != r->vlan))
		return 0;
	if ((r->fields & FERRY_CLS_DPORT) && (!w->ports || w->dport != r->dport))
		return 0;
	w->hit = i;
	w->out = r->out;
	return 1;
}

/* Fills `w` from a parsed frame (`p->ok` must hold); nonzero if the
 * frame's tag cannot be read. `w->hit` starts at FERRY_CLS_MAX_RULES: no
 * rule. */
static __always_inline int ferry_cls_walk_of(struct xdp_md *ctx, struct ferry_pkt *p, struct ferry_cls_walk *w)
{
	struct ferry_vlan *tag;

	__builtin_memset(w, 0, sizeof(*w));
	w->hit = FERRY_CLS_MAX_RULES;
	/* ferry_parse_l4 took the tag (at most one) right after the MACs. */
	if (p->eth->h_proto == bpf_htons(ETH_P_8021Q)) {
		tag = (void *)(p->eth + 1);
		if ((void *)(tag + 1) > (void *)(long)ctx->data_end)
			return 1;
		w->vlan = bpf_ntohs(tag->tci) & 0x0fff;
		w->tagged = 1;
	}
	w->ip4 = p->ip4 != NULL;
	w->saddr = p->saddr;
	w->daddr = p->daddr;
	w->ports = (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) && p->l4;
	w->dport = p->dport;
	return 0;
}

#endif
