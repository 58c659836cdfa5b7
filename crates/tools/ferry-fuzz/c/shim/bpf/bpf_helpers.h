/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * libbpf's bpf_helpers.h for a user-space build of Ferry's BPF headers:
 * the same macros, and the helpers as plain functions that bpf_user.c
 * implements over its own tables. It sits first on the include path of
 * that build only; the BPF objects use libbpf's.
 */
#ifndef FERRY_FUZZ_BPF_HELPERS_H
#define FERRY_FUZZ_BPF_HELPERS_H

#include <linux/bpf.h>

/* A map definition becomes a plain global: its address names the map to
 * bpf_map_lookup_elem, as the loader's relocation does in the kernel. */
#define SEC(name)
#define __uint(name, val) int(*name)[val]
#define __type(name, val) __typeof__(val) *name
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

void *bpf_map_lookup_elem(void *map, const void *key);
long bpf_map_update_elem(void *map, const void *key, const void *value, __u64 flags);
__u64 bpf_ktime_get_ns(void);
long bpf_redirect_map(void *map, __u64 key, __u64 flags);
long bpf_spin_lock(struct bpf_spin_lock *lock);
long bpf_spin_unlock(struct bpf_spin_lock *lock);
long bpf_xdp_adjust_meta(struct xdp_md *ctx, int delta);

#endif
