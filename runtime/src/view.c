/* View prologue and epilogue (DESIGN.md §3).
 *
 * A storage buffer is read as a flat vector. A strided view whose dims, sorted by
 * stride, nest inside each other is a "window": slice [offset, offset+span) →
 * reshape to the parent shape → slice each dim → transpose → broadcast. The
 * offset may be a runtime operand (dynamic_slice), so a moving KV-cache position
 * does not recompile. Anything else (overlapping or unevenly strided views)
 * falls back to a gather / scatter over computed flat indices. */
#include <stdlib.h>
#include <string.h>

#include "exec.h"

typedef struct tpu_window {
  int k;                          /* dims with size > 1 and stride != 0 */
  int64_t order[TPU_MAX_RANK];    /* those dims, by decreasing stride */
  int prank;                      /* parent rank (k, or k+1 with an inner stride dim) */
  int64_t parent[TPU_MAX_RANK + 1];
  int64_t limit[TPU_MAX_RANK + 1];
  int64_t span;                   /* elements covered by the parent */
} tpu_window_t;

/* Fills `w` and returns true when the view is a window (see above). */
static bool tpu_window_plan(const tpu_tensor_t* t, tpu_window_t* w) {
  memset(w, 0, sizeof(*w));
  for (int i = 0; i < t->rank; ++i) {
    if (t->sizes[i] == 1 || t->strides[i] == 0) continue;
    if (t->strides[i] < 0) return false;
    int j = w->k++;
    while (j > 0 && t->strides[w->order[j - 1]] < t->strides[i]) {
      w->order[j] = w->order[j - 1];
      --j;
    }
    w->order[j] = i;
  }
  if (w->k == 0) {
    w->span = 1;
    return true;
  }
  for (int j = 0; j + 1 < w->k; ++j) {
    int64_t s = t->strides[w->order[j]], s_in = t->strides[w->order[j + 1]];
    if (s % s_in != 0 || t->sizes[w->order[j + 1]] * s_in > s) return false;
  }
  for (int j = 0; j < w->k; ++j) {
    int64_t d = w->order[j];
    w->parent[j] = j == 0 ? t->sizes[d] : t->strides[w->order[j - 1]] / t->strides[d];
    w->limit[j] = t->sizes[d];
  }
  w->prank = w->k;
  int64_t inner = t->strides[w->order[w->k - 1]];
  if (inner > 1) {
    w->parent[w->prank] = inner;
    w->limit[w->prank] = 1;
    w->prank++;
  }
  w->span = t->sizes[w->order[0]] * t->strides[w->order[0]];
  return true;
}

tpu_view_mode_t tpu_view_classify(const tpu_tensor_t* t, const tpu_buffer_t* buffer) {
  return tpu_view_classify_aval(t, buffer ? tpu_buffer_aval(buffer) : NULL);
}

tpu_view_mode_t tpu_view_classify_aval(const tpu_tensor_t* t, const tpu_aval_t* ba) {
  if (!t->storage) return TPU_VIEW_ABSENT;
  if (!ba) return TPU_VIEW_ZEROS;
  int64_t n = tpu_tensor_numel(t);
  if (t->offset == 0 && ba->dtype == t->dtype && tpu_aval_numel(ba) == n &&
      tpu_tensor_is_contiguous(t))
    return TPU_VIEW_FULL;
  tpu_window_t w;
  if (n > 0 && tpu_window_plan(t, &w)) return TPU_VIEW_DYNAMIC;
  return TPU_VIEW_STATIC;
}

tpu_val_t tpu_view_flatten(tpu_builder_t* b, tpu_val_t buffer, tpu_dtype_t dtype) {
  const tpu_aval_t in = *tpu_b_aval(b, buffer);
  int64_t n = tpu_aval_numel(&in);
  tpu_val_t flat = tpu_b_reshape(b, buffer, 1, &n);
  if (in.dtype == dtype) return flat;
  size_t from = tpu_dtype_size(in.dtype), to = tpu_dtype_size(dtype);
  if (in.dtype == TPU_BOOL || dtype == TPU_BOOL) {
    /* PyTorch stores bool as one byte 0/1; reinterpret through u8. */
    if (from != to) {
      TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "viewing %s storage as %s", tpu_dtype_name(in.dtype), tpu_dtype_name(dtype));
      return TPU_NOVAL;
    }
    if (in.dtype != TPU_BOOL) flat = tpu_b_bitcast(b, flat, &(tpu_aval_t){TPU_U8, 1, {n}});
    return tpu_b_convert(b, flat, dtype);
  }
  if (from == to) return tpu_b_bitcast(b, flat, &(tpu_aval_t){dtype, 1, {n}});
  if (from > to) {
    int64_t r = (int64_t)(from / to);
    tpu_val_t v = tpu_b_bitcast(b, flat, &(tpu_aval_t){dtype, 2, {n, r}});
    int64_t m = n * r;
    return tpu_b_reshape(b, v, 1, &m);
  }
  int64_t r = (int64_t)(to / from);
  if (n % r) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "storage of %lld %s elements cannot be viewed as %s",
               (long long)n, tpu_dtype_name(in.dtype), tpu_dtype_name(dtype));
    return TPU_NOVAL;
  }
  tpu_val_t v = tpu_b_reshape(b, flat, 2, (int64_t[]){n / r, r});
  return tpu_b_bitcast(b, v, &(tpu_aval_t){dtype, 1, {n / r}});
}

