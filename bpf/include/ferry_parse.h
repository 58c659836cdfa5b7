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
#include <bpf/bpf_endian.h>
#include "ferry_abi.h"

/* From <linux/in.h>, which drags in libc headers a BPF build cannot use. */
#ifndef IPPROTO_TCP
#define IPPROTO_ICMP 1
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#endif

/*
 * IPv6, TCP and ICMP headers declared here: <linux/ipv6.h> and <linux/tcp.h>
 * include libc headers too. Same layouts as the kernel's.
 */
struct ferry_ipv6hdr {
	__u8 vtc;
	__u8 flow[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct ferry_tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res; /* data offset in the high nibble */
	__u8 flags;
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

struct ferry_icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 rest;
};

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
	__u32 hlen, total;

	if ((void *)(ip + 1) > c->end)
		return NULL;
	hlen = ip->ihl * 4;
	if (ip->version != 4 || hlen < sizeof(*ip) || c->pos + hlen > c->end)
		return NULL;
	/* The total length covers the header and fits the frame (trailing
	 * link-layer padding is allowed), as ferry-wire's Ipv4Packet checks. */
	total = bpf_ntohs(ip->tot_len);
	if (total < hlen || c->pos + total > c->end)
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

/* One 802.1Q/802.1ad tag; returns the inner ethertype (network order). */
struct ferry_vlan {
	__be16 tci;
	__be16 proto;
};

static __always_inline struct ferry_vlan *ferry_parse_vlan(struct ferry_cursor *c)
{
	struct ferry_vlan *v = c->pos;

	if ((void *)(v + 1) > c->end)
		return NULL;
	c->pos = v + 1;
	return v;
}

/* The fixed IPv6 header: version 6, and the payload its length announces
 * within the frame (as ferry-wire's Ipv6Packet checks). */
static __always_inline struct ferry_ipv6hdr *ferry_parse_ipv6(struct ferry_cursor *c)
{
	struct ferry_ipv6hdr *ip6 = c->pos;

	if ((void *)(ip6 + 1) > c->end)
		return NULL;
	if (ip6->vtc >> 4 != 6 || (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len) > c->end)
		return NULL;
	c->pos = ip6 + 1;
	return ip6;
}

/* An IPv4-mapped address (::ffff:0:0/96). */
static __always_inline int ferry_in6_is_v4mapped(const __u8 *a)
{
	const __be32 *w = (const __be32 *)a;

	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff);
}

static __always_inline void ferry_in6_of_v4(struct ferry_in6 *to, __be32 v4)
{
	to->w[0] = 0;
	to->w[1] = 0;
	to->w[2] = bpf_htonl(0xffff);
	to->w[3] = v4;
}

static __always_inline struct ferry_tcphdr *ferry_parse_tcp(struct ferry_cursor *c)
{
	struct ferry_tcphdr *tcp = c->pos;
	__u32 hlen;

	if ((void *)(tcp + 1) > c->end)
		return NULL;
	hlen = (tcp->doff_res >> 4) * 4;
	if (hlen < sizeof(*tcp) || c->pos + hlen > c->end)
		return NULL;
	c->pos += hlen;
	return tcp;
}

static __always_inline struct ferry_icmphdr *ferry_parse_icmp(struct ferry_cursor *c)
{
	struct ferry_icmphdr *icmp = c->pos;

	if ((void *)(icmp + 1) > c->end)
		return NULL;
	c->pos = icmp + 1;
	return icmp;
}

/*
 * A frame parsed to L4, by the rules of ferry-wire's `flow::parse` (the
 * same parser in Rust; a differential test holds the two to the same
 * answers). `ok` is 0 for a malformed frame (the caller counts it): too
 * short for a header it announces; a third VLAN tag or an 802.1ad tag
 * inside; an IPv4 header whose version is not 4 or whose total length
 * does not cover its header or exceeds the frame; an IPv6 header whose
 * version is not 6, whose payload length exceeds the frame, that carries
 * an IPv4-mapped address, or whose extension headers are cut short, out
 * of order or more than four; an L4 header past the IP payload; a UDP
 * length under 8 or past the IP payload (but for a first fragment).
 * Non-IP frames, fragments after the first and unknown L4 protocols
 * parse fine with the fields they have (l4 == NULL, ports 0).
 */
