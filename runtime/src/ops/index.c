/* Lowerings: index family (gather/scatter-like ops, advanced indexing, masks,
 * sort-based selection, searchsorted).
 *
 * Index tensors become i64 in the graph; negative indices wrap where PyTorch
 * allows them. Out-of-range indices of user-facing ops are device-side checks
 * (check.h): the op records them in the device's error word and the next sync
 * raises PyTorch's error (class and text of the CPU kernel), with no host sync
 * per op. The gather/scatter itself still clamps / drops such indices, so the
 * program never reads or writes out of bounds.
 *
 * Data-dependent shapes (nonzero, masked_select; unique* in unique.c) follow
 * TPU_LOWER_DYNAMIC_SHAPE: results padded to their largest size, then the
 * lengths vector (index.h) that the runtime reads at a sync point. */
#include "index.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reduce.h"

/* ================================================================ helpers */

static tpu_val_t tpu_idx_c64(tpu_builder_t* b, int64_t v) { return tpu_b_const_i(b, TPU_I64, v); }

static tpu_aval_t tpu_idx_aval_with(const tpu_aval_t* a, tpu_dtype_t dtype) {
  tpu_aval_t r = *a;
  r.dtype = dtype;
  return r;
}

/* The combiner region body for dtype: bool add/multiply are or/and. */
static const char* tpu_idx_body(tpu_dtype_t t, const char* body) {
  if (!body || t != TPU_BOOL) return body;
  if (strcmp(body, "stablehlo.add") == 0) return "stablehlo.or";
  if (strcmp(body, "stablehlo.multiply") == 0) return "stablehlo.and";
  if (strcmp(body, "stablehlo.maximum") == 0) return "stablehlo.or";
  if (strcmp(body, "stablehlo.minimum") == 0) return "stablehlo.and";
  return body;
}

tpu_val_t tpu_idx_wrap(tpu_builder_t* b, tpu_val_t idx, int64_t size) {
  idx = tpu_b_convert(b, idx, TPU_I64);
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  const tpu_aval_t a = *tpu_b_aval(b, idx); /* a copy: new values move the table */
  tpu_val_t zero = tpu_b_full(b, &a, 0.0);
  tpu_val_t n = tpu_b_broadcast_in_dim(b, tpu_idx_c64(b, size), a.rank, a.dims, NULL);
  tpu_val_t neg = tpu_b_compare(b, "LT", idx, zero);
  return tpu_b_select(b, neg, tpu_b_binary(b, "stablehlo.add", idx, n), idx);
}

tpu_val_t tpu_idx_out_of_range(tpu_builder_t* b, tpu_val_t idx, int64_t size) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, idx);
  tpu_val_t lo = tpu_b_compare(b, "LT", idx, tpu_b_full(b, &a, 0.0));
  tpu_val_t n = tpu_b_broadcast_in_dim(b, tpu_idx_c64(b, size), a.rank, a.dims, NULL);
  tpu_val_t bad = tpu_b_binary(b, "stablehlo.or", lo, tpu_b_compare(b, "GE", idx, n));
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < a.rank; ++i) dims[i] = i;
  return tpu_b_reduce(b, bad, tpu_b_const_i(b, TPU_BOOL, 0), a.rank, dims, "stablehlo.or");
}

static bool tpu_idx_empty(const tpu_aval_t* a) { return tpu_aval_numel(a) == 0; }

tpu_val_t tpu_idx_select(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t idx) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t in = *tpu_b_aval(b, x);
  int64_t k = tpu_b_aval(b, idx)->dims[0];
  tpu_aval_t out = in;
  out.dims[dim] = k;
  if (tpu_idx_empty(&out) || in.dims[dim] == 0) return tpu_b_full(b, &out, 0.0);
  int64_t offset[TPU_MAX_RANK], slice[TPU_MAX_RANK], d = dim;
  int n = 0;
  for (int i = 0; i < in.rank; ++i) {
    if (i != dim) offset[n++] = i;
    slice[i] = i == dim ? 1 : in.dims[i];
  }
  tpu_gather_dims_t g = {n, offset, 1, &d, 1, &d, 1, slice};
  return tpu_b_gather(b, x, idx, &g, &out);
}

tpu_val_t tpu_idx_put_along(tpu_builder_t* b, tpu_val_t base, int dim, tpu_val_t idx, tpu_val_t src,
                            const char* body) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, base);
  if (tpu_idx_empty(in) || tpu_idx_empty(tpu_b_aval(b, src))) return base;
  int64_t window[TPU_MAX_RANK], d = dim;
  int n = 0;
  for (int i = 0; i < in->rank; ++i)
    if (i != dim) window[n++] = i;
  tpu_scatter_dims_t s = {n, window, 1, &d, 1, &d, 1};
  return tpu_b_scatter(b, base, idx, src, &s, tpu_idx_body(in->dtype, body));
}

/* Full coordinates [idx.shape..., rank] for element-wise gather/scatter along dim. */
static tpu_val_t tpu_idx_coords(tpu_builder_t* b, tpu_val_t idx, int dim) {
  tpu_aval_t a = *tpu_b_aval(b, idx);
  int64_t dims1[TPU_MAX_RANK + 1];
  memcpy(dims1, a.dims, sizeof(int64_t) * (size_t)a.rank);
  dims1[a.rank] = 1;
  tpu_val_t parts[TPU_MAX_RANK];
  for (int d = 0; d < a.rank; ++d) {
    tpu_val_t c = d == dim ? idx : tpu_b_iota(b, &a, d);
    parts[d] = tpu_b_reshape(b, c, a.rank + 1, dims1);
  }
  return tpu_b_concat(b, a.rank, parts, a.rank);
}

/* Rank-0 operands are handled as [1]. */
static tpu_val_t tpu_idx_as_1d(tpu_builder_t* b, tpu_val_t v) {
  int64_t one = 1;
  return tpu_b_rank(b, v) == 0 ? tpu_b_reshape(b, v, 1, &one) : v;
}

tpu_val_t tpu_idx_gather_dim(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t idx) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t ia = *tpu_b_aval(b, idx);
  tpu_aval_t out = tpu_idx_aval_with(&ia, tpu_b_dtype(b, x));
  if (tpu_idx_empty(&out) || tpu_idx_empty(tpu_b_aval(b, x))) return tpu_b_full(b, &out, 0.0);
  x = tpu_idx_as_1d(b, x);
  idx = tpu_idx_as_1d(b, idx);
  int r = tpu_b_rank(b, x);
  tpu_val_t coords = tpu_idx_coords(b, idx, dim);
  int64_t all[TPU_MAX_RANK], ones[TPU_MAX_RANK];
  for (int i = 0; i < r; ++i) all[i] = i, ones[i] = 1;
  tpu_gather_dims_t g = {0, NULL, r, all, r, all, r, ones};
  tpu_aval_t o1 = *tpu_b_aval(b, idx);
  o1.dtype = out.dtype;
  tpu_val_t res = tpu_b_gather(b, x, coords, &g, &o1);
  return tpu_b_reshape(b, res, out.rank, out.dims);
}

tpu_val_t tpu_idx_scatter_dim(tpu_builder_t* b, tpu_val_t base, int dim, tpu_val_t idx, tpu_val_t src,
                              const char* body) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t ba = *tpu_b_aval(b, base);
  if (tpu_idx_empty(tpu_b_aval(b, idx)) || tpu_idx_empty(&ba)) return base;
  base = tpu_idx_as_1d(b, base);
  idx = tpu_idx_as_1d(b, idx);
  src = tpu_idx_as_1d(b, src);
  const tpu_aval_t ia = *tpu_b_aval(b, idx);
  int64_t zero[TPU_MAX_RANK] = {0};
  src = tpu_b_slice(b, src, zero, ia.dims, NULL); /* src may be larger than index */
  int r = ia.rank;
  int64_t all[TPU_MAX_RANK];
  for (int i = 0; i < r; ++i) all[i] = i;
  tpu_scatter_dims_t s = {0, NULL, r, all, r, all, r};
  tpu_val_t res = tpu_b_scatter(b, base, tpu_idx_coords(b, idx, dim), src, &s, tpu_idx_body(ba.dtype, body));
  return tpu_b_reshape(b, res, ba.rank, ba.dims);
}

tpu_val_t tpu_idx_cumsum(tpu_builder_t* b, tpu_val_t x, int dim) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, x);
  int64_t n = a.dims[dim];
  tpu_val_t zero = tpu_b_const(b, a.dtype, 0.0);
  for (int64_t s = 1; s < n; s *= 2) {
    int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    memcpy(limit, a.dims, sizeof(limit));
    limit[dim] = n - s;
    lo[dim] = s;
    tpu_val_t shifted = tpu_b_pad(b, tpu_b_slice(b, x, start, limit, NULL), zero, lo, hi, NULL);
    x = tpu_b_binary(b, "stablehlo.add", x, shifted);
  }
  return x;
}

/* The comparator region of a sort on (key, index): PyTorch's order, NaN largest. */
static char* tpu_idx_sort_region(tpu_builder_t* b, tpu_dtype_t t, bool descending) {
  tpu_aval_t sv = tpu_aval_make(t, 0, NULL), si = tpu_aval_make(TPU_I64, 0, NULL);
  tpu_aval_t args_av[4] = {sv, sv, si, si};
  tpu_val_t r[4];
  tpu_b_region_begin(b, 4, args_av, r);
  tpu_val_t x = r[0], y = r[1];
  tpu_val_t before = tpu_b_compare(b, descending ? "GT" : "LT", x, y);
  if (tpu_dtype_is_float(t)) {
    /* NaN sorts as the largest value: after everything ascending, first descending. */
    tpu_val_t nan_first = descending ? x : y, other = descending ? y : x;
    tpu_val_t is_nan = tpu_b_compare(b, "NE", nan_first, nan_first);
    tpu_val_t other_ok = tpu_b_compare(b, "EQ", other, other);
    before = tpu_b_binary(b, "stablehlo.or", before, tpu_b_binary(b, "stablehlo.and", is_nan, other_ok));
  }
  return tpu_b_region_end(b, 1, &before);
}

void tpu_idx_sort(tpu_builder_t* b, tpu_val_t x, int dim, bool descending, tpu_val_t* values,
                  tpu_val_t* indices) {
  *values = *indices = TPU_NOVAL;
  if (!tpu_b_ok(b)) return;
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_aval_t ia = tpu_idx_aval_with(&a, TPU_I64);
  if (a.rank == 0 || tpu_idx_empty(&a)) {
    *values = x;
    *indices = tpu_b_full(b, &ia, 0.0);
    return;
  }
  tpu_val_t iota = tpu_b_iota(b, &ia, dim);
  char* region = tpu_idx_sort_region(b, a.dtype, descending);
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimension = %d : i64, is_stable = true", dim);
  tpu_val_t ins[2] = {x, iota}, outs[2];
  tpu_aval_t oav[2] = {a, ia};
  tpu_b_op(b, "stablehlo.sort", 2, ins, 1, &region, attrs, 2, oav, outs);
  *values = outs[0];
  *indices = outs[1];
}

tpu_val_t tpu_idx_const_vec(tpu_builder_t* b, tpu_dtype_t dtype, int64_t n, const void* data) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = tpu_aval_make(dtype, 1, &n);
  if (n == 0) return tpu_b_full(b, &a, 0.0);
  size_t isz = tpu_dtype_size(dtype), nbytes = isz * (size_t)n;
  char* attrs = malloc(nbytes * 2 + 128);
  if (!attrs) {
    TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
    return TPU_NOVAL;
  }
  /* MLIR's hex form: the raw little-endian buffer, exact for every value. */
  static const char hex[] = "0123456789ABCDEF";
  size_t p = (size_t)sprintf(attrs, "value = dense<\"0x");
  const unsigned char* bytes = data;
  for (size_t i = 0; i < nbytes; ++i) {
    attrs[p++] = hex[bytes[i] >> 4];
    attrs[p++] = hex[bytes[i] & 15];
  }
  char t[64];
  sprintf(attrs + p, "\"> : %s", tpu_fmt_type(t, sizeof(t), &a));
  tpu_val_t v = tpu_b_op1(b, "stablehlo.constant", 0, NULL, attrs, &a);
  free(attrs);
  return v;
}

