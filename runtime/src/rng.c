/* Random generators: a (seed, offset) pair each. Random ops reserve a range of
 * offsets per execution (Philox-style counters), so the same seed replays the
 * same stream regardless of how ops are batched. Each device has a default
 * generator (as CUDA does); `torch.Generator(device="tpu")` makes its own, so
 * drawing from it never moves the default stream. */
#include <pthread.h>
#include <stdlib.h>

#include "torchtpu/runtime.h"

/* PyTorch's default_rng_seed_val, so an unseeded process starts where PyTorch's
 * device generators start. */
#define TPU_RNG_DEFAULT_SEED UINT64_C(67280421310721)
/* Default generators exist for devices [0, TPU_RNG_MAX_DEFAULTS); the PJRT layer
 * holds at most as many devices per process. */
#define TPU_RNG_MAX_DEFAULTS 256

struct tpu_generator {
  pthread_mutex_t mu;
  uint64_t seed;
  uint64_t offset;
};

static pthread_mutex_t g_defaults_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_generator_t* g_defaults[TPU_RNG_MAX_DEFAULTS];

tpu_status_t* tpu_generator_create(uint64_t seed, tpu_generator_t** out_generator) {
  *out_generator = NULL;
  tpu_generator_t* g = calloc(1, sizeof(*g));
  if (!g) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory for a generator");
  pthread_mutex_init(&g->mu, NULL);
  g->seed = seed;
  *out_generator = g;
  return NULL;
}

void tpu_generator_destroy(tpu_generator_t* g) {
  if (!g) return;
  pthread_mutex_destroy(&g->mu);
  free(g);
}

tpu_generator_t* tpu_generator_default(int device) {
  if (device < 0 || device >= TPU_RNG_MAX_DEFAULTS) return NULL;
  pthread_mutex_lock(&g_defaults_mu);
  if (!g_defaults[device] && tpu_generator_create(TPU_RNG_DEFAULT_SEED, &g_defaults[device]) != NULL)
    g_defaults[device] = NULL; /* out of host memory: reported as "no generator" */
  tpu_generator_t* g = g_defaults[device];
  pthread_mutex_unlock(&g_defaults_mu);
  return g;
}

void tpu_generator_set_seed(tpu_generator_t* g, uint64_t seed) {
  pthread_mutex_lock(&g->mu);
  g->seed = seed;
  g->offset = 0; /* like manual_seed: a new seed starts a new stream */
  pthread_mutex_unlock(&g->mu);
}

uint64_t tpu_generator_seed(tpu_generator_t* g) {
  pthread_mutex_lock(&g->mu);
  uint64_t seed = g->seed;
  pthread_mutex_unlock(&g->mu);
  return seed;
}

void tpu_generator_get_state(tpu_generator_t* g, uint64_t* out_seed, uint64_t* out_offset) {
  pthread_mutex_lock(&g->mu);
  if (out_seed) *out_seed = g->seed;
  if (out_offset) *out_offset = g->offset;
  pthread_mutex_unlock(&g->mu);
}

void tpu_generator_set_state(tpu_generator_t* g, uint64_t seed, uint64_t offset) {
  pthread_mutex_lock(&g->mu);
  g->seed = seed;
  g->offset = offset;
  pthread_mutex_unlock(&g->mu);
}

void tpu_generator_next(tpu_generator_t* g, uint64_t n, uint64_t* out_seed, uint64_t* out_first) {
  pthread_mutex_lock(&g->mu);
  *out_seed = g->seed;
  *out_first = g->offset;
  g->offset += n;
  pthread_mutex_unlock(&g->mu);
}
