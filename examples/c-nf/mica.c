/*
 * mica.c - a MICA-compatible key-value cache as a Ferry NF in C (FLASH's
 * real-world chain). It answers MICA's datagram protocol (ferry-wire's
 * mica.rs describes the bytes): a UDP payload with a batch of GET and SET
 * requests, answered in place with a batch of responses (magic 0x79), the
 * frame turned around (MACs, addresses and ports swapped) and sent back
 * where it came from, or, when the NF has an out-link, on out-link 0.
 *
 * The store, as MICA's: 16 partitions by key hash, each a lossy index (a
 * bucket of 8 tagged offsets per hash) over a circular log. A SET appends
 * the item to its partition's log and points the index at it; a full
 * bucket forgets one of its entries, and the log overwrites its oldest
 * items, so a key may be forgotten (a GET then says not found), never
 * answered wrongly: a hit checks the item is still in the log and its key
 * is the one asked for. Each partition has a lock, so any NF thread may
 * serve any key.
 *
 * Arguments (the chain file's args:): keys=N (preloaded keys 0..N-1, key
 * i being i as 8 little-endian bytes and its value ferry-wire's
 * mica::value_of(i, value_size)), value_size=B, log_mb=M (all partitions'
 * logs together). Build: `make -C examples/c-nf mica`.
 */
#include <errno.h>
#include <ferry.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BURST 32
#define PARTITIONS 16
#define WAYS 8
#define MAGIC_REQUEST 0x78
#define MAGIC_RESPONSE 0x79
#define BATCH_HEADER_LEN 6
#define REQUEST_HEADER_LEN 24
#define OP_SET 4
#define OP_GET 5
#define RESULT_SUCCESS 0
#define RESULT_INSUFFICIENT_SPACE 2
#define RESULT_NOT_FOUND 4
#define RESULT_NOT_PROCESSED 6
#define RESULT_NOT_SUPPORTED 7
/* Largest UDP payload of a response: a 1500-byte IPv4 packet's. */
#define MAX_RESPONSE (1500 - 20 - 8)
#define OFFSET_BITS 48
#define OFFSET_MASK ((1ULL << OFFSET_BITS) - 1)

enum {
  C_REQUESTS,
  C_GETS,
  C_GET_HITS,
  C_GET_MISSES,
  C_SETS,
  C_SETS_FAILED,
  C_NOT_PROCESSED,
  C_DROP_MALFORMED,
  N_COUNTERS
};
static const char *const counter_names[N_COUNTERS] = {
    "requests", "gets",        "get_hits",      "get_misses",
    "sets",     "sets_failed", "not_processed", "drop_malformed"};

/* A log item: key hash, key and value lengths, key and value padded to 8. */
struct item {
  uint64_t key_hash;
  uint32_t key_len;
  uint32_t value_len;
  uint8_t data[];
};

struct partition {
  pthread_mutex_t lock;
  uint64_t
      *index; /* n_buckets * WAYS entries: tag << 48 | (offset + 1); 0 empty */
  uint32_t n_buckets;
  uint8_t *log;
  uint64_t log_size;
  uint64_t head; /* bytes ever appended: an item at offset o is intact while
                    head - o <= log_size */
};

static struct partition parts[PARTITIONS];

static uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

/* FNV-1a 64 (ferry-wire's mica::key_hash). */
static uint64_t key_hash(const uint8_t *key, size_t len) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < len; i++)
    h = (h ^ key[i]) * 0x100000001b3ULL;
  return h;
}

static struct partition *partition_of(uint64_t hash) {
  return &parts[hash % PARTITIONS];
}
static uint64_t tag_of(uint64_t hash) {
  return (hash >> OFFSET_BITS) | 1; /* never 0 */
}

static uint64_t *bucket_of(struct partition *p, uint64_t hash) {
  return &p->index[((hash / PARTITIONS) % p->n_buckets) * WAYS];
}

/* The item an index entry points at, if it is still in the log. */
static struct item *item_at(struct partition *p, uint64_t entry) {
  uint64_t off = (entry & OFFSET_MASK) - 1;
  if (p->head - off > p->log_size)
    return NULL;
  return (struct item *)(p->log + off % p->log_size);
}

