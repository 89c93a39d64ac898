/* Storage slots: a mutable pointer to an immutable buffer (DESIGN.md §3). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "torchtpu/memory.h"

struct tpu_storage {
  atomic_int refcount;
  int device;
  size_t nbytes;
  tpu_buffer_t* buffer; /* guarded by tpu_slot_mu */
};

/* One lock for all slots: held for a pointer swap only. */
static pthread_mutex_t tpu_slot_mu = PTHREAD_MUTEX_INITIALIZER;

/* A storage larger than the whole device fails at once, as CUDA fails at
 * allocation: its buffer is made at the first write, which would fail only then
 * (or, on the CPU plugin, be paged in until the kernel kills the process). Only
 * requests of 1 GiB and more pay for the query (/proc/meminfo or the plugin). */
static tpu_status_t* tpu_storage_check_fits(int device, size_t nbytes) {
  if (nbytes < ((size_t)1 << 30)) return NULL;
  int64_t free_bytes = 0, total = 0;
  tpu_status_t* st = tpu_memory_info(device, &free_bytes, &total);
  if (st) { /* no figure to check against: the write will tell */
    tpu_status_free(st);
    return NULL;
  }
  if (total <= 0 || nbytes <= (size_t)total) return NULL;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "tried to allocate %.2f GiB (%zu bytes); tpu:%d has %.2f GiB in total",
                    (double)nbytes / gib, nbytes, device, (double)total / gib);
}

tpu_status_t* tpu_storage_create(int device, size_t nbytes, tpu_storage_t** out_storage) {
  *out_storage = NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  TPU_RETURN_IF_ERROR(tpu_storage_check_fits(device, nbytes));
  tpu_storage_t* s = calloc(1, sizeof(*s));
  if (!s) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "storage: out of host memory");
  atomic_init(&s->refcount, 1);
  s->device = device;
  s->nbytes = nbytes;
  *out_storage = s;
  return NULL;
}

tpu_storage_t* tpu_storage_retain(tpu_storage_t* s) {
  if (s) atomic_fetch_add(&s->refcount, 1);
  return s;
}

void tpu_storage_release(tpu_storage_t* s) {
  if (!s || atomic_fetch_sub(&s->refcount, 1) != 1) return;
  tpu_buffer_release(s->buffer);
  free(s);
}

size_t tpu_storage_nbytes(const tpu_storage_t* s) {
  pthread_mutex_lock(&tpu_slot_mu);
  size_t n = s->nbytes;
  pthread_mutex_unlock(&tpu_slot_mu);
  return n;
}

int tpu_storage_device(const tpu_storage_t* s) { return s->device; }

tpu_buffer_t* tpu_storage_buffer(tpu_storage_t* s) {
  pthread_mutex_lock(&tpu_slot_mu);
  tpu_buffer_t* b = tpu_buffer_retain(s->buffer);
  pthread_mutex_unlock(&tpu_slot_mu);
  return b;
}

void tpu_storage_set_buffer(tpu_storage_t* s, tpu_buffer_t* buf, size_t nbytes) {
  tpu_buffer_retain(buf);
  pthread_mutex_lock(&tpu_slot_mu);
  tpu_buffer_t* old = s->buffer;
  s->buffer = buf;
  s->nbytes = nbytes;
  pthread_mutex_unlock(&tpu_slot_mu);
  tpu_buffer_note_replaced(old, buf);
  tpu_buffer_release(old);
  tpu_metric_add(TPU_METRIC_SLOT_SWAPS, 1);
}

void tpu_storage_assign(tpu_storage_t* dst, tpu_storage_t* src) {
  if (dst == src) return;
  tpu_buffer_t* b = tpu_storage_buffer(src);
  tpu_storage_set_buffer(dst, b, tpu_storage_nbytes(src));
  tpu_buffer_release(b);
}

/* Resize lowering: arg 0 is the whole storage as a flat tensor, arg 1 the new
 * element count; zero-extends or truncates. */
static tpu_status_t* tpu_lower_resize(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                      int* out_nouts) {
  (void)max_outs;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  int64_t n = tpu_b_aval(b, x)->dims[0], m = tpu_op_int(op, 1, 0);
  int64_t lo = 0, hi = m - n;
  outs[0] = tpu_b_pad(b, x, tpu_b_const(b, tpu_b_dtype(b, x), 0.0), &lo, &hi, NULL);
  *out_nouts = 1;
  return NULL;
}

tpu_status_t* tpu_storage_resize(tpu_storage_t* s, size_t nbytes) {
  tpu_buffer_t* buf = tpu_storage_buffer(s);
  if (!buf) {
    pthread_mutex_lock(&tpu_slot_mu);
    s->nbytes = nbytes;
    pthread_mutex_unlock(&tpu_slot_mu);
    return NULL;
  }
  const tpu_aval_t* ba = tpu_buffer_aval(buf);
  tpu_dtype_t dt = ba->dtype;
  size_t isz = tpu_dtype_size(dt);
  if (nbytes % isz != 0) dt = TPU_U8, isz = 1;
  size_t old = tpu_storage_nbytes(s);
  tpu_buffer_release(buf);
  if (old == nbytes) return NULL;
  tpu_arg_t args[2];
  memset(args, 0, sizeof(args));
  args[0].kind = TPU_ARG_TENSOR;
  args[0].u.tensor.storage = s;
  args[0].u.tensor.dtype = dt;
  args[0].u.tensor.rank = 1;
  args[0].u.tensor.sizes[0] = (int64_t)(old / isz);
  args[0].u.tensor.strides[0] = 1;
  args[1].kind = TPU_ARG_INT;
  args[1].u.i = (int64_t)(nbytes / isz);
  tpu_buffer_t* out = NULL;
  int nouts = 0;
  TPU_RETURN_IF_ERROR(tpu_exec_run("resize_", "", tpu_lower_resize, 0, s->device, args, 2, 1, &out, &nouts));
  tpu_storage_set_buffer(s, out, nbytes);
  tpu_buffer_release(out);
  return NULL;
}