/* ========================================================= argument checks */

/* Which index dtypes an op accepts, and how PyTorch's message spells them. */
typedef enum { TPU_IDX_I64, TPU_IDX_I32_OR_I64, TPU_IDX_I32_SLASH_I64 } tpu_idx_dtypes_t;

/* Tensor argument i as an index: int64 (or int32 when allowed). PyTorch >= 2.x
 * accepts int32 for index_select, gather and the scatter family. */
static bool tpu_idx_check_dtype(tpu_builder_t* b, const tpu_op_t* op, int i, tpu_idx_dtypes_t allowed,
                                const char* what) {
  static const char* const names[] = {"int64", "int32 or int64", "int32/int64"};
  tpu_aval_t a = tpu_op_aval(op, i);
  tpu_dtype_t t = a.dtype;
  bool is_tensor = tpu_op_kind(op, i) == TPU_ARG_TENSOR;
  /* gather/scatter check the dtype of non-empty indices only (any empty index passes). */
  if (is_tensor && allowed == TPU_IDX_I32_SLASH_I64 && tpu_aval_numel(&a) == 0) return true;
  if (!is_tensor || !(t == TPU_I64 || (allowed != TPU_IDX_I64 && t == TPU_I32))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s(): Expected dtype %s for index", what, names[allowed]);
    return false;
  }
  return true;
}

/* A Scalar or 0-d tensor argument as a 0-d value of dtype. */
static tpu_val_t tpu_idx_value_arg(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t dtype, const char* what) {
  if (tpu_op_kind(op, i) == TPU_ARG_TENSOR) {
    tpu_aval_t a = tpu_op_aval(op, i);
    if (a.rank != 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "%s only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).", what,
                 a.rank);
      return TPU_NOVAL;
    }
    return tpu_b_convert(b, tpu_op_tensor(b, op, i), dtype);
  }
  return tpu_op_scalar(b, op, i, dtype);
}

static tpu_status_t* tpu_idx_one(tpu_val_t v, tpu_val_t* outs, int* nouts) {
  return tpu_ops_result1(v, outs, nouts);
}

static tpu_status_t* tpu_idx_two(tpu_val_t v, tpu_val_t i, tpu_val_t* outs, int* nouts) {
  outs[0] = v;
  outs[1] = i;
  *nouts = 2;
  return NULL;
}

/* ================================================== device-side range checks */

/* How an op reports an index outside its dim: PyTorch's CPU class and text. */
typedef enum tpu_idx_msg {
  TPU_IDX_MSG_SELF,      /* IndexError: index out of range in self */
  TPU_IDX_MSG_BOUNDS,    /* IndexError: index i is out of bounds for dimension d with size n */
  TPU_IDX_MSG_BOUNDS_RT, /* the same text as a RuntimeError (gather, scatter, index_add of a matrix) */
  TPU_IDX_MSG_COPY,      /* IndexError: index_copy_(): index i is out of bounds ... */
  TPU_IDX_MSG_TAKE,      /* IndexError: out of range: tried to access index i on a tensor of n elements. */
  TPU_IDX_MSG_SELECT,    /* IndexError: select(): index i out of range for tensor of size [..] at dimension d */
} tpu_idx_msg_t;

typedef struct tpu_idx_rule {
  bool negative; /* -size..-1 are valid too and wrap (x[i], take, put, index_fill) */
  tpu_idx_msg_t msg;
  const char* shape; /* TPU_IDX_MSG_SELECT: the indexed tensor's sizes, "[5, 3]" */
} tpu_idx_rule_t;

static void tpu_idx_report(tpu_builder_t* b, tpu_op_t* op, tpu_val_t bad, tpu_val_t value, int dim, int64_t size,
                           const tpu_idx_rule_t* rule) {
  tpu_idx_msg_t msg = rule->msg;
  switch (msg) {
    case TPU_IDX_MSG_SELF:
      tpu_op_check(b, op, bad, value, TPU_OUT_OF_RANGE, "index out of range in self");
      break;
    case TPU_IDX_MSG_BOUNDS:
    case TPU_IDX_MSG_BOUNDS_RT:
      tpu_op_check(b, op, bad, value, msg == TPU_IDX_MSG_BOUNDS ? TPU_OUT_OF_RANGE : TPU_INVALID_ARGUMENT,
                   "index {} is out of bounds for dimension %d with size %" PRId64, dim, size);
      break;
    case TPU_IDX_MSG_COPY:
      tpu_op_check(b, op, bad, value, TPU_OUT_OF_RANGE,
                   "index_copy_(): index {} is out of bounds for dimension %d with size %" PRId64, dim, size);
      break;
    case TPU_IDX_MSG_TAKE:
      tpu_op_check(b, op, bad, value, TPU_OUT_OF_RANGE,
                   "out of range: tried to access index {} on a tensor of %" PRId64 " elements.", size);
      break;
    case TPU_IDX_MSG_SELECT:
      tpu_op_check(b, op, bad, value, TPU_OUT_OF_RANGE, "select(): index {} out of range for tensor of size %s at dimension %d",
                   rule->shape ? rule->shape : "", dim);
      break;
  }
}

/* idx (any integer dtype) as i64, checked on the device against a dim of `size`
 * (`dim` names it in the message) and wrapped when the rule allows negatives.
 * The reported value is the largest offending index. */
static tpu_val_t tpu_idx_checked(tpu_builder_t* b, tpu_op_t* op, tpu_val_t idx, int dim, int64_t size,
                                 tpu_idx_rule_t rule) {
  idx = tpu_b_convert(b, idx, TPU_I64);
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, idx);
  if (tpu_aval_numel(&a) == 0) return idx;
  tpu_val_t lo = tpu_b_full(b, &a, rule.negative ? (double)-size : 0.0);
  tpu_val_t hi = tpu_b_broadcast_in_dim(b, tpu_idx_c64(b, size), a.rank, a.dims, NULL);
  tpu_val_t m = tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "LT", idx, lo), tpu_b_compare(b, "GE", idx, hi));
  /* "index out of range in self" names no index: skip the extra reduction. */
  bool want_value = rule.msg != TPU_IDX_MSG_SELF;
  tpu_val_t bad = m, value = want_value ? idx : TPU_NOVAL;
  if (a.rank > 0) {
    int64_t dims[TPU_MAX_RANK];
    for (int i = 0; i < a.rank; ++i) dims[i] = i;
    bad = tpu_b_reduce(b, m, tpu_b_const_i(b, TPU_BOOL, 0), a.rank, dims, "stablehlo.or");
    if (want_value) {
      tpu_val_t low = tpu_idx_c64(b, INT64_MIN);
      tpu_val_t only_bad = tpu_b_select(b, m, idx, tpu_b_broadcast_in_dim(b, low, a.rank, a.dims, NULL));
      value = tpu_b_reduce(b, only_bad, low, a.rank, dims, "stablehlo.maximum");
    }
  }
  tpu_idx_report(b, op, bad, value, dim, size, &rule);
  return rule.negative ? tpu_idx_wrap(b, idx, size) : idx;
}

/* Index argument i as a 1-D i64 vector, checked along `dim` of `size` (index_select & co). */
static tpu_val_t tpu_idx_vector_arg(tpu_builder_t* b, tpu_op_t* op, int i, int dim, int64_t size,
                                    tpu_idx_rule_t rule, const char* what) {
  tpu_aval_t a = tpu_op_aval(op, i);
  if (a.rank > 1) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "%s(): Index is supposed to be a vector", what);
    return TPU_NOVAL;
  }
  int64_t n = tpu_aval_numel(&a);
  return tpu_b_reshape(b, tpu_idx_checked(b, op, tpu_op_tensor(b, op, i), dim, size, rule), 1, &n);
}

/* ============================================== index_select / gather / take */

static tpu_status_t* tpu_lower_index_select(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  if (!tpu_idx_check_dtype(b, op, 2, TPU_IDX_I32_OR_I64, "index_select")) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  const tpu_idx_rule_t rule = {false, TPU_IDX_MSG_SELF, NULL};
  if (in.rank == 0) { /* a scalar self: the result is self (index must be [0]) */
    tpu_idx_vector_arg(b, op, 2, 0, 1, rule, "index_select");
    return tpu_idx_one(x, outs, nouts);
  }
  tpu_val_t idx = tpu_idx_vector_arg(b, op, 2, dim, in.dims[dim], rule, "index_select");
  return tpu_idx_one(tpu_idx_select(b, x, dim, idx), outs, nouts);
}

static tpu_status_t* tpu_lower_gather(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 2);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  if (!tpu_idx_check_dtype(b, op, 2, TPU_IDX_I32_SLASH_I64, "gather")) return NULL;
  if (tpu_aval_numel(&ia) == 0) { /* PyTorch checks neither dtype nor shape of an empty index */
    tpu_aval_t ra = tpu_aval_make(in.dtype, ia.rank, ia.dims);
    return tpu_idx_one(tpu_b_full(b, &ra, 0.0), outs, nouts);
  }
  if (ia.rank != in.rank && !(ia.rank <= 1 && in.rank <= 1)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Index tensor must have the same number of dimensions as input tensor");
    return NULL;
  }
  for (int d = 0; d < ia.rank && ia.rank == in.rank; ++d) {
    if (d != dim && ia.dims[d] > in.dims[d]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Size does not match at dimension %d expected index to be no larger than self apart from dimension %d",
                 d, dim);
      return NULL;
    }
  }
  int64_t size = in.rank ? in.dims[dim] : 1;
  tpu_idx_rule_t rule = {false, TPU_IDX_MSG_BOUNDS_RT, NULL};
  tpu_val_t idx = tpu_idx_checked(b, op, tpu_op_tensor(b, op, 2), dim, size, rule);
  return tpu_idx_one(tpu_idx_gather_dim(b, tpu_op_tensor(b, op, 0), dim, idx), outs, nouts);
}

static tpu_status_t* tpu_lower_take(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 1);
  if (!tpu_idx_check_dtype(b, op, 1, TPU_IDX_I64, "take")) return NULL;
  int64_t n = tpu_aval_numel(&in), k = tpu_aval_numel(&ia);
  if (n == 0 && k > 0) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "take(): tried to take from an empty tensor");
    return NULL;
  }
  tpu_val_t flat = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 1, &n);
  tpu_idx_rule_t rule = {true, TPU_IDX_MSG_TAKE, NULL};
  tpu_val_t idx = tpu_b_reshape(b, tpu_idx_checked(b, op, tpu_op_tensor(b, op, 1), 0, n, rule), 1, &k);
  tpu_val_t r = tpu_idx_select(b, flat, 0, idx);
  return tpu_idx_one(tpu_b_reshape(b, r, ia.rank, ia.dims), outs, nouts);
}

/* put_(self, index, source, accumulate) */
static tpu_status_t* tpu_lower_put(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 1), sa = tpu_op_aval(op, 2);
  if (!tpu_idx_check_dtype(b, op, 1, TPU_IDX_I64, "put_")) return NULL;
  int64_t n = tpu_aval_numel(&in), k = tpu_aval_numel(&ia);
  if (tpu_aval_numel(&sa) != k) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "put_(): Expected source and index to have the same number of elements, but got source.numel() = %" PRId64
               ", index.numel() = %" PRId64, tpu_aval_numel(&sa), k);
    return NULL;
  }
  if (sa.dtype != in.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "put_(): self and source expected to have the same dtype, but got self.dtype = %s and source.dtype = %s",
               tpu_dtype_name(in.dtype), tpu_dtype_name(sa.dtype));
    return NULL;
  }
  tpu_val_t flat = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 1, &n);
  tpu_idx_rule_t rule = {true, TPU_IDX_MSG_TAKE, NULL};
  tpu_val_t idx = tpu_b_reshape(b, tpu_idx_checked(b, op, tpu_op_tensor(b, op, 1), 0, n, rule), 1, &k);
  tpu_val_t src = tpu_b_reshape(b, tpu_op_tensor(b, op, 2), 1, &k);
  tpu_val_t r = tpu_idx_put_along(b, flat, 0, idx, src, tpu_op_bool(op, 3, false) ? "stablehlo.add" : NULL);
  return tpu_idx_one(tpu_b_reshape(b, r, in.rank, in.dims), outs, nouts);
}

