// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Steers every frame to the AF_XDP socket registered for its receive queue.
 * A frame on a queue without a socket is counted (FERRY_SLOT_NO_SOCKET) and
 * dropped, unless the port hands such frames to the kernel stack
 * (`unowned_queues: kernel`): a device may be shared with the kernel, but
 * never silently.
 */
#include "ferry_common.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} ferry_xsks SEC(".maps");

/* Entry 0: what a frame on a queue with no socket gets (FERRY_UNOWNED_*). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ferry_xsk_unowned SEC(".maps");

SEC("xdp")
int ferry_xsk_redirect(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u32 *unowned;
	/* The low bits of flags are the action when the queue has no socket:
	 * XDP_ABORTED, which a found socket never returns, marks that case. */
	int action = bpf_redirect_map(&ferry_xsks, ctx->rx_queue_index, XDP_ABORTED);

	if (action != XDP_ABORTED)
		return ferry_exit(ctx, action, action);
	unowned = bpf_map_lookup_elem(&ferry_xsk_unowned, &zero);
	action = unowned && *unowned == FERRY_UNOWNED_KERNEL ? XDP_PASS : XDP_DROP;
	return ferry_exit(ctx, FERRY_SLOT_NO_SOCKET, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
