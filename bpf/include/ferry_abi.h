/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * Layouts shared between Ferry's BPF programs and user space.
 *
 * This header is the single definition; crates/ferry-bpf/src/abi.rs mirrors
 * it with #[repr(C)] types and the same static size checks, so a change here
 * that is not mirrored fails the Rust build.
 */
#ifndef FERRY_ABI_H
#define FERRY_ABI_H

#include <linux/types.h>

/* Payload stamp written by every Ferry generator right after the L4 header. */
#define FERRY_STAMP_MAGIC 0x7946
struct ferry_stamp {
	__u16 magic;
	__u16 stream;
	__u32 seq;
	__u64 tx_ns;
};
_Static_assert(sizeof(struct ferry_stamp) == 16, "ferry_stamp layout");

/*
 * Verdict counters: one slot per XDP action (XDP_ABORTED..XDP_REDIRECT), plus
 * one for frames a program refused as malformed before choosing an action.
 * Kept in a per-CPU array with one entry, summed by user space.
 */
#define FERRY_VERDICT_SLOTS 6
#define FERRY_SLOT_MALFORMED 5
struct ferry_verdicts {
	__u64 packets[FERRY_VERDICT_SLOTS];
	__u64 bytes[FERRY_VERDICT_SLOTS];
};
_Static_assert(sizeof(struct ferry_verdicts) == 96, "ferry_verdicts layout");

/* Configuration of the live-frames generator (xdp_gen.bpf.c), map entry 0. */
struct ferry_gen_config {
	__u32 ifindex;      /* device the frames are redirected out of */
	__u16 stream;       /* stamp stream id of this generator thread */
	__u16 stamp_offset; /* 0: do not stamp */
	__u16 sport_offset; /* 0: do not vary the source port */
	__u16 sport_min;    /* host order */
	__u16 sport_count;  /* number of source ports to cycle through */
	__u16 clock_shift;  /* read the clock every 2^clock_shift frames */
	__u64 interval_ns;  /* pacing: at most one frame per interval (0: none) */
	__u64 limit;        /* frames to send in all (0: no limit) */
};
_Static_assert(sizeof(struct ferry_gen_config) == 32, "ferry_gen_config layout");

/* Per-CPU generator state (xdp_gen.bpf.c), map entry 0. */
struct ferry_gen_state {
	__u32 seq;       /* frames sent */
	__u32 sport_idx;
	__u64 now_ns;    /* last clock reading, reused between readings */
	__u64 next_ns;   /* pacing: earliest time of the next frame */
};
_Static_assert(sizeof(struct ferry_gen_state) == 24, "ferry_gen_state layout");

#endif