/* ========================================================== scatter family */

typedef struct tpu_idx_reduce {
  const char* name; /* PyTorch's reduce string */
  const char* body; /* the scatter combiner */
  int identity;     /* 0: zero, 1: one, 2: lowest, 3: highest */
} tpu_idx_reduce_t;

static const tpu_idx_reduce_t tpu_idx_reduces[] = {
    {"add", "stablehlo.add", 0},       {"multiply", "stablehlo.multiply", 1},
    {"sum", "stablehlo.add", 0},       {"prod", "stablehlo.multiply", 1},
    {"mean", "stablehlo.add", 0},      {"amax", "stablehlo.maximum", 2},
    {"amin", "stablehlo.minimum", 3},
};

static const tpu_idx_reduce_t* tpu_idx_find_reduce(const char* s, int first, int last) {
  for (int i = first; s && i < last; ++i)
    if (strcmp(tpu_idx_reduces[i].name, s) == 0) return &tpu_idx_reduces[i];
  return NULL;
}

/* The identity of a reduction for dtype t, as a 0-d constant. */
static tpu_val_t tpu_idx_identity(tpu_builder_t* b, tpu_dtype_t t, int kind) {
  if (kind < 2) return tpu_b_const(b, t, kind);
  return tpu_b_const_extreme(b, t, kind != 3);
}

/* Shared checks of scatter-like ops: index int32/int64, same rank, sizes within bounds. */
static bool tpu_idx_scatter_checks(tpu_builder_t* b, const tpu_op_t* op, int dim, bool src_tensor, const char* what) {
  if (!tpu_idx_check_dtype(b, op, 2, TPU_IDX_I32_SLASH_I64, what)) return false;
  tpu_aval_t in = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 2);
  if (src_tensor && tpu_op_aval(op, 3).dtype != in.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s(): Expected self.dtype to be equal to src.dtype", what);
    return false;
  }
  if (tpu_aval_numel(&ia) == 0) return true;
  if (ia.rank != in.rank && !(ia.rank <= 1 && in.rank <= 1)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Index tensor must have the same number of dimensions as self tensor");
    return false;
  }
  tpu_aval_t sa = src_tensor ? tpu_op_aval(op, 3) : ia;
  for (int d = 0; d < ia.rank && ia.rank == in.rank; ++d) {
    if ((d != dim && ia.dims[d] > in.dims[d]) || (src_tensor && sa.rank == ia.rank && ia.dims[d] > sa.dims[d])) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Expected index to be smaller than self apart from dimension %d and to be smaller size than src", dim);
      return false;
    }
  }
  return true;
}

/* src (tensor arg 3, or the Scalar value broadcast to index's shape). */
static tpu_val_t tpu_idx_scatter_src(tpu_builder_t* b, tpu_op_t* op, tpu_dtype_t t) {
  if (tpu_op_kind(op, 3) == TPU_ARG_TENSOR) return tpu_op_tensor(b, op, 3);
  tpu_aval_t ia = tpu_op_aval(op, 2);
  ia.dtype = t;
  return tpu_b_broadcast_in_dim(b, tpu_op_scalar(b, op, 3, t), ia.rank, ia.dims, NULL);
}

/* scatter(self, dim, index, src|value[, reduce]) and scatter_add(self, dim, index, src). */
static tpu_status_t* tpu_lower_scatter_common(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts,
                                              const char* body, const char* what) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  if (!tpu_idx_scatter_checks(b, op, dim, tpu_op_kind(op, 3) == TPU_ARG_TENSOR, what)) return NULL;
  int64_t size = in.rank ? in.dims[dim] : 1;
  tpu_idx_rule_t rule = {false, TPU_IDX_MSG_BOUNDS_RT, NULL};
  tpu_val_t idx = tpu_idx_checked(b, op, tpu_op_tensor(b, op, 2), dim, size, rule);
  tpu_val_t r = tpu_idx_scatter_dim(b, tpu_op_tensor(b, op, 0), dim, idx, tpu_idx_scatter_src(b, op, in.dtype), body);
  return tpu_idx_one(r, outs, nouts);
}

static tpu_status_t* tpu_lower_scatter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const char* body = NULL;
  if (tpu_op_kind(op, 4) == TPU_ARG_STRING) {
    const tpu_idx_reduce_t* r = tpu_idx_find_reduce(tpu_op_arg(op, 4)->u.str, 0, 2);
    if (!r) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "reduce argument must be either add or multiply.");
      return NULL;
    }
    body = r->body;
  }
  return tpu_lower_scatter_common(b, op, outs, nouts, body, "scatter");
}

static tpu_status_t* tpu_lower_scatter_add(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  return tpu_lower_scatter_common(b, op, outs, nouts, "stablehlo.add", "scatter_add");
}

/* Replaces the positions a reduction touches by its identity (include_self=False). */
static tpu_val_t tpu_idx_reset_touched(tpu_builder_t* b, tpu_val_t self, int dim, tpu_val_t idx,
                                       tpu_val_t identity, const tpu_aval_t* ia) {
  tpu_aval_t fa = tpu_idx_aval_with(ia, tpu_b_dtype(b, self));
  tpu_val_t fill = tpu_b_broadcast_in_dim(b, identity, fa.rank, fa.dims, NULL);
  return tpu_idx_scatter_dim(b, self, dim, idx, fill, NULL);
}

/* scatter_reduce(self, dim, index, src, reduce, include_self) and
 * index_reduce(self, dim, index, source, reduce, include_self): `along` selects
 * the index_* form (1-D index, whole slices). */
static tpu_val_t tpu_idx_reduce_into(tpu_builder_t* b, tpu_val_t self, int dim, tpu_val_t idx, tpu_val_t src,
                                     const tpu_idx_reduce_t* red, bool include_self, bool along) {
  tpu_aval_t sa = *tpu_b_aval(b, self);
  tpu_aval_t ua = *tpu_b_aval(b, src);
  tpu_aval_t ia = tpu_idx_aval_with(along ? &ua : tpu_b_aval(b, idx), sa.dtype);
  tpu_dtype_t t = sa.dtype;
  tpu_val_t identity = tpu_idx_identity(b, t, red->identity);
#define TPU_IDX_APPLY(base, upd, body)                                        \
  (along ? tpu_idx_put_along(b, (base), dim, idx, (upd), (body))             \
         : tpu_idx_scatter_dim(b, (base), dim, idx, (upd), (body)))
  if (!include_self) {
    tpu_val_t fill = tpu_b_broadcast_in_dim(b, identity, ia.rank, ia.dims, NULL);
    self = along ? TPU_IDX_APPLY(self, fill, NULL) : tpu_idx_reset_touched(b, self, dim, idx, identity, &ia);
  }
  tpu_val_t out = TPU_IDX_APPLY(self, src, red->body);
  if (strcmp(red->name, "mean") == 0) {
    tpu_val_t ones = tpu_b_full(b, &ia, 1.0);
    tpu_val_t count = TPU_IDX_APPLY(tpu_b_full(b, &sa, include_self ? 1.0 : 0.0), ones, "stablehlo.add");
    tpu_val_t zero = tpu_ops_like(b, count, 0.0);
    count = tpu_b_select(b, tpu_b_compare(b, "EQ", count, zero), tpu_ops_like(b, count, 1.0), count);
    if (tpu_dtype_is_float(t)) {
      out = tpu_b_binary(b, "stablehlo.divide", out, count);
    } else { /* floor division, as PyTorch's div_(count, "floor") */
      tpu_val_t q = tpu_b_binary(b, "stablehlo.divide", out, count);
      tpu_val_t rem = tpu_b_binary(b, "stablehlo.remainder", out, count);
      tpu_val_t fix = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "NE", rem, zero),
                                   tpu_b_compare(b, "LT", rem, zero));
      out = tpu_b_select(b, fix, tpu_b_binary(b, "stablehlo.subtract", q, tpu_ops_like(b, q, 1.0)), q);
    }
  }
#undef TPU_IDX_APPLY
  return out;
}

static const tpu_idx_reduce_t* tpu_idx_reduce_arg(tpu_builder_t* b, const tpu_op_t* op, int i, const char* what) {
  const char* s = tpu_op_kind(op, i) == TPU_ARG_STRING ? tpu_op_arg(op, i)->u.str : NULL;
  const tpu_idx_reduce_t* r = tpu_idx_find_reduce(s, 2, (int)TPU_ARRAY_LEN(tpu_idx_reduces));
  if (!r) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s(): reduce argument must be either sum, prod, mean, amax or amin, got %s",
                     what, s ? s : "None");
  return r;
}

static tpu_status_t* tpu_lower_scatter_reduce(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  const tpu_idx_reduce_t* red = tpu_idx_reduce_arg(b, op, 4, "scatter_reduce");
  if (!red || !tpu_idx_scatter_checks(b, op, dim, true, "scatter_reduce")) return NULL;
  int64_t size = in.rank ? in.dims[dim] : 1;
  tpu_idx_rule_t rule = {false, TPU_IDX_MSG_BOUNDS_RT, NULL};
  tpu_val_t idx = tpu_idx_checked(b, op, tpu_op_tensor(b, op, 2), dim, size, rule);
  tpu_val_t src = tpu_op_tensor(b, op, 3);
  if (tpu_aval_numel(tpu_b_aval(b, idx)) == 0) return tpu_idx_one(tpu_op_tensor(b, op, 0), outs, nouts);
  /* Slice src to the index's shape first (the mean count uses the index shape). */
  tpu_aval_t ia = *tpu_b_aval(b, idx);
  int64_t zero[TPU_MAX_RANK] = {0};
  if (ia.rank == tpu_b_rank(b, src)) src = tpu_b_slice(b, src, zero, ia.dims, NULL);
  tpu_val_t r = tpu_idx_reduce_into(b, tpu_op_tensor(b, op, 0), dim, idx, src, red, tpu_op_bool(op, 5, true), false);
  return tpu_idx_one(r, outs, nouts);
}

/* ============================================== index_add / copy / fill / reduce */

/* Checks of the index_* ops and the wrapped 1-D index; source is arg 3. */
static tpu_val_t tpu_idx_along_args(tpu_builder_t* b, tpu_op_t* op, int* out_dim, tpu_idx_rule_t rule,
                                    const char* what) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  *out_dim = dim;
  if (!tpu_idx_check_dtype(b, op, 2, TPU_IDX_I32_OR_I64, what)) return TPU_NOVAL;
  int64_t size = in.rank ? in.dims[dim] : 1;
  return tpu_idx_vector_arg(b, op, 2, dim, size, rule, what);
}

/* Source (arg 3) as a value of self's rank (0-d self: [1]), in dtype t. */
static tpu_val_t tpu_idx_along_source(tpu_builder_t* b, tpu_op_t* op, int dim, tpu_dtype_t t, const char* what) {
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 3);
  tpu_aval_t ia = tpu_op_aval(op, 2);
  int64_t k = tpu_aval_numel(&ia);
  bool ok = sa.rank == in.rank || (in.rank == 0 && sa.rank <= 1) || (sa.rank == 0 && in.rank <= 1);
  for (int d = 0; ok && d < in.rank && sa.rank == in.rank; ++d) ok = d == dim ? sa.dims[d] == k : sa.dims[d] == in.dims[d];
  if (!ok) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s(): Source/destination tensor must have same slice shapes", what);
    return TPU_NOVAL;
  }
  return tpu_idx_as_1d(b, tpu_b_convert(b, tpu_op_tensor(b, op, 3), t));
}

/* The one result of index_add / index_copy: src put into self (arg 0) along dim at
 * idx, combined by `body` (NULL: replaced), in self's shape. */
