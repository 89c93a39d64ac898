/* Lowerings: shape family (cat, flips and rolls, padding, resampling).
 *
 * Padding (reflection/replication) and upsampling are separable: along each
 * spatial dim, output element o is a weighted sum of a few input elements whose
 * positions and weights depend only on shapes and static arguments. Those "taps"
 * are computed on the host with PyTorch's own formulas (same float arithmetic)
 * and embedded as constants; the forward op gathers and sums them, the backward
 * op scatter-adds through the same taps (the adjoint). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "index.h"

#ifndef M_PI /* -std=c11 hides it */
#define M_PI 3.14159265358979323846
#endif

static tpu_status_t* tpu_shape_one(tpu_val_t v, tpu_val_t* outs, int* nouts) {
  return tpu_ops_result1(v, outs, nouts);
}

static void tpu_shape_fmt_sizes(char* buf, size_t cap, const tpu_aval_t* a) {
  tpu_fmt_i64_list(buf, cap, a->rank, a->dims);
}

/* ==================================================================== cat */

/* cat(tensors, dim): PyTorch's legacy rule skips 1-D empty tensors; the result
 * type promotes over all inputs. */
static tpu_status_t* tpu_lower_cat(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int n = tpu_op_list_len(op, 0);
  if (n == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.cat(): expected a non-empty list of Tensors");
    return NULL;
  }
  tpu_dtype_t rt = tpu_op_list_aval(op, 0, 0).dtype;
  int ref = -1;
  for (int j = 0; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, 0, j);
    if (j) rt = tpu_dtype_promote(rt, a.dtype);
    if (a.rank == 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "zero-dimensional tensor (at position %d) cannot be concatenated", j);
      return NULL;
    }
    bool skip = a.rank == 1 && a.dims[0] == 0;
    if (!skip && ref < 0) ref = j;
  }
  if (ref < 0) { /* everything skipped: an empty 1-D result */
    int64_t zero = 0;
    tpu_aval_t e = tpu_aval_make(rt, 1, &zero);
    return tpu_shape_one(tpu_b_full(b, &e, 0.0), outs, nouts);
  }
  tpu_aval_t ra = tpu_op_list_aval(op, 0, ref);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), ra.rank);
  if (!tpu_b_ok(b)) return NULL;
  tpu_aval_t out = ra;
  out.dtype = rt;
  out.dims[dim] = 0;
  tpu_val_t parts[64];
  int np = 0;
  for (int j = 0; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, 0, j);
    if (a.rank == 1 && a.dims[0] == 0) continue;
    if (a.rank != ra.rank) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Tensors must have same number of dimensions: got %d and %d", ra.rank, a.rank);
      return NULL;
    }
    for (int d = 0; d < a.rank; ++d) {
      if (d != dim && a.dims[d] != ra.dims[d]) {
        TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                   "Sizes of tensors must match except in dimension %d. Expected size %" PRId64 " but got size %" PRId64
                   " for tensor number %d in the list.", dim, ra.dims[d], a.dims[d], j);
        return NULL;
      }
    }
    out.dims[dim] += a.dims[dim];
    if (a.dims[dim] == 0) continue;
    if (np == (int)TPU_ARRAY_LEN(parts)) { /* many inputs: fold into one part */
      parts[0] = tpu_b_concat(b, np, parts, dim);
      np = 1;
    }
    parts[np++] = tpu_b_convert(b, tpu_op_list_tensor(b, op, 0, j), rt);
  }
  if (np == 0 || tpu_aval_numel(&out) == 0) return tpu_shape_one(tpu_b_full(b, &out, 0.0), outs, nouts);
  return tpu_shape_one(tpu_b_concat(b, np, parts, dim), outs, nouts);
}

/* ========================================================== flip / roll */

static tpu_status_t* tpu_lower_flip(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool seen[TPU_MAX_RANK];
  if (!tpu_ops_dim_set(b, op, 1, in.rank, seen)) return NULL;
  int64_t dims[TPU_MAX_RANK];
  int m = 0;
  for (int d = 0; d < in.rank; ++d)
    if (seen[d]) dims[m++] = d;
  return tpu_shape_one(tpu_b_reverse(b, tpu_op_tensor(b, op, 0), m, dims), outs, nouts);
}

/* x rolled by s (0 <= s < n) along dim: [x[n-s:], x[:n-s]]. */
static tpu_val_t tpu_shape_roll1(tpu_builder_t* b, tpu_val_t x, int dim, int64_t shift) {
  const tpu_aval_t a = *tpu_b_aval(b, x);
  int64_t n = a.dims[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
  memcpy(limit, a.dims, sizeof(limit));
  start[dim] = n - s;
  tpu_val_t tail = tpu_b_slice(b, x, start, limit, NULL);
  start[dim] = 0;
  limit[dim] = n - s;
  tpu_val_t head = tpu_b_slice(b, x, start, limit, NULL);
  tpu_val_t parts[2] = {tail, head};
  return tpu_b_concat(b, 2, parts, dim);
}

/* roll(self, shifts, dims); no dims: roll the flattened tensor. */
static tpu_status_t* tpu_lower_roll(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t shifts[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  int ns = tpu_op_ints(op, 1, shifts, TPU_MAX_RANK), nd = tpu_op_ints(op, 2, dims, TPU_MAX_RANK);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (nd == 0) {
    if (ns != 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "`shifts` required to be a 1-element tuple when `dims` is empty, got %d elements", ns);
      return NULL;
    }
    int64_t n = tpu_aval_numel(&in);
    tpu_val_t r = tpu_shape_roll1(b, tpu_b_reshape(b, x, 1, &n), 0, shifts[0]);
    return tpu_shape_one(tpu_b_reshape(b, r, in.rank, in.dims), outs, nouts);
  }
  if (ns != nd) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "shifts and dimensions must align. shifts: %d, dims:%d", ns, nd);
    return NULL;
  }
  for (int k = 0; k < nd && k < TPU_MAX_RANK; ++k) {
    int d = tpu_ops_dim(b, dims[k], in.rank);
    if (!tpu_b_ok(b)) return NULL;
    if (in.rank > 0) x = tpu_shape_roll1(b, x, d, shifts[k]);
  }
  return tpu_shape_one(x, outs, nouts);
}

