/* The binding's entry points: ops, copies, uploads and downloads. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec.h"

int64_t tpu_tensor_numel(const tpu_tensor_t* t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; ++i) n *= t->sizes[i];
  return n;
}

bool tpu_tensor_is_contiguous(const tpu_tensor_t* t) {
  int64_t expected = 1;
  for (int i = t->rank - 1; i >= 0; --i) {
    if (t->sizes[i] == 0) return true;
    if (t->sizes[i] != 1 && t->strides[i] != expected) return false;
    expected *= t->sizes[i];
  }
  return true;
}

/* Does the view cover its whole storage, densely, from offset 0? */
static bool tpu_tensor_covers_storage(const tpu_tensor_t* t) {
  return t->offset == 0 && tpu_tensor_is_contiguous(t) &&
         (size_t)tpu_tensor_numel(t) * tpu_dtype_size(t->dtype) == tpu_storage_nbytes(t->storage);
}

tpu_tensor_t tpu_tensor_dense(tpu_storage_t* s, tpu_dtype_t dtype, int rank, const int64_t* sizes) {
  tpu_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.storage = s;
  t.dtype = dtype;
  t.rank = rank;
  int64_t st = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = st;
    st *= sizes[i] ? sizes[i] : 1;
  }
  return t;
}

/* ------------------------------------------------------------------- ops */

/* Reads and drops the trailing lengths vector of a dynamic-shape op: i64[2n],
 * result i's true size in entry i and the dim it sizes in entry n + i
 * (ops/index.h, tpu_idx_lengths). */
static tpu_status_t* tpu_read_lengths(const char* name, tpu_buffer_t** bufs, int* n, int64_t* lengths) {
  if (*n < 1) return TPU_STATUS(TPU_INTERNAL, "%s: dynamic-shape op without its lengths", name);
  tpu_buffer_t* lb = bufs[--*n];
  const tpu_aval_t* a = tpu_buffer_aval(lb);
  tpu_status_t* st = NULL;
  if (a->dtype != TPU_I64 || a->rank != 1 || a->dims[0] != 2 * (int64_t)*n)
    st = TPU_STATUS(TPU_INTERNAL, "%s: lengths must be i64[%d]", name, 2 * *n);
  if (!st) st = tpu_buffer_to_host(lb, lengths, sizeof(int64_t) * 2 * (size_t)*n);
  tpu_buffer_release(lb);
  if (st) {
    for (int i = 0; i < *n; ++i) tpu_buffer_release(bufs[i]);
    *n = 0;
  }
  return st;
}

/* Wraps the op's output buffers (all consumed) as results; trims one dim of each
 * result of a dynamic-shape op by its lengths (entry i: the size, -1 = keep;
 * entry n + i: the dim). */
tpu_status_t* tpu_op_results(int device, unsigned flags, tpu_buffer_t** bufs, int n, const int64_t* lengths,
                             tpu_result_t* out_results) {
  tpu_status_t* st = NULL;
  for (int i = 0; i < n; ++i) {
    const tpu_aval_t* a = tpu_buffer_aval(bufs[i]);
    tpu_result_t* r = &out_results[i];
    memset(r, 0, sizeof(*r));
    if (!st) st = tpu_storage_create(device, tpu_buffer_nbytes(bufs[i]), &r->storage);
    if (!st) {
      tpu_storage_set_buffer(r->storage, bufs[i], tpu_buffer_nbytes(bufs[i]));
      r->dtype = a->dtype;
      r->rank = a->rank;
      memcpy(r->sizes, a->dims, sizeof(int64_t) * (size_t)a->rank);
      int64_t d = (flags & TPU_LOWER_DYNAMIC_SHAPE) ? lengths[n + i] : -1;
      if (d >= 0 && d < a->rank && lengths[i] >= 0 && lengths[i] <= a->dims[d]) r->sizes[d] = lengths[i];
    }
    tpu_buffer_release(bufs[i]);
  }
  if (st)
    for (int i = 0; i < n; ++i) tpu_storage_release(out_results[i].storage);
  return st;
}

/* A copy of `args` with argument i (the op's runtime float, ops/table.c) turned
 * into a runtime scalar operand, or *out_args NULL when there is none to convert. */
