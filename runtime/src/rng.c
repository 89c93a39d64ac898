/* The process' random state: a (seed, offset) pair. Random ops reserve a range of
 * offsets per execution (Philox-style counters), so the same seed replays the
 * same stream regardless of how ops are batched. */
#include <pthread.h>

#include "torchtpu/runtime.h"

/* PyTorch's default_rng_seed_val, so an unseeded process starts where PyTorch's
 * device generators start. */
#define TPU_RNG_DEFAULT_SEED UINT64_C(67280421310721)

static pthread_mutex_t g_rng_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_seed = TPU_RNG_DEFAULT_SEED;
static uint64_t g_offset = 0;

void tpu_rng_set_seed(uint64_t seed) {
  pthread_mutex_lock(&g_rng_mu);
  g_seed = seed;
  g_offset = 0; /* like manual_seed: a new seed starts a new stream */
  pthread_mutex_unlock(&g_rng_mu);
}

uint64_t tpu_rng_seed(void) {
  pthread_mutex_lock(&g_rng_mu);
  uint64_t seed = g_seed;
  pthread_mutex_unlock(&g_rng_mu);
  return seed;
}

void tpu_rng_get_state(uint64_t* out_seed, uint64_t* out_offset) {
  pthread_mutex_lock(&g_rng_mu);
  if (out_seed) *out_seed = g_seed;
  if (out_offset) *out_offset = g_offset;
  pthread_mutex_unlock(&g_rng_mu);
}

void tpu_rng_set_state(uint64_t seed, uint64_t offset) {
  pthread_mutex_lock(&g_rng_mu);
  g_seed = seed;
  g_offset = offset;
  pthread_mutex_unlock(&g_rng_mu);
}

uint64_t tpu_rng_next(uint64_t n) {
  pthread_mutex_lock(&g_rng_mu);
  uint64_t first = g_offset;
  g_offset += n;
  pthread_mutex_unlock(&g_rng_mu);
  return first;
}