/* narrow_copy(self, dim, start, length) */
static tpu_status_t* tpu_lower_narrow_copy(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "narrow() cannot be applied to a 0-dim tensor.");
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  int64_t size = in.dims[dim], start = tpu_op_int(op, 2, 0), len = tpu_op_int(op, 3, 0);
  if (start < -size || start > size) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "start out of range (expected to be in range of [%" PRId64 ", %" PRId64 "], but got %" PRId64 ")",
               -size, size, start);
    return NULL;
  }
  if (start < 0) start += size;
  if (len < 0 || len > size - start) { /* no overflow for huge lengths */
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "start (%" PRId64 ") + length (%" PRId64 ") exceeds dimension size (%" PRId64 ").",
               start, len, size);
    return NULL;
  }
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK];
  memcpy(hi, in.dims, sizeof(hi));
  lo[dim] = start;
  hi[dim] = start + len;
  return tpu_shape_one(tpu_b_slice(b, tpu_op_tensor(b, op, 0), lo, hi, NULL), outs, nouts);
}

/* channel_shuffle(self, groups): [N, g, C/g, *] transposed to [N, C/g, g, *]. */
static tpu_status_t* tpu_lower_channel_shuffle(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t g = tpu_op_int(op, 1, 1);
  if (in.rank < 3 || in.rank + 1 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes");
    return NULL;
  }
  if (g <= 0 || in.dims[1] % g != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Number of channels must be divisible by groups. Got %" PRId64 " channels and %" PRId64 " groups.", in.dims[1], g);
    return NULL;
  }
  int64_t d5[TPU_MAX_RANK], perm[TPU_MAX_RANK];
  d5[0] = in.dims[0];
  d5[1] = g;
  d5[2] = in.dims[1] / g;
  for (int i = 2; i < in.rank; ++i) d5[i + 1] = in.dims[i];
  for (int i = 0; i <= in.rank; ++i) perm[i] = i;
  perm[1] = 2;
  perm[2] = 1;
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), in.rank + 1, d5);
  x = tpu_b_transpose(b, x, perm);
  return tpu_shape_one(tpu_b_reshape(b, x, in.rank, in.dims), outs, nouts);
}

/* repeat_interleave(repeats, output_size): element i repeated repeats[i] times,
 * in repeats' dtype. Without output_size the runtime first reads min and sum
 * of repeats (TPU_LOWER_DATA_SUM) and appends them; with it, a device-side
 * check holds the data to it, as CPU's kernel does. */
static tpu_status_t* tpu_lower_repeat_interleave(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                 int* nouts) {
  (void)max_outs;
  tpu_aval_t ra = tpu_op_aval(op, 0);
  bool given = tpu_op_kind(op, 1) == TPU_ARG_INT, summed = !given && tpu_op_nargs(op) >= 4;
  if (!given && !summed) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED,
               "repeat_interleave with a repeats tensor has a data-dependent size; in a compiled graph pass output_size");
    return NULL;
  }
  if (ra.rank != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "repeat_interleave only accept 1D vector as repeat");
    return NULL;
  }
  if (ra.dtype != TPU_I64 && ra.dtype != TPU_I32) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"repeat_interleave_tpu\" not implemented for '%s'", tpu_dtype_scalar_type_name(ra.dtype));
    return NULL;
  }
  if (summed && tpu_op_int(op, 2, 0) < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "repeats can not be negative");
    return NULL;
  }
  int64_t total = tpu_op_int(op, summed ? 3 : 1, 0), n = ra.dims[0];
  tpu_aval_t oa = tpu_aval_make(ra.dtype, 1, &total);
  if (total == 0 || n == 0) return tpu_shape_one(tpu_b_full(b, &oa, 0.0), outs, nouts);
  tpu_val_t r = tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_I64);
  tpu_val_t ends = tpu_idx_cumsum(b, r, 0);
  if (given) { /* the data must agree with output_size (no negative counts, the right sum) */
    int64_t d0 = 0;
    tpu_val_t lo = tpu_b_reduce(b, r, tpu_b_const_i(b, TPU_I64, INT64_MAX), 1, &d0, "stablehlo.minimum");
    tpu_op_check(b, op, tpu_b_compare(b, "LT", lo, tpu_b_const_i(b, TPU_I64, 0)), TPU_NOVAL, TPU_INVALID_ARGUMENT,
                 "repeats can not be negative");
    tpu_val_t sum = tpu_b_reduce(b, r, tpu_b_const_i(b, TPU_I64, 0), 1, &d0, "stablehlo.add");
    tpu_op_check(b, op, tpu_b_compare(b, "NE", sum, tpu_b_const_i(b, TPU_I64, total)), TPU_NOVAL,
                 TPU_INVALID_ARGUMENT, "allocated size does not match required size");
  }
  /* out[j] = number of i with ends[i] <= j: a 1 where each element's run ends,
   * summed up (ends past the last position drop out of the scatter) */
  tpu_aval_t ma = tpu_aval_make(TPU_I64, 1, &total);
  tpu_val_t marks = tpu_idx_scatter_dim(b, tpu_b_full(b, &ma, 0), 0, ends, tpu_ops_like(b, ends, 1), "stablehlo.add");
  tpu_val_t out = tpu_idx_cumsum(b, marks, 0);
  return tpu_shape_one(tpu_b_convert(b, out, ra.dtype), outs, nouts);
}

