// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
/*
 * NSH service function forwarding (RFC 8300, RFC 7665 roles) in XDP, on
 * every device of a host that a service path crosses:
 *
 * - a CLASSIFY device: a frame the rule table (ferry_classify.h) matches
 *   gets NSH pushed (MD type 1, SI 255, TTL 63, next protocol Ethernet,
 *   the frame as it came as the inner frame); what no rule takes goes to
 *   the kernel;
 * - a FABRIC device: frames with NSH from other hosts, right after
 *   Ethernet (EtherType 0x894F) or in VXLAN-GPE over IPv4/UDP 4790 (made
 *   Ethernet + NSH first); anything else is the kernel's;
 * - a RETURN device (the SFC proxy's other half): what an NSH-unaware NF
 *   sends back gets the header restored, with the SPI, SI (the NF's hop
 *   done: SI - 1) and TTL ferryd configured for that attachment.
 *
 * Only a fabric device takes frames that already carry NSH; on the others
 * they are refused (a sender could pick its own path and index).
 *
 * Then the forwarding table, keyed by (SPI, SI), says: FORWARD to the next
 * SFF (TTL decremented, dropped at 0; outer MACs rewritten; over
 * Ethernet, or in VXLAN-GPE to the next SFF's IPv4 address), PROXY to a
 * local NF (the header stripped), or END the path (the header popped). SI
 * 0, TTL 0, a missing entry, a malformed header (ferry_parse_nsh), an
 * inner frame that is not Ethernet and an empty device slot are dropped
 * and counted. Frames are untagged: NSH behind a VLAN tag on a fabric
 * device is not NSH here (the kernel's). The headers cost MTU: 38 bytes
 * above the tenants' for NSH over Ethernet, 74 in VXLAN-GPE.
 */
#include "ferry_common.h"
#include "ferry_parse.h"
#include "ferry_classify.h"
#include "ferry_csum.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); /* ifindex */
	__type(value, struct ferry_nsh_port);
} ferry_nsh_ports SEC(".maps");

/* Entry 0: the number of rules; entries 1..: path i's SPI at i + 1. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FERRY_NSH_PATHS + 1);
	__type(key, __u32);
	__type(value, __u32);
} ferry_nsh_paths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FERRY_NSH_MAX_HOPS);
	__type(key, __u32); /* SPI << 8 | SI */
	__type(value, struct ferry_nsh_hop);
} ferry_nsh_hops SEC(".maps");

/* The SFFs (their IPv4 addresses) a fabric device takes VXLAN-GPE from. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __be32);
	__type(value, __u8);
} ferry_nsh_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} ferry_nsh_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FERRY_NSH_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} ferry_nsh_counters SEC(".maps");

#define FERRY_NSH_NEXT_ETHERNET 3
#define FERRY_NSH_DEFAULT_TTL 63
#define FERRY_NSH_PUSH (sizeof(struct ethhdr) + FERRY_NSH_MD1_LEN)

static __always_inline void ferry_nsh_count(__u32 counter)
{
	__u64 *n = bpf_map_lookup_elem(&ferry_nsh_counters, &counter);

	if (n)
		*n += 1;
}

/* The path a classified frame takes: its rule's SPI, SI 255; 0 if no rule
 * matched (or the frame is malformed: *malformed set). */
static __always_inline __u32 ferry_nsh_classify(struct xdp_md *ctx, int *malformed)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ferry_cls_walk w;
	struct ferry_pkt p;
	__u32 zero = 0, path, *rules, *spi;

	ferry_parse_l4(&c, &p);
	if (!p.ok) {
		*malformed = 1;
		return 0;
	}
	ferry_cls_walk_of(&p, &w);
	rules = bpf_map_lookup_elem(&ferry_nsh_paths, &zero);
	if (!rules)
		return 0;
	bpf_loop(*rules < FERRY_CLS_MAX_RULES ? *rules : FERRY_CLS_MAX_RULES, ferry_cls_step, &w, 0);
	if (w.hit >= FERRY_CLS_MAX_RULES || w.out >= FERRY_NSH_PATHS)
		return 0;
	path = w.out + 1;
	spi = bpf_map_lookup_elem(&ferry_nsh_paths, &path);
	return spi ? (*spi << 8) | 255 : 0;
}

/* Puts an outer Ethernet header and an MD type 1 NSH header in front of
 * the frame; the outer MACs are the forwarding step's to write. */
