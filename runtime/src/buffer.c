/* Reference-counted immutable device buffers over PJRT_Buffer. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "donation.h"
#include "hostpool.h"
#include "pjrt/pjrt.h"
#include "tracing.h"

#define TPU_PRODUCER_MAX 64

/* A buffer is REAL (it owns `pjrt`) or a placeholder for a value of a fused
 * program not run yet (fuse.c): PENDING until that program runs, then RESOLVED
 * (`target` holds the real buffer) or FAILED (`error` says why). The state is
 * written once by the flusher, under its queue lock, after target/error. */
enum { BUF_REAL = 0, BUF_PENDING, BUF_RESOLVED, BUF_FAILED };

struct tpu_buffer {
  atomic_int refs;
  /* Set once the producer is known to have finished without error, so later
   * waits skip creating PJRT events. */
  atomic_bool ready;
  atomic_int state;
  PJRT_Buffer* pjrt;
  tpu_buffer_t* target;     /* RESOLVED: the real buffer (retained) */
  tpu_status_t* error;      /* FAILED: why the program did not run */
  bool counted;             /* a placeholder counts its bytes until resolved */
  bool lent;                /* its memory is a pooled host block (never donated) */
  bool interned;            /* one of a cache's shared values (scalars.c): never donated */
  atomic_bool donated;      /* given to an execution: its bytes are no longer counted here */
  tpu_donation_t* donation; /* donated: when that execution finished (owned; may be NULL) */
  int32_t fuse_value;       /* PENDING: its value in its device's fused queue... */
  uint64_t fuse_epoch;      /* ...of this epoch */
  uint64_t fuse_seq;        /* a placeholder: its op's place in its queue's op stream (>= 1) */
  tpu_aval_t aval;
  int device;
  size_t nbytes;
  char producer[TPU_PRODUCER_MAX]; /* "" for host uploads */
};

/* Set once by fuse.c (under its pthread_once) before the first placeholder, and
 * read by every thread that downloads or swaps a buffer: published through an
 * atomic pointer. NULL until then: a strict-only process never calls a hook. */
static tpu_pending_hooks_t g_hooks_store;
static _Atomic(const tpu_pending_hooks_t*) g_hooks;

static const tpu_pending_hooks_t* pending_hooks(void) {
  return atomic_load_explicit(&g_hooks, memory_order_acquire);
}

static const int kPjrtType[] = {
    [TPU_BOOL] = PJRT_Buffer_Type_PRED, /* 1 byte per element on host, as in PyTorch */
    [TPU_U8] = PJRT_Buffer_Type_U8,     [TPU_I8] = PJRT_Buffer_Type_S8,
    [TPU_I16] = PJRT_Buffer_Type_S16,   [TPU_I32] = PJRT_Buffer_Type_S32,
    [TPU_I64] = PJRT_Buffer_Type_S64,   [TPU_F16] = PJRT_Buffer_Type_F16,
    [TPU_BF16] = PJRT_Buffer_Type_BF16, [TPU_F32] = PJRT_Buffer_Type_F32,
    [TPU_F64] = PJRT_Buffer_Type_F64,   [TPU_C64] = PJRT_Buffer_Type_C64,
    [TPU_C128] = PJRT_Buffer_Type_C128, [TPU_U16] = PJRT_Buffer_Type_U16,
    [TPU_U32] = PJRT_Buffer_Type_U32,   [TPU_U64] = PJRT_Buffer_Type_U64,
};
static_assert(sizeof kPjrtType / sizeof kPjrtType[0] == TPU_DTYPE_COUNT, "one type per dtype");

int tpu_dtype_to_pjrt(tpu_dtype_t t) {
  return tpu_dtype_valid((int)t) ? kPjrtType[t] : PJRT_Buffer_Type_INVALID;
}