/* ==================================================================== taps */

/* Along one dim: out[o] = sum_t w[t][o] * in[idx[t][o]] (w NULL: one tap, weight 1). */
typedef struct tpu_taps {
  int ntaps;
  int64_t in, out;
  int64_t* idx; /* [ntaps][out] */
  double* w;    /* [ntaps][out] or NULL */
} tpu_taps_t;

static bool tpu_taps_alloc(tpu_builder_t* b, tpu_taps_t* t, int ntaps, int64_t in, int64_t out, bool weighted) {
  memset(t, 0, sizeof(*t));
  t->ntaps = ntaps;
  t->in = in;
  t->out = out;
  size_t n = (size_t)ntaps * (size_t)(out > 0 ? out : 1);
  t->idx = calloc(n, sizeof(int64_t));
  t->w = weighted ? calloc(n, sizeof(double)) : NULL;
  if (!t->idx || (weighted && !t->w)) {
    free(t->idx);
    free(t->w);
    t->idx = NULL;
    t->w = NULL;
    TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
    return false;
  }
  return true;
}

static void tpu_taps_free(tpu_taps_t* t) {
  free(t->idx);
  free(t->w);
  t->idx = NULL;
  t->w = NULL;
}

/* Weights of tap k as a constant of dtype ct broadcast along dim of shape a. */
static tpu_val_t tpu_taps_weight(tpu_builder_t* b, const tpu_taps_t* t, int k, tpu_dtype_t ct, const tpu_aval_t* a,
                                 int dim) {
  tpu_val_t w;
  if (ct == TPU_F64) {
    w = tpu_idx_const_vec(b, TPU_F64, t->out, t->w + k * t->out);
  } else {
    float* f = malloc(sizeof(float) * (size_t)(t->out > 0 ? t->out : 1));
    if (!f) {
      TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
      return TPU_NOVAL;
    }
    for (int64_t o = 0; o < t->out; ++o) f[o] = (float)t->w[k * t->out + o];
    w = tpu_idx_const_vec(b, TPU_F32, t->out, f);
    free(f);
  }
  int64_t bd = dim;
  return tpu_b_broadcast_in_dim(b, w, a->rank, a->dims, &bd);
}

/* Forward: x (compute dtype) along dim through the taps. */
static tpu_val_t tpu_taps_apply(tpu_builder_t* b, tpu_val_t x, int dim, const tpu_taps_t* t) {
  tpu_val_t acc = TPU_NOVAL;
  for (int k = 0; k < t->ntaps && tpu_b_ok(b); ++k) {
    tpu_val_t idx = tpu_idx_const_vec(b, TPU_I64, t->out, t->idx + k * t->out);
    tpu_val_t g = tpu_idx_select(b, x, dim, idx);
    if (t->w) g = tpu_b_binary(b, "stablehlo.multiply", g, tpu_taps_weight(b, t, k, tpu_b_dtype(b, x), tpu_b_aval(b, g), dim));
    acc = k == 0 ? g : tpu_b_binary(b, "stablehlo.add", acc, g);
  }
  return acc;
}

/* Adjoint: g (compute dtype, out along dim) scattered back to in along dim. */
static tpu_val_t tpu_taps_adjoint(tpu_builder_t* b, tpu_val_t g, int dim, const tpu_taps_t* t) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t za = *tpu_b_aval(b, g);
  za.dims[dim] = t->in;
  tpu_val_t acc = tpu_b_full(b, &za, 0.0);
  for (int k = 0; k < t->ntaps && tpu_b_ok(b); ++k) {
    tpu_val_t idx = tpu_idx_const_vec(b, TPU_I64, t->out, t->idx + k * t->out);
    tpu_val_t u = g;
    if (t->w) u = tpu_b_binary(b, "stablehlo.multiply", g, tpu_taps_weight(b, t, k, za.dtype, tpu_b_aval(b, g), dim));
    acc = tpu_idx_put_along(b, acc, dim, idx, u, "stablehlo.add");
  }
  return acc;
}

/* ===================================================== reflection/replication pad */

typedef enum { TPU_PAD_REFLECT, TPU_PAD_REPLICATE } tpu_pad_mode_t;

static bool tpu_pad_taps(tpu_builder_t* b, tpu_taps_t* t, tpu_pad_mode_t mode, int64_t in, int64_t l, int64_t r) {
  if (!tpu_taps_alloc(b, t, 1, in, in + l + r, false)) return false;
  for (int64_t o = 0; o < t->out; ++o) {
    int64_t s = o - l;
    if (mode == TPU_PAD_REFLECT) {
      if (s < 0) s = -s;
      if (s >= in) s = 2 * (in - 1) - s;
    } else {
      s = s < 0 ? 0 : (s >= in ? in - 1 : s);
    }
    t->idx[o] = s;
  }
  return true;
}