static __always_inline int ferry_nsh_push(struct xdp_md *ctx, __u32 spi_si, __u32 ttl)
{
	struct ethhdr *outer;
	struct ferry_nshhdr *h;
	void *data, *end;

	if (bpf_xdp_adjust_head(ctx, -(int)FERRY_NSH_PUSH))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	outer = data;
	h = (void *)(outer + 1);
	if ((void *)h + FERRY_NSH_MD1_LEN > end)
		return -1;
	__builtin_memset(outer, 0, sizeof(*outer));
	outer->h_proto = bpf_htons(FERRY_ETH_P_NSH);
	__builtin_memset(h, 0, FERRY_NSH_MD1_LEN);
	h->ver_o_ttl_len = bpf_htons(((ttl & 0x3f) << 6) | (FERRY_NSH_MD1_LEN / 4));
	h->md_type = 1;
	h->next_proto = FERRY_NSH_NEXT_ETHERNET;
	h->spi_si = bpf_htonl(spi_si);
	return 0;
}

/* Between hosts over IP: Ethernet, IPv4, UDP to port 4790, VXLAN-GPE
 * (next protocol NSH), then the NSH header. */
struct ferry_nsh_gpe_outer {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct ferry_vxlan_gpe_hdr gpe;
} __attribute__((packed));

#define FERRY_NSH_GPE_PUSH (sizeof(struct ferry_nsh_gpe_outer) - sizeof(struct ethhdr))
#define FERRY_VXLAN_GPE_FLAGS 0x0c /* I (VNI valid) and P (next protocol) */

/* A fabric frame in VXLAN-GPE carrying NSH, from a known SFF to this
 * host's address with the port's VNI, becomes Ethernet + NSH (the outer
 * MACs kept; bytes past the UDP datagram cut): 1. Anything else (another
 * address or sender, OAM, not NSH inside): 0, untouched (the kernel's).
 * -1 if the frame could not be changed. Only known SFFs: otherwise any
 * host that can reach this one over IP could choose a path and index. */
static __always_inline int ferry_nsh_from_gpe(struct xdp_md *ctx, struct ferry_nsh_port *port)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ferry_vxlan_gpe_hdr *gpe;
	struct udphdr *udp;
	struct ferry_pkt p;
	struct ethhdr *eth;
	__u8 macs[2 * ETH_ALEN];
	__u32 strip;
	long tail;

	ferry_parse_l4(&c, &p);
	/* Untagged IPv4, UDP to the VXLAN-GPE port. */
	if (!p.ok || !p.ip4 || p.fragment || p.proto != IPPROTO_UDP || !p.l4 ||
	    p.dport != bpf_htons(FERRY_VXLAN_GPE_PORT) || p.eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	if (!port->addr || p.daddr.w[3] != port->addr || !bpf_map_lookup_elem(&ferry_nsh_peers, &p.saddr.w[3]))
		return 0;
	udp = p.l4;
	c.pos = p.l4 + sizeof(struct udphdr);
	gpe = ferry_parse_vxlan_gpe(&c);
	/* I set (the VNI is valid), O clear (OAM is the control plane's). */
	if (!gpe || gpe->next_proto != FERRY_VXLAN_GPE_NEXT_NSH || !(gpe->flags & 0x08) || (gpe->flags & 0x01) ||
	    bpf_ntohl(gpe->vni_reserved) >> 8 != (port->vni & 0xffffff))
		return 0;
	strip = (void *)(gpe + 1) - (void *)(p.eth + 1);
	/* The datagram ends where UDP says (ferry_parse_l4 checked it fits). */
	tail = (long)((void *)udp + bpf_ntohs(udp->len)) - (long)ctx->data_end;
	__builtin_memcpy(macs, p.eth, sizeof(macs));
	if (tail < 0 && bpf_xdp_adjust_tail(ctx, tail))
		return -1;
	if (bpf_xdp_adjust_head(ctx, strip))
		return -1;
	eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return -1;
	__builtin_memcpy(eth, macs, sizeof(macs));
	eth->h_proto = bpf_htons(FERRY_ETH_P_NSH);
	return 1;
}

/* Ethernet + NSH (TTL already decremented) becomes Ethernet, IPv4, UDP,
 * VXLAN-GPE, NSH to the next SFF `hop` names; nonzero on failure. */