struct ferry_pkt {
	struct ethhdr *eth;
	struct iphdr *ip4;
	struct ferry_ipv6hdr *ip6;
	void *l4;
	__be16 ethertype; /* after the tags */
	__u8 proto;	  /* IPv4 protocol, or IPv6 next header after the extensions */
	__u8 ok;
	/* 4 or 6 once an IP header parsed, else 0 (a scalar: the verifier
	 * refuses arithmetic on the two header pointers). */
	__u8 ip_version;
	/* A fragment, the first included. */
	__u8 fragment;
	/* A fragment after the first: it has no L4 header. */
	__u8 later_fragment;
	/* VLAN tags unwrapped (0-2) and their ids, host order. */
	__u8 tags;
	__u16 outer_vid;
	__u16 inner_vid;
	/* Addresses in the 128-bit space (IPv4 mapped); 0 for non-IP. */
	struct ferry_in6 saddr;
	struct ferry_in6 daddr;
	__be16 sport;
	__be16 dport;
};

/* IPv6 next-header values the walk knows (RFC 8200 4). */
#define FERRY_NH_HOP_BY_HOP 0
#define FERRY_NH_ROUTING 43
#define FERRY_NH_FRAGMENT 44
#define FERRY_NH_ICMPV6 58
#define FERRY_NH_DEST_OPTS 60
/* The most extension headers walked (ferry-wire's MAX_EXTENSION_HEADERS). */
#define FERRY_IPV6_MAX_EXT 4

/*
 * Walks the extension headers after the fixed IPv6 header, up to `limit`
 * (the end of the IPv6 payload), as ferry-wire's ipv6::walk_extensions
 * does: hop-by-hop (first only), routing, fragment and destination
 * options, at most FERRY_IPV6_MAX_EXT of them; stops at any other header
 * and after a non-first fragment header. Sets proto and the fragment
 * flags; nonzero for a malformed chain.
 */
static __always_inline int ferry_parse_ipv6_ext(struct ferry_cursor *c, void *limit, struct ferry_pkt *p)
{
	__u8 nh = p->ip6->nexthdr;

	for (int i = 0; i <= FERRY_IPV6_MAX_EXT; i++) {
		__u8 *h = c->pos;
		__u32 len;

		if (nh == FERRY_NH_HOP_BY_HOP && i > 0)
			return -1;
		if (nh == FERRY_NH_HOP_BY_HOP || nh == FERRY_NH_ROUTING || nh == FERRY_NH_DEST_OPTS) {
			/* Hdr Ext Len: 8-octet units after the first 8. */
			if ((void *)(h + 2) > limit || (void *)(h + 2) > c->end)
				return -1;
			len = 8 + (__u32)h[1] * 8;
		} else if (nh == FERRY_NH_FRAGMENT) {
			len = 8;
		} else {
			p->proto = nh;
			return 0;
		}
		if (i == FERRY_IPV6_MAX_EXT)
			return -1;
		if ((void *)h + len > limit || (void *)(h + 8) > c->end)
			return -1;
		if (nh == FERRY_NH_FRAGMENT) {
			p->fragment = 1;
			/* Fragment Offset: the high 13 bits of bytes 2-3. */
			p->later_fragment = ((h[2] << 8 | h[3]) >> 3) != 0;
		}
		nh = h[0];
		c->pos = (void *)h + len;
		if (p->later_fragment) {
			p->proto = nh;
			return 0;
		}
	}
	return -1;
}

/* Up to two tags: an outer 802.1ad or 802.1Q tag, then an inner 802.1Q
 * one (ferry-wire's EthernetFrame). Nonzero when a tag is cut short. */
static __always_inline int ferry_parse_tags(struct ferry_cursor *c, struct ferry_pkt *p)
{
	struct ferry_vlan *v;

	if (p->ethertype != bpf_htons(ETH_P_8021AD) && p->ethertype != bpf_htons(ETH_P_8021Q))
		return 0;
	v = ferry_parse_vlan(c);
	if (!v)
		return -1;
	p->tags = 1;
	p->outer_vid = bpf_ntohs(v->tci) & 0x0fff;
	p->ethertype = v->proto;
	if (p->ethertype != bpf_htons(ETH_P_8021Q))
		return 0;
	v = ferry_parse_vlan(c);
	if (!v)
		return -1;
	p->tags = 2;
	p->inner_vid = bpf_ntohs(v->tci) & 0x0fff;
	p->ethertype = v->proto;
	return 0;
}