/* {reflection,replication}_pad{1,2,3}d[_backward]: the name says mode, N, direction. */
static tpu_status_t* tpu_lower_pad_nd(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts) {
  const char* name = tpu_op_name(op);
  tpu_pad_mode_t mode = strncmp(name, "reflection", 10) == 0 ? TPU_PAD_REFLECT : TPU_PAD_REPLICATE;
  const char* nd = strstr(name, "pad") + 3;
  int n = nd[0] - '0';
  bool backward = strstr(name, "backward") != NULL;
  int self_i = backward ? 1 : 0, pad_i = backward ? 2 : 1;
  tpu_aval_t in = tpu_op_aval(op, self_i);
  int64_t pad[TPU_MAX_RANK]; /* room for a wrong count, reported as PyTorch does */
  int np = tpu_op_ints(op, pad_i, pad, TPU_MAX_RANK);
  if (np != 2 * n) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "padding size is expected to be %d, but got: %d", 2 * n, np);
    return NULL;
  }
  if (in.rank != n + 1 && in.rank != n + 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected %dD or %dD (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: %dD",
               n + 1, n + 2, in.rank);
    return NULL;
  }
  char sz[256];
  tpu_shape_fmt_sizes(sz, sizeof(sz), &in);
  tpu_taps_t taps[3];
  int made = 0;
  for (int k = 0; k < n; ++k) { /* padding pairs start at the last dim */
    int dim = in.rank - 1 - k;
    int64_t l = pad[2 * k], r = pad[2 * k + 1], size = in.dims[dim];
    if (mode == TPU_PAD_REFLECT && (l >= size || r >= size)) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (%" PRId64
                 ", %" PRId64 ") at dimension %d of input %s", l, r, dim, sz);
      break;
    }
    if (size + l + r < 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "input (%s) is too small. Calculated output size: %" PRId64, sz, size + l + r);
      break;
    }
    if (!tpu_pad_taps(b, &taps[k], mode, size, l, r)) break;
    made++;
  }
  tpu_val_t r = TPU_NOVAL;
  if (made == n) {
    if (!backward) {
      r = tpu_op_tensor(b, op, 0);
      for (int k = 0; k < n; ++k) r = tpu_taps_apply(b, r, in.rank - 1 - k, &taps[k]);
    } else {
      tpu_dtype_t ct = tpu_dtype_opmath(in.dtype);
      r = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
      for (int k = n - 1; k >= 0; --k) r = tpu_taps_adjoint(b, r, in.rank - 1 - k, &taps[k]);
      r = tpu_b_convert(b, r, tpu_op_aval(op, 0).dtype);
    }
  }
  for (int k = 0; k < made; ++k) tpu_taps_free(&taps[k]);
  return tpu_shape_one(r, outs, nouts);
}

static tpu_status_t* tpu_lower_pad(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_pad_nd(b, op, outs, nouts);
}

/* ============================================================== upsampling */

/* *_AA: the antialiased resizes (interpolate(..., antialias=True)), whose filter
 * widens with the downscale factor. */
typedef enum {
  TPU_UP_NEAREST,
  TPU_UP_NEAREST_EXACT,
  TPU_UP_LINEAR,
  TPU_UP_CUBIC,
  TPU_UP_LINEAR_AA,
  TPU_UP_CUBIC_AA,
  TPU_UP_LANCZOS_AA
} tpu_up_mode_t;

typedef struct tpu_up_kind {
  const char* prefix; /* name without the trailing "Nd" / "Nd_backward" */
  tpu_up_mode_t mode;
} tpu_up_kind_t;

static const tpu_up_kind_t tpu_up_kinds[] = {
    {"upsample_nearest", TPU_UP_NEAREST},  {"_upsample_nearest_exact", TPU_UP_NEAREST_EXACT},
    {"upsample_linear", TPU_UP_LINEAR},    {"upsample_bilinear", TPU_UP_LINEAR},
    {"upsample_trilinear", TPU_UP_LINEAR}, {"upsample_bicubic", TPU_UP_CUBIC},
    {"_upsample_bilinear", TPU_UP_LINEAR_AA}, {"_upsample_bicubic", TPU_UP_CUBIC_AA},
    {"_upsample_lanczos", TPU_UP_LANCZOS_AA},
};

/* PyTorch's compute_scales_value<T> (T float or double). */
static double tpu_up_scales_value(bool is_f64, bool has_scale, double scale, int64_t in, int64_t out) {
  if (is_f64) return has_scale && scale > 0 ? 1.0 / scale : (double)in / (double)out;
  return has_scale && scale > 0 ? (double)(float)(1.0 / scale) : (double)((float)in / (float)out);
}

/* PyTorch's area_pixel_compute_scale<T>. */
static double tpu_up_area_scale(bool is_f64, bool align, bool has_scale, double scale, int64_t in, int64_t out) {
  if (align) {
    if (out <= 1) return 0;
    return is_f64 ? (double)(in - 1) / (double)(out - 1) : (double)((float)(in - 1) / (float)(out - 1));
  }
  return tpu_up_scales_value(is_f64, has_scale, scale, in, out);
}

/* PyTorch's area_pixel_compute_source_index<T>. */
static double tpu_up_source_index(bool is_f64, double scale, int64_t o, bool align, bool cubic) {
  if (is_f64) {
    if (align) return scale * (double)o;
    double s = scale * ((double)o + 0.5) - 0.5;
    return (!cubic && s < 0) ? 0 : s;
  }
  float fs = (float)scale;
  if (align) return (double)(fs * (float)o);
  float s = fs * ((float)o + 0.5f) - 0.5f;
  return (!cubic && s < 0) ? 0 : (double)s;
}

/* PyTorch's cubic convolution coefficients, A = -0.75. */
static void tpu_up_cubic_coeffs(double t, double* c) {
  const double A = -0.75;
#define TPU_CC1(x) ((((A + 2) * (x)) - (A + 3)) * (x) * (x) + 1)
#define TPU_CC2(x) ((((A * (x)) - (5 * A)) * (x) + (8 * A)) * (x) - (4 * A))
  c[0] = TPU_CC2(t + 1.0);
  c[1] = TPU_CC1(t);
  c[2] = TPU_CC1(1.0 - t);
  c[3] = TPU_CC2(2.0 - t);
#undef TPU_CC1
#undef TPU_CC2
}

