/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Incremental Internet checksum updates (RFC 1624) for header rewrites:
 * HC' = ~(~HC + ~m + m'), for 16- and 32-bit fields in network order.
 */
#ifndef FERRY_CSUM_H
#define FERRY_CSUM_H

#include <linux/types.h>

static __always_inline __u16 ferry_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Updates checksum `*csum` for a 16-bit field going from `old` to `new`. */
static __always_inline void ferry_csum_replace2(__sum16 *csum, __be16 old, __be16 new)
{
	__u32 sum = (__u16) ~*csum;

	sum += (__u16)~old;
	sum += (__u16) new;
	*csum = ~ferry_csum_fold(sum);
}

/* The same for a 32-bit field (an IPv4 address). */
static __always_inline void ferry_csum_replace4(__sum16 *csum, __be32 old, __be32 new)
{
	ferry_csum_replace2(csum, (__be16)(old >> 16), (__be16)(new >> 16));
	ferry_csum_replace2(csum, (__be16)(old & 0xffff), (__be16)(new & 0xffff));
}

/*
 * An IPv4 address field and, with it, the IPv4 header checksum and the L4
 * checksum over the pseudo-header (`l4_check` NULL: none to update): for
 * the one header rewrite of every fast path (ferry_apply_rewrite).
 */
static __always_inline void ferry_rewrite_addr(__sum16 *ip_check, __sum16 *l4_check, __be32 *field, __be32 to)
{
	ferry_csum_replace4(ip_check, *field, to);
	if (l4_check)
		ferry_csum_replace4(l4_check, *field, to);
	*field = to;
}

/*
 * An IPv6 address field: the L4 checksum over the pseudo-header follows
 * it (IPv6 has no header checksum), a 32-bit word at a time.
 */
static __always_inline void ferry_rewrite_addr6(__sum16 *l4_check, __be32 *field, const __be32 *to)
{
	for (int i = 0; i < 4; i++) {
		if (l4_check)
			ferry_csum_replace4(l4_check, field[i], to[i]);
		field[i] = to[i];
	}
}

/* A TCP or UDP port field, and the L4 checksum with it. */
static __always_inline void ferry_rewrite_port(__sum16 *l4_check, __be16 *field, __be16 to)
{
	if (l4_check)
		ferry_csum_replace2(l4_check, *field, to);
	*field = to;
}

/* After rewrites of a UDP datagram: a checksum that came out 0 is sent as
 * 0xffff, since 0 means "no checksum" in UDP (RFC 768). */
static __always_inline void ferry_udp_csum_fixup(__sum16 *udp_check)
{
	if (udp_check && !*udp_check)
		*udp_check = 0xffff;
}

#endif
