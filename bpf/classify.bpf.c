// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Tenant classification at the edge: decides each frame's tenant entry
 * before any tenant memory is touched, and redirects the frame to that
 * entry's device (a veth pair ferryd made, whose other end the tenant's
 * AF_XDP sockets are bound to, over the tenant's own UMEM). What no rule
 * takes is dropped or handed to the edge's kernel stack, as configured;
 * a malformed frame is dropped and counted.
 *
 * The rules are ferry-wire's classify::Table (the router NF runs the same
 * table in user space); the parse is ferry_parse_l4, the same as
 * ferry-wire's flow parser. Per-rule hits are counted in ferry_cls_hits,
 * the default's in its last entry.
 */
#include "ferry_common.h"
#include "ferry_parse.h"
#include "ferry_classify.h"

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
	struct ferry_pkt p;
	__u32 zero = 0, rules, slot = FERRY_SLOT_MALFORMED;
	int action = XDP_DROP;

	ferry_parse_l4(&c, &p);
	cfg = bpf_map_lookup_elem(&ferry_cls_config, &zero);
	if (!p.ok || !cfg)
		goto out;
	ferry_cls_walk_of(&p, &w);
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