static __always_inline int ferry_nsh_to_gpe(struct xdp_md *ctx, struct ferry_nsh_hop *hop, __u32 spi_si)
{
	struct ferry_nsh_gpe_outer *o;
	struct iphdr ip = {};
	__u16 *word = (void *)&ip;
	__u32 len, sum = 0;

	if (bpf_xdp_adjust_head(ctx, -(int)FERRY_NSH_GPE_PUSH))
		return -1;
	o = (void *)(long)ctx->data;
	if ((void *)(o + 1) > (void *)(long)ctx->data_end)
		return -1;
	len = (long)ctx->data_end - (long)ctx->data;
	*(__u8 *)&ip = 0x45; /* version 4, 5 words */
	ip.tot_len = bpf_htons(len - sizeof(struct ethhdr));
	ip.frag_off = bpf_htons(0x4000); /* don't fragment */
	ip.ttl = 64;
	ip.protocol = IPPROTO_UDP;
	ip.saddr = hop->src_ip;
	ip.daddr = hop->dst_ip;
	for (int i = 0; i < (int)(sizeof(ip) / 2); i++)
		sum += word[i];
	ip.check = ~ferry_csum_fold(sum);
	__builtin_memcpy(o->eth.h_dest, hop->dst_mac, ETH_ALEN);
	__builtin_memcpy(o->eth.h_source, hop->src_mac, ETH_ALEN);
	o->eth.h_proto = bpf_htons(ETH_P_IP);
	__builtin_memcpy(&o->ip, &ip, sizeof(ip));
	/* A source port per hop (SPI, SI): entropy for ECMP between hosts. */
	o->udp.source = bpf_htons(49152 | ((spi_si ^ (spi_si >> 14)) & 0x3fff));
	o->udp.dest = bpf_htons(FERRY_VXLAN_GPE_PORT);
	o->udp.len = bpf_htons(len - sizeof(struct ethhdr) - sizeof(struct iphdr));
	o->udp.check = 0; /* optional over IPv4 */
	o->gpe.flags = FERRY_VXLAN_GPE_FLAGS;
	o->gpe.reserved[0] = 0;
	o->gpe.reserved[1] = 0;
	o->gpe.next_proto = FERRY_VXLAN_GPE_NEXT_NSH;
	o->gpe.vni_reserved = bpf_htonl((hop->vni & 0xffffff) << 8);
	return 0;
}

/* The forwarding step, on a frame that starts with Ethernet + NSH. */
static __always_inline int ferry_nsh_forward(struct xdp_md *ctx, __u32 *counter)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	struct ferry_nsh_hop *hop;
	struct ferry_nshhdr *h;
	struct ethhdr *outer;
	__u32 spi_si, ttl, len;
	__u16 word;

	outer = ferry_parse_eth(&c);
	h = outer ? ferry_parse_nsh(&c) : NULL;
	if (!h) {
		*counter = FERRY_NSH_MALFORMED;
		return XDP_DROP;
	}
	spi_si = bpf_ntohl(h->spi_si);
	word = bpf_ntohs(h->ver_o_ttl_len);
	ttl = (word >> 6) & 0x3f;
	len = (word & 0x3f) * 4;
	/* An index or a TTL used up, whatever the table says. */
	if ((spi_si & 0xff) == 0) {
		*counter = FERRY_NSH_SI_EXPIRED;
		return XDP_DROP;
	}
	if (ttl == 0) {
		*counter = FERRY_NSH_TTL_EXPIRED;
		return XDP_DROP;
	}
	hop = bpf_map_lookup_elem(&ferry_nsh_hops, &spi_si);
	if (!hop) {
		*counter = FERRY_NSH_NO_HOP;
		return XDP_DROP;
	}
	if (hop->action == FERRY_NSH_FORWARD) {
		/* Sent on, it must arrive with a TTL left. */
		if (ttl == 1) {
			*counter = FERRY_NSH_TTL_EXPIRED;
			return XDP_DROP;
		}
		h->ver_o_ttl_len = bpf_htons((word & ~(0x3f << 6)) | ((ttl - 1) << 6));
		__builtin_memcpy(outer->h_dest, hop->dst_mac, ETH_ALEN);
		__builtin_memcpy(outer->h_source, hop->src_mac, ETH_ALEN);
		if (hop->encap == FERRY_NSH_ENCAP_VXLAN_GPE && ferry_nsh_to_gpe(ctx, hop, spi_si)) {
			*counter = FERRY_NSH_MALFORMED;
			return XDP_ABORTED;
		}
		*counter = FERRY_NSH_FORWARDED;
		return bpf_redirect_map(&ferry_nsh_devs, hop->dev, XDP_DROP);
	}
	if (h->next_proto != FERRY_NSH_NEXT_ETHERNET) {
		*counter = FERRY_NSH_NOT_ETHERNET;
		return XDP_DROP;
	}
	*counter = hop->action == FERRY_NSH_PROXY ? FERRY_NSH_PROXIED : FERRY_NSH_ENDED;
	/* Strip or pop: the inner frame is what leaves. */
	if (bpf_xdp_adjust_head(ctx, sizeof(struct ethhdr) + len)) {
		*counter = FERRY_NSH_MALFORMED;
		return XDP_DROP;
	}
	return bpf_redirect_map(&ferry_nsh_devs, hop->dev, XDP_DROP);
}