/* The IPv4 header; sets *l4_limit to the end of its payload. Nonzero for
 * a malformed header. */
static __always_inline int ferry_parse_l3_ipv4(struct ferry_cursor *c, struct ferry_pkt *p, void **l4_limit)
{
	p->ip4 = ferry_parse_ipv4(c);
	if (!p->ip4)
		return -1;
	p->ip_version = 4;
	*l4_limit = (void *)p->ip4 + bpf_ntohs(p->ip4->tot_len);
	p->proto = p->ip4->protocol;
	ferry_in6_of_v4(&p->saddr, p->ip4->saddr);
	ferry_in6_of_v4(&p->daddr, p->ip4->daddr);
	p->fragment = (p->ip4->frag_off & bpf_htons(0x3fff)) != 0;
	p->later_fragment = (p->ip4->frag_off & bpf_htons(0x1fff)) != 0;
	return 0;
}

/* The IPv6 header and its extension headers; sets *l4_limit to the end of
 * its payload. Nonzero when malformed. */
static __always_inline int ferry_parse_l3_ipv6(struct ferry_cursor *c, struct ferry_pkt *p, void **l4_limit)
{
	p->ip6 = ferry_parse_ipv6(c);
	if (!p->ip6)
		return -1;
	if (ferry_in6_is_v4mapped(p->ip6->saddr) || ferry_in6_is_v4mapped(p->ip6->daddr))
		return -1;
	p->ip_version = 6;
	*l4_limit = (void *)(p->ip6 + 1) + bpf_ntohs(p->ip6->payload_len);
	__builtin_memcpy(&p->saddr, p->ip6->saddr, sizeof(p->saddr));
	__builtin_memcpy(&p->daddr, p->ip6->daddr, sizeof(p->daddr));
	return ferry_parse_ipv6_ext(c, *l4_limit, p);
}

/* The L4 header, which must end within `l4_limit`. Nonzero when malformed. */
static __always_inline int ferry_parse_upper(struct ferry_cursor *c, struct ferry_pkt *p, void *l4_limit)
{
	struct ferry_tcphdr *tcp;
	struct udphdr *udp;

	if (p->proto == IPPROTO_TCP) {
		tcp = ferry_parse_tcp(c);
		if (!tcp || c->pos > l4_limit)
			return -1;
		p->l4 = tcp;
		p->sport = tcp->source;
		p->dport = tcp->dest;
	} else if (p->proto == IPPROTO_UDP) {
		udp = ferry_parse_udp(c);
		if (!udp || c->pos > l4_limit)
			return -1;
		/* A first fragment's UDP length covers the whole datagram, past
		 * this fragment: only its header must be here. */
		if (!p->fragment &&
		    (bpf_ntohs(udp->len) < sizeof(*udp) || (void *)udp + bpf_ntohs(udp->len) > l4_limit))
			return -1;
		p->l4 = udp;
		p->sport = udp->source;
		p->dport = udp->dest;
	} else if ((p->proto == IPPROTO_ICMP && p->ip4) || (p->proto == FERRY_NH_ICMPV6 && p->ip6)) {
		/* ICMP and ICMPv6 share the 8-byte header layout. */
		p->l4 = ferry_parse_icmp(c);
		if (!p->l4 || c->pos > l4_limit)
			return -1;
	}
	return 0;
}

