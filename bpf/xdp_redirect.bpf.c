// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Forwards every frame, unchanged, out of one other device: the kernel-only
 * l2fwd NF of the "kernel chain" baseline (`ferry bench chain`), the chain
 * a user could build today from network namespaces, veth pairs and XDP.
 *
 * The egress device is entry 0 of a DEVMAP, written by user space
 * (LoadedXdp::set_redirect_target) from inside the egress device's network
 * namespace: the kernel resolves the ifindex in the writer's namespace.
 * With no entry configured, the frame is aborted (counted in the aborted
 * slot and visible as an xdp_exception trace event). For veth, the peer of
 * the egress device must have XDP enabled (any program) or the kernel
 * drops the redirected frames.
 */
#include "ferry_common.h"
#include "ferry_parse.h"

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} ferry_redirect_devs SEC(".maps");

SEC("xdp")
int ferry_redirect(struct xdp_md *ctx)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	__u32 slot = FERRY_SLOT_MALFORMED;
	int action = XDP_DROP;

	/* An l2 forwarder needs at least the Ethernet header. */
	if (ferry_parse_eth(&c)) {
		/* The low bits of flags are the action when entry 0 is empty. */
		action = bpf_redirect_map(&ferry_redirect_devs, 0, XDP_ABORTED);
		slot = action;
	}
	return ferry_exit(ctx, slot, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