/* Finds key; the caller holds the partition's lock. */
static struct item *lookup(struct partition *p, uint64_t hash,
                           const uint8_t *key, uint32_t key_len) {
  uint64_t *b = bucket_of(p, hash), tag = tag_of(hash);
  for (int w = 0; w < WAYS; w++) {
    if (b[w] == 0 || b[w] >> OFFSET_BITS != tag)
      continue;
    struct item *it = item_at(p, b[w]);
    if (it && it->key_hash == hash && it->key_len == key_len &&
        memcmp(it->data, key, key_len) == 0)
      return it;
  }
  return NULL;
}

/* Appends the item and indexes it; 0, or -ENOSPC if it is larger than the
 * log. The caller holds the partition's lock. */
static int store(struct partition *p, uint64_t hash, const uint8_t *key,
                 uint32_t key_len, const uint8_t *value, uint32_t value_len) {
  uint64_t len = sizeof(struct item) + pad8(key_len) + pad8(value_len);
  if (len > p->log_size)
    return -ENOSPC;
  /* Items never wrap: skip the log's tail when this one would. */
  if (p->head % p->log_size + len > p->log_size)
    p->head += p->log_size - p->head % p->log_size;
  uint64_t off = p->head;
  struct item *it = (struct item *)(p->log + off % p->log_size);
  it->key_hash = hash;
  it->key_len = key_len;
  it->value_len = value_len;
  memcpy(it->data, key, key_len);
  memcpy(it->data + pad8(key_len), value, value_len);
  p->head += len;
  uint64_t *b = bucket_of(p, hash), tag = tag_of(hash),
           entry = tag << OFFSET_BITS | (off + 1);
  int free_way = -1;
  for (int w = 0; w < WAYS; w++) {
    struct item *old =
        b[w] && b[w] >> OFFSET_BITS == tag ? item_at(p, b[w]) : NULL;
    if (old && old->key_hash == hash && old->key_len == key_len &&
        memcmp(old->data, key, key_len) == 0) {
      b[w] = entry; /* the key's new version */
      return 0;
    }
    if (free_way < 0 && (b[w] == 0 || item_at(p, b[w]) == NULL))
      free_way = w;
  }
  /* Lossy: a full bucket forgets an entry. */
  b[free_way >= 0 ? free_way : (int)(hash >> 40) % WAYS] = entry;
  return 0;
}

/* ferry-wire's mica::value_of(i, len). */
static void value_of(uint64_t i, uint8_t *out, uint32_t len) {
  for (uint32_t j = 0; j < len; j++)
    out[j] = (uint8_t)(i * 131 + (uint64_t)j * 7);
}

static int setup(uint64_t keys, uint32_t value_size, uint64_t log_mb) {
  uint64_t per_log = pad8(log_mb * (1 << 20) / PARTITIONS);
  uint32_t buckets = 1024;
  while ((uint64_t)buckets * WAYS < 2 * keys / PARTITIONS)
    buckets *= 2;
  for (int i = 0; i < PARTITIONS; i++) {
    pthread_mutex_init(&parts[i].lock, NULL);
    parts[i].index = calloc((size_t)buckets * WAYS, sizeof(uint64_t));
    parts[i].log = malloc(per_log);
    if (parts[i].index == NULL || parts[i].log == NULL)
      return -ENOMEM;
    parts[i].n_buckets = buckets;
    parts[i].log_size = per_log;
  }
  uint8_t *value = malloc(value_size ? value_size : 1);
  if (value == NULL)
    return -ENOMEM;
  for (uint64_t i = 0; i < keys; i++) {
    uint8_t key[8];
    for (int b = 0; b < 8; b++)
      key[b] = (uint8_t)(i >> (8 * b));
    value_of(i, value, value_size);
    uint64_t h = key_hash(key, 8);
    if (store(partition_of(h), h, key, 8, value, value_size) != 0) {
      free(value);
      return -ENOSPC;
    }
  }
  free(value);
  return 0;
}

