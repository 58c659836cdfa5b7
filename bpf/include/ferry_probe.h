/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * The parsers' answers as the ABI's result structs: what the probe
 * programs (elements.bpf.c) hand a BPF_PROG_TEST_RUN test, and what the
 * same header, built for user space, hands the differential fuzz targets
 * (crates/tools/ferry-fuzz). One function per parser, so the kernel and
 * the fuzzer run the same code.
 */
#ifndef FERRY_PROBE_H
#define FERRY_PROBE_H

#include "ferry_parse.h"
#include "ferry_elements.h"

/* ferry_parse_l4's answer for the frame at c->pos (its first byte). */
static __always_inline void ferry_parse_result_of(struct ferry_cursor *c, struct ferry_parse_result *r)
{
	void *data = c->pos;
	struct ferry_pkt p;

	__builtin_memset(r, 0, sizeof(*r));
	ferry_parse_l4(c, &p);
	r->ok = p.ok;
	r->proto = p.proto;
	r->later_fragment = p.later_fragment;
	r->fragment = p.fragment;
	r->ip_version = p.ip_version;
	r->tags = p.tags;
	r->ethertype = p.ethertype;
	r->outer_vid = p.outer_vid;
	r->inner_vid = p.inner_vid;
	r->sport = p.sport;
	r->dport = p.dport;
	r->l3_off = p.eth ? sizeof(struct ethhdr) + p.tags * sizeof(struct ferry_vlan) : 0;
	r->l4_off = p.l4 ? (__u16)(p.l4 - data) : 0;
	r->saddr = p.saddr;
	r->daddr = p.daddr;
}

/* The pipeline parse's fields (ferry_pl_parse, which accepted the frame)
 * as a parse result, so that they compare field by field with
 * ferry_parse_l4's answer and ferry-wire's. */
static __always_inline void ferry_pl_result_of(const struct ferry_pl_fields *f, struct ferry_parse_result *r)
{
	__builtin_memset(r, 0, sizeof(*r));
	r->ok = 1;
	r->proto = f->proto;
	r->fragment = f->fragment;
	r->later_fragment = f->later_fragment;
	r->ip_version = f->is_ip4 ? 4 : f->is_ip6 ? 6 : 0;
	r->sport = f->sport;
	r->dport = f->dport;
	r->l3_off = f->l3_off;
	r->l4_off = f->l4_off;
	r->saddr = f->saddr;
	r->daddr = f->daddr;
}

/* ferry_parse_nsh's answer for the frame at c->pos: an NSH header right
 * after Ethernet, or in VXLAN-GPE over IPv4/UDP port 4790 (found by
 * ferry_parse_l4). */
static __always_inline void ferry_nsh_result_of(struct ferry_cursor *c, struct ferry_nsh_result *r)
{
	void *data = c->pos;
	struct ferry_vxlan_gpe_hdr *gpe;
	struct ferry_nshhdr *h = NULL;
	struct ferry_pkt p;
	__u16 word;

	__builtin_memset(r, 0, sizeof(*r));
	ferry_parse_l4(c, &p);
	if (p.ok && p.ethertype == bpf_htons(FERRY_ETH_P_NSH)) {
		r->encap = FERRY_NSH_IN_ETHERNET;
		c->pos = (void *)(p.eth + 1);
		h = ferry_parse_nsh(c);
	} else if (p.ok && p.ip4 && p.proto == IPPROTO_UDP && p.l4 && p.dport == bpf_htons(FERRY_VXLAN_GPE_PORT)) {
		c->pos = p.l4 + sizeof(struct udphdr);
		gpe = ferry_parse_vxlan_gpe(c);
		if (gpe && gpe->next_proto == FERRY_VXLAN_GPE_NEXT_NSH) {
			r->encap = FERRY_NSH_IN_VXLAN_GPE;
			h = ferry_parse_nsh(c);
		}
	}
	if (!h)
		return;
	word = bpf_ntohs(h->ver_o_ttl_len);
	r->ok = 1;
	r->oam = (word >> 13) & 1;
	r->ttl = (word >> 6) & 0x3f;
	r->hdr_len = (word & 0x3f) * 4;
	r->md_type = h->md_type & 0x0f;
	r->next_proto = h->next_proto;
	r->spi = bpf_ntohl(h->spi_si) >> 8;
	r->si = bpf_ntohl(h->spi_si) & 0xff;
	r->nsh_off = (void *)h - data;
}

#endif
