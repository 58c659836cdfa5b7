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

static __always_inline struct ferry_ipv6hdr *ferry_parse_ipv6(struct ferry_cursor *c)
{
	struct ferry_ipv6hdr *ip6 = c->pos;

	if ((void *)(ip6 + 1) > c->end)
		return NULL;
	c->pos = ip6 + 1;
	return ip6;
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
 * A frame parsed to L4. `ok` is 0 for a malformed frame (the caller counts
 * it): too short for a header it announces, stacked VLAN tags, an IPv4
 * header whose version is not 4 or whose total length does not cover its
 * header or exceeds the frame, an L4 header past the IPv4 total length, a
 * UDP length under 8 or past its IP payload (but for a first fragment).
 * Non-IP frames, IPv4 fragments after the first and unknown L4 protocols
 * parse fine with the fields they have (l4 == NULL, ports 0). ferry-wire's `flow::parse` is the same parser in Rust; a
 * differential test holds the two to the same answers.
 */
struct ferry_pkt {
	struct ethhdr *eth;
	struct iphdr *ip4;
	struct ferry_ipv6hdr *ip6;
	void *l4;
	__be16 ethertype;
	__u8 proto;
	__u8 ok;
	/* An IPv4 fragment (more fragments follow, or a later one). */
	__u8 fragment;
	/* An IPv4 fragment after the first: it has no L4 header. */
	__u8 later_fragment;
	/* IPv4 only, network order; 0 otherwise. */
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
};

static __always_inline void ferry_parse_l4(struct ferry_cursor *c, struct ferry_pkt *p)
{
	struct ferry_vlan *v;
	struct ferry_tcphdr *tcp;
	struct udphdr *udp;
	/* Where the IP payload ends: L4 headers must end before it. */
	void *l4_limit = c->end;

	__builtin_memset(p, 0, sizeof(*p));
	p->eth = ferry_parse_eth(c);
	if (!p->eth)
		return;
	p->ethertype = p->eth->h_proto;
	/* One 802.1Q tag is unwrapped. */
	if (p->ethertype == bpf_htons(ETH_P_8021Q)) {
		v = ferry_parse_vlan(c);
		if (!v)
			return;
		p->ethertype = v->proto;
	}
	/* Stacked tags (802.1ad, or a second 802.1Q) are malformed here: an
	 * NF that passes "not IP" would let the inner frame by unchecked. */
	if (p->ethertype == bpf_htons(ETH_P_8021Q) || p->ethertype == bpf_htons(ETH_P_8021AD))
		return;
	if (p->ethertype == bpf_htons(ETH_P_IP)) {
		p->ip4 = ferry_parse_ipv4(c);
		if (!p->ip4)
			return;
		l4_limit = (void *)p->ip4 + bpf_ntohs(p->ip4->tot_len);
		p->proto = p->ip4->protocol;
		p->saddr = p->ip4->saddr;
		p->daddr = p->ip4->daddr;
		p->fragment = (p->ip4->frag_off & bpf_htons(0x3fff)) != 0;
		if (p->ip4->frag_off & bpf_htons(0x1fff)) {
			p->later_fragment = 1;
			p->ok = 1;
			return;
		}
	} else if (p->ethertype == bpf_htons(ETH_P_IPV6)) {
		p->ip6 = ferry_parse_ipv6(c);
		if (!p->ip6)
			return;
		p->proto = p->ip6->nexthdr;
	} else {
		p->ok = 1;
		return;
	}
	if (p->proto == IPPROTO_TCP) {
		tcp = ferry_parse_tcp(c);
		if (!tcp || c->pos > l4_limit)
			return;
		p->l4 = tcp;
		p->sport = tcp->source;
		p->dport = tcp->dest;
	} else if (p->proto == IPPROTO_UDP) {
		udp = ferry_parse_udp(c);
		if (!udp || c->pos > l4_limit)
			return;
		/* A first fragment's UDP length covers the whole datagram, past
		 * this fragment: only its header must be here. */
		if (!p->fragment &&
		    (bpf_ntohs(udp->len) < sizeof(*udp) || (void *)udp + bpf_ntohs(udp->len) > l4_limit))
			return;
		p->l4 = udp;
		p->sport = udp->source;
		p->dport = udp->dest;
	} else if (p->proto == IPPROTO_ICMP) {
		p->l4 = ferry_parse_icmp(c);
		if (!p->l4 || c->pos > l4_limit)
			return;
	}
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