static tpu_status_t* tpu_idx_put_self_along(tpu_builder_t* b, tpu_op_t* op, int dim, tpu_val_t idx, tpu_val_t src,
                                            const char* body, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_val_t r = tpu_idx_put_along(b, tpu_idx_as_1d(b, tpu_op_tensor(b, op, 0)), dim, idx, src, body);
  return tpu_idx_one(tpu_b_reshape(b, r, in.rank, in.dims), outs, nouts);
}

/* index_add(self, dim, index, source, alpha) */
static tpu_status_t* tpu_lower_index_add(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim;
  /* CPU's kernel for a 1-D (or 0-d) self raises IndexError, the one for more dims a RuntimeError */
  const tpu_idx_msg_t msg = in.rank > 1 ? TPU_IDX_MSG_BOUNDS_RT : TPU_IDX_MSG_SELF;
  tpu_val_t idx = tpu_idx_along_args(b, op, &dim, (tpu_idx_rule_t){false, msg, NULL}, "index_add");
  if (tpu_op_aval(op, 3).dtype != in.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "index_add_(): self (%s) and source (%s) must have the same scalar type",
               tpu_dtype_name(in.dtype), tpu_dtype_name(tpu_op_aval(op, 3).dtype));
    return NULL;
  }
  tpu_val_t src = tpu_idx_along_source(b, op, dim, in.dtype, "index_add");
  if (tpu_ops_has_value(op, 4)) {
    tpu_val_t alpha = tpu_op_scalar(b, op, 4, in.dtype);
    const tpu_aval_t a = *tpu_b_aval(b, src);
    /* bool: alpha*source is a logical and (alpha=False adds nothing), as on CPU. */
    const char* mul = in.dtype == TPU_BOOL ? "stablehlo.and" : "stablehlo.multiply";
    if (tpu_b_ok(b)) src = tpu_b_binary(b, mul, src, tpu_b_broadcast_in_dim(b, alpha, a.rank, a.dims, NULL));
  }
  return tpu_idx_put_self_along(b, op, dim, idx, src, "stablehlo.add", outs, nouts);
}

static tpu_status_t* tpu_lower_index_copy(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim;
  tpu_val_t idx = tpu_idx_along_args(b, op, &dim, (tpu_idx_rule_t){false, TPU_IDX_MSG_COPY, NULL}, "index_copy");
  if (tpu_op_aval(op, 3).dtype != in.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "index_copy_(): self and source expected to have the same dtype, but got (self) %s and (source) %s",
               tpu_dtype_name(in.dtype), tpu_dtype_name(tpu_op_aval(op, 3).dtype));
    return NULL;
  }
  tpu_val_t src = tpu_idx_along_source(b, op, dim, in.dtype, "index_copy");
  return tpu_idx_put_self_along(b, op, dim, idx, src, NULL, outs, nouts);
}

static tpu_status_t* tpu_lower_index_reduce(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim;
  tpu_val_t idx = tpu_idx_along_args(b, op, &dim, (tpu_idx_rule_t){false, TPU_IDX_MSG_SELF, NULL}, "index_reduce");
  const char* s = tpu_op_kind(op, 4) == TPU_ARG_STRING ? tpu_op_arg(op, 4)->u.str : NULL;
  const tpu_idx_reduce_t* red = tpu_idx_find_reduce(s, 3, (int)TPU_ARRAY_LEN(tpu_idx_reduces));
  if (!red) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got %s.",
               s ? s : "None");
    return NULL;
  }
  tpu_val_t src = tpu_idx_along_source(b, op, dim, in.dtype, "index_reduce");
  tpu_val_t r = tpu_idx_reduce_into(b, tpu_idx_as_1d(b, tpu_op_tensor(b, op, 0)), dim, idx, src, red,
                                    tpu_op_bool(op, 5, true), true);
  return tpu_idx_one(tpu_b_reshape(b, r, in.rank, in.dims), outs, nouts);
}

/* A bool [size] vector: which positions does the 1-D index hit? */
static tpu_val_t tpu_idx_hits(tpu_builder_t* b, tpu_val_t idx, int64_t size) {
  tpu_aval_t ha = tpu_aval_make(TPU_BOOL, 1, &size);
  tpu_aval_t ia = *tpu_b_aval(b, idx);
  tpu_val_t ones = tpu_b_full(b, &(tpu_aval_t){.dtype = TPU_BOOL, .rank = 1, .dims = {ia.dims[0]}}, 1.0);
  return tpu_idx_put_along(b, tpu_b_full(b, &ha, 0.0), 0, idx, ones, NULL);
}

/* index_fill_(self, dim, index, value) */
static tpu_status_t* tpu_lower_index_fill(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim;
  tpu_val_t idx = tpu_idx_along_args(b, op, &dim, (tpu_idx_rule_t){true, TPU_IDX_MSG_BOUNDS, NULL}, "index_fill_");
  tpu_val_t v = tpu_idx_value_arg(b, op, 3, in.dtype, "index_fill_");
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (!tpu_b_ok(b) || tpu_aval_numel(&in) == 0) return tpu_idx_one(x, outs, nouts);
  int64_t size = in.rank ? in.dims[dim] : 1;
  tpu_val_t hit = tpu_idx_hits(b, idx, size);
  int64_t bd = dim;
  tpu_aval_t ba = tpu_idx_aval_with(&in, TPU_BOOL);
  if (in.rank == 0) hit = tpu_b_reshape(b, hit, 0, NULL);
  else hit = tpu_b_broadcast_in_dim(b, hit, ba.rank, ba.dims, &bd);
  tpu_val_t vb = tpu_b_broadcast_in_dim(b, v, in.rank, in.dims, NULL);
  return tpu_idx_one(tpu_b_select(b, hit, vb, x), outs, nouts);
}

/* ================================================================ masks */

/* Mask argument i broadcast to self's shape (in-place ops never broadcast self). */
static tpu_val_t tpu_idx_mask_arg(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_aval_t* self, const char* what) {
  tpu_aval_t ma = tpu_op_aval(op, i);
  if (ma.dtype != TPU_BOOL) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s only supports boolean masks, but got mask with dtype %s", what,
               tpu_dtype_name(ma.dtype));
    return TPU_NOVAL;
  }
  return tpu_b_broadcast_to(b, tpu_op_tensor(b, op, i), self->rank, self->dims);
}

/* masked_fill_(self, mask, value) */
static tpu_status_t* tpu_lower_masked_fill(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_val_t mask = tpu_idx_mask_arg(b, op, 1, &in, "masked_fill_");
  tpu_val_t v = tpu_idx_value_arg(b, op, 2, in.dtype, "masked_fill_");
  tpu_val_t vb = tpu_b_broadcast_in_dim(b, v, in.rank, in.dims, NULL);
  return tpu_idx_one(tpu_b_select(b, mask, vb, tpu_op_tensor(b, op, 0)), outs, nouts);
}

/* For each true position of a flat bool mask, its rank among the true ones
 * (exclusive prefix count), as i64 [n]. */
static tpu_val_t tpu_idx_mask_rank(tpu_builder_t* b, tpu_val_t flat_mask) {
  tpu_val_t c = tpu_idx_cumsum(b, tpu_b_convert(b, flat_mask, TPU_I64), 0);
  return tpu_b_binary(b, "stablehlo.subtract", c, tpu_ops_like(b, c, 1.0));
}

/* masked_scatter_(self, mask, source): true positions take source's elements in order. */
static tpu_status_t* tpu_lower_masked_scatter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 2);
  if (sa.dtype != in.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "masked_scatter_: expected self and source to have same dtypes but got %s and %s",
               tpu_dtype_name(in.dtype), tpu_dtype_name(sa.dtype));
    return NULL;
  }
  tpu_val_t mask = tpu_idx_mask_arg(b, op, 1, &in, "masked_scatter_");
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  int64_t n = tpu_aval_numel(&in), m = tpu_aval_numel(&sa);
  if (n == 0 || !tpu_b_ok(b)) return tpu_idx_one(x, outs, nouts);
  tpu_val_t fm = tpu_b_reshape(b, mask, 1, &n);
  tpu_val_t pos = tpu_idx_mask_rank(b, fm);
  /* More true positions than source elements (the last rank, count - 1, reaches m):
   * CPU refuses; the gather would clamp. */
  int64_t last = n - 1;
  tpu_val_t count_m1 = tpu_b_reshape(b, tpu_b_slice(b, pos, &last, &n, NULL), 0, NULL);
  tpu_op_check(b, op, tpu_b_compare(b, "GE", count_m1, tpu_idx_c64(b, m)), TPU_NOVAL, TPU_INVALID_ARGUMENT,
               "Number of elements of source < number of ones in mask");
  if (m == 0) return tpu_idx_one(x, outs, nouts);
  tpu_val_t src = tpu_b_reshape(b, tpu_op_tensor(b, op, 2), 1, &m);
  tpu_val_t g = tpu_idx_select(b, src, 0, pos);
  tpu_val_t r = tpu_b_select(b, fm, g, tpu_b_reshape(b, x, 1, &n));
  return tpu_idx_one(tpu_b_reshape(b, r, in.rank, in.dims), outs, nouts);
}

tpu_val_t tpu_idx_compact(tpu_builder_t* b, tpu_val_t flat_mask, tpu_val_t* count) {
  tpu_val_t key = tpu_b_convert(b, tpu_b_unary(b, "stablehlo.not", flat_mask), TPU_I32);
  tpu_val_t sorted, order;
  tpu_idx_sort(b, key, 0, false, &sorted, &order);
  int64_t d0 = 0;
  tpu_val_t ones = tpu_b_convert(b, flat_mask, TPU_I64);
  *count = tpu_b_reduce(b, ones, tpu_idx_c64(b, 0), 1, &d0, "stablehlo.add");
  return order;
}

/* Row-major coordinates [n, rank] of flat positions (i64 [n]). */
static tpu_val_t tpu_idx_unravel(tpu_builder_t* b, tpu_val_t flat, const tpu_aval_t* shape) {
  int64_t n = tpu_b_aval(b, flat)->dims[0];
  int64_t col[2] = {n, 1};
  tpu_val_t parts[TPU_MAX_RANK];
  int64_t stride = 1;
  for (int d = shape->rank - 1; d >= 0; --d) {
    tpu_val_t s = tpu_b_broadcast_in_dim(b, tpu_idx_c64(b, stride), 1, &n, NULL);
    tpu_val_t sz = tpu_b_broadcast_in_dim(b, tpu_idx_c64(b, shape->dims[d] ? shape->dims[d] : 1), 1, &n, NULL);
    tpu_val_t c = tpu_b_binary(b, "stablehlo.remainder", tpu_b_binary(b, "stablehlo.divide", flat, s), sz);
    parts[d] = tpu_b_reshape(b, c, 2, col);
    stride *= shape->dims[d] ? shape->dims[d] : 1;
  }
  return tpu_b_concat(b, shape->rank, parts, 1);
}

tpu_val_t tpu_idx_lengths(tpu_builder_t* b, int n, const tpu_val_t* lens, const int* dims) {
  int64_t one = 1;
  tpu_val_t acc = TPU_NOVAL;
  for (int i = 0; i < 2 * n; ++i) {
    tpu_val_t e = i < n ? tpu_b_convert(b, lens[i], TPU_I64) : tpu_idx_c64(b, dims ? dims[i - n] : 0);
    e = tpu_b_reshape(b, e, 1, &one);
    tpu_val_t pair[2] = {acc, e};
    acc = i == 0 ? e : tpu_b_concat(b, 2, pair, 0);
  }
  return acc;
}

/* nonzero(self) -> [count, rank] i64: computed padded to [numel, rank] (rows
 * past count are coordinates of zero elements), then the lengths vector. */