static uint32_t get32(const uint8_t *p) {
  return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
  return get32(p) | (uint64_t)get32(p + 4) << 32;
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16be(const uint8_t *p) {
  return (uint16_t)(p[0] << 8 | p[1]);
}
static void put16be(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}

static void swap(uint8_t *a, uint8_t *b, size_t n) {
  uint8_t t[16];
  memcpy(t, a, n);
  memcpy(a, b, n);
  memcpy(b, t, n);
}

static uint16_t ip_checksum(const uint8_t *h, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i < len; i += 2)
    sum += get16be(h + i);
  while (sum >> 16)
    sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

/*
 * Answers the request batch in `frame`, in place; returns the reply's
 * length, or 0 for a frame that is not a well-formed MICA request batch
 * (dropped).
 */
/* Where the request at `at` of a batch of `req_len` bytes ends, or 0 if
 * it does not fit. */
static uint32_t request_end(const uint8_t *req, uint32_t req_len, uint32_t at) {
  if (at + REQUEST_HEADER_LEN > req_len)
    return 0;
  uint32_t lengths = get32(req + at + 4);
  uint64_t end = (uint64_t)at + REQUEST_HEADER_LEN + pad8(lengths >> 24) +
                 pad8(lengths & 0xffffff);
  return end > req_len ? 0 : (uint32_t)end;
}

static uint32_t serve(uint8_t *frame, uint32_t len, uint64_t *c,
                      uint8_t *resp) {
  if (len < 14 + 20 + 8 || get16be(frame + 12) != 0x0800)
    return 0;
  uint8_t *ip = frame + 14;
  uint32_t ihl = (ip[0] & 0x0f) * 4, total = get16be(ip + 2);
  if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != 17 || total < ihl + 8 ||
      14 + total > len)
    return 0;
  if (get16be(ip + 6) & 0x3fff)
    return 0; /* fragments */
  uint8_t *udp = ip + ihl, *req = udp + 8;
  uint32_t req_len = total - ihl - 8;
  if (req_len < BATCH_HEADER_LEN || req[0] != MAGIC_REQUEST)
    return 0;
  uint32_t count = req[1], at = BATCH_HEADER_LEN, out = BATCH_HEADER_LEN;
  /* The whole batch must lie in the datagram before any request is served:
   * a malformed batch changes nothing. */
  for (uint32_t r = 0; r < count; r++) {
    uint32_t next = request_end(req, req_len, at);
    if (next == 0)
      return 0;
    at = next;
  }
  uint32_t answered = 0;
  at = BATCH_HEADER_LEN;
  for (uint32_t r = 0; r < count; r++) {
    const uint8_t *h = req + at;
    uint32_t lengths = get32(h + 4), key_len = lengths >> 24,
             value_len = lengths & 0xffffff;
    uint64_t hash = get64(h + 8);
    const uint8_t *key = h + REQUEST_HEADER_LEN, *value = key + pad8(key_len);
    at = request_end(req, req_len, at);
    c[C_REQUESTS]++;
    uint8_t result = RESULT_NOT_SUPPORTED;
    uint32_t value_out = 0;
    if (out + REQUEST_HEADER_LEN > MAX_RESPONSE) {
      c[C_NOT_PROCESSED]++;
      continue; /* no room left even for the response header */
    }
    uint8_t *o = resp + out;
    struct partition *p = partition_of(hash);
    if (h[0] == OP_GET) {
      c[C_GETS]++;
      pthread_mutex_lock(&p->lock);
      struct item *it = lookup(p, hash, key, key_len);
      if (it == NULL) {
        result = RESULT_NOT_FOUND;
        c[C_GET_MISSES]++;
      } else if (out + REQUEST_HEADER_LEN + pad8(it->value_len) >
                 MAX_RESPONSE) {
        result = RESULT_NOT_PROCESSED;
        c[C_NOT_PROCESSED]++;
      } else {
        result = RESULT_SUCCESS;
        value_out = it->value_len;
        memset(o + REQUEST_HEADER_LEN, 0, pad8(value_out));
        memcpy(o + REQUEST_HEADER_LEN, it->data + pad8(it->key_len), value_out);
        c[C_GET_HITS]++;
      }
      pthread_mutex_unlock(&p->lock);
    } else if (h[0] == OP_SET) {
      c[C_SETS]++;
      pthread_mutex_lock(&p->lock);
      result = store(p, hash, key, key_len, value, value_len) == 0
                   ? RESULT_SUCCESS
                   : RESULT_INSUFFICIENT_SPACE;
      pthread_mutex_unlock(&p->lock);
      if (result != RESULT_SUCCESS)
        c[C_SETS_FAILED]++;
    }
    /* The response: the request's operation, hash and opaque; no key. */
    memcpy(o, h, REQUEST_HEADER_LEN);
    o[1] = result;
    put32(o + 4, value_out);
    out += REQUEST_HEADER_LEN + (uint32_t)pad8(value_out);
    answered++;
  }
  resp[0] = MAGIC_RESPONSE;
  resp[1] = (uint8_t)answered; /* requests past the room get no response */
  memset(resp + 2, 0, 4);
  /* In place: the response replaces the requests; the frame turns around. */
  memcpy(req, resp, out);
  swap(frame, frame + 6, 6);
  swap(ip + 12, ip + 16, 4);
  swap(udp, udp + 2, 2);
  put16be(ip + 2, (uint16_t)(ihl + 8 + out));
  put16be(ip + 10, 0);
  put16be(ip + 10, ip_checksum(ip, ihl));
  put16be(udp + 4, (uint16_t)(8 + out));
  put16be(udp + 6, 0); /* no UDP checksum (IPv4 allows it) */
  return 14 + ihl + 8 + out;
}