/* Checks an aval before it reaches PJRT and computes its dense size. */
static tpu_status_t* aval_nbytes(const tpu_aval_t* aval, size_t* out_nbytes) {
  *out_nbytes = 0;
  if (!aval) return TPU_STATUS(TPU_INVALID_ARGUMENT, "aval is NULL");
  if (!tpu_dtype_valid((int)aval->dtype)) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "invalid dtype %d", (int)aval->dtype);
  }
  if (aval->rank < 0 || aval->rank > TPU_MAX_RANK) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "rank %d out of range [0, %d]", (int)aval->rank,
                      TPU_MAX_RANK);
  }
  size_t n = tpu_dtype_size(aval->dtype);
  for (int i = 0; i < aval->rank; i++) {
    int64_t d = aval->dims[i];
    if (d < 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "negative dimension %lld", (long long)d);
    if (d != 0 && n > SIZE_MAX / (uint64_t)d) {
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "buffer size overflows");
    }
    n *= (size_t)d;
  }
  *out_nbytes = n;
  return NULL;
}

static const PJRT_Api* api_or_null(void) { return tpu_client_api(); }

static tpu_status_t* not_initialized(void) {
  return TPU_STATUS(TPU_FAILED_PRECONDITION, "the torchtpu runtime is not initialised");
}

static void buffer_init(tpu_buffer_t* buf, int device, const tpu_aval_t* aval, size_t nbytes, const char* producer) {
  atomic_init(&buf->refs, 1);
  atomic_init(&buf->ready, false);
  atomic_init(&buf->donated, false);
  buf->donation = NULL;
  atomic_init(&buf->state, BUF_REAL);
  buf->aval = *aval;
  buf->device = device;
  buf->nbytes = nbytes;
  if (producer) {
    /* A bounded copy: snprintf's formatting cost showed up in every op's profile. */
    size_t len = strnlen(producer, sizeof buf->producer - 1);
    memcpy(buf->producer, producer, len);
    buf->producer[len] = '\0';
  }
  tpu_memory_note_alloc(device, nbytes);
}

tpu_status_t* tpu_buffer_wrap(PJRT_Buffer* pjrt, int device, const tpu_aval_t* aval,
                              const char* producer, tpu_buffer_t** out_buffer) {
  const PJRT_Api* api = api_or_null();
  if (out_buffer) *out_buffer = NULL;
  size_t nbytes = 0;
  tpu_status_t* status = out_buffer ? aval_nbytes(aval, &nbytes)
                                    : TPU_STATUS(TPU_INVALID_ARGUMENT, "out_buffer is NULL");
  if (!status && !pjrt) status = TPU_STATUS(TPU_INTERNAL, "PJRT returned no buffer");
  tpu_buffer_t* buf = status ? NULL : calloc(1, sizeof *buf);
  if (!status && !buf) status = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
  if (status) {
    tpu_pjrt_buffer_destroy(api, pjrt);
    return status;
  }
  buffer_init(buf, device, aval, nbytes, producer);
  buf->pjrt = pjrt;
  *out_buffer = buf;
  return NULL;
}

tpu_status_t* tpu_buffer_create_pending(int device, const tpu_aval_t* aval, const char* producer, int32_t value,
                                        uint64_t epoch, uint64_t seq, tpu_buffer_t** out_buffer) {
  *out_buffer = NULL;
  size_t nbytes = 0;
  TPU_RETURN_IF_ERROR(aval_nbytes(aval, &nbytes));
  tpu_buffer_t* buf = calloc(1, sizeof *buf);
  if (!buf) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
  buffer_init(buf, device, aval, nbytes, producer);
  atomic_init(&buf->state, BUF_PENDING);
  buf->counted = true;
  buf->fuse_value = value;
  buf->fuse_epoch = epoch;
  buf->fuse_seq = seq;
  *out_buffer = buf;
  return NULL;
}

uint64_t tpu_buffer_fuse_seq(const tpu_buffer_t* buf) { return buf ? buf->fuse_seq : 0; }

