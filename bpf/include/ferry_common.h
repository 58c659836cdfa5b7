/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* Helpers shared by all Ferry XDP programs. */
#ifndef FERRY_COMMON_H
#define FERRY_COMMON_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "ferry_abi.h"

/*
 * Declares the per-CPU verdict counter map every program counts into.
 * Each program has its own copy (maps are per object file).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_verdicts);
} ferry_verdicts SEC(".maps");

/*
 * The one exit of every Ferry XDP program: counts the verdict (slot) and the
 * frame's bytes, then returns the XDP action. Programs compute `slot` and
 * `action` and `return ferry_exit(ctx, slot, action);` exactly once.
 */
static __always_inline int ferry_exit(struct xdp_md *ctx, __u32 slot, int action)
{
	__u32 zero = 0;
	struct ferry_verdicts *v = bpf_map_lookup_elem(&ferry_verdicts, &zero);

	/* Keep the checked slot in one register: otherwise clang may redo the
	 * zero-extension after the check and the verifier loses the bound. */
	asm volatile("" : "+r"(slot));
	if (v && slot < FERRY_VERDICT_SLOTS) {
		v->packets[slot] += 1;
		v->bytes[slot] += ctx->data_end - ctx->data;
	}
	return action;
}

/* The verdict slot ferry_exit counts an XDP action in. */
static __always_inline __u32 ferry_slot_of(int action)
{
	return action >= 0 && action <= XDP_REDIRECT ? (__u32)action : XDP_ABORTED;
}

/*
 * The one slow path of every fast path: the frame goes to the AF_XDP
 * socket of its receive queue in `xsks` (an XSKMAP), with a struct
 * ferry_slow_meta in front. Returns XDP_REDIRECT, or XDP_ABORTED when no
 * socket is bound on that queue: the caller counts the frame in
 * FERRY_SLOT_NO_SOCKET and chooses its fate. Changes the packet: call last.
 */
static __always_inline int ferry_to_slow_path(struct xdp_md *ctx, void *xsks, __u32 reason, __u32 chain, __u32 nf,
					      __u32 stage)
{
	struct ferry_slow_meta *m;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*m)) == 0) {
		m = (void *)(long)ctx->data_meta;
		if ((void *)(m + 1) <= (void *)(long)ctx->data) {
			m->reason = reason;
			m->chain = chain;
			m->nf = nf;
			m->stage = stage;
		}
	}
	return bpf_redirect_map(xsks, ctx->rx_queue_index, XDP_ABORTED);
}

#endif
