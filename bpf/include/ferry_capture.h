/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Captures in the stage pipeline, as xdpdump mirrors frames: while a tap
 * is set (ferry_pl_tap), the frames entering or leaving one NF of one
 * chain are copied to a BPF ring buffer that ferryd drains into pcapng.
 * A copy that finds the ring full is counted lost; the frame goes on as
 * it would have. Off, a tap costs one call and two array lookups per
 * frame and a load and compare per element.
 */
#ifndef FERRY_CAPTURE_H
#define FERRY_CAPTURE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "ferry_abi.h"
#include "ferry_elements.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_TAP_SLOTS);
	__type(key, __u32);
	__type(value, struct ferry_pl_tap);
} ferry_pl_tap SEC(".maps");

/* One ring buffer per slot: each capture drains its own. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 2 << 20);
} ferry_pl_capture0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 2 << 20);
} ferry_pl_capture1 SEC(".maps");

/*
 * Reserves a record with room for `room` bytes, copies the frame's first
 * `take` (<= room) bytes into it and submits it; 0 if the ring was full.
 */
#define FERRY_CAP_COPY(ring, ctx, t, take, orig, room)                                                                 \
	({                                                                                                             \
		struct {                                                                                               \
			struct ferry_cap_hdr h;                                                                        \
			__u8 data[room];                                                                               \
		} *rec = bpf_ringbuf_reserve((ring), sizeof(*rec), 0);                                                 \
		__u64 n = (take);                                                                                      \
		int ok = 0;                                                                                            \
		/* Bounded in the 64-bit register the helper reads: clang may                                          \
		 * otherwise pass a copy whose bound the verifier never saw. */                                        \
		asm volatile("" : "+r"(n));                                                                            \
		n &= 0x3fff;                                                                                           \
		if (n > (room))                                                                                        \
			n = (room);                                                                                    \
		if (rec) {                                                                                             \
			rec->h.ts_ns = bpf_ktime_get_ns();                                                             \
			rec->h.session = (t)->session;                                                                 \
			rec->h.orig_len = (orig);                                                                      \
			rec->h.len = n;                                                                                \
			rec->h._pad = 0;                                                                               \
			if (n > 0 && bpf_xdp_load_bytes((ctx), 0, rec->data, n) == 0) {                                \
				bpf_ringbuf_submit(rec, 0);                                                            \
				ok = 1;                                                                                \
			} else {                                                                                       \
				bpf_ringbuf_discard(rec, 0);                                                           \
			}                                                                                              \
		}                                                                                                      \
		ok;                                                                                                    \
	})

/* Copies the frame for tap `t` into `ring`; 1 if it fit. */
static __always_inline int ferry_tap_copy(struct xdp_md *ctx, struct ferry_pl_tap *t, void *ring)
{
	__u32 orig = bpf_xdp_get_buff_len(ctx), take = orig;
	int ok;

	if (t->snaplen && take > t->snaplen)
		take = t->snaplen;
	if (take > FERRY_CAP_MAX)
		take = FERRY_CAP_MAX;
	/* Size classes: a ring buffer record's size must be a constant. */
	if (take <= 128)
		ok = FERRY_CAP_COPY(ring, ctx, t, take, orig, 128);
	else if (take <= 1536)
		ok = FERRY_CAP_COPY(ring, ctx, t, take, orig, 1536);
	else
		ok = FERRY_CAP_COPY(ring, ctx, t, take, orig, FERRY_CAP_MAX);
	__sync_fetch_and_add(ok ? &t->taken : &t->lost, 1);
	return ok;
}

/* Copies the frame if slot `slot`'s tap is set on NF `nf` of chain `chain`,
 * side `where` (a global function: verified once for both slots). */
__attribute__((noinline)) int ferry_tap_slot(struct xdp_md *ctx, __u32 slot, __u32 chain, __u32 nf, __u32 where)
{
	struct ferry_pl_tap *t = bpf_map_lookup_elem(&ferry_pl_tap, &slot);

	if (!t || t->where != where || t->chain != chain || t->nf != nf)
		return 0;
	if (slot == 0)
		return ferry_tap_copy(ctx, t, &ferry_pl_capture0);
	return ferry_tap_copy(ctx, t, &ferry_pl_capture1);
}

/* Copies the frame for every slot whose tap is set on side `where` of NF
 * `nf` of chain `chain`. */
__attribute__((noinline)) int ferry_tap_at(struct xdp_md *ctx, __u32 chain, __u32 nf, __u32 where)
{
	_Static_assert(FERRY_TAP_SLOTS == 2, "one line per slot");
	return ferry_tap_slot(ctx, 0, chain, nf, where) + ferry_tap_slot(ctx, 1, chain, nf, where);
}

/*
 * The taps after an element of NF `nf` (control entry `ctl`) gave
 * `verdict`: NF `nf`'s output when the verdict sends the frame on, to the
 * next NF (CONTINUE from the element that completes the NF) or out (a
 * redirect, a route, a TX); and the next NF's input, which is the same
 * frame. (An NF's input before the chain's first element is tapped at
 * the entry.) Called after every element, a tap set or not: a global
 * function whose result is ignored does not fork the caller's
 * verification, which a branch here would (the entry function is within
 * a thousand instructions of the verifier's one-million limit). Off, it
 * costs a call and a return per element.
 */
__attribute__((noinline)) int ferry_tap_after(struct xdp_md *ctx, __u32 chain, __u32 nf, struct ferry_pl_ctl *ctl,
					      __u32 tapping_verdict)
{
	/* (Five arguments at most: whether a tap is set rides with the
	 * verdict, which fits a signed byte.) */
	int verdict = (__s8)(tapping_verdict & 0xff), next, copied = 0;

	if (!ctl || !(tapping_verdict >> 8))
		return 0;
	next = verdict == CONTINUE && ctl->nf_complete;
	if (next || verdict == REDIRECT || verdict == ROUTE || verdict == XDP_TX)
		copied += ferry_tap_at(ctx, chain, nf, FERRY_TAP_OUT);
	if (next)
		copied += ferry_tap_at(ctx, chain, ctl->next_nf, FERRY_TAP_IN);
	return copied;
}

static __always_inline int ferry_tap_slot_on(__u32 slot, __u32 chain)
{
	struct ferry_pl_tap *t = bpf_map_lookup_elem(&ferry_pl_tap, &slot);

	return t && t->where != FERRY_TAP_OFF && t->chain == chain;
}

/* Whether a tap is set on chain `chain` (looked up once per frame). */
__attribute__((noinline)) int ferry_tap_on(__u32 chain)
{
	return ferry_tap_slot_on(0, chain) || ferry_tap_slot_on(1, chain);
}

#endif