static tpu_status_t* tpu_lower_nonzero(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t n = tpu_aval_numel(&in);
  int64_t od[2] = {n, in.rank};
  tpu_aval_t oa = tpu_aval_make(TPU_I64, 2, od);
  tpu_val_t count;
  if (n == 0 || in.rank == 0) {
    /* 0-d: one row of zero columns; count is 1 when the value is nonzero. */
    tpu_val_t nz = tpu_b_convert(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_BOOL), TPU_I64);
    count = n == 0 ? tpu_idx_c64(b, 0) : tpu_b_reshape(b, nz, 0, NULL);
    return tpu_idx_two(tpu_b_full(b, &oa, 0.0), tpu_idx_lengths(b, 1, &count, NULL), outs, nouts);
  }
  tpu_val_t fm = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_BOOL), 1, &n);
  tpu_val_t order = tpu_idx_compact(b, fm, &count);
  return tpu_idx_two(tpu_idx_unravel(b, order, &in), tpu_idx_lengths(b, 1, &count, NULL), outs, nouts);
}

/* nonzero_static(self, size, fill_value): static shape [size, rank]. */
static tpu_status_t* tpu_lower_nonzero_static(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t size = tpu_op_int(op, 1, 0), fill = tpu_op_int(op, 2, -1);
  if (size < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "nonzero_static: 'size' must be an non-negative integer");
    return NULL;
  }
  int64_t n = tpu_aval_numel(&in), rank = in.rank;
  int64_t od[2] = {size, rank};
  tpu_aval_t oa = tpu_aval_make(TPU_I64, 2, od);
  if (n == 0 || size == 0 || rank == 0) {
    tpu_val_t r = tpu_b_full(b, &oa, (double)fill);
    if (rank == 0 || size == 0) r = tpu_b_full(b, &oa, 0.0);
    return tpu_idx_one(r, outs, nouts);
  }
  tpu_val_t fm = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_BOOL), 1, &n);
  tpu_val_t count;
  tpu_val_t coords = tpu_idx_unravel(b, tpu_idx_compact(b, fm, &count), &in);
  /* Rows [0, size): pad with fill (or crop), then fill rows >= count. */
  tpu_val_t fv = tpu_idx_c64(b, fill);
  int64_t lo[2] = {0, 0}, hi[2] = {size - n, 0};
  coords = tpu_b_pad(b, coords, fv, lo, hi, NULL);
  tpu_val_t row = tpu_b_iota(b, &oa, 0);
  tpu_val_t keep = tpu_b_compare(b, "LT", row, tpu_b_broadcast_in_dim(b, count, 2, od, NULL));
  return tpu_idx_one(tpu_b_select(b, keep, coords, tpu_b_full(b, &oa, (double)fill)), outs, nouts);
}

/* masked_select(self, mask) -> [count]: padded to the broadcast numel, then lengths. */
static tpu_status_t* tpu_lower_masked_select(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  (void)max_outs;
  if (tpu_op_aval(op, 1).dtype != TPU_BOOL) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "masked_select: expected BoolTensor for mask");
    return NULL;
  }
  int args[2] = {0, 1};
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  int64_t n = tpu_aval_numel(&shape);
  tpu_aval_t oa = tpu_aval_make(t, 1, &n);
  tpu_val_t count = tpu_idx_c64(b, 0);
  if (n == 0) return tpu_idx_two(tpu_b_full(b, &oa, 0.0), tpu_idx_lengths(b, 1, &count, NULL), outs, nouts);
  tpu_val_t x = tpu_b_reshape(b, tpu_ops_bcast(b, tpu_op_tensor(b, op, 0), &shape), 1, &n);
  tpu_val_t fm = tpu_b_reshape(b, tpu_ops_bcast(b, tpu_op_tensor(b, op, 1), &shape), 1, &n);
  tpu_val_t order = tpu_idx_compact(b, fm, &count);
  return tpu_idx_two(tpu_idx_select(b, x, 0, order), tpu_idx_lengths(b, 1, &count, NULL), outs, nouts);
}

/* ====================================================== advanced indexing */

/* x[indices] with integer index tensors (None entries keep their dim). */
typedef struct tpu_adv {
  int nadv;
  int64_t adv[TPU_MAX_RANK];    /* operand dims that are indexed, ascending */
  int nb;                       /* rank of the broadcast index shape */
  int64_t bdims[TPU_MAX_RANK];
  tpu_aval_t result;            /* shape of x[indices] */
  int noff;
  int64_t offset[TPU_MAX_RANK]; /* positions of the kept dims in result */
  int mask_pos;                 /* list position of a bool mask, or -1 */
} tpu_adv_t;

static bool tpu_adv_is_mask(tpu_dtype_t t) { return t == TPU_BOOL || t == TPU_U8; }

/* Validates the index list (arg 1) against self and plans the result shape. */
static bool tpu_adv_plan(tpu_builder_t* b, const tpu_op_t* op, const tpu_aval_t* self, tpu_adv_t* p) {
  memset(p, 0, sizeof(*p));
  p->mask_pos = -1;
  int n = tpu_op_list_len(op, 1);
  const tpu_arg_t* list = tpu_op_arg(op, 1);
  int used = 0;
  for (int j = 0; j < n; ++j) {
    const tpu_tensor_t* t = &list->u.list.tensors[j];
    if (!t->storage) { used++; continue; }
    if (tpu_adv_is_mask(t->dtype)) {
      for (int k = 0; k < t->rank; ++k) {
        if (used + k >= self->rank || t->sizes[k] != self->dims[used + k]) {
          TPU_B_FAIL(b, TPU_OUT_OF_RANGE,
                     "The shape of the mask at index %d does not match the shape of the indexed tensor at index %d",
                     k, used + k);
          return false;
        }
      }
      if (p->mask_pos >= 0 || p->nadv > 0) p->mask_pos = -2; /* mixed: unsupported */
      else p->mask_pos = j;
      used += t->rank;
      continue;
    }
    if (t->dtype != TPU_I64 && t->dtype != TPU_I32) {
      TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "tensors used as indices must be long, int, byte or bool tensors");
      return false;
    }
    if (p->mask_pos != -1) p->mask_pos = -2;
    p->adv[p->nadv++] = used++;
  }
  if (used > self->rank) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "too many indices for tensor of dimension %d", self->rank);
    return false;
  }
  if (p->mask_pos != -1) return true;
  /* Broadcast shape of the index tensors. */
  for (int j = 0; j < n; ++j) {
    const tpu_tensor_t* t = &list->u.list.tensors[j];
    if (!t->storage) continue;
    int rank = t->rank > p->nb ? t->rank : p->nb;
    int64_t dims[TPU_MAX_RANK];
    for (int i = 0; i < rank; ++i) {
      int it = i - (rank - t->rank), ib = i - (rank - p->nb);
      int64_t dt = it >= 0 ? t->sizes[it] : 1, db = ib >= 0 ? p->bdims[ib] : 1;
      if (dt != db && dt != 1 && db != 1) {
        TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "shape mismatch: indexing tensors could not be broadcast together");
        return false;
      }
      dims[i] = dt == 1 ? db : dt;
    }
    p->nb = rank;
    memcpy(p->bdims, dims, sizeof(dims));
  }
  bool adjacent = true;
  for (int i = 1; i < p->nadv; ++i) adjacent = adjacent && p->adv[i] == p->adv[i - 1] + 1;
  /* Adjacent advanced dims: the index shape replaces them in place; otherwise
   * it goes first (numpy's rule). */
  int64_t at = adjacent && p->nadv ? p->adv[0] : 0;
  tpu_aval_t* r = &p->result;
  r->dtype = self->dtype;
  for (int d = 0; d < self->rank; ++d) {
    bool is_adv = false;
    for (int i = 0; i < p->nadv; ++i) is_adv = is_adv || p->adv[i] == d;
    if (d == at) for (int i = 0; i < p->nb; ++i) r->dims[r->rank++] = p->bdims[i];
    if (is_adv) continue;
    p->offset[p->noff++] = r->rank;
    r->dims[r->rank++] = self->dims[d];
  }
  if (at >= self->rank) for (int i = 0; i < p->nb; ++i) r->dims[r->rank++] = p->bdims[i];
  return true;
}

/* Coordinates [B..., nadv] of the advanced indices (wrapped, broadcast). */
static tpu_val_t tpu_adv_coords(tpu_builder_t* b, tpu_op_t* op, const tpu_aval_t* self, const tpu_adv_t* p) {
  int n = tpu_op_list_len(op, 1), k = 0;
  const tpu_arg_t* list = tpu_op_arg(op, 1);
  int64_t d1[TPU_MAX_RANK + 1];
  memcpy(d1, p->bdims, sizeof(int64_t) * (size_t)p->nb);
  d1[p->nb] = 1;
  tpu_val_t parts[TPU_MAX_RANK];
  for (int j = 0; j < n; ++j) {
    if (!list->u.list.tensors[j].storage) continue;
    int d = (int)p->adv[k];
    tpu_val_t v = tpu_idx_checked(b, op, tpu_op_list_tensor(b, op, 1, j), d, self->dims[d],
                                  (tpu_idx_rule_t){true, TPU_IDX_MSG_BOUNDS, NULL});
    v = tpu_b_broadcast_to(b, v, p->nb, p->bdims);
    parts[k++] = tpu_b_reshape(b, v, p->nb + 1, d1);
  }
  return tpu_b_concat(b, k, parts, p->nb);
}

static void tpu_adv_slice_sizes(const tpu_aval_t* self, const tpu_adv_t* p, int64_t* slice) {
  for (int d = 0; d < self->rank; ++d) slice[d] = self->dims[d];
  for (int i = 0; i < p->nadv; ++i) slice[p->adv[i]] = 1;
}

/* A non-empty result from an empty self means an index into a size-0 dim: every
 * index is out of range there, which the shapes alone tell. */
static bool tpu_adv_check_empty(tpu_builder_t* b, const tpu_aval_t* self) {
  if (tpu_aval_numel(self) != 0) return true;
  TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "index is out of bounds for dimension with size 0");
  return false;
}

/* index(self, indices) */
static tpu_status_t* tpu_lower_index(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_adv_t p;
  if (!tpu_adv_plan(b, op, &in, &p)) return NULL;
  if (p.mask_pos != -1) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED,
               "aten::index with a bool/byte mask has a data-dependent shape; the runtime must first turn "
               "masks into long indices with nonzero, as PyTorch's expandTensors does");
    return NULL;
  }
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (p.nadv == 0) return tpu_idx_one(x, outs, nouts);
  /* An empty result reads nothing and checks nothing (as on CPU). */
  if (tpu_aval_numel(&p.result) == 0) return tpu_idx_one(tpu_b_full(b, &p.result, 0.0), outs, nouts);
  if (!tpu_adv_check_empty(b, &in)) return NULL;
  int64_t slice[TPU_MAX_RANK];
  tpu_adv_slice_sizes(&in, &p, slice);
  tpu_gather_dims_t g = {p.noff, p.offset, p.nadv, p.adv, p.nadv, p.adv, p.nb, slice};
  return tpu_idx_one(tpu_b_gather(b, x, tpu_adv_coords(b, op, &in, &p), &g, &p.result), outs, nouts);
}

/* self[mask] = values / += values with one bool mask and no other index: a
 * select, values taken in mask order via the prefix count (no sync needed). */