bool tpu_buffer_pending_value(const tpu_buffer_t* buf, uint64_t epoch, int32_t* out_value) {
  if (!buf || atomic_load_explicit(&buf->state, memory_order_acquire) != BUF_PENDING || buf->fuse_epoch != epoch)
    return false;
  *out_value = buf->fuse_value;
  return true;
}

bool tpu_buffer_donatable(const tpu_buffer_t* buf, int holders) {
  return buf && !buf->lent && !buf->interned && atomic_load_explicit(&buf->state, memory_order_acquire) == BUF_REAL &&
         !atomic_load_explicit(&buf->donated, memory_order_acquire) &&
         atomic_load_explicit(&buf->refs, memory_order_acquire) == holders;
}

tpu_buffer_t* tpu_buffer_settled(tpu_buffer_t* buf) {
  switch (buf ? atomic_load_explicit(&buf->state, memory_order_acquire) : BUF_FAILED) {
    case BUF_REAL: return buf;
    case BUF_RESOLVED: return buf->target;
    default: return NULL;
  }
}

int tpu_buffer_refcount(const tpu_buffer_t* buf) { return atomic_load_explicit(&buf->refs, memory_order_acquire); }

static void note_donated(tpu_buffer_t* buf, tpu_donation_t* donation) {
  if (!atomic_exchange_explicit(&buf->donated, true, memory_order_acq_rel)) {
    buf->donation = tpu_donation_retain(donation);
    tpu_memory_note_free(buf->device, buf->nbytes);
    tpu_metric_add(TPU_METRIC_DONATED_BUFFERS, 1);
  }
}

void tpu_buffer_note_donations(int nargs, tpu_buffer_t* const* args, const bool* donate, tpu_donation_t* donation) {
  for (int i = 0; donate && i < nargs; i++)
    if (donate[i]) note_donated(args[i], donation);
}

bool tpu_buffer_is_pending(const tpu_buffer_t* buf) {
  return buf && atomic_load_explicit(&buf->state, memory_order_acquire) == BUF_PENDING;
}

tpu_status_t* tpu_buffer_error(const tpu_buffer_t* buf) {
  if (!buf || atomic_load_explicit(&buf->state, memory_order_acquire) != BUF_FAILED) return NULL;
  return TPU_STATUS(tpu_status_code(buf->error), "%s", tpu_status_message(buf->error));
}

void tpu_buffer_resolve(tpu_buffer_t* buf, tpu_buffer_t* real) {
  buf->target = tpu_buffer_retain(real);
  /* The real buffer counts its bytes from now on. */
  if (buf->counted) tpu_memory_note_free(buf->device, buf->nbytes);
  buf->counted = false;
  atomic_store_explicit(&buf->state, BUF_RESOLVED, memory_order_release);
}

void tpu_buffer_fail(tpu_buffer_t* buf, const tpu_status_t* why) {
  buf->error = TPU_STATUS(tpu_status_code(why), "%s", tpu_status_message(why));
  atomic_store_explicit(&buf->state, BUF_FAILED, memory_order_release);
}

void tpu_buffer_set_pending_hooks(const tpu_pending_hooks_t* hooks) {
  g_hooks_store = *hooks;
  atomic_store_explicit(&g_hooks, &g_hooks_store, memory_order_release);
}

tpu_status_t* tpu_buffer_flush_pending(int device) {
  const tpu_pending_hooks_t* h = pending_hooks();
  return h && h->flush ? h->flush(device) : NULL;
}

void tpu_buffer_note_replaced(tpu_buffer_t* old, tpu_buffer_t* buf) {
  /* Every storage swap comes here: the hooks only matter for a placeholder. */
  if (!old || old == buf || !tpu_buffer_is_pending(buf)) return;
  const tpu_pending_hooks_t* h = pending_hooks();
  if (h && h->replaced) h->replaced(old, buf);
}

void tpu_buffer_intern(tpu_buffer_t* buf) { buf->interned = true; }