static tpu_status_t* tpu_op_runtime_floats(const char* name, int i, const tpu_arg_t* args, int nargs,
                                           tpu_arg_t** out_args) {
  *out_args = NULL;
  if (i < 0 || i >= nargs || args[i].kind != TPU_ARG_FLOAT) return NULL;
  tpu_arg_t* copy = malloc(sizeof(*copy) * (size_t)nargs);
  if (!copy) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "%s: out of host memory", name);
  memcpy(copy, args, sizeof(*copy) * (size_t)nargs);
  const double v = args[i].u.f;
  memset(&copy[i], 0, sizeof(copy[i]));
  copy[i].kind = TPU_ARG_SCALAR;
  copy[i].u.scalar.dtype = TPU_F64;
  copy[i].u.scalar.wrapped = true;
  copy[i].u.scalar.f = v;
  *out_args = copy;
  return NULL;
}

/* Most ops return a few results: their buffers live on the stack. */
#define TPU_SMALL_RESULTS 16

tpu_status_t* tpu_op_run(const char* name, const char* overload, int device, const tpu_arg_t* args,
                         int nargs, int max_results, tpu_result_t* out_results, int* out_nresults) {
  *out_nresults = 0;
  const tpu_lowering_info_t* info = tpu_lowering_info(name);
  if (!info)
    return TPU_STATUS(TPU_UNIMPLEMENTED, "no lowering for aten::%s%s%s", name, overload && *overload ? "." : "",
                      overload ? overload : "");
  unsigned flags = info->flags;
  int cap = max_results > 0 ? max_results : 0;
  if (flags & TPU_LOWER_DYNAMIC_SHAPE) cap++; /* room for the lengths vector */
  /* Sized by the caller's bound: no fixed cap on the number of results. */
  tpu_buffer_t* small_bufs[TPU_SMALL_RESULTS];
  int64_t small_lengths[2 * TPU_SMALL_RESULTS];
  bool small = cap <= TPU_SMALL_RESULTS;
  tpu_buffer_t** bufs = small ? small_bufs : calloc((size_t)cap, sizeof(*bufs));
  int64_t* lengths = small ? small_lengths : calloc(2 * (size_t)cap, sizeof(*lengths));
  int n = 0;
  tpu_status_t* st = bufs && lengths ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  tpu_arg_t* own_args = NULL;
  if (!st) st = tpu_op_runtime_floats(name, info->runtime_float, args, nargs, &own_args);
  if (own_args) args = own_args;
  if (!st) st = tpu_exec_run(name, overload, info->fn, flags, device, args, nargs, cap, bufs, &n);
  free(own_args);
  if (!st && (flags & TPU_LOWER_DYNAMIC_SHAPE)) st = tpu_read_lengths(name, bufs, &n, lengths);
  /* Reading the lengths synchronised: report check failures (check.h) as a sync does. */
  if (!st && (flags & TPU_LOWER_DYNAMIC_SHAPE) && (st = tpu_check_sync(device)) != NULL) {
    for (int i = 0; i < n; ++i) tpu_buffer_release(bufs[i]);
    n = 0;
  }
  if (!st && n > max_results) {
    for (int i = 0; i < n; ++i) tpu_buffer_release(bufs[i]);
    st = TPU_STATUS(TPU_INTERNAL, "%s: %d results, room for %d", name, n, max_results);
  }
  if (!st) st = tpu_op_results(device, flags, bufs, n, lengths, out_results);
  if (!small) {
    free(bufs);
    free(lengths);
  }
  if (!st) *out_nresults = n;
  return st;
}

bool tpu_op_supported(const char* name) { return tpu_lowering_find(name) != NULL; }

bool tpu_op_wants_out_dtype(const char* name) { return (tpu_lowering_flags(name) & TPU_LOWER_OUT_DTYPE) != 0; }

/* ----------------------------------------------------------------- copies */

/* copy_: arg 0 is the destination view, arg 1 the source. */
static tpu_status_t* tpu_lower_copy(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                    int* out_nouts) {
  (void)max_outs;
  tpu_aval_t dst = tpu_op_aval(op, 0);
  tpu_val_t v = tpu_op_tensor(b, op, 1);
  v = tpu_b_convert(b, tpu_b_broadcast_to(b, v, dst.rank, dst.dims), dst.dtype);
  outs[0] = tpu_op_write_view(b, op, 0, v);
  *out_nouts = 1;
  return NULL;
}

