/* The in-memory executable cache: a hash table of reference-counted entries and
 * an LRU list; an evicted entry is freed when its last user lets go. */
#include "cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

#define TPU_CACHE_BUCKETS 4096
/* Capacity in memory mappings (an entry weighs what its executable's code
 * mapped, tpu_executable_maps): well below vm.max_map_count's default of 65530,
 * which the rest of the process shares. */
#define TPU_CACHE_DEFAULT_CAPACITY 24576

struct tpu_cache_entry {
  uint64_t hash;
  uint8_t* key;
  size_t len;
  tpu_compiled_t compiled;
  size_t weight;   /* what the table counts for it... */
  bool weighed;    /* ...final once its executable is compiled (a lazy one weighs 1 until then) */
  atomic_int refs; /* the table holds one */
  atomic_bool prepared; /* compiled ahead of its first run, which has not come yet */
  tpu_cache_entry_t* next; /* bucket chain */
  tpu_cache_entry_t* lru_prev;
  tpu_cache_entry_t* lru_next;
  tpu_cache_entry_t* unw_prev; /* the list of entries not weighed yet */
  tpu_cache_entry_t* unw_next;
};

static pthread_mutex_t tpu_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_cache_entry_t* tpu_cache_buckets[TPU_CACHE_BUCKETS];
static tpu_cache_entry_t* tpu_lru_head; /* most recent */
static tpu_cache_entry_t* tpu_lru_tail;
static size_t tpu_cache_count;  /* entries */
static size_t tpu_cache_weight; /* their total weight, bounded by the capacity */
static size_t tpu_cache_capacity;
/* Entries whose lazy executable had not compiled when last weighed. A lazy one
 * may compile without being looked up again (fused eager mode runs a recording's
 * ops unfused, each its op's program): the next insert weighs them again when
 * executables were loaded since (tpu_executable_loads), so what they mapped
 * counts towards the capacity. */
static tpu_cache_entry_t* tpu_unweighed;
static uint64_t tpu_unweighed_loads;

static void tpu_unweighed_unlink(tpu_cache_entry_t* e) {
  if (e->weighed) return; /* not in the list */
  if (e->unw_prev) e->unw_prev->unw_next = e->unw_next;
  else tpu_unweighed = e->unw_next;
  if (e->unw_next) e->unw_next->unw_prev = e->unw_prev;
  e->unw_prev = e->unw_next = NULL;
}

/* Weighs `e` by its executable's code mappings (under the lock); `listed`: it
 * is in the unweighed list. */
static void tpu_entry_weigh_locked(tpu_cache_entry_t* e, bool listed) {
  int maps = tpu_executable_maps(e->compiled.exe);
  size_t w = maps > 0 ? (size_t)maps : 1;
  tpu_cache_weight += w - e->weight;
  e->weight = w;
  if (listed && maps > 0) tpu_unweighed_unlink(e);
  if (!listed && maps <= 0) {
    e->unw_prev = NULL;
    e->unw_next = tpu_unweighed;
    if (tpu_unweighed) tpu_unweighed->unw_prev = e;
    tpu_unweighed = e;
  }
  e->weighed = maps > 0;
}

/* Weighs again the unweighed entries when executables were loaded since the
 * last time (under the lock). */
static void tpu_unweighed_refresh_locked(void) {
  uint64_t loads = tpu_executable_loads();
  if (loads == tpu_unweighed_loads) return;
  tpu_unweighed_loads = loads;
  for (tpu_cache_entry_t* e = tpu_unweighed; e;) {
    tpu_cache_entry_t* next = e->unw_next;
    tpu_entry_weigh_locked(e, true);
    e = next;
  }
}

/* Eight bytes per step (a byte at a time, FNV-1a, was 3% of a small op's time
 * on the cache lookup every op makes): each word is mixed in by a multiply and
 * a shift, and the end folds the high bits down so every input bit reaches the
 * low bits the table indexes with. */
static uint64_t hash_mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

uint64_t tpu_hash_bytes(const uint8_t* data, size_t len) {
  uint64_t h = 0x243f6a8885a308d3ULL ^ (uint64_t)len;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, data + i, 8); /* unaligned; compiles to one load */
    h = hash_mix(h, w);
  }
  if (i < len) {
    uint64_t w = 0;
    memcpy(&w, data + i, len - i);
    h = hash_mix(h, w ^ ((uint64_t)(len - i) << 56));
  }
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 32);
}

void tpu_compiled_destroy(tpu_compiled_t* c) {
  if (!c) return;
  tpu_executable_destroy(c->exe);
  free(c->params);
  free(c->out_avals);
  memset(c, 0, sizeof(*c));
}

static void tpu_entry_free(tpu_cache_entry_t* e) {
  tpu_compiled_destroy(&e->compiled);
  free(e->key);
  free(e);
}

void tpu_cache_entry_release(tpu_cache_entry_t* e) {
  if (e && atomic_fetch_sub(&e->refs, 1) == 1) tpu_entry_free(e);
}

const tpu_compiled_t* tpu_cache_entry_compiled(const tpu_cache_entry_t* e) { return &e->compiled; }

void tpu_cache_entry_mark_prepared(tpu_cache_entry_t* e) { atomic_store(&e->prepared, true); }

/* A load first: every eager op's cache hit asks, and a plain read keeps the
 * entry's cache line shared where an exchange would write it each time. */
bool tpu_cache_entry_take_prepared(tpu_cache_entry_t* e) {
  return atomic_load_explicit(&e->prepared, memory_order_relaxed) && atomic_exchange(&e->prepared, false);
}

