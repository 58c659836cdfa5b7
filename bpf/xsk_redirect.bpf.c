// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Steers every frame to the AF_XDP socket registered for its receive queue.
 * Frames arriving on a queue without a socket go to the kernel stack, so the
 * device stays usable by the kernel (the NIC is shared, not taken over).
 */
#include "ferry_common.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} ferry_xsks SEC(".maps");

SEC("xdp")
int ferry_xsk_redirect(struct xdp_md *ctx)
{
	/* The low bits of flags are the action when the queue has no socket. */
	int action = bpf_redirect_map(&ferry_xsks, ctx->rx_queue_index, XDP_PASS);

	return ferry_exit(ctx, action, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