struct worker {
  ferry_nf *nf;
  int index;
  int forward; /* the NF has an out-link */
  pthread_t tid;
  int failed;
};

static void *run_worker(void *arg) {
  struct worker *w = arg;
  ferry_thread *th = ferry_thread_open(w->nf, w->index);
  if (th == NULL) {
    fprintf(stderr, "mica: thread %d: %s\n", w->index, ferry_last_error());
    w->failed = 1;
    return NULL;
  }
  static __thread uint8_t resp[MAX_RESPONSE];
  uint64_t c[N_COUNTERS] = {0};
  ferry_pkt pkts[BURST];
  int n;
  while ((n = ferry_recv(th, pkts, BURST)) > 0) {
    for (int i = 0; i < n; i++) {
      ferry_pkt *p = &pkts[i];
      uint32_t len = serve(p->data, p->len, c, resp);
      if (len == 0) {
        c[C_DROP_MALFORMED]++;
        ferry_drop(th, p);
        continue;
      }
      if (ferry_set_len(th, p, len) != 0) {
        c[C_DROP_MALFORMED]++;
        ferry_drop(th, p);
        continue;
      }
      /* In a chain (FLASH's Fig. 15: on to l2fwd) the response goes on
       * out-link 0; alone, back out where the request came in. */
      if (w->forward)
        ferry_send(th, p, 0);
      else
        ferry_reply(th, p);
    }
    for (int k = 0; k < N_COUNTERS; k++)
      ferry_set_counter(th, k, c[k]);
  }
  if (n != -ESHUTDOWN) {
    fprintf(stderr, "mica: thread %d: %s\n", w->index, ferry_last_error());
    w->failed = 1;
  }
  ferry_thread_close(th);
  return NULL;
}

/* The value of argument `name=` among the NF's arguments, or `fallback`. */
static uint64_t arg(ferry_nf *nf, const char *name, uint64_t fallback) {
  size_t n = strlen(name);
  for (int i = 0;; i++) {
    const char *a = ferry_nf_arg(nf, i);
    if (a == NULL)
      return fallback;
    if (strncmp(a, name, n) == 0 && a[n] == '=')
      return strtoull(a + n + 1, NULL, 10);
  }
}

int main(void) {
  ferry_nf *nf = ferry_connect(NULL, NULL, counter_names, N_COUNTERS);
  if (nf == NULL) {
    fprintf(stderr, "mica: %s\n", ferry_last_error());
    return 1;
  }
  uint64_t keys = arg(nf, "keys", 1000), value_size = arg(nf, "value_size", 64),
           log_mb = arg(nf, "log_mb", 64);
  if (value_size > MAX_RESPONSE - BATCH_HEADER_LEN - REQUEST_HEADER_LEN ||
      log_mb == 0) {
    fprintf(stderr,
            "mica: value_size=%llu (at most %d) or log_mb=%llu (at least 1)\n",
            (unsigned long long)value_size,
            MAX_RESPONSE - BATCH_HEADER_LEN - REQUEST_HEADER_LEN,
            (unsigned long long)log_mb);
    ferry_nf_close(nf);
    return 1;
  }
  int err = setup(keys, (uint32_t)value_size, log_mb);
  if (err != 0) {
    fprintf(stderr, "mica: preloading %llu keys: %s\n",
            (unsigned long long)keys, strerror(-err));
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
    workers[i] = (struct worker){
        .nf = nf, .index = i, .forward = ferry_nf_out_links(nf) > 0};
    if (pthread_create(&workers[i].tid, NULL, run_worker, &workers[i]) != 0) {
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