tpu_val_t tpu_view_unflatten(tpu_builder_t* b, tpu_val_t flat, const tpu_aval_t* ba) {
  tpu_dtype_t dtype = tpu_b_dtype(b, flat);
  int64_t n = tpu_aval_numel(ba);
  if (dtype != ba->dtype) {
    size_t from = tpu_dtype_size(dtype), to = tpu_dtype_size(ba->dtype);
    if (dtype == TPU_BOOL || ba->dtype == TPU_BOOL) {
      flat = tpu_b_convert(b, flat, ba->dtype == TPU_BOOL ? TPU_BOOL : TPU_U8);
      if (ba->dtype != TPU_BOOL) flat = tpu_b_bitcast(b, flat, &(tpu_aval_t){ba->dtype, 1, {n}});
    } else if (from == to) {
      flat = tpu_b_bitcast(b, flat, &(tpu_aval_t){ba->dtype, 1, {n}});
    } else if (from < to) {
      int64_t r = (int64_t)(to / from);
      flat = tpu_b_reshape(b, flat, 2, (int64_t[]){n, r});
      flat = tpu_b_bitcast(b, flat, &(tpu_aval_t){ba->dtype, 1, {n}});
    } else {
      int64_t r = (int64_t)(from / to);
      flat = tpu_b_bitcast(b, flat, &(tpu_aval_t){ba->dtype, 2, {n / r, r}});
    }
  }
  return tpu_b_reshape(b, flat, ba->rank, ba->dims);
}

/* Flat indices offset + sum(i_d * stride_d) over the view's shape, as i64. */
static tpu_val_t tpu_view_indices(tpu_builder_t* b, const tpu_tensor_t* t, tpu_val_t offset_val) {
  tpu_aval_t a = tpu_aval_make(TPU_I64, t->rank, t->sizes);
  tpu_val_t idx = offset_val != TPU_NOVAL ? tpu_b_broadcast_in_dim(b, offset_val, a.rank, a.dims, NULL)
                                          : tpu_b_full(b, &a, (double)t->offset);
  if (offset_val == TPU_NOVAL && t->offset > (1LL << 52)) TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "offset too large");
  for (int d = 0; d < t->rank; ++d) {
    if (t->sizes[d] == 1 || t->strides[d] == 0) continue;
    tpu_val_t term = tpu_b_binary(b, "stablehlo.multiply", tpu_b_iota(b, &a, d),
                                  tpu_b_broadcast_in_dim(b, tpu_b_const_i(b, TPU_I64, t->strides[d]),
                                                         a.rank, a.dims, NULL));
    idx = tpu_b_binary(b, "stablehlo.add", idx, term);
  }
  int64_t dims[TPU_MAX_RANK + 1];
  memcpy(dims, t->sizes, sizeof(int64_t) * (size_t)t->rank);
  dims[t->rank] = 1;
  return tpu_b_reshape(b, idx, t->rank + 1, dims);
}

/* The parent window spans more than the view reaches (its last row is short):
 * pad the flat buffer by the difference, a static amount, so that any valid
 * offset — static or a runtime operand — keeps the window in bounds. */
static tpu_val_t tpu_view_pad_window(tpu_builder_t* b, tpu_val_t flat, const tpu_tensor_t* t,
                                     const tpu_window_t* w) {
  int64_t extent = 1;
  for (int d = 0; d < t->rank; ++d) extent += (t->sizes[d] - 1) * t->strides[d];
  if (w->span <= extent) return flat;
  int64_t lo = 0, hi = w->span - extent;
  return tpu_b_pad(b, flat, tpu_b_const(b, tpu_b_dtype(b, flat), 0.0), &lo, &hi, NULL);
}

static tpu_val_t tpu_view_segment(tpu_builder_t* b, tpu_val_t flat, int64_t offset, tpu_val_t offset_val,
                                  int64_t span) {
  if (offset_val != TPU_NOVAL) return tpu_b_dynamic_slice(b, flat, &offset_val, &span);
  int64_t start = offset, limit = offset + span;
  return tpu_b_slice(b, flat, &start, &limit, NULL);
}

