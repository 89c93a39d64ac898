/* The host block pool (hostpool.h): a mutex-guarded list of free blocks. */
#include "hostpool.h"

#include "torchtpu/tensor.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define TPU_HOSTPOOL_PAGE ((size_t)4096)

/* The header sits in the TPU_HOSTPOOL_ALIGN bytes in front of each block. */
typedef struct tpu_hostpool_block {
  size_t capacity; /* usable bytes after the header */
  struct tpu_hostpool_block* next;
} tpu_hostpool_block_t;
static_assert(sizeof(tpu_hostpool_block_t) <= TPU_HOSTPOOL_ALIGN, "header fits in front of the block");

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_hostpool_block_t* g_free;
static size_t g_cached;

static tpu_hostpool_block_t* header_of(void* block) {
  return (tpu_hostpool_block_t*)((char*)block - TPU_HOSTPOOL_ALIGN);
}

/* A cached block of exactly `capacity` bytes, unlinked, or NULL. */
static tpu_hostpool_block_t* take_cached(size_t capacity) {
  pthread_mutex_lock(&g_lock);
  tpu_hostpool_block_t** p = &g_free;
  while (*p && (*p)->capacity != capacity) p = &(*p)->next;
  tpu_hostpool_block_t* h = *p;
  if (h) {
    *p = h->next;
    g_cached -= h->capacity;
  }
  pthread_mutex_unlock(&g_lock);
  return h;
}

tpu_status_t* tpu_host_block_acquire(size_t nbytes, void** out_block) {
  if (!out_block) return TPU_STATUS(TPU_INVALID_ARGUMENT, "hostpool: out_block is NULL");
  *out_block = NULL;
  if (nbytes > SIZE_MAX - TPU_HOSTPOOL_PAGE - TPU_HOSTPOOL_ALIGN)
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "hostpool: %zu bytes cannot be allocated", nbytes);
  size_t capacity = (nbytes + TPU_HOSTPOOL_PAGE - 1) / TPU_HOSTPOOL_PAGE * TPU_HOSTPOOL_PAGE;
  tpu_hostpool_block_t* h = take_cached(capacity);
  if (!h) {
    h = aligned_alloc(TPU_HOSTPOOL_ALIGN, TPU_HOSTPOOL_ALIGN + capacity);
    if (!h) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "hostpool: out of host memory for %zu bytes", nbytes);
    h->capacity = capacity;
  }
  h->next = NULL;
  *out_block = (char*)h + TPU_HOSTPOOL_ALIGN;
  return NULL;
}

void tpu_host_block_release(void* block) {
  if (!block) return;
  tpu_hostpool_block_t* h = header_of(block);
  pthread_mutex_lock(&g_lock);
  bool keep = g_cached + h->capacity <= TPU_HOSTPOOL_CACHE_BYTES;
  if (keep) {
    h->next = g_free;
    g_free = h;
    g_cached += h->capacity;
  }
  pthread_mutex_unlock(&g_lock);
  if (!keep) free(h);
}

void tpu_hostpool_trim(void) {
  pthread_mutex_lock(&g_lock);
  tpu_hostpool_block_t* h = g_free;
  g_free = NULL;
  g_cached = 0;
  pthread_mutex_unlock(&g_lock);
  while (h) {
    tpu_hostpool_block_t* next = h->next;
    free(h);
    h = next;
  }
}

size_t tpu_hostpool_cached_bytes(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_cached;
  pthread_mutex_unlock(&g_lock);
  return n;
}