bool tpu_buffer_interned(const tpu_buffer_t* buf) { return buf && buf->interned; }

/* The real buffer behind `buf`: itself, or a placeholder's target once its
 * program has run (run now if it has not). */
static tpu_status_t* buffer_real(tpu_buffer_t* buf, tpu_buffer_t** out_real) {
  *out_real = buf;
  int state = atomic_load_explicit(&buf->state, memory_order_acquire);
  if (state == BUF_PENDING) {
    TPU_RETURN_IF_ERROR(tpu_buffer_flush_pending(buf->device));
    state = atomic_load_explicit(&buf->state, memory_order_acquire);
  }
  switch (state) {
    case BUF_REAL: return NULL;
    case BUF_RESOLVED: *out_real = buf->target; return NULL;
    case BUF_FAILED: return tpu_buffer_error(buf);
    default: return TPU_STATUS(TPU_INTERNAL, "a fused program left %s's result unresolved", buf->producer);
  }
}

tpu_status_t* tpu_buffer_materialize(tpu_buffer_t* buf, PJRT_Buffer** out_pjrt) {
  *out_pjrt = NULL;
  if (!buf) return TPU_STATUS(TPU_INVALID_ARGUMENT, "buffer is NULL");
  tpu_buffer_t* real = NULL;
  TPU_RETURN_IF_ERROR(buffer_real(buf, &real));
  *out_pjrt = real->pjrt;
  return NULL;
}

/* Large uploads to the CPU plugin go through a pool block (hostpool.h). */
static bool use_hostpool(size_t nbytes) { return nbytes >= TPU_HOSTPOOL_MIN_BYTES && tpu_runtime_platform_is_cpu(); }

/* A failure of from_host before the block was lent: the block goes back. */
static tpu_status_t* drop_block(void* block, tpu_status_t* status) {
  tpu_host_block_release(block);
  return status;
}

static void give_back_block(PJRT_Error* error, void* block) {
  if (error) tpu_status_free(tpu_pjrt_status(api_or_null(), error, __FILE__, __LINE__));
  tpu_host_block_release(block);
}

/* The block behind a zero-copy upload returns to the pool when PJRT is done with
 * it (when the buffer is destroyed). Consumes `done`. If the callback cannot be
 * set, the buffer is destroyed first, so the block can be given back at once. */
static tpu_status_t* lend_block(const PJRT_Api* api, PJRT_Event* done, PJRT_Buffer** buffer, void* block) {
  if (!done) { /* nothing pending: the plugin copied during the call */
    tpu_host_block_release(block);
    return NULL;
  }
  TPU_PJRT_ARGS(PJRT_Event_OnReady_Args, args, user_arg);
  args.event = done;
  args.callback = give_back_block;
  args.user_arg = block;
  tpu_status_t* status = TPU_PJRT_CALL(api, Event_OnReady, &args);
  if (status) {
    tpu_pjrt_buffer_destroy(api, *buffer);
    *buffer = NULL;
    tpu_status_free(tpu_pjrt_event_await(api, done)); /* destroys it */
    tpu_host_block_release(block);
    return status;
  }
  tpu_pjrt_event_destroy(api, done);
  return NULL;
}

/* `block`, when not NULL, is a host pool block holding `data` that the caller
 * hands over (consumed, on failure too): it is lent to the buffer as is. */