static tpu_val_t tpu_adv_put_mask(tpu_builder_t* b, tpu_op_t* op, const tpu_aval_t* self, const tpu_adv_t* p,
                                  bool accumulate) {
  const tpu_tensor_t* mt = &tpu_op_arg(op, 1)->u.list.tensors[p->mask_pos];
  int pre = 0, k = mt->rank;
  for (int j = 0; j < p->mask_pos; ++j) pre++;
  int post = self->rank - pre - k;
  int64_t m = 1;
  for (int i = 0; i < k; ++i) m *= mt->sizes[i];
  /* values aligned to the indexed shape [pre..., nnz, post...]. */
  tpu_aval_t va = tpu_op_aval(op, 2);
  int R = pre + 1 + post;
  if (va.rank > R) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "shape mismatch: value tensor cannot be broadcast to indexing result");
    return TPU_NOVAL;
  }
  int64_t L = va.rank > post ? va.dims[va.rank - post - 1] : 1;
  int64_t shape[TPU_MAX_RANK];
  for (int i = 0; i < pre; ++i) shape[i] = self->dims[i];
  shape[pre] = L;
  for (int i = 0; i < post; ++i) shape[pre + 1 + i] = self->dims[pre + k + i];
  tpu_val_t v = tpu_b_broadcast_to(b, tpu_op_tensor(b, op, 2), R, shape);
  tpu_val_t mask = tpu_b_convert(b, tpu_op_list_tensor(b, op, 1, p->mask_pos), TPU_BOOL);
  if (L != 1) { /* values row r goes to the r-th true position */
    tpu_val_t fm = tpu_b_reshape(b, mask, 1, &m);
    v = tpu_idx_select(b, v, pre, tpu_idx_mask_rank(b, fm));
    shape[pre] = m;
  }
  int64_t full[TPU_MAX_RANK];
  int fr = 0;
  for (int i = 0; i < pre; ++i) full[fr++] = self->dims[i];
  for (int i = 0; i < k; ++i) full[fr++] = L != 1 ? mt->sizes[i] : 1;
  for (int i = 0; i < post; ++i) full[fr++] = self->dims[pre + k + i];
  v = tpu_b_reshape(b, v, fr, full);
  v = tpu_b_broadcast_to(b, v, self->rank, self->dims);
  int64_t mb[TPU_MAX_RANK];
  for (int i = 0; i < k; ++i) mb[i] = pre + i;
  tpu_aval_t ba = tpu_idx_aval_with(self, TPU_BOOL);
  mask = tpu_b_broadcast_in_dim(b, mask, ba.rank, ba.dims, mb);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (accumulate) {
    tpu_val_t add = tpu_b_select(b, mask, v, tpu_ops_like(b, v, 0.0));
    return tpu_b_binary(b, self->dtype == TPU_BOOL ? "stablehlo.or" : "stablehlo.add", x, add);
  }
  return tpu_b_select(b, mask, v, x);
}

/* _index_put_impl_(self, indices, values, accumulate, unsafe); index_put too. */
static tpu_status_t* tpu_lower_index_put(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                         int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), va = tpu_op_aval(op, 2);
  bool accumulate = tpu_op_bool(op, 3, false);
  if (va.dtype != in.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Index put requires the source and destination dtypes match, got %s for the destination and %s for "
               "the source.", tpu_dtype_name(in.dtype), tpu_dtype_name(va.dtype));
    return NULL;
  }
  tpu_adv_t p;
  if (!tpu_adv_plan(b, op, &in, &p)) return NULL;
  if (p.mask_pos == -2) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED,
               "index_put_ with a bool mask combined with other index tensors is not supported on tpu");
    return NULL;
  }
  if (p.mask_pos >= 0) return tpu_idx_one(tpu_adv_put_mask(b, op, &in, &p, accumulate), outs, nouts);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (p.nadv == 0) { /* x[...] = v: a broadcast write */
    tpu_val_t v = tpu_b_broadcast_to(b, tpu_op_tensor(b, op, 2), in.rank, in.dims);
    if (accumulate) v = tpu_b_binary(b, in.dtype == TPU_BOOL ? "stablehlo.or" : "stablehlo.add", x, v);
    return tpu_idx_one(v, outs, nouts);
  }
  if (tpu_aval_numel(&p.result) == 0) return tpu_idx_one(x, outs, nouts);
  if (!tpu_adv_check_empty(b, &in)) return NULL;
  if (va.rank > p.result.rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "shape mismatch: value tensor cannot be broadcast to indexing result");
    return NULL;
  }
  tpu_val_t v = tpu_b_broadcast_to(b, tpu_op_tensor(b, op, 2), p.result.rank, p.result.dims);
  tpu_scatter_dims_t s = {p.noff, p.offset, p.nadv, p.adv, p.nadv, p.adv, p.nb};
  tpu_val_t r = tpu_b_scatter(b, x, tpu_adv_coords(b, op, &in, &p), v, &s,
                              tpu_idx_body(in.dtype, accumulate ? "stablehlo.add" : NULL));
  return tpu_idx_one(r, outs, nouts);
}

/* ============================================================== embedding */

/* embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq) */
static tpu_status_t* tpu_lower_embedding_dense_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                        tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t ga = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 1);
  int64_t nw = tpu_op_int(op, 2, 0), pad = tpu_op_int(op, 3, -1);
  bool by_freq = tpu_op_bool(op, 4, false);
  if (ia.dtype != TPU_I64 && ia.dtype != TPU_I32) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "embedding_backward: Expected tensor for argument #2 'indices' to have one of the following scalar types: Long, Int");
    return NULL;
  }
  int64_t k = tpu_aval_numel(&ia), dim = ga.rank ? ga.dims[ga.rank - 1] : 1;
  int64_t gd[2] = {k, dim}, od[2] = {nw, dim};
  tpu_dtype_t ct = tpu_dtype_opmath(ga.dtype);
  tpu_aval_t oa = tpu_aval_make(ct, 2, od);
  /* CPU drops such indices silently; the forward (index_select) raised for them
   * already, and a gradient for a row that does not exist is a bug: raise too. */
  tpu_val_t idx = tpu_idx_checked(b, op, tpu_op_tensor(b, op, 1), 0, nw, (tpu_idx_rule_t){false, TPU_IDX_MSG_SELF, NULL});
  if (k == 0 || nw == 0 || dim == 0)
    return tpu_idx_one(tpu_b_convert(b, tpu_b_full(b, &oa, 0.0), ga.dtype), outs, nouts);
  idx = tpu_b_reshape(b, idx, 1, &k);
  tpu_val_t g = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), 2, gd);
  tpu_aval_t ka = tpu_aval_make(ct, 1, &k);
  int64_t zero_dim = 0;
  tpu_val_t scale = tpu_b_full(b, &ka, 1.0);
  if (pad >= 0) { /* rows of padding_idx get no gradient */
    tpu_val_t is_pad = tpu_b_compare(b, "EQ", idx, tpu_b_broadcast_in_dim(b, tpu_idx_c64(b, pad), 1, &k, NULL));
    scale = tpu_b_select(b, is_pad, tpu_b_full(b, &ka, 0.0), scale);
  }
  if (by_freq) { /* divide by how often each index occurs */
    tpu_aval_t ca = tpu_aval_make(ct, 1, &nw);
    tpu_val_t counts = tpu_idx_put_along(b, tpu_b_full(b, &ca, 0.0), 0, idx, tpu_b_full(b, &ka, 1.0), "stablehlo.add");
    scale = tpu_b_binary(b, "stablehlo.divide", scale, tpu_idx_select(b, counts, 0, idx));
  }
  g = tpu_b_binary(b, "stablehlo.multiply", g, tpu_b_broadcast_in_dim(b, scale, 2, gd, &zero_dim));
  tpu_val_t r = tpu_idx_put_along(b, tpu_b_full(b, &oa, 0.0), 0, idx, g, "stablehlo.add");
  return tpu_idx_one(tpu_b_convert(b, r, ga.dtype), outs, nouts);
}

/* Checks of embedding_renorm_'s arguments, with ATen's messages. */
static bool tpu_idx_renorm_args(tpu_builder_t* b, const tpu_aval_t* wa, const tpu_aval_t* ia) {
  const char* ctx = "(while checking arguments for embedding_renorm_)";
  if (ia->dtype != TPU_I64 && ia->dtype != TPU_I32) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected tensor for argument #2 'indices' to have one of the following "
               "scalar types: Long, Int; but got torch.%sTensor instead %s", tpu_dtype_scalar_type_name(ia->dtype), ctx);
    return false;
  }
  if (wa->rank != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected 2-dimensional tensor, but got %d-dimensional tensor for argument "
               "#1 'self' %s", (int)wa->rank, ctx);
    return false;
  }
  if (!tpu_dtype_is_float(wa->dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "linalg.vector_norm: Expected a floating point or complex tensor as input. "
               "Got %s", tpu_dtype_scalar_type_name(wa->dtype));
    return false;
  }
  return true;
}

/* embedding_renorm(self, indices, max_norm, norm_type): every row of self that
 * indices name (once, however often named; negatives wrap as self[i] does) whose
 * norm_type-norm exceeds max_norm is scaled by max_norm / (norm + 1e-7), as ATen's
 * CPU kernel does; the binding writes the result into self for embedding_renorm_.
 * The norm is rounded to self's dtype first: ATen computes it as a tensor of it. */
static tpu_status_t* tpu_lower_embedding_renorm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t wa = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 1);
  if (!tpu_idx_renorm_args(b, &wa, &ia)) return NULL;
  int64_t v = wa.dims[0], k = tpu_aval_numel(&ia), one = 1, zero_dim = 0;
  double max_norm = tpu_op_float(op, 2, 0.0);
  char shape[96];
  tpu_idx_rule_t rule = {true, TPU_IDX_MSG_SELECT, tpu_fmt_i64_list(shape, sizeof(shape), wa.rank, wa.dims)};
  tpu_val_t idx = tpu_idx_checked(b, op, tpu_op_tensor(b, op, 1), 0, v, rule);
  tpu_val_t self = tpu_op_tensor(b, op, 0);
  if (k == 0 || tpu_aval_numel(&wa) == 0) return tpu_idx_one(self, outs, nouts);
  tpu_dtype_t ct = tpu_dtype_opmath(wa.dtype);
  tpu_aval_t va = tpu_aval_make(ct, 1, &v), ka = tpu_aval_make(ct, 1, &k);
  tpu_val_t named = tpu_idx_put_along(b, tpu_b_full(b, &va, 0.0), 0, tpu_b_reshape(b, idx, 1, &k),
                                      tpu_b_full(b, &ka, 1.0), NULL);
  tpu_val_t w = tpu_b_convert(b, self, ct);
  tpu_val_t norm = tpu_red_pnorm(b, tpu_b_unary(b, "stablehlo.abs", w), tpu_b_const(b, ct, tpu_op_float(op, 3, 2.0)),
                                 1, &one);
  norm = tpu_b_convert(b, tpu_b_convert(b, norm, wa.dtype), ct);
  tpu_val_t over = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GT", named, tpu_b_full(b, &va, 0.0)),
                                tpu_b_compare(b, "GT", norm, tpu_b_full(b, &va, max_norm)));
  tpu_val_t scale = tpu_b_binary(b, "stablehlo.divide", tpu_b_full(b, &va, max_norm),
                                 tpu_b_binary(b, "stablehlo.add", norm, tpu_b_full(b, &va, 1e-7)));
  scale = tpu_b_select(b, over, scale, tpu_b_full(b, &va, 1.0));
  w = tpu_b_binary(b, "stablehlo.multiply", w, tpu_b_broadcast_in_dim(b, scale, 2, wa.dims, &zero_dim));
  return tpu_idx_one(tpu_b_convert(b, w, wa.dtype), outs, nouts);
}

/* ================================================================= sorting */

/* sort(self, stable, dim, descending) -> (values, indices) */
static tpu_status_t* tpu_lower_sort(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  /* sort.stable: (self, stable, dim, descending); sort: (self, dim, descending). */
  bool has_stable = tpu_op_kind(op, 1) == TPU_ARG_BOOL || tpu_op_kind(op, 1) == TPU_ARG_NONE;
  int di = has_stable && tpu_op_nargs(op) >= 3 ? 2 : 1;
  int dim = tpu_ops_dim(b, tpu_op_int(op, di, -1), in.rank);
  tpu_val_t v, i;
  tpu_idx_sort(b, tpu_op_tensor(b, op, 0), dim, tpu_op_bool(op, di + 1, false), &v, &i);
  return tpu_idx_two(v, i, outs, nouts);
}

/* Slice [lo, hi) of v along dim. */
static tpu_val_t tpu_idx_slice_dim(tpu_builder_t* b, tpu_val_t v, int dim, int64_t lo, int64_t hi) {
  const tpu_aval_t* a = tpu_b_aval(b, v);
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
  memcpy(limit, a->dims, sizeof(limit));
  start[dim] = lo;
  limit[dim] = hi;
  return tpu_b_slice(b, v, start, limit, NULL);
}

