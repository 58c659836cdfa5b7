// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * Each pipeline element as a dedicated XDP program: parse, run the element
 * with config 1, drop. `ferry bench pipeline` compares these with the same
 * element run through the stage pipeline (P4SFC Fig. 6). The element's
 * verdict is ignored: every program ends in a counted drop.
 */
#include "ferry_elements.h"

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
	struct ferry_parse_result r = {};
	struct ferry_parse_result *m;
	struct ferry_pkt p;

	ferry_parse_l4(&c, &p);
	r.ok = p.ok;
	r.proto = p.proto;
	r.later_fragment = p.later_fragment;
	r.fragment = p.fragment;
	r.ip_version = p.ip_version;
	r.tags = p.tags;
	r.ethertype = p.ethertype;
	r.outer_vid = p.outer_vid;
	r.inner_vid = p.inner_vid;
	r.sport = p.sport;
	r.dport = p.dport;
	r.l3_off = p.eth ? sizeof(struct ethhdr) + p.tags * sizeof(struct ferry_vlan) : 0;
	r.l4_off = p.l4 ? (__u16)(p.l4 - (void *)(long)ctx->data) : 0;
	r.saddr = p.saddr;
	r.daddr = p.daddr;
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(r)))
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	*m = r;
	return ferry_exit(ctx, r.ok ? XDP_PASS : FERRY_SLOT_MALFORMED, XDP_PASS);
}

/* Writes ferry_parse_nsh's answer in front of the frame (XDP metadata):
 * an NSH header right after Ethernet, or in VXLAN-GPE over IPv4/UDP
 * port 4790 (found by ferry_parse_l4). */
SEC("xdp")
int ferry_nsh_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	struct ferry_cursor c = { data, (void *)(long)ctx->data_end };
	struct ferry_nsh_result r = {};
	struct ferry_vxlan_gpe_hdr *gpe;
	struct ferry_nsh_result *m;
	struct ferry_nshhdr *h = NULL;
	struct ferry_pkt p;

	ferry_parse_l4(&c, &p);
	if (p.ok && p.ethertype == bpf_htons(FERRY_ETH_P_NSH)) {
		r.encap = FERRY_NSH_IN_ETHERNET;
		c.pos = (void *)(p.eth + 1);
		h = ferry_parse_nsh(&c);
	} else if (p.ok && p.ip4 && p.proto == IPPROTO_UDP && p.l4 && p.dport == bpf_htons(FERRY_VXLAN_GPE_PORT)) {
		c.pos = p.l4 + sizeof(struct udphdr);
		gpe = ferry_parse_vxlan_gpe(&c);
		if (gpe && gpe->next_proto == FERRY_VXLAN_GPE_NEXT_NSH) {
			r.encap = FERRY_NSH_IN_VXLAN_GPE;
			h = ferry_parse_nsh(&c);
		}
	}
	if (h) {
		__u16 word = bpf_ntohs(h->ver_o_ttl_len);

		r.ok = 1;
		r.oam = (word >> 13) & 1;
		r.ttl = (word >> 6) & 0x3f;
		r.hdr_len = (word & 0x3f) * 4;
		r.md_type = h->md_type & 0x0f;
		r.next_proto = h->next_proto;
		r.spi = bpf_ntohl(h->spi_si) >> 8;
		r.si = bpf_ntohl(h->spi_si) & 0xff;
		r.nsh_off = (void *)h - data;
	}
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(r)))
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return ferry_exit(ctx, XDP_ABORTED, XDP_ABORTED);
	*m = r;
	return ferry_exit(ctx, XDP_PASS, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
