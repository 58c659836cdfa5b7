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

#endif