static tpu_status_t* from_host(int device, const void* data, void* block, const tpu_aval_t* aval,
                               tpu_buffer_t** out_buffer) {
  if (!out_buffer) return drop_block(block, TPU_STATUS(TPU_INVALID_ARGUMENT, "out_buffer is NULL"));
  *out_buffer = NULL;
  const PJRT_Api* api = api_or_null();
  if (!api) return drop_block(block, not_initialized());
  PJRT_Device* pjrt_device = tpu_client_device(device);
  if (!pjrt_device) {
    return drop_block(block, TPU_STATUS(TPU_INVALID_ARGUMENT, "device %d out of range [0, %d)", device,
                                        tpu_runtime_device_count()));
  }
  size_t nbytes = 0;
  tpu_status_t* bad = aval_nbytes(aval, &nbytes);
  if (!bad && !data && nbytes > 0) bad = TPU_STATUS(TPU_INVALID_ARGUMENT, "host data is NULL");
  if (bad) return drop_block(block, bad);
  static const char kEmpty[16];

  TPU_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args, args, buffer);
  args.client = tpu_client_pjrt();
  args.data = data ? data : kEmpty; /* some plugins dislike NULL even for empty arrays */
  args.type = tpu_dtype_to_pjrt(aval->dtype);
  args.dims = aval->dims;
  args.num_dims = (size_t)aval->rank;
  /* The plugin copies during the call, so the caller may reuse `data` at once;
   * or (large, CPU plugin) `data` is copied here into a block the buffer keeps. */
  args.host_buffer_semantics = PJRT_HostBufferSemantics_ImmutableOnlyDuringCall;
  args.device = pjrt_device;
  if (!block && use_hostpool(nbytes)) {
    TPU_RETURN_IF_ERROR(tpu_host_block_acquire(nbytes, &block));
    memcpy(block, data, nbytes);
  }
  if (block) {
    args.data = block;
    args.host_buffer_semantics = PJRT_HostBufferSemantics_ImmutableZeroCopy;
  }
  tpu_status_t* status = TPU_PJRT_CALL(api, Client_BufferFromHostBuffer, &args);
  if (status) return drop_block(block, status);
  if (block) {
    TPU_RETURN_IF_ERROR(lend_block(api, args.done_with_host_buffer, &args.buffer, block));
    tpu_metric_add(TPU_METRIC_H2D_LENT, 1);
  } else if ((status = tpu_pjrt_event_await(api, args.done_with_host_buffer)) != NULL) {
    tpu_pjrt_buffer_destroy(api, args.buffer);
    return status;
  }
  TPU_RETURN_IF_ERROR(tpu_buffer_wrap(args.buffer, device, aval, NULL, out_buffer));
  (*out_buffer)->lent = block != NULL;
  tpu_metric_add(TPU_METRIC_H2D_TRANSFERS, 1);
  tpu_metric_add(TPU_METRIC_H2D_BYTES, (int64_t)nbytes);
  return NULL;
}

static tpu_status_t* annotate(const tpu_buffer_t* buf, tpu_status_t* status) {
  if (!status || !buf->producer[0]) return status;
  return tpu_status_annotate(status, "%s", buf->producer);
}

tpu_status_t* tpu_buffer_check(tpu_buffer_t* buf, bool wait, bool* out_ready) {
  if (out_ready) *out_ready = false;
  if (!buf) return TPU_STATUS(TPU_INVALID_ARGUMENT, "buffer is NULL");
  tpu_status_t* unresolved = buffer_real(buf, &buf);
  if (unresolved) {
    if (out_ready) *out_ready = true; /* it will never run: that is the error */
    return unresolved;
  }
  /* A donated buffer's data went to the execution it fed, which is tracked in
   * its place (and waited for its producer first). */
  if (atomic_load_explicit(&buf->ready, memory_order_acquire) ||
      atomic_load_explicit(&buf->donated, memory_order_acquire)) {
    if (out_ready) *out_ready = true;
    return NULL;
  }
  const PJRT_Api* api = api_or_null();
  if (!api) return not_initialized();
  TPU_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, ev, event);
  ev.buffer = buf->pjrt;
  tpu_status_t* status = TPU_PJRT_CALL(api, Buffer_ReadyEvent, &ev);
  if (status) {
    /* A plugin may refuse the event of a poisoned buffer: that is the error. */
    if (out_ready) *out_ready = true;
    return annotate(buf, status);
  }
  if (wait) {
    status = tpu_pjrt_event_await(api, ev.event);
  } else {
    TPU_PJRT_ARGS(PJRT_Event_IsReady_Args, is_ready, is_ready);
    is_ready.event = ev.event;
    status = TPU_PJRT_CALL(api, Event_IsReady, &is_ready);
    if (!status && !is_ready.is_ready) {
      tpu_pjrt_event_destroy(api, ev.event);
      return NULL;
    }
    if (!status) {
      TPU_PJRT_ARGS(PJRT_Event_Error_Args, err, event);
      err.event = ev.event;
      status = TPU_PJRT_CALL(api, Event_Error, &err);
    }
    tpu_pjrt_event_destroy(api, ev.event);
  }
  if (out_ready) *out_ready = true;
  if (!status) atomic_store_explicit(&buf->ready, true, memory_order_release);
  return annotate(buf, status);
}