static int64_t tpu_up_clamp(int64_t v, int64_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

/* sin(pi x) / (pi x). */
static double tpu_up_sinc(double x) {
  if (x == 0) return 1;
  x *= M_PI;
  return sin(x) / x;
}

/* The antialias filters: triangle (bilinear), Keys' cubic with a = -0.5
 * (bicubic) and Lanczos-3, sinc(x) sinc(x / 3) (lanczos), as ATen's separable
 * AA kernels. Their support radius is tpu_up_aa_half. */
static double tpu_up_aa_filter(tpu_up_mode_t mode, double x) {
  x = fabs(x);
  if (mode == TPU_UP_LINEAR_AA) return x < 1 ? 1 - x : 0;
  if (mode == TPU_UP_LANCZOS_AA) return x < 3 ? tpu_up_sinc(x) * tpu_up_sinc(x / 3) : 0;
  const double a = -0.5;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

/* ATen's interp_size / 2 of an antialias filter. */
static double tpu_up_aa_half(tpu_up_mode_t mode) {
  return mode == TPU_UP_LINEAR_AA ? 1.0 : mode == TPU_UP_CUBIC_AA ? 2.0 : 3.0;
}

/* The taps of one dim of an antialiased resize: every input pixel within the
 * filter's support (widened by the scale when downsampling), weights
 * normalised to sum 1; float math in float like ATen's kernel for float input. */
static bool tpu_up_taps_aa(tpu_builder_t* b, tpu_taps_t* t, tpu_up_mode_t mode, bool is_f64, bool align, bool has_scale,
                           double scale_arg, int64_t in, int64_t out) {
  double scale = tpu_up_area_scale(is_f64, align, has_scale, scale_arg, in, out);
  double half = tpu_up_aa_half(mode);
  double support = scale >= 1.0 ? half * scale : half;
  if (!is_f64) support = (double)(float)support;
  int ntaps = (int)ceil(support) * 2 + 1;
  if (!tpu_taps_alloc(b, t, ntaps, in, out, true)) return false;
  double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  if (!is_f64) invscale = (double)(float)invscale;
  for (int64_t o = 0; o < out; ++o) {
    double center = is_f64 ? scale * ((double)o + 0.5) : (double)((float)scale * ((float)o + 0.5f));
    double lo = is_f64 ? center - support + 0.5 : (double)((float)center - (float)support + 0.5f);
    double hi = is_f64 ? center + support + 0.5 : (double)((float)center + (float)support + 0.5f);
    int64_t xmin = (int64_t)lo < 0 ? 0 : (int64_t)lo;
    int64_t xsize = ((int64_t)hi < in ? (int64_t)hi : in) - xmin;
    if (xsize > ntaps) xsize = ntaps;
    double total = 0;
    for (int64_t j = 0; j < ntaps; ++j) {
      double arg = ((double)(j + xmin) - center + 0.5) * invscale;
      if (!is_f64) arg = (double)(((float)(j + xmin) - (float)center + 0.5f) * (float)invscale);
      double w = j < xsize ? tpu_up_aa_filter(mode, arg) : 0;
      t->w[j * out + o] = is_f64 ? w : (double)(float)w;
      t->idx[j * out + o] = tpu_up_clamp(xmin + j, in - 1);
      total += t->w[j * out + o];
    }
    for (int64_t j = 0; j < ntaps; ++j) t->w[j * out + o] = total != 0 ? t->w[j * out + o] / total : 0;
  }
  return true;
}

/* The taps of one spatial dim (PyTorch's CPU kernels' index/weight formulas). */
static bool tpu_up_taps(tpu_builder_t* b, tpu_taps_t* t, tpu_up_mode_t mode, bool is_f64, bool align, bool has_scale,
                        double scale, int64_t in, int64_t out) {
  if (mode == TPU_UP_LINEAR_AA || mode == TPU_UP_CUBIC_AA || mode == TPU_UP_LANCZOS_AA)
    return tpu_up_taps_aa(b, t, mode, is_f64, align, has_scale, scale, in, out);
  int ntaps = mode == TPU_UP_CUBIC ? 4 : mode == TPU_UP_LINEAR ? 2 : 1;
  if (!tpu_taps_alloc(b, t, ntaps, in, out, ntaps > 1)) return false;
  if (mode == TPU_UP_NEAREST || mode == TPU_UP_NEAREST_EXACT) {
    float s = (float)tpu_up_scales_value(false, has_scale, scale, in, out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t src;
      if (mode == TPU_UP_NEAREST && out == in) src = o;
      else if (mode == TPU_UP_NEAREST && out == 2 * in) src = o >> 1;
      else if (mode == TPU_UP_NEAREST) src = (int64_t)floorf((float)o * s);
      else src = (int64_t)floorf((float)(((double)o + 0.5) * s));
      t->idx[o] = src < in - 1 ? src : in - 1;
    }
    return true;
  }
  double ratio = tpu_up_area_scale(is_f64, align, has_scale, scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    if (mode == TPU_UP_LINEAR && out == in) {
      t->idx[o] = t->idx[out + o] = o;
      t->w[o] = 1;
      t->w[out + o] = 0;
      continue;
    }
    double real = tpu_up_source_index(is_f64, ratio, o, align, mode == TPU_UP_CUBIC);
    int64_t i0 = (int64_t)floor(real);
    if (i0 > in - 1) i0 = in - 1;
    double lam = real - (double)i0;
    lam = lam < 0 ? 0 : (lam > 1 ? 1 : lam);
    if (!is_f64) lam = (double)(float)lam;
    if (mode == TPU_UP_LINEAR) {
      t->idx[o] = i0;
      t->idx[out + o] = i0 + (i0 < in - 1 ? 1 : 0);
      t->w[o] = 1.0 - lam;
      t->w[out + o] = lam;
    } else {
      double c[4];
      tpu_up_cubic_coeffs(lam, c);
      for (int k = 0; k < 4; ++k) {
        t->idx[k * out + o] = tpu_up_clamp(i0 - 1 + k, in - 1);
        t->w[k * out + o] = c[k];
      }
    }
  }
  return true;
}

/* upsample_*{1,2,3}d(self, output_size, [align_corners], scales...) and
 * *_backward(grad_output, output_size, input_size, [align_corners], scales...). */
static tpu_status_t* tpu_lower_upsample(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const char* name = tpu_op_name(op);
  const tpu_up_kind_t* kind = NULL;
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_up_kinds); ++i) {
    size_t len = strlen(tpu_up_kinds[i].prefix);
    if (strncmp(name, tpu_up_kinds[i].prefix, len) == 0 && name[len] >= '1' && name[len] <= '3') {
      kind = &tpu_up_kinds[i];
      break;
    }
  }
  if (!kind) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: unknown upsampling op", name);
    return NULL;
  }
  int n = name[strlen(kind->prefix)] - '0';
  bool backward = strstr(name, "backward") != NULL;
  bool has_align = kind->mode != TPU_UP_NEAREST && kind->mode != TPU_UP_NEAREST_EXACT;
  int osz_i = 1, align_i = backward ? 3 : 2;
  int scales_i = (backward ? 3 : 2) + (has_align ? 1 : 0);
  tpu_aval_t x = tpu_op_aval(op, 0);
  int64_t osz[TPU_MAX_RANK], isz[TPU_MAX_RANK]; /* room for a wrong count, reported as PyTorch does */
  int no = tpu_op_ints(op, osz_i, osz, TPU_MAX_RANK);
  tpu_aval_t in = x;
  if (backward) {
    int ni = tpu_op_ints(op, 2, isz, TPU_MAX_RANK);
    if (ni != n + 2) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "It is expected input_size equals to %d, but got size %d", n + 2, ni);
      return NULL;
    }
    in = tpu_aval_make(x.dtype, ni, isz);
  }
  if (no != n) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "It is expected output_size equals to %d, but got size %d", n, no);
    return NULL;
  }
  if (in.rank != n + 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected %dD input (got %dD input)", n + 2, in.rank);
    return NULL;
  }
  for (int k = 0; k < n; ++k) {
    if (in.dims[2 + k] <= 0 || osz[k] <= 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Input and output sizes should be greater than 0, but got input (%" PRId64 ") and output (%" PRId64 ")",
                 in.dims[2 + k], osz[k]);
      return NULL;
    }
    if (backward && x.dims[2 + k] != osz[k]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected grad_output to have the output size at dimension %d", 2 + k);
      return NULL;
    }
  }
  if (!tpu_dtype_is_float(x.dtype) && (has_align || backward)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: dtype %s is not supported on tpu", name, tpu_dtype_name(x.dtype));
    return NULL;
  }
  bool align = has_align && tpu_op_bool(op, align_i, false);
  bool is_f64 = x.dtype == TPU_F64;
  tpu_taps_t taps[3];
  int made = 0;
  for (int k = 0; k < n; ++k) {
    bool has_scale = tpu_op_kind(op, scales_i + k) == TPU_ARG_FLOAT;
    double scale = tpu_op_float(op, scales_i + k, 0.0);
    if (!tpu_up_taps(b, &taps[k], kind->mode, is_f64, align, has_scale, scale, in.dims[2 + k], osz[k])) break;
    made++;
  }
  tpu_val_t r = TPU_NOVAL;
  if (made == n) {
    bool exact = kind->mode == TPU_UP_NEAREST || kind->mode == TPU_UP_NEAREST_EXACT;
    tpu_dtype_t ct = exact && !backward ? x.dtype : tpu_dtype_opmath(x.dtype);
    r = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
    if (!backward) {
      for (int k = n - 1; k >= 0; --k) r = tpu_taps_apply(b, r, 2 + k, &taps[k]);
    } else {
      for (int k = 0; k < n; ++k) r = tpu_taps_adjoint(b, r, 2 + k, &taps[k]);
    }
    r = tpu_b_convert(b, r, x.dtype);
  }
  for (int k = 0; k < made; ++k) tpu_taps_free(&taps[k]);
  return tpu_shape_one(r, outs, nouts);
}

