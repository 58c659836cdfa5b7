// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * The simplest XDP verdicts, each counted: used as baselines by
 * `ferry bench io` and as counting sinks on the far side of a veth.
 */
#include "ferry_common.h"
#include "ferry_parse.h"

SEC("xdp")
int ferry_drop(struct xdp_md *ctx)
{
	return ferry_exit(ctx, XDP_DROP, XDP_DROP);
}

SEC("xdp")
int ferry_pass(struct xdp_md *ctx)
{
	return ferry_exit(ctx, XDP_PASS, XDP_PASS);
}

/* Sends the frame back out of the device it came in on, MACs swapped. */
SEC("xdp")
int ferry_tx(struct xdp_md *ctx)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ethhdr *eth = ferry_parse_eth(&c);
	__u32 slot = XDP_TX;
	int action = XDP_TX;

	if (!eth) {
		slot = FERRY_SLOT_MALFORMED;
		action = XDP_DROP;
	} else {
		ferry_swap_macs(eth);
	}
	return ferry_exit(ctx, slot, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