/* topk(self, k, dim, largest, sorted) -> (values, indices): a stable sort, sliced. */
static tpu_status_t* tpu_lower_topk(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t k = tpu_op_int(op, 1, 1);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, -1), in.rank);
  int64_t n = in.rank ? in.dims[dim] : 1;
  if (k < 0 || k > n) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "selected index k out of range");
    return NULL;
  }
  tpu_val_t v, i;
  tpu_idx_sort(b, tpu_op_tensor(b, op, 0), dim, tpu_op_bool(op, 3, true), &v, &i);
  if (in.rank == 0) return tpu_idx_two(v, i, outs, nouts);
  return tpu_idx_two(tpu_idx_slice_dim(b, v, dim, 0, k), tpu_idx_slice_dim(b, i, dim, 0, k), outs, nouts);
}

/* Values and indices at a per-row position `pos` (i64 of the reduced shape with
 * dim kept as 1) of the sorted values/indices; then keepdim or squeeze. */
static void tpu_idx_pick(tpu_builder_t* b, tpu_val_t sv, tpu_val_t si, int dim, tpu_val_t pos, bool keepdim,
                         const tpu_aval_t* in, tpu_val_t* outs) {
  tpu_val_t v = tpu_idx_gather_dim(b, sv, dim, pos), i = tpu_idx_gather_dim(b, si, dim, pos);
  if (!keepdim && in->rank > 0) {
    tpu_aval_t r = *in;
    for (int d = dim; d + 1 < r.rank; ++d) r.dims[d] = r.dims[d + 1];
    r.rank--;
    v = tpu_b_reshape(b, v, r.rank, r.dims);
    i = tpu_b_reshape(b, i, r.rank, r.dims);
  } else if (in->rank == 0) {
    v = tpu_b_reshape(b, v, 0, NULL);
    i = tpu_b_reshape(b, i, 0, NULL);
  }
  outs[0] = v;
  outs[1] = i;
}

/* kthvalue(self, k, dim, keepdim) */
static tpu_status_t* tpu_lower_kthvalue(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t k = tpu_op_int(op, 1, 1);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, -1), in.rank);
  int64_t n = in.rank ? in.dims[dim] : 1;
  if (k < 1 || k > n) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "kthvalue(): selected number k out of range for dimension %d", dim);
    return NULL;
  }
  tpu_val_t sv, si;
  tpu_idx_sort(b, tpu_idx_as_1d(b, tpu_op_tensor(b, op, 0)), dim, false, &sv, &si);
  tpu_aval_t pa = tpu_aval_make(TPU_I64, in.rank ? in.rank : 1, in.rank ? in.dims : (int64_t[]){1});
  pa.dims[dim] = 1;
  tpu_idx_pick(b, sv, si, dim, tpu_b_full(b, &pa, (double)(k - 1)), tpu_op_bool(op, 3, false), &in, outs);
  *nouts = 2;
  return NULL;
}

/* median / nanmedian, with or without dim: the lower median of the sorted row;
 * median returns NaN (and its first index) when the row has NaN, nanmedian skips NaN. */
static tpu_status_t* tpu_lower_median_common(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool nan_skip) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool whole = tpu_op_nargs(op) < 2 || tpu_op_kind(op, 1) == TPU_ARG_NONE;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  tpu_aval_t a = in;
  int dim = 0;
  if (whole) {
    int64_t n = tpu_aval_numel(&in);
    if (n == 0) {
      tpu_aval_t r = tpu_aval_make(in.dtype, 0, NULL);
      return tpu_idx_one(tpu_b_full(b, &r, NAN), outs, nouts);
    }
    x = tpu_b_reshape(b, x, 1, &n);
    a = tpu_aval_make(in.dtype, 1, &n);
  } else {
    dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
    if (in.rank && in.dims[dim] == 0) {
      TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "median(): Expected reduction dim %d to have non-zero size.", dim);
      return NULL;
    }
    x = tpu_idx_as_1d(b, x);
    a = *tpu_b_aval(b, x);
  }
  int64_t n = a.dims[dim];
  tpu_val_t sv, si;
  tpu_idx_sort(b, x, dim, false, &sv, &si);
  tpu_aval_t pa = tpu_idx_aval_with(&a, TPU_I64);
  pa.dims[dim] = 1;
  tpu_val_t pos;
  if (tpu_dtype_is_float(in.dtype)) {
    /* nan count per row: NaNs sort last. */
    tpu_val_t isnan = tpu_b_convert(b, tpu_b_compare(b, "NE", x, x), TPU_I64);
    int64_t d = dim;
    tpu_val_t nn = tpu_b_reduce(b, isnan, tpu_idx_c64(b, 0), 1, &d, "stablehlo.add");
    nn = tpu_b_reshape(b, nn, pa.rank, pa.dims);
    tpu_val_t total = tpu_b_full(b, &pa, (double)n);
    tpu_val_t valid = tpu_b_binary(b, "stablehlo.subtract", total, nn);
    tpu_val_t one = tpu_b_full(b, &pa, 1.0), two = tpu_b_full(b, &pa, 2.0), zero = tpu_b_full(b, &pa, 0.0);
    if (nan_skip) { /* (valid - 1) / 2, or 0 when everything is NaN */
      pos = tpu_b_binary(b, "stablehlo.divide", tpu_b_binary(b, "stablehlo.subtract", valid, one), two);
      pos = tpu_b_select(b, tpu_b_compare(b, "GT", valid, zero), pos, zero);
    } else { /* the first NaN when there is one */
      pos = tpu_b_select(b, tpu_b_compare(b, "GT", nn, zero), valid, tpu_b_full(b, &pa, (double)((n - 1) / 2)));
    }
  } else {
    pos = tpu_b_full(b, &pa, (double)((n - 1) / 2));
  }
  if (whole) {
    tpu_val_t v = tpu_idx_gather_dim(b, sv, 0, pos);
    return tpu_idx_one(tpu_b_reshape(b, v, 0, NULL), outs, nouts);
  }
  tpu_idx_pick(b, sv, si, dim, pos, tpu_op_bool(op, 2, false), &in, outs);
  *nouts = 2;
  return NULL;
}

static tpu_status_t* tpu_lower_median(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_median_common(b, op, outs, nouts, false);
}

static tpu_status_t* tpu_lower_nanmedian(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_median_common(b, op, outs, nouts, true);
}

/* ======================================================= searchsorted & co */

/* Insertion points of values v [..., N] into sorted rows s [..., M] (or 1-D s):
 * count(!(s >= v)) (left) or count(!(s > v)) (right), the predicates of
 * PyTorch's binary search, so NaN lands where it does on CPU. */
static tpu_val_t tpu_idx_insertion(tpu_builder_t* b, tpu_val_t s, tpu_val_t v, bool right, tpu_dtype_t out) {
  tpu_aval_t sa = *tpu_b_aval(b, s), va = *tpu_b_aval(b, v);
  tpu_dtype_t ct = tpu_dtype_promote(sa.dtype, va.dtype);
  s = tpu_b_convert(b, s, ct);
  v = tpu_b_convert(b, v, ct);
  /* compare shape [..., N, M] */
  tpu_aval_t c = va;
  if (va.rank == 0) c.rank = 0;
  c.dims[c.rank++] = sa.dims[sa.rank - 1];
  c.dtype = ct;
  int64_t vb[TPU_MAX_RANK], sb[TPU_MAX_RANK];
  for (int i = 0; i < va.rank; ++i) vb[i] = i;
  tpu_val_t vx = tpu_b_broadcast_in_dim(b, v, c.rank, c.dims, vb);
  if (sa.rank == 1) {
    sb[0] = c.rank - 1;
  } else {
    for (int i = 0; i + 1 < sa.rank; ++i) sb[i] = i;
    sb[sa.rank - 1] = c.rank - 1;
  }
  tpu_val_t sx = tpu_b_broadcast_in_dim(b, s, c.rank, c.dims, sb);
  tpu_val_t hit = tpu_b_unary(b, "stablehlo.not", tpu_b_compare(b, right ? "GT" : "GE", sx, vx));
  int64_t last = c.rank - 1;
  tpu_val_t cnt = tpu_b_reduce(b, tpu_b_convert(b, hit, TPU_I64), tpu_idx_c64(b, 0), 1, &last, "stablehlo.add");
  return tpu_b_convert(b, cnt, out);
}

/* The `right` flag from (right, side) as PyTorch resolves it. */
static bool tpu_idx_side(tpu_builder_t* b, const tpu_op_t* op, int ri, int si, bool* right) {
  *right = tpu_op_bool(op, ri, false);
  if (tpu_op_kind(op, si) != TPU_ARG_STRING) return true;
  const char* side = tpu_op_arg(op, si)->u.str;
  bool side_right = strcmp(side, "right") == 0;
  if (!side_right && strcmp(side, "left") != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.searchsorted(): side can only be 'left' or 'right' but got %s", side);
    return false;
  }
  if (*right && !side_right) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True");
    return false;
  }
  *right = side_right;
  return true;
}

/* A Scalar value searched in a sequence (args 0 and 1 of the op, either order):
 * PyTorch promotes it with the sequence as a wrapped number (int sequence, float
 * value -> float32). Converts *seq and returns the value in that dtype. */
static tpu_val_t tpu_idx_scalar_probe(tpu_builder_t* b, tpu_op_t* op, int value_arg, tpu_val_t* seq) {
  tpu_dtype_t ct = tpu_ops_result_type(op, 2, (const int[]){0, 1});
  *seq = tpu_b_convert(b, *seq, ct);
  return tpu_op_scalar(b, op, value_arg, ct);
}

/* searchsorted(sorted_sequence, self, out_int32, right, side, sorter) */
static tpu_status_t* tpu_lower_searchsorted(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t sa = tpu_op_aval(op, 0);
  bool right;
  if (!tpu_idx_side(b, op, 3, 4, &right)) return NULL;
  tpu_dtype_t ot = tpu_op_bool(op, 2, false) ? TPU_I32 : TPU_I64;
  bool scalar = tpu_op_kind(op, 1) != TPU_ARG_TENSOR;
  if (sa.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension");
    return NULL;
  }
  if (scalar && sa.rank != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension is 1, but we got boundaries tensor dim(%d)", sa.rank);
    return NULL;
  }
  tpu_val_t s = tpu_op_tensor(b, op, 0);
  if (tpu_op_kind(op, 5) == TPU_ARG_TENSOR) { /* sorter: s = take_along_dim(s, sorter) */
    tpu_val_t so = tpu_b_convert(b, tpu_op_tensor(b, op, 5), TPU_I64);
    if (tpu_aval_numel(&sa) > 0) /* ATen refuses a negative entry too */
      tpu_op_check(b, op, tpu_idx_out_of_range(b, so, sa.dims[sa.rank - 1]), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
                   "torch.searchsorted(): sorter index out of range");
    s = tpu_idx_gather_dim(b, s, sa.rank - 1, so);
  }
  tpu_val_t v;
  if (scalar) {
    v = tpu_idx_scalar_probe(b, op, 1, &s);
  } else {
    tpu_aval_t va = tpu_op_aval(op, 1);
    bool lead_ok = sa.rank == 1 || sa.rank == va.rank;
    for (int i = 0; lead_ok && sa.rank > 1 && i + 1 < sa.rank; ++i) lead_ok = sa.dims[i] == va.dims[i];
    if (!lead_ok) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor must match");
      return NULL;
    }
    if (va.dtype != sa.dtype) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "torch.searchsorted(): boundaries and input value tensors should have same dtype, but got %s and %s",
                 tpu_dtype_name(sa.dtype), tpu_dtype_name(va.dtype));
      return NULL;
    }
    v = tpu_op_tensor(b, op, 1);
  }
  return tpu_idx_one(tpu_idx_insertion(b, s, v, right, ot), outs, nouts);
}

/* bucketize(self, boundaries, out_int32, right) */
static tpu_status_t* tpu_lower_bucketize(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t ba = tpu_op_aval(op, 1);
  if (ba.rank != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "boundaries tensor must be 1 dimension, but got dim(%d)", ba.rank);
    return NULL;
  }
  tpu_dtype_t ot = tpu_op_bool(op, 2, false) ? TPU_I32 : TPU_I64;
  tpu_val_t bv = tpu_op_tensor(b, op, 1);
  tpu_val_t v = tpu_op_kind(op, 0) == TPU_ARG_TENSOR ? tpu_op_tensor(b, op, 0) : tpu_idx_scalar_probe(b, op, 0, &bv);
  return tpu_idx_one(tpu_idx_insertion(b, bv, v, tpu_op_bool(op, 3, false), ot), outs, nouts);
}

