// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * The run-time programmable stage pipeline: P4SFC's dynamic data plane
 * (§III-F) as one fixed XDP program. Nothing here changes to deploy or
 * remove a chain; only map entries do.
 *
 * - ferry_pl_chains (the stage-control table): ingress ifindex -> chain id,
 *   first NF id and first stage. Frames of an ifindex with no entry go to
 *   the kernel (XDP_PASS).
 * - ferry_pl_stage0..3 (element-control tables), keyed by (chain, NF) so
 *   chains and NFs never see each other's entries: which element runs at
 *   this stage, with which config, whether it completes the NF (then the
 *   NF id becomes next_nf) and the next stage. A next stage at or before
 *   the current one recirculates: the program tail-calls itself with its
 *   state in a per-CPU map, so a chain may have any number of elements.
 * - one config table per element kind, keyed by config id.
 *
 * A (chain, NF) with no entry at its stage is a slow-path case: the frame
 * goes to the AF_XDP socket of its queue with metadata saying why and
 * where (or to the kernel when no socket is registered). So does a frame
 * a hybrid NF's table misses: its server part decides.
 *
 * The hybrid NFs (eFW, eLB, eDPI, eNAT) are elements here like the
 * others, so one way of chaining, one slow path and one rewrite serve
 * every fast path.
 */
#include "ferry_hybrid.h"
#include "ferry_capture.h"
#include "ferry_scan.h"

/* The element-control tables, one per stage. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ferry_pl_key);
	__type(value, struct ferry_pl_ctl);
} ferry_pl_stage0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ferry_pl_key);
	__type(value, struct ferry_pl_ctl);
} ferry_pl_stage1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ferry_pl_key);
	__type(value, struct ferry_pl_ctl);
} ferry_pl_stage2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ferry_pl_key);
	__type(value, struct ferry_pl_ctl);
} ferry_pl_stage3 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct ferry_pl_entry);
} ferry_pl_chains SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} ferry_pl_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} ferry_pl_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_pl_state);
} ferry_pl_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ferry_pl_progs SEC(".maps");

static __always_inline struct ferry_pl_ctl *stage_ctl(__u32 stage, struct ferry_pl_key *key)
{
	switch (stage) {
	case 0:
		return bpf_map_lookup_elem(&ferry_pl_stage0, key);
	case 1:
		return bpf_map_lookup_elem(&ferry_pl_stage1, key);
	case 2:
		return bpf_map_lookup_elem(&ferry_pl_stage2, key);
	case 3:
		return bpf_map_lookup_elem(&ferry_pl_stage3, key);
	}
	return NULL;
}

static __always_inline int run_element(struct xdp_md *ctx, struct ferry_pl_ctl *ctl, struct ferry_pl_fields *f,
				       __u32 *ifindex)
{
	switch (ctl->element) {
	case FERRY_EL_ACL:
		return ferry_el_acl(ctl->config, f);
	case FERRY_EL_COUNTER:
		return ferry_el_counter(ctl->config, f->bytes);
	case FERRY_EL_FLOWMON:
		return ferry_el_flowmon(ctl->config, f);
	case FERRY_EL_REWRITE:
		return ferry_el_rewrite(ctx, ctl->config, f);
	case FERRY_EL_POLICER:
		return ferry_el_policer(ctl->config);
	case FERRY_EL_FORWARD:
		return ferry_el_forward(ctx, ctl->config, ifindex);
	case FERRY_EL_EFW:
		return ferry_el_efw(f);
	case FERRY_EL_ELB:
		return ferry_el_elb(ctx, f);
	case FERRY_EL_ELB_REPLY:
		return ferry_el_elb_reply(ctx, f);
	case FERRY_EL_EDPI:
		return ferry_el_edpi(f);
	case FERRY_EL_ENAT:
		return ferry_el_enat(ctx, f);
	case FERRY_EL_ENAT_REPLY:
		return ferry_el_enat_reply(ctx, f);
	case FERRY_EL_ROUTE:
		return ferry_el_route(ctx, f, ifindex);
	case FERRY_EL_SCAN:
		return ferry_el_scan(ctx, ctl->config, f);
	case FERRY_EL_ETHER_SWAP:
		return ferry_el_ether_swap(ctx);
	}
	return XDP_ABORTED;
}

/* Runs stages from st->stage; returns an XDP action or one of the codes
 * of enum verdict for the entry function to carry out. */
