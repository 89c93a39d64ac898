/* Device buffers for scalar operands, cached by (device, dtype, bits): a
 * learning rate used every step costs one transfer, not one per op. */
#include <pthread.h>
#include <string.h>

#include "exec.h"

#define TPU_SCALAR_SLOTS 1024

typedef struct tpu_scalar_slot {
  int device;
  tpu_dtype_t dtype;
  uint8_t bytes[16]; /* a complex128 is the widest */
  tpu_buffer_t* buffer;
} tpu_scalar_slot_t;

static pthread_mutex_t tpu_scalar_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_scalar_slot_t tpu_scalar_slots[TPU_SCALAR_SLOTS];

static size_t tpu_scalar_slot_index(int device, tpu_dtype_t dtype, const uint8_t* bytes) {
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)(device * 31 + (int)dtype);
  const size_t n = tpu_dtype_size(dtype); /* the rest is zero: hashing it would only cost (per op) */
  for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  return (size_t)(h % TPU_SCALAR_SLOTS);
}

tpu_status_t* tpu_scalar_buffer(int device, tpu_dtype_t dtype, const void* value, tpu_buffer_t** out_buffer) {
  *out_buffer = NULL;
  uint8_t bytes[16] = {0};
  memcpy(bytes, value, tpu_dtype_size(dtype));
  size_t idx = tpu_scalar_slot_index(device, dtype, bytes);
  pthread_mutex_lock(&tpu_scalar_mu);
  tpu_scalar_slot_t* slot = &tpu_scalar_slots[idx];
  if (slot->buffer && slot->device == device && slot->dtype == dtype && memcmp(slot->bytes, bytes, 16) == 0) {
    *out_buffer = tpu_buffer_retain(slot->buffer);
    pthread_mutex_unlock(&tpu_scalar_mu);
    return NULL;
  }
  pthread_mutex_unlock(&tpu_scalar_mu);
  tpu_aval_t a = tpu_aval_make(dtype, 0, NULL);
  tpu_buffer_t* buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_from_host(device, bytes, &a, &buf));
  tpu_buffer_intern(buf);
  pthread_mutex_lock(&tpu_scalar_mu);
  tpu_buffer_t* old = slot->buffer;
  slot->device = device;
  slot->dtype = dtype;
  memcpy(slot->bytes, bytes, 16);
  slot->buffer = tpu_buffer_retain(buf);
  pthread_mutex_unlock(&tpu_scalar_mu);
  tpu_buffer_release(old);
  *out_buffer = buf;
  return NULL;
}

void tpu_scalar_cache_clear(void) {
  pthread_mutex_lock(&tpu_scalar_mu);
  for (int i = 0; i < TPU_SCALAR_SLOTS; ++i) {
    tpu_buffer_release(tpu_scalar_slots[i].buffer);
    tpu_scalar_slots[i].buffer = NULL;
  }
  pthread_mutex_unlock(&tpu_scalar_mu);
}
