/*
 * l2fwd.c - a Ferry NF in C: swaps source and destination MAC addresses and
 * sends every packet on out-link 0. One pthread per NF thread (the chain
 * file's `threads:`); each publishes its own "swapped" counter.
 *
 * Build (from the repository root, after cargo build --release):
 *
 *   cc -O2 -Wall -I crates/runtime/ferry-capi/include examples/c-nf/l2fwd.c \
 *      -L target/release -lferry -Wl,-rpath,$PWD/target/release -lpthread \
 *      -o l2fwd
 *
 * or `make -C examples/c-nf`. Run it from a chain file:
 *
 *   - { name: cnf, domain: main, exec: ["/abs/path/to/l2fwd"], threads: 2 }
 *
 * ferryd runs it as the NF's user (nobody by default), so the binary and
 * libferry.so must be readable and executable by that user.
 */
#include <ferry.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BURST 32
#define ETH_ALEN 6

enum { COUNTER_SWAPPED, N_COUNTERS };
static const char *const counter_names[N_COUNTERS] = {"swapped"};

struct worker {
  ferry_nf *nf;
  int index;
  pthread_t tid;
  int failed;
};

static void swap_macs(uint8_t *frame) {
  uint8_t tmp[ETH_ALEN];
  memcpy(tmp, frame, ETH_ALEN);
  memcpy(frame, frame + ETH_ALEN, ETH_ALEN);
  memcpy(frame + ETH_ALEN, tmp, ETH_ALEN);
}

static void *run_worker(void *arg) {
  struct worker *w = arg;
  /* Opened on the OS thread that uses it. */
  ferry_thread *th = ferry_thread_open(w->nf, w->index);
  if (th == NULL) {
    fprintf(stderr, "l2fwd: thread %d: %s\n", w->index, ferry_last_error());
    w->failed = 1;
    return NULL;
  }
  ferry_pkt pkts[BURST];
  uint64_t swapped = 0;
  int n;
  while ((n = ferry_recv(th, pkts, BURST)) > 0) {
    for (int i = 0; i < n; i++) {
      ferry_pkt *p = &pkts[i];
      if (p->len < 2 * ETH_ALEN) {
        ferry_drop(th, p);
        continue;
      }
      swap_macs(p->data);
      ferry_send(th, p, 0);
      swapped++;
    }
    ferry_set_counter(th, COUNTER_SWAPPED, swapped);
  }
  if (n != -ESHUTDOWN) {
    fprintf(stderr, "l2fwd: thread %d: %s\n", w->index, ferry_last_error());
    w->failed = 1;
  }
  ferry_thread_close(th);
  return NULL;
}

int main(void) {
  /* FERRY_SOCKET and FERRY_NF come from ferryd. */
  ferry_nf *nf = ferry_connect(NULL, NULL, counter_names, N_COUNTERS);
  if (nf == NULL) {
    fprintf(stderr, "l2fwd: %s\n", ferry_last_error());
    return 1;
  }
  if (ferry_nf_out_links(nf) < 1) {
    fprintf(stderr, "l2fwd: needs an out-link\n");
    ferry_nf_close(nf);
    return 1;
  }
  int threads = ferry_nf_threads(nf);
  struct worker *workers = calloc(threads > 0 ? threads : 1, sizeof *workers);
  if (workers == NULL) {
    ferry_nf_close(nf);
    return 1;
  }
  int started = 0, failed = 0;
  for (int i = 0; i < threads; i++) {
    workers[i] = (struct worker){.nf = nf, .index = i};
    if (pthread_create(&workers[i].tid, NULL, run_worker, &workers[i]) != 0) {
      fprintf(stderr, "l2fwd: cannot start thread %d\n", i);
      failed = 1;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) {
    pthread_join(workers[i].tid, NULL);
    failed |= workers[i].failed;
  }
  free(workers);
  ferry_nf_close(nf);
  return failed;
}