static __always_inline void ferry_parse_l4(struct ferry_cursor *c, struct ferry_pkt *p)
{
	/* Where the IP payload ends: L4 headers must end before it. */
	void *l4_limit = c->end;
	int bad;

	__builtin_memset(p, 0, sizeof(*p));
	p->eth = ferry_parse_eth(c);
	if (!p->eth)
		return;
	p->ethertype = p->eth->h_proto;
	if (ferry_parse_tags(c, p))
		return;
	/* A third tag, or an 802.1ad one inside, is malformed: an NF that
	 * passes "not IP" would let the inner frame by unchecked. */
	if (p->ethertype == bpf_htons(ETH_P_8021Q) || p->ethertype == bpf_htons(ETH_P_8021AD))
		return;
	if (p->ethertype == bpf_htons(ETH_P_IP))
		bad = ferry_parse_l3_ipv4(c, p, &l4_limit);
	else if (p->ethertype == bpf_htons(ETH_P_IPV6))
		bad = ferry_parse_l3_ipv6(c, p, &l4_limit);
	else
		bad = 0;
	if (bad)
		return;
	if (p->ip_version && !p->later_fragment && ferry_parse_upper(c, p, l4_limit))
		return;
	p->ok = 1;
}

/*
 * NSH (RFC 8300) and its UDP encapsulation between hosts, VXLAN-GPE (UDP
 * port 4790). ferry-wire's nsh.rs and vxlan_gpe.rs are the same parsers
 * in Rust; a differential test holds the two to the same answers.
 */
#define FERRY_ETH_P_NSH 0x894F
#define FERRY_VXLAN_GPE_PORT 4790
#define FERRY_VXLAN_GPE_NEXT_NSH 4
#define FERRY_NSH_MIN_LEN 8
#define FERRY_NSH_MD1_LEN 24
/* The most MD type 2 TLVs a header holds: (63 words - 2) of 4 bytes. */
#define FERRY_NSH_MAX_TLVS 61

struct ferry_nshhdr {
	__be16 ver_o_ttl_len; /* version 2 bits, O, U, TTL 6, length 6 (words) */
	__u8 md_type;	      /* low nibble */
	__u8 next_proto;
	__be32 spi_si; /* SPI 24 bits, SI 8 */
};

struct ferry_vxlan_gpe_hdr {
	__u8 flags; /* R R Ver(2) I P B O */
	__u8 reserved[2];
	__u8 next_proto;
	__be32 vni_reserved;
};

/* A VXLAN-GPE header of version 0 with the P bit set (else its next
 * protocol means nothing). */
static __always_inline struct ferry_vxlan_gpe_hdr *ferry_parse_vxlan_gpe(struct ferry_cursor *c)
{
	struct ferry_vxlan_gpe_hdr *h = c->pos;

	if ((void *)(h + 1) > c->end)
		return NULL;
	if ((h->flags >> 4) & 0x3 || !(h->flags & 0x04))
		return NULL;
	c->pos = h + 1;
	return h;
}

/*
 * An NSH header, the whole of it: version 0; a length (in 4-byte words)
 * of at least 2, all of it in the frame; MD type 1 with 24 bytes, or MD
 * type 2 whose context headers (TLVs, each 4 bytes plus its length padded
 * to 4) fill the context exactly; a next protocol of 1-5. NULL (the
 * caller counts and drops the frame) for anything else.
 */
static __always_inline struct ferry_nshhdr *ferry_parse_nsh(struct ferry_cursor *c)
{
	struct ferry_nshhdr *h = c->pos;
	__u32 len, off;
	__u16 word;

	if ((void *)(h + 1) > c->end)
		return NULL;
	word = bpf_ntohs(h->ver_o_ttl_len);
	if (word >> 14)
		return NULL;
	len = (word & 0x3f) * 4;
	if (len < FERRY_NSH_MIN_LEN || (void *)h + len > c->end)
		return NULL;
	switch (h->md_type & 0x0f) {
	case 1:
		if (len != FERRY_NSH_MD1_LEN)
			return NULL;
		break;
	case 2:
		off = FERRY_NSH_MIN_LEN;
		for (int i = 0; i < FERRY_NSH_MAX_TLVS && off < len; i++) {
			__u8 *tlv;

			if (off + 4 > len)
				return NULL;
			tlv = (void *)h + off;
			if ((void *)(tlv + 4) > c->end)
				return NULL;
			off += 4 + ((__u32)(tlv[3] & 0x7f) + 3) / 4 * 4;
		}
		if (off != len)
			return NULL;
		break;
	default:
		return NULL;
	}
	if (h->next_proto < 1 || h->next_proto > 5)
		return NULL;
	c->pos = (void *)h + len;
	return h;
}

static __always_inline void ferry_swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

#endif