typedef struct ready_callback {
  void (*fn)(void* user);
  void* user;
} ready_callback_t;

static void on_ready_trampoline(PJRT_Error* error, void* user_arg) {
  ready_callback_t cb = *(ready_callback_t*)user_arg;
  free(user_arg);
  /* The failure itself is reported by whoever waits for the buffer. */
  if (error) tpu_status_free(tpu_pjrt_status(api_or_null(), error, __FILE__, __LINE__));
  cb.fn(cb.user);
}

tpu_status_t* tpu_buffer_on_ready(tpu_buffer_t* buf, void (*fn)(void* user), void* user) {
  if (!buf || !fn) return TPU_STATUS(TPU_INVALID_ARGUMENT, "on_ready: buffer or callback is NULL");
  TPU_RETURN_IF_ERROR(buffer_real(buf, &buf));
  if (atomic_load_explicit(&buf->ready, memory_order_acquire)) {
    fn(user);
    return NULL;
  }
  const PJRT_Api* api = api_or_null();
  if (!api) return not_initialized();
  ready_callback_t* cb = malloc(sizeof *cb);
  if (!cb) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "on_ready: out of host memory");
  *cb = (ready_callback_t){fn, user};
  TPU_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, ev, event);
  ev.buffer = buf->pjrt;
  tpu_status_t* status = TPU_PJRT_CALL(api, Buffer_ReadyEvent, &ev);
  if (status) {
    free(cb);
    return annotate(buf, status);
  }
  TPU_PJRT_ARGS(PJRT_Event_OnReady_Args, args, user_arg);
  args.event = ev.event;
  args.callback = on_ready_trampoline;
  args.user_arg = cb;
  status = TPU_PJRT_CALL(api, Event_OnReady, &args);
  if (status) free(cb);
  /* The callback holds on to the buffer's readiness, not to this handle. */
  tpu_pjrt_event_destroy(api, ev.event);
  return status;
}

tpu_status_t* tpu_buffer_await(tpu_buffer_t* buf) {
  if (!buf) return TPU_STATUS(TPU_INVALID_ARGUMENT, "buffer is NULL");
  tpu_metric_add(TPU_METRIC_SYNCS, 1);
  bool ready = false;
  return tpu_buffer_check(buf, true, &ready);
}