/* ========================================================= im2col / col2im */

typedef struct tpu_unfold_geom {
  int64_t k[2], d[2], p[2], s[2], in[2], out[2];
} tpu_unfold_geom_t;

/* Reads kernel_size, dilation, padding, stride from args first..first+3. */
static bool tpu_unfold_geom(tpu_builder_t* b, const tpu_op_t* op, int first, const int64_t* in, tpu_unfold_geom_t* g) {
  int64_t* fields[4] = {g->k, g->d, g->p, g->s};
  static const char* names[4] = {"kernel_size", "dilation", "padding", "stride"};
  for (int f = 0; f < 4; ++f) {
    int64_t v[TPU_MAX_RANK];
    if (tpu_op_ints(op, first + f, v, TPU_MAX_RANK) != 2) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "It is expected %s equals to 2", names[f]);
      return false;
    }
    fields[f][0] = v[0];
    fields[f][1] = v[1];
    bool bad = f == 2 ? (fields[f][0] < 0 || fields[f][1] < 0) : (fields[f][0] <= 0 || fields[f][1] <= 0);
    if (bad) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s should be greater than zero, but got %s: %" PRId64 " %" PRId64, names[f],
                 names[f], fields[f][0], fields[f][1]);
      return false;
    }
  }
  for (int i = 0; i < 2; ++i) {
    g->in[i] = in[i];
    g->out[i] = (in[i] + 2 * g->p[i] - (g->d[i] * (g->k[i] - 1) + 1)) / g->s[i] + 1;
    if (in[i] + 2 * g->p[i] - (g->d[i] * (g->k[i] - 1) + 1) < 0 || g->out[i] < 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Given input with spatial size (%" PRId64 ", %" PRId64 "), kernel_size=(%" PRId64 ", %" PRId64
                 "), dilation=(%" PRId64 ", %" PRId64 "), padding=(%" PRId64 ", %" PRId64
                 "), calculated shape of the array of sliding blocks as (%" PRId64 ", %" PRId64
                 "), but its components must be at least one.",
                 in[0], in[1], g->k[0], g->k[1], g->d[0], g->d[1], g->p[0], g->p[1], g->out[0], g->out[1]);
      return false;
    }
  }
  return true;
}

