// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Tenant classification at the edge: decides each frame's tenant entry
 * before any tenant memory is touched, and redirects the frame to that
 * entry's device (a veth pair ferryd made, whose other end the tenant's
 * AF_XDP sockets are bound to, over the tenant's own UMEM). What no rule
 * takes is dropped or handed to the edge's kernel stack, as configured;
 * a malformed frame is dropped and counted.
 *
 * The rules are ferry-nf's classify::Table (the router NF runs the same
 * table in user space); the parse is ferry_parse_l4, the same as
 * ferry-wire's flow parser. Per-rule hits are counted in ferry_cls_hits,
 * the default's in its last entry.
 */
#include "ferry_common.h"
#include "ferry_parse.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_CLS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct ferry_cls_rule);
} ferry_cls_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_cls_config);
} ferry_cls_config SEC(".maps");

/* Tenant entry i: the device frames for it are redirected to. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, FERRY_CLS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} ferry_cls_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FERRY_CLS_MAX_RULES + 1);
	__type(key, __u32);
	__type(value, __u64);
} ferry_cls_hits SEC(".maps");

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

static __always_inline void ferry_cls_count(__u32 index)
{
	__u64 *hits = bpf_map_lookup_elem(&ferry_cls_hits, &index);

	if (hits)
		*hits += 1;
}

SEC("xdp")
int ferry_classify(struct xdp_md *ctx)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ferry_cls_walk w = { .hit = FERRY_CLS_MAX_RULES };
	struct ferry_cls_config *cfg;
	struct ferry_vlan *tag;
	struct ferry_pkt p;
	__u32 zero = 0, rules, slot = FERRY_SLOT_MALFORMED;
	int action = XDP_DROP;

	ferry_parse_l4(&c, &p);
	cfg = bpf_map_lookup_elem(&ferry_cls_config, &zero);
	if (!p.ok || !cfg)
		goto out;
	/* ferry_parse_l4 took the tag (at most one) right after the MACs. */
	if (p.eth->h_proto == bpf_htons(ETH_P_8021Q)) {
		tag = (void *)(p.eth + 1);
		if ((void *)(tag + 1) > (void *)(long)ctx->data_end)
			goto out;
		w.vlan = bpf_ntohs(tag->tci) & 0x0fff;
		w.tagged = 1;
	}
	w.ip4 = p.ip4 != NULL;
	w.saddr = p.saddr;
	w.daddr = p.daddr;
	w.ports = (p.proto == IPPROTO_TCP || p.proto == IPPROTO_UDP) && p.l4;
	w.dport = p.dport;
	rules = cfg->rules < FERRY_CLS_MAX_RULES ? cfg->rules : FERRY_CLS_MAX_RULES;
	bpf_loop(rules, ferry_cls_step, &w, 0);
	action = cfg->default_action == XDP_PASS ? XDP_PASS : XDP_DROP;
	/* An entry without a device drops: never another tenant's. */
	if (w.hit < FERRY_CLS_MAX_RULES)
		action = bpf_redirect_map(&ferry_cls_devs, w.out, XDP_DROP);
	ferry_cls_count(w.hit);
	slot = ferry_slot_of(action);
out:
	return ferry_exit(ctx, slot, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