static tpu_status_t* to_host(tpu_buffer_t* buf, void* dst, size_t nbytes) {
  if (!buf) return TPU_STATUS(TPU_INVALID_ARGUMENT, "buffer is NULL");
  if (nbytes != buf->nbytes) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "to_host: destination has %zu bytes, buffer has %zu",
                      nbytes, buf->nbytes);
  }
  if (!dst && nbytes > 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "to_host: dst is NULL");
  tpu_metric_add(TPU_METRIC_SYNCS, 1);
  /* A download is a sync point (as .item() is on CUDA): in fused eager mode it
   * ends the device's recording even when `buf` was settled earlier by a cut, so
   * recordings start at the program's sync points (a loop's .item()) and repeat
   * instead of drifting across them. A failure there is reported where the
   * failed results are read, not here. */
  tpu_status_free(tpu_buffer_flush_pending(buf->device));
  TPU_RETURN_IF_ERROR(buffer_real(buf, &buf));
  /* Wait for the producer first so its failure is reported as the producer's,
   * not as a transfer error. */
  bool ready = false;
  TPU_RETURN_IF_ERROR(tpu_buffer_check(buf, true, &ready));
  if (nbytes == 0) return NULL;
  const PJRT_Api* api = api_or_null();
  if (!api) return not_initialized();
  TPU_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, args, event);
  args.src = buf->pjrt;
  args.host_layout = NULL; /* dense row-major */
  args.dst = dst;
  args.dst_size = nbytes;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, Buffer_ToHostBuffer, &args));
  TPU_RETURN_IF_ERROR(annotate(buf, tpu_pjrt_event_await(api, args.event)));
  tpu_metric_add(TPU_METRIC_D2H_TRANSFERS, 1);
  tpu_metric_add(TPU_METRIC_D2H_BYTES, (int64_t)nbytes);
  return NULL;
}

tpu_status_t* tpu_buffer_from_host(int device, const void* data, const tpu_aval_t* aval,
                                   tpu_buffer_t** out_buffer) {
  tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_H2D, NULL);
  tpu_status_t* status = from_host(device, data, NULL, aval, out_buffer);
  tpu_trace_end(range);
  return status;
}

tpu_status_t* tpu_buffer_from_block(int device, void* block, const tpu_aval_t* aval,
                                    tpu_buffer_t** out_buffer) {
  if (!block) return TPU_STATUS(TPU_INVALID_ARGUMENT, "host block is NULL");
  if (!tpu_runtime_platform_is_cpu()) { /* a plugin that copies: the block goes back at once */
    tpu_status_t* status = tpu_buffer_from_host(device, block, aval, out_buffer);
    tpu_host_block_release(block);
    return status;
  }
  tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_H2D, NULL);
  tpu_status_t* status = from_host(device, block, block, aval, out_buffer);
  tpu_trace_end(range);
  return status;
}

tpu_status_t* tpu_buffer_to_host(tpu_buffer_t* buf, void* dst, size_t nbytes) {
  tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_D2H, NULL);
  tpu_status_t* status = to_host(buf, dst, nbytes);
  tpu_trace_end(range);
  return status;
}

tpu_buffer_t* tpu_buffer_retain(tpu_buffer_t* buf) {
  if (buf) atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed);
  return buf;
}

void tpu_buffer_release(tpu_buffer_t* buf) {
  if (!buf) return;
  if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1) return;
  int state = atomic_load_explicit(&buf->state, memory_order_acquire);
  const tpu_pending_hooks_t* h = state == BUF_PENDING ? pending_hooks() : NULL;
  if (h && h->dead) {
    /* No longer wanted from its fused program (which may be running it now). */
    h->dead(buf);
    state = atomic_load_explicit(&buf->state, memory_order_acquire);
  }
  if (state == BUF_REAL) {
    /* After a shutdown the client (and its buffers) are gone; only free ours. */
    if (atomic_load_explicit(&buf->donated, memory_order_acquire)) {
      tpu_donation_bury(buf->pjrt, buf->donation); /* destroying it now could wait for the device */
    } else {
      tpu_pjrt_buffer_destroy(api_or_null(), buf->pjrt);
      tpu_memory_note_free(buf->device, buf->nbytes);
    }
  } else {
    if (buf->counted) tpu_memory_note_free(buf->device, buf->nbytes);
    tpu_buffer_release(buf->target);
    tpu_status_free(buf->error);
  }
  free(buf);
}

const tpu_aval_t* tpu_buffer_aval(const tpu_buffer_t* buf) { return buf ? &buf->aval : NULL; }
int tpu_buffer_device(const tpu_buffer_t* buf) { return buf ? buf->device : -1; }
size_t tpu_buffer_nbytes(const tpu_buffer_t* buf) { return buf ? buf->nbytes : 0; }
