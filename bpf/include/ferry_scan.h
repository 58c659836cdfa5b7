/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * The payload-scan element: does the start of a TCP or UDP payload (IPv4
 * or IPv6) hold one of a few byte strings? Limits (ferry_abi.h): 16 patterns of up
 * to 32 bytes, the first 256 payload bytes. The window is copied out of
 * the frame once (bpf_xdp_load_bytes) into a per-CPU buffer, and bpf_loop
 * runs one callback per 8 start offsets, each trying every pattern there:
 * at most 256 x 16 x 32 byte compares. The decision table is the
 * payload-scan NF's (crates/runtime/ferry-nf/src/payload_scan.rs):
 *   not TCP/UDP over IP           -> on, unscanned
 *   a fragment                    -> drop (a pattern could straddle pieces)
 *   a header past the IP payload  -> drop (malformed)
 *   a pattern in the window       -> count, then drop or on (config)
 *   none                          -> on
 */
#ifndef FERRY_SCAN_H
#define FERRY_SCAN_H

#include "ferry_elements.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_SCAN_CONFIGS);
	__type(key, __u32);
	__type(value, struct ferry_pl_scan);
} ferry_pl_scans SEC(".maps");

struct ferry_scan_window {
	__u8 bytes[FERRY_SCAN_WINDOW];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_scan_window);
} ferry_pl_scan_window SEC(".maps");

struct ferry_scan_state {
	__u32 config;
	__u32 len;
	__u32 found;
};

/* Start offsets one callback tries: the two lookups and the call are paid
 * once per chunk, not once per offset. */
#define FERRY_SCAN_CHUNK 8

/* Does a pattern of config st->config start at an offset of chunk n? */
static long ferry_scan_chunk(__u64 n, void *data)
{
	struct ferry_scan_state *st = data;
	struct ferry_scan_window *w;
	struct ferry_pl_scan *s;
	__u32 zero = 0, config = st->config;
	__u8 b;

	s = bpf_map_lookup_elem(&ferry_pl_scans, &config);
	w = bpf_map_lookup_elem(&ferry_pl_scan_window, &zero);
	if (!s || !w)
		return 1;
	for (__u32 k = 0; k < FERRY_SCAN_CHUNK; k++) {
		__u64 i = n * FERRY_SCAN_CHUNK + k;

		if (i >= st->len)
			return 1;
		b = w->bytes[i & (FERRY_SCAN_WINDOW - 1)];
		if (!(s->first[b >> 3] & (1 << (b & 7))))
			continue;
		for (__u32 p = 0; p < FERRY_SCAN_MAX_PATTERNS; p++) {
			__u32 plen, j;

			if (p >= s->patterns)
				break;
			plen = s->len[p];
			if (plen == 0 || plen > FERRY_SCAN_MAX_LEN || i + plen > st->len)
				continue;
			for (j = 0; j < FERRY_SCAN_MAX_LEN; j++) {
				if (j >= plen)
					break;
				if (w->bytes[(i + j) & (FERRY_SCAN_WINDOW - 1)] != s->bytes[p][j])
					break;
			}
			if (j == plen) {
				st->found = 1;
				return 1;
			}
		}
	}
	return 0;
}

__attribute__((noinline)) int ferry_el_scan(struct xdp_md *ctx, __u32 config, struct ferry_pl_fields *f)
{
	struct ferry_scan_state st = { .config = config };
	struct ferry_scan_window *w;
	struct ferry_pl_scan *s;
	struct ferry_pl_count *c;
	__u32 zero = 0, payload, end, frame;
	__u8 doff;

	if (!f)
		return XDP_ABORTED;
	if ((!f->is_ip4 && !f->is_ip6) || (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP))
		return CONTINUE;
	if (f->fragment || f->later_fragment || !f->has_ports)
		return XDP_DROP;
	s = bpf_map_lookup_elem(&ferry_pl_scans, &config);
	w = bpf_map_lookup_elem(&ferry_pl_scan_window, &zero);
	if (!s || !w)
		return XDP_DROP;
	frame = ctx->data_end - ctx->data;
	end = f->ip_end;
	if (end > frame)
		end = frame;
	if (f->proto == IPPROTO_UDP) {
		payload = f->l4_off + 8;
	} else {
		if (bpf_xdp_load_bytes(ctx, f->l4_off + 12, &doff, 1) || (doff >> 4) < 5)
			return XDP_DROP;
		payload = f->l4_off + (doff >> 4) * 4;
	}
	if (payload > end)
		return XDP_DROP;
	st.len = end - payload;
	if (st.len > FERRY_SCAN_WINDOW)
		st.len = FERRY_SCAN_WINDOW;
	if (st.len == 0)
		return CONTINUE;
	/* 1..WINDOW in a form the verifier can bound (st.len already is). */
	st.len = ((st.len - 1) & (FERRY_SCAN_WINDOW - 1)) + 1;
	if (bpf_xdp_load_bytes(ctx, payload, w->bytes, st.len))
		return XDP_DROP;
	bpf_loop((st.len + FERRY_SCAN_CHUNK - 1) / FERRY_SCAN_CHUNK, ferry_scan_chunk, &st, 0);
	if (!st.found)
		return CONTINUE;
	c = bpf_map_lookup_elem(&ferry_pl_counters, &s->counter);
	if (c) {
		c->packets += 1;
		c->bytes += f->bytes;
	}
	return s->action == FERRY_SCAN_PASS ? CONTINUE : XDP_DROP;
}

#endif
