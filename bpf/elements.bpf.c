// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Each pipeline element as a dedicated XDP program: parse, run the element
 * with config 1, drop. `ferry bench pipeline` compares these with the same
 * element run through the stage pipeline (P4SFC Fig. 6). The element's
 * verdict is ignored: every program ends in a counted drop.
 */
#include "ferry_elements.h"
#include "ferry_probe.h"

SEC("xdp")
int ferry_only_drop(struct xdp_md *ctx)
{
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

SEC("xdp")
int ferry_only_counter(struct xdp_md *ctx)
{
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	ferry_el_counter(1, f.bytes);
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

SEC("xdp")
int ferry_only_acl(struct xdp_md *ctx)
{
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	ferry_el_acl(1, &f);
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

SEC("xdp")
int ferry_only_flowmon(struct xdp_md *ctx)
{
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	ferry_el_flowmon(1, &f);
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

SEC("xdp")
int ferry_only_rewrite(struct xdp_md *ctx)
{
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	ferry_el_rewrite(ctx, 1, &f);
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

SEC("xdp")
int ferry_only_policer(struct xdp_md *ctx)
{
	struct ferry_pl_fields f;

	if (!ferry_pl_parse(ctx, &f))
		return ferry_exit(ctx, FERRY_SLOT_MALFORMED, XDP_DROP);
	ferry_el_policer(1);
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

/*
 * Not an element: runs the shared parser and writes its answer in front of
 * the frame (struct ferry_parse_result as XDP metadata), so that a test
 * run shows it. XDP_PASS; malformed frames are counted as such.
 */
SEC("xdp")
int ferry_parse_probe(struct xdp_md *ctx)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ferry_parse_result r;
	struct ferry_parse_result *m;

	ferry_parse_result_of(&c, &r);
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(r)))
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	*m = r;
	return ferry_exit(ctx, r.ok ? XDP_PASS : FERRY_SLOT_MALFORMED, XDP_PASS);
}

/* Writes ferry_nsh_result_of's answer in front of the frame (XDP
 * metadata). */
SEC("xdp")
int ferry_nsh_probe(struct xdp_md *ctx)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ferry_nsh_result r;
	struct ferry_nsh_result *m;

	ferry_nsh_result_of(&c, &r);
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(r)))
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	*m = r;
	return ferry_exit(ctx, XDP_PASS, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