/* Reads a view into a dense value of its own shape. */
static tpu_status_t* tpu_lower_materialize(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* out_nouts) {
  (void)max_outs;
  outs[0] = tpu_op_tensor(b, op, 0);
  *out_nouts = 1;
  return NULL;
}

static tpu_status_t* tpu_check_tensor(const tpu_tensor_t* t, const char* what) {
  if (!t || !t->storage) return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: tensor has no storage", what);
  if (t->rank < 0 || t->rank > TPU_MAX_RANK) return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: rank %d", what, t->rank);
  if (!tpu_dtype_valid((int)t->dtype)) return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: invalid dtype", what);
  return NULL;
}

tpu_status_t* tpu_tensor_copy(const tpu_tensor_t* dst, const tpu_tensor_t* src) {
  TPU_RETURN_IF_ERROR(tpu_check_tensor(dst, "copy_"));
  TPU_RETURN_IF_ERROR(tpu_check_tensor(src, "copy_"));
  if (tpu_tensor_numel(dst) == 0) return NULL;
  int device = tpu_storage_device(dst->storage);
  if (tpu_storage_device(src->storage) != device) {
    /* Across devices: stage through the host. */
    size_t n = (size_t)tpu_tensor_numel(src) * tpu_dtype_size(src->dtype);
    void* host = malloc(n ? n : 1);
    if (!host) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "copy_: out of host memory");
    tpu_status_t* st = tpu_tensor_download(src, host, n);
    tpu_storage_t* tmp = NULL;
    if (!st) st = tpu_storage_create(device, n, &tmp);
    tpu_tensor_t t = tpu_tensor_dense(tmp, src->dtype, src->rank, src->sizes);
    if (!st) st = tpu_tensor_upload(&t, host, src->dtype);
    if (!st) st = tpu_tensor_copy(dst, &t);
    tpu_storage_release(tmp);
    free(host);
    return st;
  }
  /* The common case needs no device work: the destination adopts the buffer. */
  bool same_shape = dst->rank == src->rank && dst->dtype == src->dtype;
  for (int i = 0; same_shape && i < dst->rank; ++i) same_shape = dst->sizes[i] == src->sizes[i];
  if (same_shape && tpu_tensor_covers_storage(dst) && tpu_tensor_covers_storage(src)) {
    tpu_buffer_t* buf = tpu_storage_buffer(src->storage);
    if (!buf || tpu_buffer_aval(buf)->dtype == src->dtype) {
      tpu_storage_set_buffer(dst->storage, buf, tpu_storage_nbytes(dst->storage));
      tpu_buffer_release(buf);
      return NULL;
    }
    tpu_buffer_release(buf);
  }
  tpu_arg_t args[2];
  memset(args, 0, sizeof(args));
  args[0].kind = TPU_ARG_TENSOR;
  args[0].u.tensor = *dst;
  args[1].kind = TPU_ARG_TENSOR;
  args[1].u.tensor = *src;
  tpu_buffer_t* out = NULL;
  int n = 0;
  TPU_RETURN_IF_ERROR(tpu_exec_run("copy_", "", tpu_lower_copy, 0, device, args, 2, 1, &out, &n));
  tpu_storage_set_buffer(dst->storage, out, tpu_storage_nbytes(dst->storage));
  tpu_buffer_release(out);
  return NULL;
}

/* An upload in `dtype` whose buffer can become dst's storage as it is. */
static bool tpu_tensor_takes_whole(const tpu_tensor_t* dst, tpu_dtype_t dtype) {
  return dtype == dst->dtype && tpu_tensor_covers_storage(dst);
}

/* dst's storage adopts `buf` (consumed). */
static tpu_status_t* tpu_tensor_adopt(const tpu_tensor_t* dst, tpu_buffer_t* buf) {
  tpu_storage_set_buffer(dst->storage, buf, tpu_storage_nbytes(dst->storage));
  tpu_buffer_release(buf);
  return NULL;
}

