/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Ferry's BPF parse header and element decisions, built for user space so
 * that a fuzzer can hold them to the Rust parsers (src/differential.rs).
 * The code under test is the headers in bpf/include, unchanged; this file
 * only supplies what the kernel would: maps as tables the Rust side
 * fills, and frames in memory laid out as XDP sees them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "ferry_elements.h"
#include "ferry_classify.h"
#include "ferry_probe.h"

/*
 * Every frame is copied to end where a PROT_NONE guard page begins, so a
 * read past its end faults as the verifier would have refused it. The
 * arena lies below 4 GiB (MAP_32BIT): struct xdp_md holds data pointers
 * in 32 bits, and ferry_pl_parse reads them back from there.
 */
#define FRAME_ROOM (64 * 1024)
#define GUARD 4096
static uint8_t *arena;

static uint8_t *frame_at_guard(const uint8_t *frame, uint32_t len)
{
	if (len > FRAME_ROOM)
		abort();
	if (!arena) {
		arena = mmap(NULL, FRAME_ROOM + GUARD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT,
			     -1, 0);
		if (arena == MAP_FAILED || mprotect(arena + FRAME_ROOM, GUARD, PROT_NONE))
			abort();
	}
	memcpy(arena + FRAME_ROOM - len, frame, len);
	return arena + FRAME_ROOM - len;
}

/* The maps the decisions read, as config 0's entries. */
static struct ferry_pl_acl_meta acl_meta;
static struct ferry_pl_acl_rule acl_rules[FERRY_PL_ACL_MAX_RULES];
static struct ferry_cls_rule cls_rules[FERRY_CLS_MAX_RULES];

void *bpf_map_lookup_elem(void *map, const void *key)
{
	if (map == &ferry_pl_acl_meta)
		return *(const __u32 *)key == 0 ? &acl_meta : NULL;
	if (map == &ferry_pl_acl) {
		const struct ferry_pl_acl_key *k = key;

		return k->config == 0 && k->rule < acl_meta.rules ? &acl_rules[k->rule] : NULL;
	}
	if (map == &ferry_cls_rules)
		return *(const __u32 *)key < FERRY_CLS_MAX_RULES ? &cls_rules[*(const __u32 *)key] : NULL;
	/* Counters and verdicts: nothing kept. */
	return NULL;
}

/* Helpers of elements the targets never run: reaching one is a bug. */
long bpf_map_update_elem(void *map, const void *key, const void *value, __u64 flags)
{
	abort();
}

__u64 bpf_ktime_get_ns(void)
{
	abort();
}

long bpf_redirect_map(void *map, __u64 key, __u64 flags)
{
	abort();
}

long bpf_spin_lock(struct bpf_spin_lock *lock)
{
	abort();
}

long bpf_spin_unlock(struct bpf_spin_lock *lock)
{
	abort();
}

long bpf_xdp_adjust_meta(struct xdp_md *ctx, int delta)
{
	abort();
}

/* ferry_parse_probe's answer for a frame. */
void ferry_user_parse(const uint8_t *frame, uint32_t len, struct ferry_parse_result *r)
{
	uint8_t *at = frame_at_guard(frame, len);
	struct ferry_cursor c = { at, at + len };

	ferry_parse_result_of(&c, r);
}

/* ferry_nsh_probe's answer for a frame. */
void ferry_user_nsh(const uint8_t *frame, uint32_t len, struct ferry_nsh_result *r)
{
	uint8_t *at = frame_at_guard(frame, len);
	struct ferry_cursor c = { at, at + len };

	ferry_nsh_result_of(&c, r);
}

static struct xdp_md xdp_of(const uint8_t *frame, uint32_t len)
{
	uint8_t *at = frame_at_guard(frame, len);
	struct xdp_md ctx = { .data = (__u32)(uintptr_t)at, .data_end = (__u32)(uintptr_t)(at + len) };

	return ctx;
}

/* The pipeline's element view (ferry_pl_parse) as a parse result: ok,
 * the IP fields, ports and offsets; 0 for a malformed frame. */
int ferry_user_pl_parse(const uint8_t *frame, uint32_t len, struct ferry_parse_result *r)
{
	struct xdp_md ctx = xdp_of(frame, len);
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(&ctx, &f)) {
		memset(r, 0, sizeof(*r));
		return 0;
	}
	ferry_pl_result_of(&f, r);
	return 1;
}

/* Loads config 0 of the ACL element. */
void ferry_user_acl_load(const struct ferry_pl_acl_meta *meta, const struct ferry_pl_acl_rule *rules)
{
	acl_meta = *meta;
	if (acl_meta.rules > FERRY_PL_ACL_MAX_RULES)
		abort();
	memcpy(acl_rules, rules, acl_meta.rules * sizeof(*rules));
}

/* What a pipeline of one ACL element does with a frame: XDP_DROP for a
 * malformed one (the entry's parse), else the element's, CONTINUE
 * being XDP_PASS. */
int ferry_user_acl(const uint8_t *frame, uint32_t len)
{
	struct xdp_md ctx = xdp_of(frame, len);
	struct ferry_pl_fields f;
	int v;

	if (!ferry_pl_parse(&ctx, &f))
		return XDP_DROP;
	v = ferry_el_acl(0, &f);
	return v == CONTINUE ? XDP_PASS : v;
}

void ferry_user_cls_load(const struct ferry_cls_rule *rules, uint32_t n)
{
	if (n > FERRY_CLS_MAX_RULES)
		abort();
	memset(cls_rules, 0, sizeof(cls_rules));
	memcpy(cls_rules, rules, n * sizeof(*rules));
}

/* ferry_classify's walk over the first `n` rules: the first rule that
 * matches in *hit (FERRY_CLS_MAX_RULES: none); 0 for a malformed frame. */
int ferry_user_classify(const uint8_t *frame, uint32_t len, uint32_t n, uint32_t *hit)
{
	uint8_t *at = frame_at_guard(frame, len);
	struct ferry_cursor c = { at, at + len };
	struct ferry_cls_walk w;
	struct ferry_pkt p;

	ferry_parse_l4(&c, &p);
	if (!p.ok)
		return 0;
	ferry_cls_walk_of(&p, &w);
	/* bpf_loop's contract: stop when the callback returns 1. */
	for (__u32 i = 0; i < n && i < FERRY_CLS_MAX_RULES; i++)
		if (ferry_cls_step(i, &w))
			break;
	*hit = w.hit;
	return 1;
}