SEC("xdp")
int ferry_nsh_sff(struct xdp_md *ctx)
{
	struct ferry_cursor c = { (void *)(long)ctx->data, (void *)(long)ctx->data_end };
	__u32 ifindex = ctx->ingress_ifindex, spi_si = 0, ttl = FERRY_NSH_DEFAULT_TTL;
	__u32 counter = FERRY_NSH_MALFORMED, slot;
	struct ferry_nsh_port *port;
	struct ethhdr *eth;
	int action = XDP_DROP, malformed = 0;

	port = bpf_map_lookup_elem(&ferry_nsh_ports, &ifindex);
	eth = ferry_parse_eth(&c);
	if (!port) {
		/* Not a device of a path: the kernel's. */
		action = XDP_PASS;
		slot = XDP_PASS;
		goto out;
	}
	if (!eth) {
		slot = FERRY_SLOT_MALFORMED;
		goto count;
	}
	/* Only the fabric may bring a header: a sender on a classifier or an
	 * NF on its way back could otherwise pick its own path and index. */
	if (eth->h_proto == bpf_htons(FERRY_ETH_P_NSH) && port->role != FERRY_NSH_ROLE_FABRIC) {
		counter = FERRY_NSH_REFUSED;
		slot = XDP_DROP;
		goto count;
	}
	if (eth->h_proto != bpf_htons(FERRY_ETH_P_NSH)) {
		if (port->role == FERRY_NSH_ROLE_CLASSIFY) {
			spi_si = ferry_nsh_classify(ctx, &malformed);
			counter = spi_si ? FERRY_NSH_CLASSIFIED : FERRY_NSH_UNCLASSIFIED;
		} else if (port->role == FERRY_NSH_ROLE_RETURN) {
			spi_si = port->spi_si;
			ttl = port->ttl;
			counter = FERRY_NSH_RETURNED;
		} else {
			/* A fabric frame: NSH in VXLAN-GPE, or the kernel's. */
			switch (ferry_nsh_from_gpe(ctx, port)) {
			case 1:
				goto forward;
			case 0:
				counter = FERRY_NSH_NOT_NSH;
				break;
			default:
				malformed = 1;
			}
		}
		if (malformed) {
			counter = FERRY_NSH_MALFORMED;
			slot = FERRY_SLOT_MALFORMED;
			goto count;
		}
		ferry_nsh_count(counter);
		if (!spi_si) {
			action = XDP_PASS;
			slot = XDP_PASS;
			goto out;
		}
		if (ferry_nsh_push(ctx, spi_si, ttl)) {
			counter = FERRY_NSH_MALFORMED;
			action = XDP_ABORTED;
			slot = XDP_ABORTED;
			goto count;
		}
	}
forward:
	action = ferry_nsh_forward(ctx, &counter);
	/* The redirect's fallback: the hop's device slot is empty. */
	if (action == XDP_DROP &&
	    (counter == FERRY_NSH_FORWARDED || counter == FERRY_NSH_PROXIED || counter == FERRY_NSH_ENDED))
		counter = FERRY_NSH_NO_DEV;
	slot = counter == FERRY_NSH_MALFORMED ? FERRY_SLOT_MALFORMED : ferry_slot_of(action);
count:
	ferry_nsh_count(counter);
out:
	return ferry_exit(ctx, slot, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