static __always_inline int run_stages(struct xdp_md *ctx, struct ferry_pl_fields *f, struct ferry_pl_state *st,
				      __u32 *ifindex)
{
	struct ferry_pl_key key = { .chain = st->chain, .nf = st->nf };

	for (__u32 s = 0; s < FERRY_PL_STAGES; s++) {
		struct ferry_pl_ctl *ctl;
		int r;

		if (s < st->stage)
			continue;
		st->stage = s;
		ctl = stage_ctl(s, &key);
		if (!ctl)
			return SLOW_NO_RULE;
		r = run_element(ctx, ctl, f, ifindex);
		ferry_tap_after(ctx, st->chain, key.nf, ctl, (r & 0xff) | st->tapping << 8);
		if (r != CONTINUE)
			return r;
		if (ctl->nf_complete)
			key.nf = st->nf = ctl->next_nf;
		if (ctl->next_stage == FERRY_PL_END)
			return XDP_PASS;
		if (ctl->next_stage <= s) {
			st->stage = ctl->next_stage;
			return RECIRCULATE;
		}
		st->stage = ctl->next_stage;
	}
	/* Past the last stage without an end: recirculate from stage 0. */
	st->stage = 0;
	return RECIRCULATE;
}

/* The slow-path metadata's reason for a slow-path verdict. What happens
 * while no socket is bound: a NAT's miss is dropped (untranslated, it must
 * not leave), anything else goes to the stack. */
static __always_inline __u32 slow_reason(int verdict)
{
	switch (verdict) {
	case SLOW_FORWARD:
		return FERRY_SLOW_FORWARDED;
	case SLOW_MISS_PASS:
	case SLOW_MISS_DROP:
		return FERRY_SLOW_MISS;
	}
	return FERRY_SLOW_NO_RULE;
}

SEC("xdp")
int ferry_pipeline(struct xdp_md *ctx)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex;
	struct ferry_pl_state *st = bpf_map_lookup_elem(&ferry_pl_state, &zero);
	struct ferry_pl_entry *entry;
	struct ferry_pl_fields f;
	__u32 ifindex_out = 0;
	int action;

	if (!st)
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	if (st->recirculating) {
		st->recirculating = 0;
	} else {
		entry = bpf_map_lookup_elem(&ferry_pl_chains, &ifindex);
		if (!entry)
			return ferry_exit(ctx, XDP_PASS, XDP_PASS);
		st->chain = entry->chain;
		st->nf = entry->nf;
		st->stage = entry->stage;
		st->passes = 0;
		st->tapping = ferry_tap_on(st->chain);
		if (st->tapping)
			ferry_tap_at(ctx, st->chain, st->nf, FERRY_TAP_IN);
	}
	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	action = run_stages(ctx, &f, st, &ifindex_out);
	switch (action) {
	case RECIRCULATE:
		if (++st->passes >= FERRY_PL_MAX_PASSES)
			return ferry_exit(ctx, XDP_ABORTED, XDP_DROP);
		st->recirculating = 1;
		bpf_tail_call(ctx, &ferry_pl_progs, 0);
		/* Only if the program array is empty: never leave the flag set. */
		st->recirculating = 0;
		return ferry_exit(ctx, XDP_ABORTED, XDP_DROP);
	case SLOW_NO_RULE:
	case SLOW_FORWARD:
	case SLOW_MISS_PASS:
	case SLOW_MISS_DROP:
		if (ferry_to_slow_path(ctx, &ferry_pl_xsks, slow_reason(action), st->chain, st->nf, st->stage) ==
		    XDP_REDIRECT)
			return ferry_exit(ctx, XDP_REDIRECT, XDP_REDIRECT);
		/* No socket on this queue: counted. Only a slow path that merely
		 * inspects fails open to the kernel; the rest never leaves. */
		return ferry_exit(ctx, FERRY_SLOT_NO_SOCKET, action == SLOW_MISS_PASS ? XDP_PASS : XDP_DROP);
	case ROUTE:
		action = bpf_redirect(ifindex_out, 0);
		break;
	case REDIRECT:
		action = bpf_redirect_map(&ferry_pl_devs, ifindex_out, XDP_DROP);
		break;
	}
	return ferry_exit(ctx, ferry_slot_of(action), action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
