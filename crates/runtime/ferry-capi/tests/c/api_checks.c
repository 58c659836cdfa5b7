/*
 * api_checks.c - an NF that tests/c_example.rs runs in its chain: it checks
 * libferry's run-time ownership and argument checks against a live ferryd,
 * through the C header, then idles until ferryd stops it.
 *
 * It publishes two counters: "checks_run" (how many checks ran) and
 * "checks_failed" (bit i set: check i failed). It makes three packets with
 * ferry_alloc: two end in ferry_drop (drop_nf) and one is sent on a hop with
 * no out-link (drop_bad_hop), whatever the rejected calls in between tried.
 */
#include <ferry.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static uint64_t checks_run, checks_failed;

static void check(int ok) {
  if (!ok)
    checks_failed |= UINT64_C(1) << checks_run;
  checks_run++;
}

static int error_mentions(const char *what) {
  return strstr(ferry_last_error(), what) != NULL;
}

struct other_thread {
  ferry_thread *th;
  int rc;
};

static void *recv_from_other_thread(void *arg) {
  struct other_thread *o = arg;
  ferry_pkt pkts[4];
  o->rc = ferry_recv(o->th, pkts, 4);
  return NULL;
}

int main(void) {
  static const char *const names[] = {"checks_run", "checks_failed"};
  ferry_nf *nf = ferry_connect(NULL, NULL, names, 2);
  if (nf == NULL)
    return 1;
  ferry_thread *th = ferry_thread_open(nf, 0);
  if (th == NULL)
    return 1;

  /* 0-1: each thread opens once; no thread past the last. */
  check(ferry_thread_open(nf, 0) == NULL && error_mentions("already open"));
  check(ferry_thread_open(nf, 7) == NULL && error_mentions("no thread 7"));
  /* 2: shape of the NF. */
  check(ferry_nf_threads(nf) == 1 && ferry_nf_out_links(nf) == 0 &&
        ferry_thread_index(th) == 0);
  /* 3: the chain file's args. */
  const char *arg0 = ferry_nf_arg(nf, 0);
  check(arg0 != NULL && strcmp(arg0, "mode=check") == 0 &&
        ferry_nf_arg(nf, 1) == NULL && ferry_nf_arg(nf, -1) == NULL);

  ferry_pkt p, copy, q, r;
  ferry_pkt zero = {0};
  /* 4: a new packet. */
  check(ferry_alloc(th, &p, 100) == 0 && p.data != NULL && p.len == 100 &&
        p.handle != 0);
  memset(p.data, 0xab, p.len);
  copy = p;
  /* 5-6: set_len beyond the frame fails and changes nothing; within, works. */
  check(ferry_set_len(th, &p, 1u << 20) == -EINVAL && p.len == 100);
  check(ferry_set_len(th, &p, 60) == 0 && p.len == 60);
  /* 7: a pkt->len edited past the frame: send refuses, the packet stays. */
  p.len = 1u << 20;
  check(ferry_send(th, &p, 0) == -EINVAL && p.data != NULL);
  p.len = 60;
  /* 8-9: a zeroed ferry_pkt and a handle never issued are not packets. */
  check(ferry_drop(th, &zero) == -EINVAL &&
        ferry_send(th, &zero, 0) == -EINVAL);
  ferry_pkt bogus = p;
  bogus.handle = p.handle + 1;
  check(ferry_drop(th, &bogus) == -EINVAL &&
        error_mentions("not a packet handle"));
  /* 10-11: a verdict spends the packet; a second one is refused. */
  check(ferry_drop(th, &p) == 0 && p.data == NULL);
  check(ferry_drop(th, &p) == -EALREADY && error_mentions("already"));
  /* 12: so is any use of a copy of the spent ferry_pkt. */
  check(ferry_send(th, &copy, 0) == -EALREADY &&
        ferry_reply(th, &copy) == -EALREADY &&
        ferry_set_len(th, &copy, 10) == -EALREADY);
  /* 13: even once its slot holds another packet. */
  check(ferry_alloc(th, &q, 64) == 0 && q.handle != copy.handle &&
        ferry_drop(th, &copy) == -EALREADY && q.data != NULL &&
        ferry_drop(th, &q) == 0);
  /* 14: nothing longer than a frame. */
  check(ferry_alloc(th, &q, 1u << 24) == -ENOBUFS);
  /* 15: another OS thread may not use this thread. */
  struct other_thread o = {.th = th, .rc = 0};
  pthread_t t;
  check(pthread_create(&t, NULL, recv_from_other_thread, &o) == 0 &&
        pthread_join(t, NULL) == 0 && o.rc == -EPERM);
  /* 16: an undeclared counter is ignored, and says so. */
  ferry_set_counter(th, 5, 1);
  check(error_mentions("no counter 5"));
  /* 17: a hop with no out-link drops (counted), spending the packet. */
  check(ferry_alloc(th, &r, 64) == 0 && ferry_send(th, &r, 3) == 0 &&
        r.data == NULL && ferry_send(th, &r, 0) == -EALREADY);
  /* 18: NULL arguments. */
  check(ferry_recv(th, NULL, 4) == -EINVAL &&
        ferry_recv(th, &q, 0) == -EINVAL &&
        ferry_recv(NULL, &q, 1) == -EINVAL &&
        ferry_send(NULL, &q, 0) == -EINVAL &&
        ferry_send(th, NULL, 0) == -EINVAL &&
        ferry_alloc(th, NULL, 1) == -EINVAL &&
        ferry_thread_open(NULL, 0) == NULL);

  ferry_set_counter(th, 0, checks_run);
  ferry_set_counter(th, 1, checks_failed);

  /* No in-links: this only answers ferryd (pauses, stop) until stopped. */
  ferry_pkt pkts[8];
  int n;
  while ((n = ferry_recv(th, pkts, 8)) > 0)
    for (int i = 0; i < n; i++)
      ferry_drop(th, &pkts[i]);
  ferry_thread_close(th);
  ferry_nf_close(nf);
  return n == -ESHUTDOWN ? 0 : 1;
}