tpu_status_t* tpu_tensor_upload(const tpu_tensor_t* dst, const void* host, tpu_dtype_t host_dtype) {
  TPU_RETURN_IF_ERROR(tpu_check_tensor(dst, "upload"));
  if (!tpu_dtype_valid((int)host_dtype)) return TPU_STATUS(TPU_INVALID_ARGUMENT, "upload: invalid host dtype");
  if (tpu_tensor_numel(dst) == 0) return NULL;
  int device = tpu_storage_device(dst->storage);
  tpu_aval_t a = tpu_aval_make(host_dtype, dst->rank, dst->sizes);
  tpu_buffer_t* buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_from_host(device, host, &a, &buf));
  if (tpu_tensor_takes_whole(dst, host_dtype)) return tpu_tensor_adopt(dst, buf);
  tpu_storage_t* tmp = NULL;
  tpu_status_t* st = tpu_storage_create(device, tpu_buffer_nbytes(buf), &tmp);
  if (!st) {
    tpu_storage_set_buffer(tmp, buf, tpu_buffer_nbytes(buf));
    tpu_tensor_t src = tpu_tensor_dense(tmp, host_dtype, dst->rank, dst->sizes);
    st = tpu_tensor_copy(dst, &src);
  }
  tpu_storage_release(tmp);
  tpu_buffer_release(buf);
  return st;
}

tpu_status_t* tpu_tensor_upload_block(const tpu_tensor_t* dst, void* block, tpu_dtype_t host_dtype) {
  if (!block) return TPU_STATUS(TPU_INVALID_ARGUMENT, "upload: host block is NULL");
  tpu_status_t* st = tpu_check_tensor(dst, "upload");
  if (!st && !tpu_dtype_valid((int)host_dtype)) st = TPU_STATUS(TPU_INVALID_ARGUMENT, "upload: invalid host dtype");
  if (st || !tpu_tensor_takes_whole(dst, host_dtype) || tpu_tensor_numel(dst) == 0) {
    if (!st) st = tpu_tensor_upload(dst, block, host_dtype); /* a copy: the block is free again after it */
    tpu_host_block_release(block);
    return st;
  }
  tpu_aval_t a = tpu_aval_make(host_dtype, dst->rank, dst->sizes);
  tpu_buffer_t* buf = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_from_block(tpu_storage_device(dst->storage), block, &a, &buf));
  return tpu_tensor_adopt(dst, buf);
}

static tpu_status_t* tpu_tensor_download_data(const tpu_tensor_t* src, void* host, size_t host_nbytes) {
  TPU_RETURN_IF_ERROR(tpu_check_tensor(src, "download"));
  size_t need = (size_t)tpu_tensor_numel(src) * tpu_dtype_size(src->dtype);
  if (host_nbytes != need)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "download: host buffer has %zu bytes, tensor needs %zu", host_nbytes, need);
  if (need == 0) return NULL;
  tpu_buffer_t* buf = tpu_storage_buffer(src->storage);
  tpu_view_mode_t mode = tpu_view_classify(src, buf);
  if (mode == TPU_VIEW_ZEROS) {
    memset(host, 0, need);
    return NULL;
  }
  if (mode != TPU_VIEW_FULL) {
    tpu_buffer_release(buf);
    buf = NULL;
    tpu_arg_t arg;
    memset(&arg, 0, sizeof(arg));
    arg.kind = TPU_ARG_TENSOR;
    arg.u.tensor = *src;
    int n = 0;
    TPU_RETURN_IF_ERROR(tpu_exec_run("contiguous", "", tpu_lower_materialize, 0, tpu_storage_device(src->storage),
                                     &arg, 1, 1, &buf, &n));
  }
  tpu_status_t* st = tpu_buffer_to_host(buf, host, need);
  tpu_buffer_release(buf);
  return st;
}

/* A download is a sync point: device-side check failures (check.h) surface here. */
tpu_status_t* tpu_tensor_download(const tpu_tensor_t* src, void* host, size_t host_nbytes) {
  TPU_RETURN_IF_ERROR(tpu_tensor_download_data(src, host, host_nbytes));
  return tpu_check_sync(tpu_storage_device(src->storage));
}
