/*
 * ferry.h - write Ferry network functions in C.
 *
 * libferry is a thin layer over the Rust NF SDK (crate ferry-sdk): every
 * function below is one SDK operation. ferryd starts the NF as an
 * unprivileged process with FERRY_SOCKET and FERRY_NF set; the NF connects,
 * opens one ferry_thread per NF thread (each on its own OS thread) and loops
 * over ferry_recv, giving every packet exactly one verdict: ferry_send,
 * ferry_reply or ferry_drop.
 *
 *     ferry_nf *nf = ferry_connect(NULL, NULL, NULL, 0);
 *     ferry_thread *th = ferry_thread_open(nf, 0);   // on the worker thread
 *     ferry_pkt pkts[32];
 *     int n;
 *     while ((n = ferry_recv(th, pkts, 32)) > 0)
 *         for (int i = 0; i < n; i++)
 *             ferry_send(th, &pkts[i], 0);
 *     ferry_thread_close(th);
 *     ferry_nf_close(nf);
 *
 * Packets and ownership. A received or allocated packet lives in a UMEM
 * frame owned by the thread that got it. ferry_pkt is a view of it: data and
 * len to work with, and a handle naming it. A verdict hands the frame on: the
 * handle is then spent and pkt->data is set to NULL. Using a spent handle
 * (twice the same verdict, or a copy of the ferry_pkt) returns -EALREADY and
 * touches no frame; an unknown handle returns -EINVAL. Never keep a data
 * pointer past the verdict: the frame belongs to the next NF by then.
 *
 * Errors. Functions returning int return 0 (or a count) on success and a
 * negative errno value on failure; functions returning a pointer return NULL.
 * Either way ferry_last_error() then describes the failure. NULL arguments
 * give -EINVAL (void functions ignore them).
 *
 * Threads. A ferry_nf may be shared by all OS threads. A ferry_thread is used
 * by one OS thread only, the one that opened it: ferry_recv, ferry_alloc,
 * ferry_service and ferry_flush check this and return -EPERM (ferry_flush
 * just records the error) from another thread. Packets of a thread are used
 * on that thread only.
 *
 * Build: cc -O2 -I<ferry>/crates/runtime/ferry-capi/include nf.c \
 *            -L<ferry>/target/release -lferry \
 *            -Wl,-rpath,<ferry>/target/release -lpthread
 * or, statically: cc ... nf.c <ferry>/target/release/libferry.a \
 *                      -lpthread -ldl -lm
 * (cargo build --release -p ferry-capi builds libferry.so and libferry.a.)
 */
#ifndef FERRY_H
#define FERRY_H

#include <errno.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A connected NF. */
typedef struct ferry_nf ferry_nf;

/* One NF thread: its receive ring, its sockets, its out-links. */
typedef struct ferry_thread ferry_thread;

/* A packet held by a thread. */
typedef struct ferry_pkt {
  /* First byte of the packet. NULL after the packet's verdict. */
  uint8_t *data;
  /* Length in bytes. The NF may change it (to shorten or, within the frame,
   * grow the packet); ferry_send and ferry_reply apply it, or return -EINVAL
   * if it exceeds the frame. ferry_set_len checks a new length at once. */
  uint32_t len;
  /* Names the packet for its thread; opaque. 0 is never a valid handle, so
   * a zeroed ferry_pkt is not a packet. */
  uint32_t handle;
} ferry_pkt;

/* Most packets one ferry_recv returns, whatever its max. */
#define FERRY_BURST_MAX 1024

/* ---- NF ---------------------------------------------------------------- */

/*
 * Connects to ferryd as an NF and maps what it sends (UMEM, rings, sockets).
 *
 * socket: ferryd's control socket; NULL reads FERRY_SOCKET.
 * nf:     this NF's name in the chain file; NULL reads FERRY_NF.
 * counter_names, n_counters: names of the NF's own counters (at most 24),
 *         published with ferry_set_counter and shown by `ferry chain status`;
 *         NULL and 0 for none. The strings are copied.
 *
 * Returns NULL on failure (ferryd not reachable, NF refused, ...).
 */