/* im2col(self [N,C,H,W] or [C,H,W], kernel_size, dilation, padding, stride) -> [N, C*kh*kw, L] */
static tpu_status_t* tpu_lower_im2col(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.rank != 3 && in.rank != 4) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected 3D or 4D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input");
    return NULL;
  }
  bool batched = in.rank == 4;
  int64_t N = batched ? in.dims[0] : 1, C = in.dims[in.rank - 3];
  tpu_unfold_geom_t g;
  if (!tpu_unfold_geom(b, op, 1, in.dims + in.rank - 2, &g)) return NULL;
  int64_t x4[4] = {N, C, g.in[0], g.in[1]};
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 4, x4);
  int64_t lo[4] = {0, 0, g.p[0], g.p[1]}, hi[4] = {0, 0, g.p[0], g.p[1]};
  x = tpu_b_pad(b, x, tpu_b_const(b, in.dtype, 0.0), lo, hi, NULL);
  int64_t kk = g.k[0] * g.k[1], blk[5] = {N, C, 1, g.out[0], g.out[1]};
  tpu_val_t* parts = malloc(sizeof(tpu_val_t) * (size_t)kk);
  if (!parts) {
    TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
    return NULL;
  }
  for (int64_t i = 0; i < g.k[0]; ++i) {
    for (int64_t j = 0; j < g.k[1]; ++j) {
      int64_t st[4] = {0, 0, i * g.d[0], j * g.d[1]};
      int64_t lim[4] = {N, C, st[2] + (g.out[0] - 1) * g.s[0] + 1, st[3] + (g.out[1] - 1) * g.s[1] + 1};
      int64_t str[4] = {1, 1, g.s[0], g.s[1]};
      parts[i * g.k[1] + j] = tpu_b_reshape(b, tpu_b_slice(b, x, st, lim, str), 5, blk);
    }
  }
  tpu_val_t cols = tpu_b_concat(b, (int)kk, parts, 2);
  free(parts);
  int64_t od[3] = {N, C * kk, g.out[0] * g.out[1]};
  cols = tpu_b_reshape(b, cols, 3, od);
  if (!batched) cols = tpu_b_reshape(b, cols, 2, od + 1);
  return tpu_shape_one(cols, outs, nouts);
}

/* col2im(self [N, C*kh*kw, L], output_size, kernel_size, dilation, padding, stride): the adjoint of im2col. */
static tpu_status_t* tpu_lower_col2im(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t osz[TPU_MAX_RANK];
  if (tpu_op_ints(op, 1, osz, TPU_MAX_RANK) != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "It is expected output_size equals to 2");
    return NULL;
  }
  if (in.rank != 2 && in.rank != 3) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input");
    return NULL;
  }
  bool batched = in.rank == 3;
  tpu_unfold_geom_t g;
  if (!tpu_unfold_geom(b, op, 2, osz, &g)) return NULL;
  int64_t N = batched ? in.dims[0] : 1, CK = in.dims[in.rank - 2], L = in.dims[in.rank - 1], kk = g.k[0] * g.k[1];
  if (CK % kk != 0 || L != g.out[0] * g.out[1]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Expected size of input's dimension 1 to be divisible by the product of kernel_size and dimension 2 to match the calculated number of sliding blocks %" PRId64 " * %" PRId64 " = %" PRId64 ", but got input.size(1)=%" PRId64 " and input.size(2)=%" PRId64 ".",
               g.out[0], g.out[1], g.out[0] * g.out[1], CK, L);
    return NULL;
  }
  int64_t C = CK / kk;
  tpu_dtype_t ct = tpu_dtype_opmath(in.dtype);
  int64_t d5[5] = {N, C, kk, g.out[0], g.out[1]};
  tpu_val_t cols = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), 5, d5);
  int64_t Hp = osz[0] + 2 * g.p[0], Wp = osz[1] + 2 * g.p[1];
  int64_t blk[4] = {N, C, g.out[0], g.out[1]};
  tpu_val_t zero = tpu_b_const(b, ct, 0.0), acc = TPU_NOVAL;
  for (int64_t i = 0; i < g.k[0]; ++i) {
    for (int64_t j = 0; j < g.k[1]; ++j) {
      int64_t st[5] = {0, 0, i * g.k[1] + j, 0, 0}, lim[5] = {N, C, i * g.k[1] + j + 1, g.out[0], g.out[1]};
      tpu_val_t piece = tpu_b_reshape(b, tpu_b_slice(b, cols, st, lim, NULL), 4, blk);
      int64_t lo[4] = {0, 0, i * g.d[0], j * g.d[1]}, inner[4] = {0, 0, g.s[0] - 1, g.s[1] - 1};
      int64_t hi[4] = {0, 0, Hp - (lo[2] + (g.out[0] - 1) * g.s[0] + 1), Wp - (lo[3] + (g.out[1] - 1) * g.s[1] + 1)};
      piece = tpu_b_pad(b, piece, zero, lo, hi, inner);
      acc = acc == TPU_NOVAL ? piece : tpu_b_binary(b, "stablehlo.add", acc, piece);
    }
  }
  int64_t st[4] = {0, 0, g.p[0], g.p[1]}, lim[4] = {N, C, g.p[0] + osz[0], g.p[1] + osz[1]};
  tpu_val_t r = tpu_b_convert(b, tpu_b_slice(b, acc, st, lim, NULL), in.dtype);
  if (!batched) r = tpu_b_reshape(b, r, 3, (int64_t[]){C, osz[0], osz[1]});
  return tpu_shape_one(r, outs, nouts);
}

