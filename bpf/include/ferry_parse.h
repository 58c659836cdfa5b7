/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Bounds-checked header cursors. Each helper checks the bounds of exactly one
 * header, advances the cursor past it and returns a pointer to it, or NULL
 * when the frame is too short (the caller counts it as malformed).
 */
#ifndef FERRY_PARSE_H
#define FERRY_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>

struct ferry_cursor {
	void *pos;
	void *end;
};

static __always_inline struct ethhdr *ferry_parse_eth(struct ferry_cursor *c)
{
	struct ethhdr *eth = c->pos;

	if ((void *)(eth + 1) > c->end)
		return NULL;
	c->pos = eth + 1;
	return eth;
}

static __always_inline struct iphdr *ferry_parse_ipv4(struct ferry_cursor *c)
{
	struct iphdr *ip = c->pos;
	__u32 hlen;

	if ((void *)(ip + 1) > c->end)
		return NULL;
	hlen = ip->ihl * 4;
	if (hlen < sizeof(*ip) || c->pos + hlen > c->end)
		return NULL;
	c->pos += hlen;
	return ip;
}

static __always_inline struct udphdr *ferry_parse_udp(struct ferry_cursor *c)
{
	struct udphdr *udp = c->pos;

	if ((void *)(udp + 1) > c->end)
		return NULL;
	c->pos = udp + 1;
	return udp;
}

static __always_inline void ferry_swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

#endif