ferry_nf *ferry_connect(const char *socket, const char *nf,
                        const char *const *counter_names, int n_counters);

/* Number of threads the chain file gives this NF (index 0 .. n-1). */
int ferry_nf_threads(const ferry_nf *nf);

/* Number of out-links, in the chain file's order (hop 0 .. n-1). */
int ferry_nf_out_links(const ferry_nf *nf);

/* Argument i of the chain file's `args:` (valid until ferry_nf_close), or
 * NULL past the last one. */
const char *ferry_nf_arg(const ferry_nf *nf, int i);

/* Releases the caller's reference. The NF disconnects from ferryd once its
 * open threads are closed too. NULL is ignored. */
void ferry_nf_close(ferry_nf *nf);

/* ---- Threads ----------------------------------------------------------- */

/*
 * Opens NF thread `index` for the calling OS thread, which alone may use it.
 * Each index can be opened once per connection. Returns NULL on failure: no
 * such thread (-EINVAL), already open (-EBUSY) or setup error.
 */
ferry_thread *ferry_thread_open(ferry_nf *nf, int index);

/* Drops the packets the thread still holds (counted as drop_nf), sends what
 * is queued and frees the thread. Call it when the owning OS thread is done
 * with it (it may run on another thread, e.g. after pthread_join). */
void ferry_thread_close(ferry_thread *th);

/* Index of the thread within its NF. */
int ferry_thread_index(const ferry_thread *th);

/* ---- Data path --------------------------------------------------------- */

/*
 * Receives up to `max` packets into pkts[0 .. n-1] and returns n >= 1. First
 * does the framework's work: sends queued packets in batches, applies
 * backpressure, recycles transmitted frames, refills the sockets. Blocks while
 * there is nothing to receive (busy-polls, then sleeps on an eventfd).
 *
 * Returns -ESHUTDOWN when ferryd stopped the NF (the NF should close its
 * threads and exit), -ENOBUFS if the thread already holds 2^20 packets.
 */
int ferry_recv(ferry_thread *th, ferry_pkt *pkts, int max);

/*
 * Sends the packet on out-link `hop` (queued; moved in batches by ferry_recv
 * or ferry_flush). A hop with no out-link drops the packet, counted as
 * drop_bad_hop. Returns 0, -EALREADY (packet already handed on), -EINVAL (bad
 * handle, or pkt->len exceeds the frame: the packet is then still held).
 */
int ferry_send(ferry_thread *th, ferry_pkt *pkt, int hop);

/* Sends the packet back out of the port it arrived on; a packet that came
 * from another NF (or from ferry_alloc) goes to out-link 0. Returns as
 * ferry_send. */
int ferry_reply(ferry_thread *th, ferry_pkt *pkt);

/* Drops the packet (counted as drop_nf). Returns 0, -EALREADY or -EINVAL. */
int ferry_drop(ferry_thread *th, ferry_pkt *pkt);

/* Allocates a new packet of `len` bytes (contents undefined) into *pkt, for
 * NFs that make packets. Returns 0, or -ENOBUFS when the domain has no free
 * frame or `len` exceeds a frame. */
int ferry_alloc(ferry_thread *th, ferry_pkt *pkt, uint32_t len);

/* Sets the packet's length and pkt->len. Returns 0, or -EINVAL if `len` does
 * not fit the frame (nothing changes) or the handle is bad, or -EALREADY. */
int ferry_set_len(ferry_thread *th, ferry_pkt *pkt, uint32_t len);

/* Sends everything queued now (ferry_recv also does). */
void ferry_flush(ferry_thread *th);

/* The framework's work of ferry_recv without receiving, for NFs that only
 * make packets: call it in the production loop. Returns 0, or -ESHUTDOWN
 * when ferryd stopped the NF. */
int ferry_service(ferry_thread *th);

/* Publishes NF counter `i` (declared at ferry_connect) for this thread.
 * An undeclared i is ignored (and recorded for ferry_last_error). */
void ferry_set_counter(ferry_thread *th, int i, uint64_t value);

/* ---- Errors ------------------------------------------------------------ */

/* The last failure on the calling OS thread, or "". Valid until the next
 * failure on this thread. */
const char *ferry_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_H */