static void tpu_lru_unlink(tpu_cache_entry_t* e) {
  if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
  else tpu_lru_head = e->lru_next;
  if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
  else tpu_lru_tail = e->lru_prev;
  e->lru_prev = e->lru_next = NULL;
}

static void tpu_lru_push_front(tpu_cache_entry_t* e) {
  e->lru_next = tpu_lru_head;
  e->lru_prev = NULL;
  if (tpu_lru_head) tpu_lru_head->lru_prev = e;
  tpu_lru_head = e;
  if (!tpu_lru_tail) tpu_lru_tail = e;
}

static tpu_cache_entry_t* tpu_cache_find_locked(const uint8_t* key, size_t len, uint64_t hash) {
  for (tpu_cache_entry_t* e = tpu_cache_buckets[hash % TPU_CACHE_BUCKETS]; e; e = e->next)
    if (e->hash == hash && e->len == len && memcmp(e->key, key, len) == 0) return e;
  return NULL;
}

static void tpu_cache_unlink_locked(tpu_cache_entry_t* e) {
  tpu_cache_entry_t** p = &tpu_cache_buckets[e->hash % TPU_CACHE_BUCKETS];
  while (*p && *p != e) p = &(*p)->next;
  if (*p) *p = e->next;
  tpu_lru_unlink(e);
  tpu_unweighed_unlink(e);
  e->weighed = true; /* out of every list */
  tpu_cache_count--;
  tpu_cache_weight -= e->weight;
}

tpu_cache_entry_t* tpu_cache_lookup(const uint8_t* key, size_t len, uint64_t hash) {
  pthread_mutex_lock(&tpu_cache_mu);
  tpu_cache_entry_t* e = tpu_cache_find_locked(key, len, hash);
  if (e) {
    atomic_fetch_add(&e->refs, 1);
    if (!e->weighed) tpu_entry_weigh_locked(e, true); /* compiled since: the next insert evicts by it */
    if (tpu_lru_head != e) {
      tpu_lru_unlink(e);
      tpu_lru_push_front(e);
    }
  }
  pthread_mutex_unlock(&tpu_cache_mu);
  return e;
}

static size_t tpu_cache_capacity_get(void) {
  if (!tpu_cache_capacity) {
    tpu_cache_capacity =
        (size_t)tpu_env_int("TORCHTPU_CACHE_CAPACITY", 1, INT64_MAX, TPU_CACHE_DEFAULT_CAPACITY);
  }
  return tpu_cache_capacity;
}

tpu_status_t* tpu_cache_insert(const uint8_t* key, size_t len, uint64_t hash, tpu_compiled_t* compiled,
                               tpu_cache_entry_t** out_entry) {
  *out_entry = NULL;
  tpu_cache_entry_t* e = calloc(1, sizeof(*e));
  uint8_t* k = malloc(len ? len : 1);
  if (!e || !k) {
    free(e);
    free(k);
    tpu_compiled_destroy(compiled);
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "cache: out of host memory");
  }
  memcpy(k, key, len);
  e->hash = hash;
  e->key = k;
  e->len = len;
  e->compiled = *compiled;
  memset(compiled, 0, sizeof(*compiled));
  atomic_init(&e->refs, 2); /* the table's and the caller's */
  atomic_init(&e->prepared, false);
  tpu_cache_entry_t* evicted = NULL; /* chained through lru_next once unlinked */
  pthread_mutex_lock(&tpu_cache_mu);
  tpu_cache_entry_t* existing = tpu_cache_find_locked(key, len, hash);
  if (existing) {
    atomic_fetch_add(&existing->refs, 1);
    pthread_mutex_unlock(&tpu_cache_mu);
    tpu_entry_free(e);
    *out_entry = existing;
    return NULL;
  }
  size_t b = hash % TPU_CACHE_BUCKETS;
  e->next = tpu_cache_buckets[b];
  tpu_cache_buckets[b] = e;
  tpu_lru_push_front(e);
  tpu_cache_count++;
  tpu_entry_weigh_locked(e, false);
  tpu_unweighed_refresh_locked();
  while (tpu_cache_weight > tpu_cache_capacity_get() && tpu_lru_tail && tpu_lru_tail != e) {
    tpu_cache_entry_t* old = tpu_lru_tail;
    tpu_cache_unlink_locked(old);
    old->lru_next = evicted;
    evicted = old;
  }
  pthread_mutex_unlock(&tpu_cache_mu);
  while (evicted) {
    tpu_cache_entry_t* next = evicted->lru_next;
    tpu_cache_entry_release(evicted);
    evicted = next;
  }
  *out_entry = e;
  return NULL;
}

void tpu_cache_clear(void) {
  pthread_mutex_lock(&tpu_cache_mu);
  tpu_cache_entry_t* all = tpu_lru_head;
  tpu_lru_head = tpu_lru_tail = NULL;
  tpu_unweighed = NULL;
  memset(tpu_cache_buckets, 0, sizeof(tpu_cache_buckets));
  tpu_cache_count = 0;
  tpu_cache_weight = 0;
  pthread_mutex_unlock(&tpu_cache_mu);
  while (all) {
    tpu_cache_entry_t* next = all->lru_next;
    tpu_cache_entry_release(all);
    all = next;
  }
}

size_t tpu_cache_size(void) {
  pthread_mutex_lock(&tpu_cache_mu);
  size_t n = tpu_cache_count;
  pthread_mutex_unlock(&tpu_cache_mu);
  return n;
}