/* histc bounds: the scalars, or the data's range when they are equal, widened
 * by one each side when still equal (constant data), as PyTorch does. x is the
 * flat input in `ct`; returns lo and hi as 0-d `ct` values. */
static void tpu_histc_bounds(tpu_builder_t* b, tpu_val_t x, tpu_dtype_t ct, tpu_val_t* lo, tpu_val_t* hi) {
  bool integral = tpu_dtype_is_int(ct);
  int64_t d0 = 0;
  tpu_val_t top = integral ? tpu_b_const_i(b, ct, INT64_MAX) : tpu_b_const(b, ct, INFINITY);
  tpu_val_t bottom = integral ? tpu_b_const_i(b, ct, INT64_MIN) : tpu_b_const(b, ct, -INFINITY);
  tpu_val_t dmin = tpu_b_reduce(b, x, top, 1, &d0, "stablehlo.minimum");
  tpu_val_t dmax = tpu_b_reduce(b, x, bottom, 1, &d0, "stablehlo.maximum");
  if (!integral) { /* min / max may skip a NaN, which makes ATen's range NaN (tpu_histc_check) */
    tpu_val_t nan = tpu_b_reduce(b, tpu_b_compare(b, "NE", x, x), tpu_b_const_i(b, TPU_BOOL, 0), 1, &d0, "stablehlo.or");
    dmin = tpu_b_select(b, nan, tpu_b_const(b, ct, NAN), dmin);
  }
  tpu_val_t same = tpu_b_compare(b, "EQ", *lo, *hi);
  *lo = tpu_b_select(b, same, dmin, *lo);
  *hi = tpu_b_select(b, same, dmax, *hi);
  tpu_val_t one = integral ? tpu_b_const_i(b, ct, 1) : tpu_b_const(b, ct, 1.0);
  same = tpu_b_compare(b, "EQ", *lo, *hi);
  *lo = tpu_b_select(b, same, tpu_b_binary(b, "stablehlo.subtract", *lo, one), *lo);
  *hi = tpu_b_select(b, same, tpu_b_binary(b, "stablehlo.add", *hi, one), *hi);
}

/* ATen's checks of the final bounds, in its order, on the device: the data's
 * range or runtime scalars decide. (ATen's first text names the two bounds; a
 * check reports one integer, so this one names none.) */
static void tpu_histc_check(tpu_builder_t* b, tpu_op_t* op, tpu_val_t lo, tpu_val_t hi, bool integral) {
  if (!integral) {
    tpu_val_t finite = tpu_b_binary(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.is_finite", lo),
                                    tpu_b_unary(b, "stablehlo.is_finite", hi));
    tpu_op_check(b, op, tpu_b_unary(b, "stablehlo.not", finite), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
                 "torch.histc: range of [min, max] is not finite");
  }
  tpu_op_check(b, op, tpu_b_unary(b, "stablehlo.not", tpu_b_compare(b, "LT", lo, hi)), TPU_NOVAL,
               TPU_INVALID_ARGUMENT, "%s", "torch.histc: max must be larger than min");
}

/* The bin of each element of flat x in [lo, hi] (ct), `bins` (dropped by the
 * scatter) outside and for NaN; max falls in the last bin. Floats: PyTorch's
 * (x - min) * bins / (max - min), each step rounded to the input's type as the
 * CPU kernel does (so f16/bf16 edge cases land in its bins). Integers: the same
 * in exact i64 arithmetic, as CUDA's integral histc computes it. */
static tpu_val_t tpu_histc_bin(tpu_builder_t* b, tpu_val_t x, tpu_val_t lo, tpu_val_t hi, int64_t n, int64_t bins,
                               tpu_dtype_t ct) {
  tpu_val_t lob = tpu_b_broadcast_in_dim(b, lo, 1, &n, NULL), hib = tpu_b_broadcast_in_dim(b, hi, 1, &n, NULL);
  tpu_aval_t va = tpu_aval_make(ct, 1, &n), ia = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t inside = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", x, lob), tpu_b_compare(b, "LE", x, hib));
  tpu_val_t span = tpu_b_binary(b, "stablehlo.subtract", hib, lob);
  /* outside elements may see a span <= 0 (max < min): keep their division defined */
  span = tpu_b_select(b, inside, span, tpu_b_full(b, &va, 1.0));
  tpu_val_t pos = tpu_b_binary(b, "stablehlo.divide",
                               tpu_b_binary(b, "stablehlo.multiply", tpu_b_binary(b, "stablehlo.subtract", x, lob),
                                            tpu_b_full(b, &va, (double)bins)),
                               span);
  if (!tpu_dtype_is_int(ct)) pos = tpu_b_unary(b, "stablehlo.floor", pos);
  tpu_val_t bin = tpu_b_convert(b, pos, TPU_I64);
  tpu_val_t nb = tpu_b_full(b, &ia, (double)bins);
  bin = tpu_b_select(b, tpu_b_compare(b, "GE", bin, nb), tpu_b_full(b, &ia, (double)(bins - 1)), bin);
  return tpu_b_select(b, inside, bin, nb);
}

/* histc(self, bins, min, max): min == max means the data's range. Floating
 * inputs as PyTorch's CPU kernel. Integral inputs, which the CPU kernel rejects,
 * count as CUDA's kernel does (result in the input's dtype): MoE routers send
 * their int32 expert ids here on accelerators (transformers'
 * load_balancing_loss_func, grouped_mm routing). */
static tpu_status_t* tpu_lower_histc(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t bins = tpu_op_int(op, 1, 100);
  if (in.dtype == TPU_BOOL) { /* as the CPU kernel: its bin edges are a linspace */
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"linspace_cpu\" not implemented for 'Bool'");
    return NULL;
  }
  if (!tpu_dtype_is_float(in.dtype) && !tpu_dtype_is_int(in.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"histogram_cpu\" not implemented for '%s'", tpu_dtype_scalar_type_name(in.dtype));
    return NULL;
  }
  if (bins <= 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogram(): bins must be > 0, but got %" PRId64 " for dimension 0",
               bins);
    return NULL;
  }
  bool integral = tpu_dtype_is_int(in.dtype);
  tpu_dtype_t at = integral ? TPU_I64 : in.dtype;                          /* bin arithmetic */
  tpu_dtype_t ct = integral ? TPU_I64 : tpu_ops_compute_float(in.dtype); /* counting */
  int64_t n = tpu_aval_numel(&in);
  tpu_aval_t ha = tpu_aval_make(ct, 1, &bins);
  tpu_val_t lo = tpu_op_scalar(b, op, 2, at), hi = tpu_op_scalar(b, op, 3, at);
  if (integral) { /* the bounds as the input type, as CUDA converts them */
    lo = tpu_b_convert(b, tpu_b_convert(b, lo, in.dtype), at);
    hi = tpu_b_convert(b, tpu_b_convert(b, hi, in.dtype), at);
  }
  if (n == 0) return tpu_idx_one(tpu_b_convert(b, tpu_b_full(b, &ha, 0.0), in.dtype), outs, nouts);
  tpu_val_t x = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), at), 1, &n);
  tpu_histc_bounds(b, x, at, &lo, &hi);
  tpu_histc_check(b, op, lo, hi, integral);
  tpu_val_t bin = tpu_histc_bin(b, x, lo, hi, n, bins, at);
  tpu_val_t ones = tpu_b_full(b, &(tpu_aval_t){.dtype = ct, .rank = 1, .dims = {n}}, 1.0);
  tpu_val_t h = tpu_idx_put_along(b, tpu_b_full(b, &ha, 0.0), 0, bin, ones, "stablehlo.add");
  return tpu_idx_one(tpu_b_convert(b, h, in.dtype), outs, nouts);
}

/* bincount(self, weights, minlength), then the input's min and max appended by
 * the runtime (TPU_LOWER_DATA_RANGE): the result has max(max + 1, minlength)
 * bins. Counts are i64; sums of weights are f32 for f32 weights, else f64 (the
 * CPU kernel's types). Checks in the CPU kernel's order. */
static tpu_status_t* tpu_lower_bincount(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int nargs = tpu_op_nargs(op);
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (!tpu_dtype_is_int(in.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"bincount_cpu\" not implemented for '%s'", tpu_dtype_scalar_type_name(in.dtype));
    return NULL;
  }
  int64_t minlength = tpu_op_int(op, 2, 0);
  int64_t dmin = tpu_op_int(op, nargs - 2, 0), dmax = tpu_op_int(op, nargs - 1, -1);
  if (minlength < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "minlength should be >= 0");
    return NULL;
  }
  int64_t n = tpu_aval_numel(&in);
  if (in.rank == 1 && n == 0) { /* counts even with weights, as the CPU kernel */
    tpu_aval_t za = tpu_aval_make(TPU_I64, 1, &minlength);
    return tpu_idx_one(tpu_b_full(b, &za, 0.0), outs, nouts);
  }
  if (in.rank != 1 || dmin < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "bincount only supports 1-d non-negative integral inputs.");
    return NULL;
  }
  bool weighted = tpu_op_kind(op, 1) == TPU_ARG_TENSOR;
  tpu_aval_t wa = weighted ? tpu_op_aval(op, 1) : in;
  if (weighted && (wa.rank != 1 || wa.dims[0] != n)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "weights should be 1-d and have the same length as input");
    return NULL;
  }
  tpu_dtype_t ot = !weighted ? TPU_I64 : wa.dtype == TPU_F32 ? TPU_F32 : TPU_F64;
  int64_t nbins = dmax + 1 > minlength ? dmax + 1 : minlength;
  tpu_aval_t ha = tpu_aval_make(ot, 1, &nbins), sa = tpu_aval_make(ot, 1, &n);
  tpu_val_t idx = tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_I64);
  tpu_val_t src = weighted ? tpu_b_convert(b, tpu_op_tensor(b, op, 1), ot) : tpu_b_full(b, &sa, 1.0);
  return tpu_idx_one(tpu_idx_put_along(b, tpu_b_full(b, &ha, 0.0), 0, idx, src, "stablehlo.add"), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_index[] = {
    {"index_select", tpu_lower_index_select},
    {"gather", tpu_lower_gather},
    {"take", tpu_lower_take},
    {"put", tpu_lower_put},
    {"scatter", tpu_lower_scatter},
    {"scatter_add", tpu_lower_scatter_add},
    {"scatter_reduce", tpu_lower_scatter_reduce},
    {"index_add", tpu_lower_index_add},
    {"index_copy", tpu_lower_index_copy},
    {"index_reduce", tpu_lower_index_reduce},
    {"index_fill", tpu_lower_index_fill},
    {"masked_fill", tpu_lower_masked_fill},
    {"masked_scatter", tpu_lower_masked_scatter},
    {"index", tpu_lower_index},
    {"index_put", tpu_lower_index_put},
    {"_index_put_impl", tpu_lower_index_put},
    {"_unsafe_index", tpu_lower_index},
    {"_unsafe_index_put", tpu_lower_index_put},
    {"embedding_dense_backward", tpu_lower_embedding_dense_backward},
    {"embedding_renorm", tpu_lower_embedding_renorm},
    {"nonzero", tpu_lower_nonzero},
    {"nonzero_static", tpu_lower_nonzero_static},
    {"masked_select", tpu_lower_masked_select},
    {"sort", tpu_lower_sort},
    {"topk", tpu_lower_topk},
    {"kthvalue", tpu_lower_kthvalue},
    {"median", tpu_lower_median},
    {"nanmedian", tpu_lower_nanmedian},
    {"searchsorted", tpu_lower_searchsorted},
    {"bucketize", tpu_lower_bucketize},
    {"histc", tpu_lower_histc},
    {"bincount", tpu_lower_bincount},
    {NULL, NULL},
};