/* ============================================================ unfold backward */

/* unfold_backward(grad_in, input_sizes, dim, size, step): Tensor.unfold's
 * adjoint. grad_in is the input's shape with `dim` holding the n windows and a
 * trailing dim of `size`; offset o of window w adds to position w * step + o
 * (one scatter-add per offset; overlapping windows accumulate). */
static tpu_status_t* tpu_lower_unfold_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_aval_t ga = tpu_op_aval(op, 0);
  int64_t in[TPU_MAX_RANK];
  int rank = tpu_op_ints(op, 1, in, TPU_MAX_RANK);
  int64_t size = tpu_op_int(op, 3, 1), step = tpu_op_int(op, 4, 1);
  int dim = rank > 0 ? tpu_ops_dim(b, tpu_op_int(op, 2, 0), rank) : 0;
  if (!tpu_b_ok(b)) return tpu_b_take_error(b);
  if (ga.rank != (rank > 0 ? rank : 0) + 1 || size < 0 || step <= 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "unfold_backward: grad of rank %d for an input of rank %d", ga.rank, rank);
    return tpu_b_take_error(b);
  }
  tpu_dtype_t ct = tpu_dtype_opmath(ga.dtype);
  tpu_aval_t ia = tpu_aval_make(ct, rank, in);
  tpu_val_t acc = tpu_b_full(b, &ia, 0), g = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  int64_t n = rank > 0 ? ga.dims[dim] : ga.dims[0];
  if (rank == 0) /* a 0-d input unfolds to one window of size 1 */
    return tpu_shape_one(tpu_b_convert(b, tpu_b_reshape(b, g, 0, NULL), ga.dtype), outs, nouts);
  if (n == 0 || size == 0) return tpu_shape_one(tpu_b_convert(b, acc, ga.dtype), outs, nouts);
  tpu_aval_t na = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t base = tpu_b_binary(b, "stablehlo.multiply", tpu_b_iota(b, &na, 0), tpu_b_full(b, &na, (double)step));
  for (int64_t o = 0; o < size && tpu_b_ok(b); ++o) {
    int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
    for (int i = 0; i < ga.rank; i++) limit[i] = ga.dims[i];
    start[ga.rank - 1] = o;
    limit[ga.rank - 1] = o + 1;
    tpu_val_t part = tpu_b_reshape(b, tpu_b_slice(b, g, start, limit, NULL), rank, ga.dims);
    tpu_val_t at = tpu_b_binary(b, "stablehlo.add", base, tpu_b_full(b, &na, (double)o));
    acc = tpu_idx_put_along(b, acc, dim, at, part, "stablehlo.add");
  }
  return tpu_shape_one(tpu_b_convert(b, acc, ga.dtype), outs, nouts);
}

#define TPU_SHAPE_PAD(n) {"reflection_pad" #n "d", tpu_lower_pad}, {"reflection_pad" #n "d_backward", tpu_lower_pad}, \
                         {"replication_pad" #n "d", tpu_lower_pad}, {"replication_pad" #n "d_backward", tpu_lower_pad}
#define TPU_SHAPE_UP(name) {name, tpu_lower_upsample}, {name "_backward", tpu_lower_upsample}

const tpu_lowering_t tpu_lowerings_shape[] = {
    {"cat", tpu_lower_cat},
    {"unfold_backward", tpu_lower_unfold_backward},
    {"flip", tpu_lower_flip},
    {"roll", tpu_lower_roll},
    {"narrow_copy", tpu_lower_narrow_copy},
    {"channel_shuffle", tpu_lower_channel_shuffle},
    {"repeat_interleave", tpu_lower_repeat_interleave},
    {"im2col", tpu_lower_im2col},
    {"col2im", tpu_lower_col2im},
    TPU_SHAPE_PAD(1),
    TPU_SHAPE_PAD(2),
    TPU_SHAPE_PAD(3),
    TPU_SHAPE_UP("upsample_nearest1d"),
    TPU_SHAPE_UP("upsample_nearest2d"),
    TPU_SHAPE_UP("upsample_nearest3d"),
    TPU_SHAPE_UP("_upsample_nearest_exact1d"),
    TPU_SHAPE_UP("_upsample_nearest_exact2d"),
    TPU_SHAPE_UP("_upsample_nearest_exact3d"),
    TPU_SHAPE_UP("upsample_linear1d"),
    TPU_SHAPE_UP("upsample_bilinear2d"),
    TPU_SHAPE_UP("upsample_trilinear3d"),
    TPU_SHAPE_UP("upsample_bicubic2d"),
    TPU_SHAPE_UP("_upsample_bilinear2d_aa"),
    TPU_SHAPE_UP("_upsample_bicubic2d_aa"),
    TPU_SHAPE_UP("_upsample_lanczos2d_aa"),
    {NULL, NULL},
};