tpu_val_t tpu_view_read(tpu_builder_t* b, tpu_val_t flat, const tpu_tensor_t* t, tpu_val_t offset_val) {
  tpu_aval_t out = tpu_aval_make(t->dtype, t->rank, t->sizes);
  if (tpu_aval_numel(&out) == 0) return tpu_b_full(b, &out, 0.0);
  tpu_window_t w;
  if (!tpu_window_plan(t, &w)) {
    int64_t n = tpu_b_aval(b, flat)->dims[0];
    tpu_val_t idx = tpu_view_indices(b, t, offset_val);
    int64_t zero = 0, one = 1, slice = 1;
    tpu_gather_dims_t g = {0, NULL, 1, &zero, 1, &zero, t->rank, &slice};
    (void)one;
    (void)n;
    return tpu_b_gather(b, flat, idx, &g, &out);
  }
  flat = tpu_view_pad_window(b, flat, t, &w);
  tpu_val_t v = tpu_view_segment(b, flat, t->offset, offset_val, w.span);
  if (w.k == 0) return tpu_b_broadcast_in_dim(b, tpu_b_reshape(b, v, 0, NULL), out.rank, out.dims, NULL);
  v = tpu_b_reshape(b, v, w.prank, w.parent);
  int64_t zeros[TPU_MAX_RANK + 1] = {0};
  v = tpu_b_slice(b, v, zeros, w.limit, NULL);
  v = tpu_b_reshape(b, v, w.k, w.limit);
  /* Sorted order → the view's own order among its real dims. */
  int64_t real[TPU_MAX_RANK], perm[TPU_MAX_RANK], real_sizes[TPU_MAX_RANK];
  int nreal = 0;
  for (int i = 0; i < t->rank; ++i)
    if (!(t->sizes[i] == 1 || t->strides[i] == 0)) real[nreal++] = i;
  for (int r = 0; r < nreal; ++r) {
    for (int j = 0; j < w.k; ++j)
      if (w.order[j] == real[r]) perm[r] = j;
    real_sizes[r] = t->sizes[real[r]];
  }
  v = tpu_b_transpose(b, v, perm);
  (void)real_sizes;
  return tpu_b_broadcast_in_dim(b, v, out.rank, out.dims, real);
}

tpu_val_t tpu_view_write(tpu_builder_t* b, tpu_val_t flat, const tpu_tensor_t* t, tpu_val_t offset_val,
                         tpu_val_t value) {
  int64_t numel = tpu_tensor_numel(t);
  if (numel == 0) return flat;
  int64_t n = tpu_b_aval(b, flat)->dims[0];
  for (int i = 0; i < t->rank; ++i) {
    if (t->strides[i] == 0 && t->sizes[i] > 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "unsupported operation: more than one element of the written-to tensor refers to a "
                 "single memory location. Please clone() the tensor before performing the operation.");
      return TPU_NOVAL;
    }
  }
  tpu_window_t w;
  if (!tpu_window_plan(t, &w)) {
    tpu_val_t idx = tpu_view_indices(b, t, offset_val);
    int64_t zero = 0;
    tpu_scatter_dims_t s = {0, NULL, 1, &zero, 1, &zero, t->rank};
    return tpu_b_scatter(b, flat, idx, value, &s, NULL);
  }
  flat = tpu_view_pad_window(b, flat, t, &w);
  /* value (view order) → sorted order, with the inner stride dim of size 1. */
  int64_t real[TPU_MAX_RANK], perm[TPU_MAX_RANK], real_sizes[TPU_MAX_RANK];
  int nreal = 0;
  for (int i = 0; i < t->rank; ++i)
    if (t->sizes[i] != 1) real[nreal++] = i;
  for (int r = 0; r < nreal; ++r) real_sizes[r] = t->sizes[real[r]];
  tpu_val_t v = tpu_b_reshape(b, value, nreal, real_sizes);
  for (int j = 0; j < w.k; ++j)
    for (int r = 0; r < nreal; ++r)
      if (real[r] == w.order[j]) perm[j] = r;
  v = tpu_b_transpose(b, v, perm);
  v = tpu_b_reshape(b, v, w.prank, w.limit);
  tpu_val_t seg = tpu_view_segment(b, flat, t->offset, offset_val, w.span);
  seg = tpu_b_reshape(b, seg, w.prank, w.parent);
  tpu_val_t zeros[TPU_MAX_RANK + 1];
  tpu_val_t z = tpu_b_const_i(b, TPU_I64, 0);
  for (int j = 0; j < w.prank; ++j) zeros[j] = z;
  seg = tpu_b_dynamic_update_slice(b, seg, v, zeros);
  seg = tpu_b_reshape(b, seg, 1, &w.span);
  tpu_val_t start = offset_val != TPU_NOVAL ? offset_val : tpu_b_const_i(b, TPU_I64, t->offset);
  flat = tpu_b_dynamic_update_slice(b, flat, seg, &start);
  if (tpu_b_aval(b, flat)->dims[0] != n) {
    int64_t s0 = 0;
    flat = tpu_b_slice(b, flat, &s0, &n, NULL);
  }
  return flat;
}
