/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Forwarding an IPv4 frame the way the kernel's router would, from XDP:
 * the kernel's own FIB and neighbour tables answer (bpf_fib_lookup), so
 * routes and ARP stay the operator's usual `ip route` / `ip neigh`.
 */
#ifndef FERRY_FIB_H
#define FERRY_FIB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ferry_csum.h"

#ifndef AF_INET
#define AF_INET 2
#endif

/*
 * Looks up where `ip` goes; on success rewrites the MACs, decrements the
 * TTL (fixing the header checksum) and returns the egress ifindex. Returns
 * 0 when the kernel has to handle the frame: a local destination, no
 * route, no neighbour entry yet (the kernel then resolves it), or a TTL
 * about to expire (the kernel sends the ICMP error).
 */
static __always_inline __u32 ferry_fib_route(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *ip)
{
	struct bpf_fib_lookup fib = {};
	__be16 old_ttl_word;

	if (ip->ttl <= 1)
		return 0;
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return 0;
	/* TTL shares a 16-bit checksum word with the protocol byte. */
	old_ttl_word = *(__be16 *)&ip->ttl;
	ip->ttl--;
	ferry_csum_replace2(&ip->check, old_ttl_word, *(__be16 *)&ip->ttl);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return fib.ifindex;
}

#endif
