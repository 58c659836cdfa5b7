// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Kernel-side traffic generator. User space runs this program with
 * BPF_PROG_RUN and BPF_F_TEST_XDP_LIVE_FRAMES on a template frame; each run
 * stamps the frame (stream, sequence, transmit time), optionally cycles the
 * UDP source port to make several flows, and redirects it out of a device.
 * Generated UDP carries checksum 0 (legal for IPv4), so rewriting the stamp
 * and port needs no checksum update.
 *
 * Rate limiting and the frame limit are enforced here, per run: a run that
 * is early or past the limit drops the frame instead of sending it. So one
 * long BPF_PROG_RUN call sends a smooth paced stream (each call costs tens
 * of milliseconds to set up, which rules out pacing between calls).
 * State is per CPU: the caller pins its thread to one CPU.
 */
#include "ferry_common.h"
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_gen_config);
} ferry_gen_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_gen_state);
} ferry_gen_state SEC(".maps");

/* Frames a paced generator may send back to back after falling behind. */
#define PACING_BURST 32

/* Larger offsets are refused; the verifier needs a bound anyway. */
#define MAX_FIELD_OFFSET 1024

/* Pointer to `size` bytes at `off` in the frame, or NULL if they do not fit. */
static __always_inline void *field_at(void *data, void *end, __u32 off, __u32 size)
{
	void *p;

	/* Keep the bounded offset in one register for the verifier. */
	asm volatile("" : "+r"(off));
	if (off > MAX_FIELD_OFFSET)
		return NULL;
	p = data + off;
	if (p + size > end)
		return NULL;
	return p;
}

SEC("xdp")
int ferry_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct ferry_gen_config *cfg = bpf_map_lookup_elem(&ferry_gen_config, &zero);
	struct ferry_gen_state *st = bpf_map_lookup_elem(&ferry_gen_state, &zero);
	__u32 slot = XDP_REDIRECT;
	int action = XDP_ABORTED;

	if (!cfg || !st) {
		slot = XDP_ABORTED;
		goto out;
	}
	if (cfg->limit && st->seq >= cfg->limit) {
		slot = XDP_DROP;
		action = XDP_DROP;
		goto out;
	}
	if (cfg->interval_ns) {
		__u64 now = bpf_ktime_get_ns();
		/* After idling, catch up by at most a short burst. */
		__u64 floor = now - PACING_BURST * cfg->interval_ns;

		if (now < st->next_ns) {
			slot = XDP_DROP;
			action = XDP_DROP;
			goto out;
		}
		st->next_ns = (st->next_ns > floor ? st->next_ns : floor) + cfg->interval_ns;
		st->now_ns = now;
	}
	/* A live frame comes back to the generator's page pool as the device
	 * under test left it: the kernel resets a recycled frame's pointers,
	 * not its bytes. An NF that rewrites headers (a NAT, a router's TTL
	 * and MACs) would otherwise see its own output again. */
	if (cfg->headers_len == FERRY_GEN_HEADERS_TCP) {
		if (data + FERRY_GEN_HEADERS_TCP > end) {
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		__builtin_memcpy(data, cfg->headers, FERRY_GEN_HEADERS_TCP);
	} else if (cfg->headers_len == FERRY_GEN_HEADERS_UDP) {
		if (data + FERRY_GEN_HEADERS_UDP > end) {
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		__builtin_memcpy(data, cfg->headers, FERRY_GEN_HEADERS_UDP);
	} else if (cfg->headers_len == FERRY_GEN_HEADERS_IP) {
		if (data + FERRY_GEN_HEADERS_IP > end) {
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		__builtin_memcpy(data, cfg->headers, FERRY_GEN_HEADERS_IP);
	}
	if (cfg->stamp_offset) {
		struct ferry_stamp *s = field_at(data, end, cfg->stamp_offset, sizeof(*s));

		if (!s) {
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		s->magic = FERRY_STAMP_MAGIC;
		s->stream = cfg->stream + bpf_get_smp_processor_id();
		s->seq = st->seq;
		/* Reading the clock is the generator's largest per-frame cost
		 * in a VM; a caller that can live with frames of one short
		 * burst sharing a timestamp reads it less often. */
		if (!cfg->interval_ns && (st->seq & ((1u << (cfg->clock_shift & 15)) - 1)) == 0)
			st->now_ns = bpf_ktime_get_ns();
		s->tx_ns = st->now_ns;
	}
	if (cfg->sport_offset && cfg->sport_count) {
		__be16 *port = field_at(data, end, cfg->sport_offset, sizeof(*port));

		if (!port) {
			slot = FERRY_SLOT_MALFORMED;
			goto out;
		}
		*port = bpf_htons(cfg->sport_min + st->sport_idx);
		st->sport_idx = st->sport_idx + 1 >= cfg->sport_count ? 0 : st->sport_idx + 1;
	}
	st->seq += 1;
	action = bpf_redirect(cfg->ifindex, 0);
out:
	return ferry_exit(ctx, slot, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
