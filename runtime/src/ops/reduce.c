/* Lowerings: reduce family — reductions (sum, mean, prod, amax, any ...), arg
 * reductions (max.dim, argmax ...), moments (var, std), vector norms, scans
 * (cumsum, cummax, logcumsumexp ...) and softmax with its backward.
 *
 * PyTorch's rules followed throughout: f16/bf16 accumulate in f32 (opmath) and
 * return their own dtype; integer and bool sums/products give int64; max/min
 * propagate NaN; arg reductions pick the first index on ties; reductions with no
 * identity (max, argmax ...) refuse empty reduced dims with PyTorch's messages. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reduce.h"

/* PyTorch's (c10) dtype names, as its error messages print them. */
static const char* tpu_red_c10_name(tpu_dtype_t t) {
  static const char* const names[] = {"Bool", "Byte", "Char", "Short", "Int", "Long", "Half",
                                      "BFloat16", "Float", "Double", "ComplexFloat", "ComplexDouble",
                                      "UInt16", "UInt32", "UInt64"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == TPU_DTYPE_COUNT, "one name per dtype");
  return names[t];
}

static bool tpu_red_is_intlike(tpu_dtype_t t) { return t == TPU_BOOL || tpu_dtype_is_int(t); }

/* The real dtype of a complex one (|z| and var(z) are real); others unchanged. */
static tpu_dtype_t tpu_red_real(tpu_dtype_t t) {
  return t == TPU_C64 ? TPU_F32 : t == TPU_C128 ? TPU_F64 : t;
}

/* ------------------------------------------------------------ reduced dims */

typedef struct tpu_rdims {
  int n;
  int64_t d[TPU_MAX_RANK]; /* sorted, unique */
} tpu_rdims_t;

static tpu_rdims_t tpu_red_all(int rank) {
  tpu_rdims_t r = {.n = rank};
  for (int i = 0; i < rank; ++i) r.d[i] = i;
  return r;
}

/* Dims from argument i (int, int list or absent). Absent means all dims; an empty
 * list means all dims for sum/mean/amax... but no dims for any/all (PyTorch). */
static tpu_rdims_t tpu_red_dims(tpu_builder_t* b, const tpu_op_t* op, int i, int rank, bool empty_is_all) {
  tpu_rdims_t r = {0};
  if (!empty_is_all && tpu_op_kind(op, i) == TPU_ARG_INT_LIST && tpu_op_list_len(op, i) == 0) return r;
  r.n = tpu_ops_reduce_dims(b, op, i, rank, r.d);
  return r;
}

static bool tpu_red_has_list(const tpu_op_t* op, int i) {
  return tpu_op_kind(op, i) == TPU_ARG_INT_LIST ? tpu_op_list_len(op, i) > 0 : tpu_op_kind(op, i) == TPU_ARG_INT;
}

static int64_t tpu_red_count(const tpu_aval_t* in, const tpu_rdims_t* rd) {
  int64_t n = 1;
  for (int k = 0; k < rd->n; ++k) n *= in->dims[rd->d[k]];
  return n;
}

/* Reductions without an identity refuse empty reduced dims (IndexError). */
static bool tpu_red_check_nonempty(tpu_builder_t* b, const char* what, const tpu_aval_t* in, const tpu_rdims_t* rd) {
  for (int k = 0; k < rd->n; ++k) {
    if (in->dims[rd->d[k]] == 0) {
      TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "%s Expected reduction dim %d to have non-zero size.", what, (int)rd->d[k]);
      return false;
    }
  }
  return tpu_b_ok(b);
}

/* A full reduction of an empty tensor without an identity (RuntimeError). */
static bool tpu_red_check_full(tpu_builder_t* b, const char* name, const tpu_aval_t* in) {
  if (tpu_aval_numel(in) != 0) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
             "%s(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
             "with the 'dim' argument.",
             name);
  return false;
}

/* v (reduced over rd) reshaped with size-1 dims where rd removed them. */
static tpu_val_t tpu_red_keep(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* in, const tpu_rdims_t* rd, bool keep) {
  return keep ? tpu_ops_keepdim(b, v, in, rd->n, rd->d) : v;
}

/* v (reduced over rd) broadcast back to the input's shape. */
static tpu_val_t tpu_red_expand(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* in, const tpu_rdims_t* rd) {
  return tpu_b_broadcast_to(b, tpu_ops_keepdim(b, v, in, rd->n, rd->d), in->rank, in->dims);
}

/* ------------------------------------------------------------ reduce kinds */

typedef enum { TPU_RED_SUM, TPU_RED_PROD, TPU_RED_MAX, TPU_RED_MIN } tpu_red_kind_t;

/* Body per kind: numbers, then bool (where sum is "or" and product "and"). */
static const char* const tpu_red_bodies[][2] = {
    [TPU_RED_SUM] = {"stablehlo.add", "stablehlo.or"},
    [TPU_RED_PROD] = {"stablehlo.multiply", "stablehlo.and"},
    [TPU_RED_MAX] = {"stablehlo.maximum", "stablehlo.or"},
    [TPU_RED_MIN] = {"stablehlo.minimum", "stablehlo.and"},
};

static tpu_val_t tpu_red_identity(tpu_builder_t* b, tpu_dtype_t t, tpu_red_kind_t kind) {
  switch (kind) {
    case TPU_RED_SUM: return tpu_b_const_i(b, t, 0);
    case TPU_RED_PROD: return tpu_b_const_i(b, t, 1);
    case TPU_RED_MAX: return tpu_b_const_extreme(b, t, true);
    default: return tpu_b_const_extreme(b, t, false);
  }
}

static tpu_val_t tpu_red_isnan(tpu_builder_t* b, tpu_val_t x) { return tpu_b_compare(b, "NE", x, x); }

/* The elementwise form of a reduce kind (scans, max.other, reduce bodies). Float
 * max/min propagate NaN explicitly: XLA's CPU reductions drop it otherwise. */
static tpu_val_t tpu_red_combine(tpu_builder_t* b, tpu_red_kind_t kind, tpu_val_t x, tpu_val_t y) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  tpu_val_t r = tpu_b_binary(b, tpu_red_bodies[kind][t == TPU_BOOL], x, y);
  if ((kind == TPU_RED_MAX || kind == TPU_RED_MIN) && (tpu_dtype_is_float(t) || tpu_dtype_is_complex(t))) {
    r = tpu_b_select(b, tpu_red_isnan(b, y), y, r);
    r = tpu_b_select(b, tpu_red_isnan(b, x), x, r);
  }
  return r;
}

/* x reduced over rd with `kind` in x's dtype; the body is tpu_red_combine. f32
 * sums are compensated (reduce.h): the f32 results of sum, mean, var, softmax ...
 * are then at least as accurate as PyTorch's CPU kernels. */
static tpu_val_t tpu_red(tpu_builder_t* b, tpu_val_t x, const tpu_rdims_t* rd, tpu_red_kind_t kind) {
  tpu_aval_t in = *tpu_b_aval(b, x);
  if (rd->n == 0 || !tpu_b_ok(b)) return x;
  if (kind == TPU_RED_SUM && in.dtype == TPU_F32) return tpu_red_sum_accurate(b, x, rd->n, rd->d);
  tpu_val_t init = tpu_red_identity(b, in.dtype, kind);
  tpu_aval_t s = tpu_aval_make(in.dtype, 0, NULL), args_av[2] = {s, s};
  tpu_val_t args[2];
  tpu_b_region_begin(b, 2, args_av, args);
  tpu_val_t r = tpu_red_combine(b, kind, args[0], args[1]);
  char* region = tpu_b_region_end(b, 1, &r);
  tpu_aval_t out = {.dtype = in.dtype};
  for (int i = 0, k = 0; i < in.rank; ++i) {
    if (k < rd->n && rd->d[k] == i) ++k;
    else out.dims[out.rank++] = in.dims[i];
  }
  char attrs[512], arr[480];
  snprintf(attrs, sizeof(attrs), "dimensions = %s", tpu_fmt_i64_array(arr, sizeof(arr), rd->n, rd->d));
  tpu_val_t ins[2] = {x, init}, res;
  tpu_b_op(b, "stablehlo.reduce", 2, ins, 1, &region, attrs, 1, &out, &res);
  return res;
}

/* Builder avals live in a growing array: copy one before emitting more values. */
static tpu_val_t tpu_red_like(tpu_builder_t* b, tpu_val_t v, double value) {
  tpu_aval_t a = *tpu_b_aval(b, v);
  return tpu_b_full(b, &a, value);
}

/* A 0-d value broadcast to the shape of `like`. */
static tpu_val_t tpu_red_bcast(tpu_builder_t* b, tpu_val_t v, tpu_val_t like) {
  tpu_aval_t a = *tpu_b_aval(b, like);
  return tpu_b_broadcast_to(b, v, a.rank, a.dims);
}

/* ------------------------------------------------- accurate f32 sums */

/* (s1, c1) ⊕ (s2, c2) for compensated sums: TwoSum gives the rounding error of
 * s1 + s2 exactly (Knuth; no ordering of |s1|, |s2| assumed); the errors
 * accumulate in c. */
static void tpu_red_twosum(tpu_builder_t* b, const tpu_val_t* p1, const tpu_val_t* p2, tpu_val_t* out) {
  tpu_val_t sum = tpu_b_binary(b, "stablehlo.add", p1[0], p2[0]);
  tpu_val_t bp = tpu_b_binary(b, "stablehlo.subtract", sum, p1[0]);
  tpu_val_t ap = tpu_b_binary(b, "stablehlo.subtract", sum, bp);
  tpu_val_t err = tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.subtract", p1[0], ap),
                               tpu_b_binary(b, "stablehlo.subtract", p2[0], bp));
  tpu_val_t comp = tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.add", p1[1], p2[1]), err);
  out[0] = sum;
  out[1] = comp;
}

/* Pairwise compensated reduction of the pair p = (s, c) along dim d down to size
 * 1: halves added with TwoSum, an odd last element carried to the next level. */
static void tpu_red_tree_dim(tpu_builder_t* b, tpu_val_t* p, int d) {
  for (;;) {
    tpu_aval_t a = *tpu_b_aval(b, p[0]);
    int64_t n = a.dims[d], h = n / 2;
    if (n <= 1 || !tpu_b_ok(b)) return;
    int64_t st[TPU_MAX_RANK] = {0}, lim[TPU_MAX_RANK];
    memcpy(lim, a.dims, sizeof(lim));
    tpu_val_t lo[2], hi[2], last[2] = {TPU_NOVAL, TPU_NOVAL}, r[2];
    for (int i = 0; i < 2; ++i) {
      st[d] = 0, lim[d] = h;
      lo[i] = tpu_b_slice(b, p[i], st, lim, NULL);
      st[d] = h, lim[d] = 2 * h;
      hi[i] = tpu_b_slice(b, p[i], st, lim, NULL);
      st[d] = 2 * h, lim[d] = n;
      if (n % 2) last[i] = tpu_b_slice(b, p[i], st, lim, NULL);
    }
    tpu_red_twosum(b, lo, hi, r);
    for (int i = 0; i < 2; ++i) {
      tpu_val_t parts[2] = {r[i], last[i]};
      p[i] = n % 2 ? tpu_b_concat(b, 2, parts, d) : r[i];
    }
  }
}

/* The value of a compensated pair: hi = s + c rounded, lo = what rounding dropped
 * (Fast2Sum: |s| >= |c|). An infinite or NaN partial sum poisons c (inf - inf):
 * then s alone is the answer. A zero sum is +0 as PyTorch's reductions (which
 * start from +0) give, also for all -0 terms (XLA folds the "+ 0" away). */
static void tpu_red_pair_value(tpu_builder_t* b, tpu_val_t s, tpu_val_t c, tpu_val_t* out_hi, tpu_val_t* out_lo) {
  tpu_val_t hi = tpu_b_binary(b, "stablehlo.add", s, c);
  tpu_val_t finite = tpu_b_unary(b, "stablehlo.is_finite", s);
  tpu_val_t zero = tpu_red_like(b, hi, 0.0);
  hi = tpu_b_select(b, tpu_b_compare(b, "EQ", hi, zero), zero, hi);
  *out_hi = tpu_b_select(b, finite, hi, s);
  if (!out_lo) return;
  tpu_val_t lo = tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.subtract", s, hi), c);
  *out_lo = tpu_b_select(b, finite, lo, tpu_red_like(b, lo, 0.0));
}

/* Plain sums of runs of consecutive elements along the longest reduced dim
 * (zero-padded to a whole number of runs): the compensated tree then handles
 * 1/run of the data, so the whole costs about one plain reduce. A run's rounding
 * error is a few ulp of a partial sum of only `run` terms; runs of at most
 * sqrt(n)/2 (and 16) keep that below the final rounding, measured against
 * float64 for n from 64 to 4096 (tests/test_numerics.py). */
enum { TPU_RED_RUN = 16 };

static tpu_val_t tpu_red_presum_runs(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims) {
  tpu_aval_t in = *tpu_b_aval(b, x);
  int d = (int)dims[0];
  for (int k = 1; k < ndims; ++k)
    if (in.dims[dims[k]] > in.dims[d]) d = (int)dims[k];
  int64_t n = in.dims[d], run = TPU_RED_RUN;
  while (run > 1 && 4 * run * run > n) run /= 2;
  if (run <= 1 || in.rank + 1 > TPU_MAX_RANK) return x;
  int64_t groups = (n + run - 1) / run;
  if (groups * run != n) {
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    hi[d] = groups * run - n;
    x = tpu_b_pad(b, x, tpu_b_const(b, in.dtype, 0.0), lo, hi, NULL);
  }
  int64_t shape[TPU_MAX_RANK];
  for (int i = 0, j = 0; i < in.rank; ++i) {
    shape[j++] = i == d ? groups : in.dims[i];
    if (i == d) shape[j++] = run;
  }
  int64_t inner = d + 1;
  return tpu_b_reduce(b, tpu_b_reshape(b, x, in.rank + 1, shape), tpu_b_const(b, in.dtype, 0.0), 1, &inner,
                      "stablehlo.add");
}

/* f32: runs summed plainly, then a pairwise TwoSum tree over what is left. Only
 * slices, elementwise ops and plain reduces, which every XLA backend vectorises
 * (a variadic TwoSum reduce runs as a scalar loop on the CPU plugin, 10-50x
 * slower than a plain reduce), and a fixed summation order on every backend. */
void tpu_red_sum_hilo(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims, tpu_val_t* out_hi,
                      tpu_val_t* out_lo) {
  tpu_aval_t in = *tpu_b_aval(b, x);
  if (in.dtype != TPU_F32 || ndims == 0 || tpu_aval_numel(&in) == 0) {
    /* f64/ints/f16-bf16 (callers widen those to f32 first); empty: exact zeros */
    *out_hi = ndims == 0 ? x : tpu_b_reduce(b, x, tpu_b_const(b, in.dtype, 0.0), ndims, dims, "stablehlo.add");
    *out_lo = tpu_red_like(b, *out_hi, 0.0);
    return;
  }
  tpu_val_t p[2];
  p[0] = tpu_red_presum_runs(b, x, ndims, dims);
  p[1] = tpu_red_like(b, p[0], 0.0);
  for (int k = 0; k < ndims; ++k) tpu_red_tree_dim(b, p, (int)dims[k]);
  int64_t od[TPU_MAX_RANK];
  int r = 0;
  for (int i = 0, k = 0; i < in.rank; ++i) {
    if (k < ndims && dims[k] == i) ++k;
    else od[r++] = in.dims[i];
  }
  tpu_red_pair_value(b, tpu_b_reshape(b, p[0], r, od), tpu_b_reshape(b, p[1], r, od), out_hi, out_lo);
}

/* Dekker's split of f32 a into 12-bit halves (a = hi + lo exactly), for exact
 * products without an FMA op (StableHLO has none). */
static void tpu_red_split(tpu_builder_t* b, tpu_val_t a, tpu_val_t* hi, tpu_val_t* lo) {
  tpu_val_t t = tpu_b_binary(b, "stablehlo.multiply", a, tpu_red_like(b, a, 4097.0));
  *hi = tpu_b_binary(b, "stablehlo.subtract", t, tpu_b_binary(b, "stablehlo.subtract", t, a));
  *lo = tpu_b_binary(b, "stablehlo.subtract", a, *hi);
}

tpu_val_t tpu_red_two_prod_err(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, tpu_val_t p) {
  tpu_val_t xh, xl, yh, yl;
  tpu_red_split(b, x, &xh, &xl);
  tpu_red_split(b, y, &yh, &yl);
  tpu_val_t e = tpu_b_binary(b, "stablehlo.subtract", tpu_b_binary(b, "stablehlo.multiply", xh, yh), p);
  e = tpu_b_binary(b, "stablehlo.add", e, tpu_b_binary(b, "stablehlo.multiply", xh, yl));
  e = tpu_b_binary(b, "stablehlo.add", e, tpu_b_binary(b, "stablehlo.multiply", xl, yh));
  return tpu_b_binary(b, "stablehlo.add", e, tpu_b_binary(b, "stablehlo.multiply", xl, yl));
}

/* (hi + lo) / d as q + q_lo: q = hi / d rounded, q_lo the rest to ~u² (hi + lo -
 * q·d exactly, hi - p being exact since p ≈ hi, divided by d). Huge operands
 * overflow the split and inf/NaN/0 divisors poison the rest: q_lo = 0 there. */
static void tpu_red_div_pair(tpu_builder_t* b, tpu_val_t hi, tpu_val_t lo, tpu_val_t d, tpu_val_t* out_q,
                             tpu_val_t* out_q_lo) {
  tpu_val_t q = tpu_b_binary(b, "stablehlo.divide", hi, d);
  tpu_val_t p = tpu_b_binary(b, "stablehlo.multiply", q, d);
  tpu_val_t r = tpu_b_binary(b, "stablehlo.subtract", tpu_b_binary(b, "stablehlo.subtract", hi, p),
                             tpu_red_two_prod_err(b, q, d, p));
  tpu_val_t ql = tpu_b_binary(b, "stablehlo.divide", tpu_b_binary(b, "stablehlo.add", r, lo), d);
  *out_q = q;
  *out_q_lo = tpu_b_select(b, tpu_b_unary(b, "stablehlo.is_finite", ql), ql, tpu_red_like(b, ql, 0.0));
}

tpu_val_t tpu_red_div_hilo(tpu_builder_t* b, tpu_val_t hi, tpu_val_t lo, tpu_val_t d) {
  if (tpu_b_dtype(b, hi) != TPU_F32) return tpu_b_binary(b, "stablehlo.divide", hi, d);
  tpu_val_t q, q_lo;
  tpu_red_div_pair(b, hi, lo, d, &q, &q_lo);
  tpu_val_t q2 = tpu_b_binary(b, "stablehlo.add", q, q_lo);
  return tpu_b_select(b, tpu_b_unary(b, "stablehlo.is_finite", q), q2, q);
}

/* sqrt(v + v_lo) rounded once (as sqrt in double then rounded would be): one
 * Newton step s + (v + v_lo - s²) / 2s from s = sqrt(v), s² split exactly. */
static tpu_val_t tpu_red_sqrt_pair(tpu_builder_t* b, tpu_val_t v, tpu_val_t v_lo) {
  tpu_val_t s = tpu_b_unary(b, "stablehlo.sqrt", v);
  tpu_val_t t = tpu_b_binary(b, "stablehlo.multiply", s, s);
  tpu_val_t r = tpu_b_binary(b, "stablehlo.subtract", tpu_b_binary(b, "stablehlo.subtract", v, t),
                             tpu_red_two_prod_err(b, s, s, t));
  r = tpu_b_binary(b, "stablehlo.add", r, v_lo);
  tpu_val_t s2 = tpu_b_binary(b, "stablehlo.add", s,
                              tpu_b_binary(b, "stablehlo.divide", r, tpu_b_binary(b, "stablehlo.add", s, s)));
  tpu_val_t ok = tpu_b_binary(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.is_finite", s2),
                              tpu_b_compare(b, "GT", s, tpu_red_like(b, s, 0.0)));
  return tpu_b_select(b, ok, s2, s);
}

tpu_val_t tpu_red_sum_accurate(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims) {
  tpu_val_t hi, lo;
  tpu_red_sum_hilo(b, x, ndims, dims, &hi, &lo);
  return hi;
}

/* ------------------------------------------------- sum, prod, mean, nansum */

typedef struct tpu_sum_spec {
  tpu_red_kind_t kind;
  bool nan_as_zero; /* nansum */
  bool mean;        /* divide by the reduced count; float/complex results only */
} tpu_sum_spec_t;

/* Result dtype of sum/prod/mean: the dtype argument, else int/bool → int64 (not
 * for mean, which requires a float or complex dtype). */
static tpu_dtype_t tpu_red_sum_dtype(tpu_builder_t* b, const tpu_op_t* op, int dtype_arg, const tpu_sum_spec_t* s) {
  tpu_dtype_t in = tpu_op_aval(op, 0).dtype;
  bool given = tpu_op_kind(op, dtype_arg) == TPU_ARG_DTYPE;
  tpu_dtype_t out = tpu_op_dtype(op, dtype_arg, in);
  if (s->mean) {
    if (!tpu_dtype_is_float(out) && !tpu_dtype_is_complex(out))
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "mean(): could not infer output dtype. %s dtype must be either a floating point or complex dtype. "
                 "Got: %s",
                 given ? "Optional" : "Input", tpu_red_c10_name(out));
    return out;
  }
  return !given && tpu_red_is_intlike(in) ? TPU_I64 : out;
}

/* Full forms (self, dtype) have two arguments; dim forms (self, dim, keepdim, dtype) four. */
static tpu_status_t* tpu_lower_sum_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts,
                                        const tpu_sum_spec_t* s) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool full = tpu_op_nargs(op) <= 2;
  tpu_rdims_t rd = full ? tpu_red_all(in.rank) : tpu_red_dims(b, op, 1, in.rank, true);
  bool keep = !full && tpu_op_bool(op, 2, false);
  tpu_dtype_t out = tpu_red_sum_dtype(b, op, full ? 1 : 3, s);
  if (!tpu_b_ok(b)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (s->nan_as_zero && tpu_dtype_is_float(in.dtype)) x = tpu_b_select(b, tpu_red_isnan(b, x), tpu_red_like(b, x, 0), x);
  /* PyTorch casts the input to the requested dtype first, then accumulates in opmath. */
  tpu_dtype_t ct = tpu_dtype_opmath(out);
  x = tpu_b_convert(b, tpu_b_convert(b, x, out), ct);
  tpu_val_t r = tpu_red(b, x, &rd, s->kind);
  if (s->mean) {
    tpu_val_t n = tpu_red_like(b, r, (double)tpu_red_count(&in, &rd));
    r = tpu_b_binary(b, "stablehlo.divide", r, n); /* 0/0 = NaN for empty, as PyTorch */
  }
  return tpu_ops_result1(tpu_red_keep(b, tpu_b_convert(b, r, out), &in, &rd, keep), outs, nouts);
}

static tpu_status_t* tpu_lower_sum(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_sum_like(b, op, outs, nouts, &(tpu_sum_spec_t){TPU_RED_SUM, false, false});
}
static tpu_status_t* tpu_lower_nansum(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_sum_like(b, op, outs, nouts, &(tpu_sum_spec_t){TPU_RED_SUM, true, false});
}
static tpu_status_t* tpu_lower_prod(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_sum_like(b, op, outs, nouts, &(tpu_sum_spec_t){TPU_RED_PROD, false, false});
}
static tpu_status_t* tpu_lower_mean(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_sum_like(b, op, outs, nouts, &(tpu_sum_spec_t){TPU_RED_SUM, false, true});
}

/* --------------------------------------------------------- amax, max, min */

/* amax/amin(self, dim=[], keepdim). */
static tpu_status_t* tpu_lower_amax_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool is_max) {
  const char* name = is_max ? "amax" : "amin";
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_rdims_t rd = tpu_red_dims(b, op, 1, in.rank, true);
  if (!tpu_red_has_list(op, 1) && !tpu_red_check_full(b, name, &in)) return NULL;
  if (!tpu_red_check_nonempty(b, is_max ? "amax():" : "amin():", &in, &rd)) return NULL;
  tpu_val_t r = tpu_red(b, tpu_op_tensor(b, op, 0), &rd, is_max ? TPU_RED_MAX : TPU_RED_MIN);
  return tpu_ops_result1(tpu_red_keep(b, r, &in, &rd, tpu_op_bool(op, 2, false)), outs, nouts);
}

static tpu_status_t* tpu_lower_amax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_amax_like(b, op, outs, nouts, true);
}
static tpu_status_t* tpu_lower_amin(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_amax_like(b, op, outs, nouts, false);
}

/* Values and first indices of the max/min of x along `dim` (0-d x counts as [1]). */
static void tpu_red_argreduce(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* in, int dim, bool keep, bool is_max,
                              tpu_val_t* vals, tpu_val_t* idx) {
  if (in->rank == 0) x = tpu_b_reshape(b, x, 1, (int64_t[]){1});
  tpu_b_argreduce(b, x, in->rank == 0 ? 0 : dim, is_max, vals, idx);
  if (!keep || in->rank == 0) return;
  tpu_rdims_t rd = {.n = 1, .d = {dim}};
  if (vals) *vals = tpu_red_keep(b, *vals, in, &rd, true);
  if (idx) *idx = tpu_red_keep(b, *idx, in, &rd, true);
}

/* max.other / min.other: PyTorch's maximum/minimum (promotion, broadcasting, NaN wins). */
static tpu_status_t* tpu_red_elementwise_extreme(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool is_max) {
  int args[2] = {0, 1};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, args);
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_val_t x = tpu_ops_operand(b, op, 0, rt, &shape), y = tpu_ops_operand(b, op, 1, rt, &shape);
  return tpu_ops_result1(tpu_red_combine(b, is_max ? TPU_RED_MAX : TPU_RED_MIN, x, y), outs, nouts);
}

/* max/min: (self) → 0-d; .dim (self, dim, keepdim) → (values, indices); .other → elementwise. */
static tpu_status_t* tpu_lower_max_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool is_max) {
  const char* name = is_max ? "max" : "min";
  if (tpu_op_kind(op, 1) == TPU_ARG_TENSOR) return tpu_red_elementwise_extreme(b, op, outs, nouts, is_max);
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (tpu_op_kind(op, 1) != TPU_ARG_INT) {
    if (!tpu_red_check_full(b, name, &in)) return NULL;
    tpu_rdims_t rd = tpu_red_all(in.rank);
    outs[0] = tpu_red(b, x, &rd, is_max ? TPU_RED_MAX : TPU_RED_MIN);
    *nouts = 1;
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  tpu_rdims_t rd = {.n = in.rank > 0, .d = {dim}};
  if (!tpu_red_check_nonempty(b, is_max ? "max():" : "min():", &in, &rd)) return NULL;
  tpu_red_argreduce(b, x, &in, dim, tpu_op_bool(op, 2, false), is_max, &outs[0], &outs[1]);
  *nouts = 2;
  return NULL;
}

static tpu_status_t* tpu_lower_max(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_max_like(b, op, outs, nouts, true);
}
static tpu_status_t* tpu_lower_min(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_max_like(b, op, outs, nouts, false);
}

/* A full reduction's result with keepdim: the input's rank, all sizes 1. */
static tpu_val_t tpu_red_keep_all(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* in, bool keep) {
  tpu_rdims_t rd = tpu_red_all(in->rank);
  return tpu_red_keep(b, v, in, &rd, keep);
}

/* argmax/argmin(self, dim=None, keepdim): dim None reduces the flattened input. */
static tpu_status_t* tpu_lower_argmax_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool keep = tpu_op_bool(op, 2, false);
  if (in.dtype == TPU_BOOL) return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s(): does not support bool input", name);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  *nouts = 1;
  if (tpu_op_kind(op, 1) != TPU_ARG_INT) {
    int64_t n = tpu_aval_numel(&in);
    if (n == 0)
      return TPU_STATUS(TPU_OUT_OF_RANGE, "%s(): Expected reduction dim to be specified for input.numel() == 0.", name);
    tpu_aval_t flat = tpu_aval_make(in.dtype, 1, &n);
    tpu_red_argreduce(b, tpu_b_reshape(b, x, 1, &n), &flat, 0, false, is_max, NULL, &outs[0]);
    outs[0] = tpu_red_keep_all(b, outs[0], &in, keep);
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  tpu_rdims_t rd = {.n = in.rank > 0, .d = {dim}};
  char what[32];
  snprintf(what, sizeof(what), "%s():", name);
  if (!tpu_red_check_nonempty(b, what, &in, &rd)) return NULL;
  tpu_red_argreduce(b, x, &in, dim, keep, is_max, NULL, &outs[0]);
  return NULL;
}

static tpu_status_t* tpu_lower_argmax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_argmax_like(b, op, outs, nouts, true);
}
static tpu_status_t* tpu_lower_argmin(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_argmax_like(b, op, outs, nouts, false);
}

/* aminmax(self, *, dim=None, keepdim) → (min, max). */
static tpu_status_t* tpu_lower_aminmax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool keep = tpu_op_bool(op, 2, false);
  tpu_rdims_t rd;
  if (tpu_op_kind(op, 1) == TPU_ARG_INT) {
    rd = (tpu_rdims_t){.n = in.rank > 0, .d = {tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank)}};
    if (!tpu_red_check_nonempty(b, "aminmax:", &in, &rd)) return NULL;
  } else {
    if (tpu_aval_numel(&in) == 0)
      return TPU_STATUS(TPU_INVALID_ARGUMENT,
                        "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
    rd = tpu_red_all(in.rank);
  }
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  outs[0] = tpu_red(b, x, &rd, TPU_RED_MIN);
  outs[1] = tpu_red(b, x, &rd, TPU_RED_MAX);
  /* With dim=None and keepdim, PyTorch keeps every dim as size 1: same as rd = all. */
  outs[0] = tpu_red_keep(b, outs[0], &in, &rd, keep);
  outs[1] = tpu_red_keep(b, outs[1], &in, &rd, keep);
  *nouts = 2;
  return NULL;
}

/* ------------------------------------------------------------ any, all */

/* any/all: (self), .dim (self, dim, keepdim), .dims (self, dims?, keepdim); bool
 * results, except uint8 inputs give uint8 (PyTorch's legacy rule). */
static tpu_status_t* tpu_lower_anyall(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool is_all) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_rdims_t rd = tpu_op_nargs(op) <= 1 ? tpu_red_all(in.rank) : tpu_red_dims(b, op, 1, in.rank, false);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_BOOL);
  tpu_val_t r = tpu_red(b, x, &rd, is_all ? TPU_RED_PROD : TPU_RED_SUM); /* and / or on bool */
  r = tpu_b_convert(b, r, in.dtype == TPU_U8 ? TPU_U8 : TPU_BOOL);
  return tpu_ops_result1(tpu_red_keep(b, r, &in, &rd, tpu_op_bool(op, 2, false)), outs, nouts);
}

static tpu_status_t* tpu_lower_any(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_anyall(b, op, outs, nouts, false);
}
static tpu_status_t* tpu_lower_all(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_anyall(b, op, outs, nouts, true);
}

/* count_nonzero(self, dim int? | int[]) → int64; no or empty dims count everything. */
static tpu_status_t* tpu_lower_count_nonzero(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_rdims_t rd = tpu_red_dims(b, op, 1, in.rank, true);
  tpu_val_t nz = tpu_b_convert(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_BOOL), TPU_I64);
  return tpu_ops_result1(tpu_red(b, nz, &rd, TPU_RED_SUM), outs, nouts);
}

/* hash_tensor(self, dim=[], *, keepdim=False, mode=0) -> uint64: mode 0 xors the
 * elements' 64-bit patterns (floats as float64, integers sign- or zero-extended
 * to 64 bits, bool as 0/1), as ATen's xor_sum does. */
static tpu_status_t* tpu_lower_hash_tensor(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t mode = tpu_op_int(op, 3, 0);
  if (mode != 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "Unknown hash_tensor mode: %" PRId64, mode);
  if (tpu_dtype_is_complex(in.dtype))
    return TPU_STATUS(TPU_UNIMPLEMENTED, "\"xor_sum_tpu\" not implemented for '%s'", tpu_dtype_scalar_type_name(in.dtype));
  tpu_rdims_t rd = tpu_red_dims(b, op, 1, in.rank, true);
  if (!tpu_red_has_list(op, 1) && tpu_aval_numel(&in) == 0)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
                      "Specify the reduction dim with the 'dim' argument.");
  if (!tpu_red_check_nonempty(b, "hash_tensor:", &in, &rd)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  tpu_aval_t ua = in;
  ua.dtype = TPU_U64;
  if (tpu_dtype_is_float(in.dtype)) {
    x = tpu_b_bitcast(b, tpu_b_convert(b, x, TPU_F64), &ua);
  } else if (in.dtype == TPU_BOOL || !tpu_dtype_is_signed(in.dtype)) {
    x = tpu_b_convert(b, x, TPU_U64); /* zero-extended */
  } else {
    x = tpu_b_bitcast(b, tpu_b_convert(b, x, TPU_I64), &ua); /* sign-extended */
  }
  tpu_val_t r = tpu_b_reduce(b, x, tpu_b_const_i(b, TPU_U64, 0), rd.n, rd.d, "stablehlo.xor");
  return tpu_ops_result1(tpu_red_keep(b, r, &in, &rd, tpu_op_bool(op, 2, false)), outs, nouts);
}

/* ------------------------------------------------------------- moments */

/* var/std/norm need a float or complex input; `msg` is PyTorch's message, which
 * for norm ends with the input's dtype name ("... Got Long"). */
static bool tpu_red_check_floating(tpu_builder_t* b, tpu_dtype_t t, const char* msg, bool name_dtype) {
  if (tpu_dtype_is_float(t) || tpu_dtype_is_complex(t)) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s%s", msg, name_dtype ? tpu_red_c10_name(t) : "");
  return false;
}

/* |z|² for complex z, x² for real x (in the real dtype). */
static tpu_val_t tpu_red_abs2(tpu_builder_t* b, tpu_val_t x) {
  if (!tpu_dtype_is_complex(tpu_b_dtype(b, x))) return tpu_b_binary(b, "stablehlo.multiply", x, x);
  tpu_val_t re = tpu_ops_part(b, x, false), im = tpu_ops_part(b, x, true);
  return tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.multiply", re, re),
                      tpu_b_binary(b, "stablehlo.multiply", im, im));
}

/* Mean and sum of squared deviations (reduce.h): compensated sums, the mean
 * divided with one rounding, the squares' rounding errors added back (Dekker) and
 * the corrected two-pass formula Σd² − (Σd)²/n, d = x − mean, which removes what
 * the rounded mean leaves (Chan, Golub & LeVeque). */
void tpu_red_moments(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims, tpu_val_t* out_mean,
                     tpu_val_t* out_ss, tpu_val_t* out_ss_lo) {
  tpu_aval_t in = *tpu_b_aval(b, x);
  tpu_rdims_t rd = {.n = ndims};
  memcpy(rd.d, dims, sizeof(int64_t) * (size_t)ndims);
  double n = (double)tpu_red_count(&in, &rd);
  tpu_val_t hi, lo;
  tpu_red_sum_hilo(b, x, ndims, dims, &hi, &lo);
  tpu_val_t mean = tpu_red_div_hilo(b, hi, lo, tpu_red_like(b, hi, n));
  tpu_val_t dev = tpu_b_binary(b, "stablehlo.subtract", x, tpu_red_expand(b, mean, &in, &rd));
  tpu_val_t d2 = tpu_red_abs2(b, dev);
  tpu_red_sum_hilo(b, d2, ndims, dims, out_ss, out_ss_lo);
  if (in.dtype == TPU_F32) {
    /* The rounding errors of the squares, and the correction −(Σd)²/n. */
    tpu_val_t sq_err = tpu_red_sum_accurate(b, tpu_red_two_prod_err(b, dev, dev, d2), ndims, dims);
    tpu_val_t sd = tpu_red_sum_accurate(b, dev, ndims, dims);
    tpu_val_t corr = tpu_b_binary(b, "stablehlo.divide", tpu_b_binary(b, "stablehlo.multiply", sd, sd),
                                  tpu_red_like(b, sd, n));
    tpu_val_t l = tpu_b_binary(b, "stablehlo.add", *out_ss_lo, tpu_b_binary(b, "stablehlo.subtract", sq_err, corr));
    *out_ss_lo = tpu_b_select(b, tpu_b_unary(b, "stablehlo.is_finite", l), l, tpu_red_like(b, l, 0.0));
  }
  *out_mean = mean;
}

/* var/std (.correction) and var_mean/std_mean: (self, dim?, *, correction?, keepdim).
 * Divided by max(0, N - correction); correction is a runtime Scalar, so a new
 * value does not recompile. */
static tpu_status_t* tpu_lower_moments(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool take_sqrt,
                                       bool with_mean) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (!tpu_red_check_floating(b, in.dtype, "std and var only support floating point and complex dtypes", false)) return NULL;
  tpu_rdims_t rd = tpu_red_dims(b, op, 1, in.rank, true);
  bool keep = tpu_op_bool(op, 3, false);
  tpu_dtype_t ct = tpu_dtype_opmath(in.dtype), rt = tpu_red_real(ct);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t corr = tpu_ops_has_value(op, 2) ? tpu_op_scalar(b, op, 2, rt) : tpu_b_const(b, rt, 1.0);
  int64_t n = tpu_red_count(&in, &rd);
  tpu_val_t mean, ss, ss_lo;
  tpu_red_moments(b, x, rd.n, rd.d, &mean, &ss, &ss_lo);
  tpu_val_t dof = tpu_b_binary(b, "stablehlo.subtract", tpu_b_const(b, rt, (double)n), corr);
  dof = tpu_b_binary(b, "stablehlo.maximum", dof, tpu_b_const(b, rt, 0.0));
  tpu_val_t var;
  if (rt == TPU_F32) {
    tpu_val_t v_lo;
    tpu_red_div_pair(b, ss, ss_lo, tpu_red_bcast(b, dof, ss), &var, &v_lo);
    var = take_sqrt ? tpu_red_sqrt_pair(b, var, v_lo)
                    : tpu_b_select(b, tpu_b_unary(b, "stablehlo.is_finite", var),
                                   tpu_b_binary(b, "stablehlo.add", var, v_lo), var);
  } else {
    var = tpu_b_binary(b, "stablehlo.divide", ss, tpu_red_bcast(b, dof, ss));
    if (take_sqrt) var = tpu_b_unary(b, "stablehlo.sqrt", var);
  }
  outs[0] = tpu_red_keep(b, tpu_b_convert(b, var, tpu_red_real(in.dtype)), &in, &rd, keep);
  *nouts = 1;
  if (with_mean) {
    outs[1] = tpu_red_keep(b, tpu_b_convert(b, mean, in.dtype), &in, &rd, keep);
    *nouts = 2;
  }
  return NULL;
}

static tpu_status_t* tpu_lower_var(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_moments(b, op, outs, nouts, false, false);
}
static tpu_status_t* tpu_lower_std(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_moments(b, op, outs, nouts, true, false);
}
static tpu_status_t* tpu_lower_var_mean(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_moments(b, op, outs, nouts, false, true);
}
static tpu_status_t* tpu_lower_std_mean(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_moments(b, op, outs, nouts, true, true);
}

/* --------------------------------------------------------- logsumexp, norm */

/* logsumexp(self, dim, keepdim): max-shifted, with infinite maxima shifted by 0 so
 * that all -inf gives -inf and any +inf gives +inf (PyTorch's formulation). */
static tpu_status_t* tpu_lower_logsumexp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_rdims_t rd = tpu_red_dims(b, op, 1, in.rank, true);
  tpu_dtype_t out = tpu_red_is_intlike(in.dtype) ? TPU_F32 : in.dtype, ct = tpu_dtype_opmath(out);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t m = tpu_red(b, x, &rd, TPU_RED_MAX);
  tpu_val_t finite = tpu_b_unary(b, "stablehlo.is_finite", m);
  m = tpu_b_select(b, finite, m, tpu_red_like(b, m, 0.0));
  tpu_val_t e = tpu_b_unary(b, "stablehlo.exponential",
                            tpu_b_binary(b, "stablehlo.subtract", x, tpu_red_expand(b, m, &in, &rd)));
  tpu_val_t r = tpu_b_binary(b, "stablehlo.add", tpu_b_unary(b, "stablehlo.log", tpu_red(b, e, &rd, TPU_RED_SUM)), m);
  return tpu_ops_result1(tpu_red_keep(b, tpu_b_convert(b, r, out), &in, &rd, tpu_op_bool(op, 2, false)), outs, nouts);
}

static tpu_val_t tpu_red_eq_const(tpu_builder_t* b, tpu_val_t p, double c) {
  return tpu_b_compare(b, "EQ", p, tpu_red_like(b, p, c));
}

/* sum(|x|^p)^(1/p), max|x| (p = inf), min|x| (p = -inf) or the count of nonzeros
 * (p = 0), chosen in-graph since p is a runtime Scalar; p = 1 and 2 take exact
 * paths (|x|, x·x and sqrt). A constant p folds to one branch in XLA. */
static tpu_val_t tpu_red_vector_norm(tpu_builder_t* b, tpu_val_t a, tpu_val_t p, const tpu_rdims_t* rd) {
  tpu_val_t is1 = tpu_red_eq_const(b, p, 1.0), is2 = tpu_red_eq_const(b, p, 2.0);
  tpu_val_t pw = tpu_b_binary(b, "stablehlo.power", a, tpu_red_bcast(b, p, a));
  pw = tpu_b_select(b, is2, tpu_b_binary(b, "stablehlo.multiply", a, a), tpu_b_select(b, is1, a, pw));
  tpu_val_t s = tpu_red(b, pw, rd, TPU_RED_SUM);
  tpu_val_t inv = tpu_b_binary(b, "stablehlo.divide", tpu_red_like(b, p, 1.0), p);
  tpu_val_t gen = tpu_b_binary(b, "stablehlo.power", s, tpu_red_bcast(b, inv, s));
  gen = tpu_b_select(b, is2, tpu_b_unary(b, "stablehlo.sqrt", s), tpu_b_select(b, is1, s, gen));
  /* |x| >= 0, so 0 serves as max's identity: an empty inf-norm gives 0 where
   * PyTorch raises (p's value is not known when lowering). */
  tpu_val_t mx = tpu_red(b, a, rd, TPU_RED_MAX);
  mx = tpu_red_combine(b, TPU_RED_MAX, mx, tpu_red_like(b, mx, 0.0));
  tpu_val_t mn = tpu_red(b, a, rd, TPU_RED_MIN);
  tpu_val_t nz = tpu_b_convert(b, tpu_b_convert(b, a, TPU_BOOL), tpu_b_dtype(b, a));
  tpu_val_t cnt = tpu_red(b, nz, rd, TPU_RED_SUM);
  tpu_val_t r = tpu_b_select(b, tpu_red_eq_const(b, p, 0.0), cnt, gen);
  r = tpu_b_select(b, tpu_red_eq_const(b, p, -INFINITY), mn, r);
  return tpu_b_select(b, tpu_red_eq_const(b, p, INFINITY), mx, r);
}

tpu_val_t tpu_red_pnorm(tpu_builder_t* b, tpu_val_t a, tpu_val_t p, int ndims, const int64_t* dims) {
  tpu_rdims_t rd = {.n = ndims};
  for (int i = 0; i < ndims; ++i) rd.d[i] = dims[i];
  return tpu_red_vector_norm(b, a, p, &rd);
}

/* linalg_vector_norm(self, ord=2, dim?, keepdim, *, dtype?) and the norm overloads
 * (self, p?, dim, keepdim, *, dtype) / (self, p?, *, dtype) / (self, p). */
static tpu_status_t* tpu_lower_norm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (!tpu_red_check_floating(b, in.dtype, "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ",
                              true))
    return NULL;
  bool dtype_only = tpu_op_kind(op, 2) == TPU_ARG_DTYPE;
  int dtype_arg = dtype_only ? 2 : 4;
  tpu_rdims_t rd = dtype_only ? tpu_red_all(in.rank) : tpu_red_dims(b, op, 2, in.rank, true);
  bool keep = !dtype_only && tpu_op_bool(op, 3, false);
  tpu_dtype_t dt = tpu_op_dtype(op, dtype_arg, in.dtype);
  if (tpu_dtype_promote(in.dtype, dt) != dt)
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "linalg.vector_norm: the dtype of the input (%s) should be convertible without narrowing to the "
                      "specified dtype (%s)",
                      tpu_red_c10_name(in.dtype), tpu_red_c10_name(dt));
  tpu_dtype_t out = tpu_red_real(dt), ct = tpu_dtype_opmath(out);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), dt);
  tpu_val_t a = tpu_b_convert(b, tpu_b_unary(b, "stablehlo.abs", x), ct);
  tpu_val_t p = tpu_ops_has_value(op, 1) ? tpu_op_scalar(b, op, 1, ct) : tpu_b_const(b, ct, 2.0);
  tpu_val_t r = tpu_red_vector_norm(b, a, p, &rd);
  return tpu_ops_result1(tpu_red_keep(b, tpu_b_convert(b, r, out), &in, &rd, keep), outs, nouts);
}

/* ------------------------------------------------------------------ scans */

/* combine(earlier, later) → out for n parallel arrays (values, indices ...). */
typedef void (*tpu_scan_fn_t)(tpu_builder_t* b, const tpu_val_t* earlier, const tpu_val_t* later, tpu_val_t* out,
                              const void* ctx);

/* Inclusive scan along `dim` by log-step doubling (Hillis–Steele): after step k
 * each element combines the 2^k elements before it. O(N log N) elementwise work
 * instead of reduce_window's O(N²); `combine` must be associative. */
static void tpu_red_scan(tpu_builder_t* b, int n, tpu_val_t* vals, const tpu_val_t* idents, int dim,
                         tpu_scan_fn_t combine, const void* ctx) {
  const tpu_aval_t in = *tpu_b_aval(b, vals[0]);
  if (in.rank == 0) return;
  for (int64_t k = 1; k < in.dims[dim] && tpu_b_ok(b); k *= 2) {
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    lo[dim] = k;
    hi[dim] = -k; /* shift right by k, identity in front */
    tpu_val_t shifted[2];
    for (int i = 0; i < n; ++i) shifted[i] = tpu_b_pad(b, vals[i], idents[i], lo, hi, NULL);
    combine(b, shifted, vals, vals, ctx);
  }
}

static void tpu_scan_reduce_kind(tpu_builder_t* b, const tpu_val_t* e, const tpu_val_t* l, tpu_val_t* out,
                                 const void* ctx) {
  out[0] = tpu_red_combine(b, *(const tpu_red_kind_t*)ctx, e[0], l[0]);
}

/* Compensated (sum, error) pairs: f32 cumsum as accurate as PyTorch's CPU
 * kernel, which accumulates in double. */
static void tpu_scan_twosum(tpu_builder_t* b, const tpu_val_t* e, const tpu_val_t* l, tpu_val_t* out,
                            const void* ctx) {
  (void)ctx;
  tpu_val_t r[2];
  tpu_red_twosum(b, e, l, r);
  out[0] = r[0];
  out[1] = r[1];
}

/* Where min and max are the same infinity: logaddexp is that infinity (the
 * formula's inf - inf would be NaN). */
static tpu_val_t tpu_red_same_inf(tpu_builder_t* b, tpu_val_t mn, tpu_val_t mx) {
  return tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "EQ", mn, mx),
                      tpu_b_unary(b, "stablehlo.not", tpu_b_unary(b, "stablehlo.is_finite", mn)));
}

/* log(exp(a) + exp(b)) = max + log1p(exp(min - max)); equal infinities stay. */
static void tpu_scan_logaddexp(tpu_builder_t* b, const tpu_val_t* e, const tpu_val_t* l, tpu_val_t* out,
                               const void* ctx) {
  (void)ctx;
  tpu_val_t mx = tpu_red_combine(b, TPU_RED_MAX, e[0], l[0]);
  tpu_val_t mn = tpu_red_combine(b, TPU_RED_MIN, e[0], l[0]);
  tpu_val_t d = tpu_b_unary(b, "stablehlo.exponential", tpu_b_binary(b, "stablehlo.subtract", mn, mx));
  tpu_val_t r = tpu_b_binary(b, "stablehlo.add", mx, tpu_b_unary(b, "stablehlo.log_plus_one", d));
  out[0] = tpu_b_select(b, tpu_red_same_inf(b, mn, mx), mx, r);
}

/* logaddexp of compensated pairs (hi, lo), float32 logcumsumexp: the running
 * value keeps what rounding at its magnitude drops (an ulp of 1e4 is 1e-3, more
 * than log1p's whole contribution of a term 8 below it), so the scan's log2(n)
 * levels round once, at the end. The larger hi leads; its lo and the smaller's
 * enter the difference, and hi + log1p(exp(d)) is a TwoSum. Equal infinities
 * and a non-finite sum carry no correction. */
static void tpu_scan_logaddexp_pair(tpu_builder_t* b, const tpu_val_t* e, const tpu_val_t* l, tpu_val_t* out,
                                    const void* ctx) {
  (void)ctx;
  tpu_val_t take = tpu_b_compare(b, "GE", l[0], e[0]);
  tpu_val_t mx[2] = {tpu_b_select(b, take, l[0], e[0]), tpu_b_select(b, take, l[1], e[1])};
  tpu_val_t mnh = tpu_b_select(b, take, e[0], l[0]), mnl = tpu_b_select(b, take, e[1], l[1]);
  tpu_val_t d = tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.subtract", mnh, mx[0]),
                             tpu_b_binary(b, "stablehlo.subtract", mnl, mx[1]));
  tpu_val_t t[2] = {tpu_b_unary(b, "stablehlo.log_plus_one", tpu_b_unary(b, "stablehlo.exponential", d)),
                    tpu_red_like(b, d, 0.0)};
  tpu_val_t r[2];
  tpu_red_twosum(b, mx, t, r);
  tpu_val_t same_inf = tpu_red_same_inf(b, mnh, mx[0]);
  tpu_val_t zero = tpu_red_like(b, d, 0.0);
  out[0] = tpu_b_select(b, same_inf, mx[0], r[0]);
  out[1] = tpu_b_select(b, tpu_b_unary(b, "stablehlo.is_finite", out[0]), r[1], zero);
  out[1] = tpu_b_select(b, same_inf, zero, out[1]);
}

/* cummax/cummin pairs (value, index). In the doubling scan `later` always covers
 * larger indices than `earlier` (whose padding has index -1), so ties and
 * repeated NaNs take `later`: PyTorch's rule (NaN sticks, ties move to the latest
 * index). Comparing values only keeps the graph small (XLA compile time). */
static void tpu_scan_cumext(tpu_builder_t* b, const tpu_val_t* e, const tpu_val_t* l, tpu_val_t* out,
                            const void* ctx) {
  bool is_max = *(const bool*)ctx;
  tpu_val_t take = tpu_b_compare(b, is_max ? "GE" : "LE", l[0], e[0]);
  if (tpu_dtype_is_float(tpu_b_dtype(b, l[0]))) {
    tpu_val_t not_e_nan = tpu_b_compare(b, "EQ", e[0], e[0]);
    take = tpu_b_binary(b, "stablehlo.or", tpu_red_isnan(b, l[0]), tpu_b_binary(b, "stablehlo.and", not_e_nan, take));
  }
  out[0] = tpu_b_select(b, take, l[0], e[0]);
  out[1] = tpu_b_select(b, take, l[1], e[1]);
}

/* cumsum/cumprod(self, dim, *, dtype?): int/bool → int64 like sum. */
static tpu_status_t* tpu_lower_cum_reduce(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts,
                                          tpu_red_kind_t kind) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  bool given = tpu_op_kind(op, 2) == TPU_ARG_DTYPE;
  tpu_dtype_t out = given ? tpu_op_dtype(op, 2, in.dtype) : tpu_red_is_intlike(in.dtype) ? TPU_I64 : in.dtype;
  tpu_dtype_t ct = tpu_dtype_opmath(out);
  tpu_val_t x = tpu_b_convert(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), out), ct);
  tpu_val_t ident = tpu_red_identity(b, ct, kind);
  if (kind == TPU_RED_SUM && ct == TPU_F32 && in.rank > 0) {
    tpu_val_t v[2] = {x, tpu_red_like(b, x, 0.0)}, idents[2] = {ident, ident};
    tpu_red_scan(b, 2, v, idents, dim, tpu_scan_twosum, NULL);
    tpu_red_pair_value(b, v[0], v[1], &x, NULL);
  } else {
    tpu_red_scan(b, 1, &x, &ident, dim, tpu_scan_reduce_kind, &kind);
  }
  return tpu_ops_result1(tpu_b_convert(b, x, out), outs, nouts);
}

static tpu_status_t* tpu_lower_cumsum(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_cum_reduce(b, op, outs, nouts, TPU_RED_SUM);
}
static tpu_status_t* tpu_lower_cumprod(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_cum_reduce(b, op, outs, nouts, TPU_RED_PROD);
}

/* logcumsumexp / _logcumsumexp(self, dim): floating inputs (PyTorch has no int kernel). */
static tpu_status_t* tpu_lower_logcumsumexp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (!tpu_dtype_is_float(in.dtype))
    return TPU_STATUS(TPU_UNIMPLEMENTED, "\"logcumsumexp\" not implemented for '%s'", tpu_red_c10_name(in.dtype));
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  tpu_dtype_t ct = tpu_dtype_opmath(in.dtype);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t ident = tpu_b_const(b, ct, -INFINITY);
  if (ct == TPU_F32 && in.rank > 0) {
    tpu_val_t v[2] = {x, tpu_red_like(b, x, 0.0)}, idents[2] = {ident, tpu_b_const(b, ct, 0.0)};
    tpu_red_scan(b, 2, v, idents, dim, tpu_scan_logaddexp_pair, NULL);
    tpu_red_pair_value(b, v[0], v[1], &x, NULL);
  } else {
    tpu_red_scan(b, 1, &x, &ident, dim, tpu_scan_logaddexp, NULL);
  }
  return tpu_ops_result1(tpu_b_convert(b, x, in.dtype), outs, nouts);
}

/* cummax/cummin(self, dim) and _cummax_helper/_cummin_helper(self, values, indices,
 * dim), whose mutated values/indices come back as the two results. */
static tpu_status_t* tpu_lower_cumext(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool is_max) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim_arg = tpu_op_kind(op, 1) == TPU_ARG_TENSOR ? 3 : 1;
  int dim = tpu_ops_dim(b, tpu_op_int(op, dim_arg, 0), in.rank);
  tpu_val_t v[2] = {tpu_op_tensor(b, op, 0), TPU_NOVAL};
  tpu_aval_t ia = in;
  ia.dtype = TPU_I64;
  v[1] = in.rank > 0 ? tpu_b_iota(b, &ia, dim) : tpu_b_const_i(b, TPU_I64, 0);
  tpu_val_t idents[2] = {tpu_b_const_extreme(b, in.dtype, is_max), tpu_b_const_i(b, TPU_I64, -1)};
  tpu_red_scan(b, 2, v, idents, dim, tpu_scan_cumext, &is_max);
  outs[0] = v[0];
  outs[1] = v[1];
  *nouts = 2;
  return NULL;
}

static tpu_status_t* tpu_lower_cummax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_cumext(b, op, outs, nouts, true);
}
static tpu_status_t* tpu_lower_cummin(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_cumext(b, op, outs, nouts, false);
}

/* ---------------------------------------------------------------- softmax */

/* _softmax/_log_softmax(self, dim, half_to_float): max-shifted in opmath;
 * half_to_float returns f32 (as PyTorch's CUDA kernel; its CPU kernel refuses). */
static tpu_status_t* tpu_lower_softmax_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool log) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (!tpu_dtype_is_float(in.dtype))
    return TPU_STATUS(TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", log ? "log_softmax" : "softmax",
                      tpu_red_c10_name(in.dtype));
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  tpu_dtype_t out = tpu_op_bool(op, 2, false) ? TPU_F32 : in.dtype;
  tpu_rdims_t rd = {.n = in.rank > 0, .d = {dim}}; /* a 0-d input reduces nothing: softmax = 1 */
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(in.dtype));
  tpu_val_t m = tpu_red_expand(b, tpu_red(b, x, &rd, TPU_RED_MAX), &in, &rd);
  tpu_val_t sh = tpu_b_binary(b, "stablehlo.subtract", x, m);
  tpu_val_t e = tpu_b_unary(b, "stablehlo.exponential", sh);
  tpu_val_t s = tpu_red_expand(b, tpu_red(b, e, &rd, TPU_RED_SUM), &in, &rd);
  tpu_val_t r = log ? tpu_b_binary(b, "stablehlo.subtract", sh, tpu_b_unary(b, "stablehlo.log", s))
                    : tpu_b_binary(b, "stablehlo.divide", e, s);
  return tpu_ops_result1(tpu_b_convert(b, r, out), outs, nouts);
}

static tpu_status_t* tpu_lower_softmax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_softmax_like(b, op, outs, nouts, false);
}
static tpu_status_t* tpu_lower_log_softmax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  return tpu_lower_softmax_like(b, op, outs, nouts, true);
}

/* _softmax_backward_data / _log_softmax_backward_data(grad, output, dim, input_dtype):
 * softmax: y·(g − Σ g·y); log_softmax: g − exp(y)·Σ g. Result in input_dtype. */
static tpu_status_t* tpu_lower_softmax_bwd_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts,
                                                bool log) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, 0), in.rank);
  tpu_dtype_t ct = tpu_dtype_opmath(in.dtype), out = tpu_op_dtype(op, 3, in.dtype);
  tpu_rdims_t rd = {.n = in.rank > 0, .d = {dim}};
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t y = tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct);
  tpu_val_t r;
  if (log) {
    tpu_val_t s = tpu_red_expand(b, tpu_red(b, g, &rd, TPU_RED_SUM), &in, &rd);
    r = tpu_b_binary(b, "stablehlo.subtract", g,
                     tpu_b_binary(b, "stablehlo.multiply", tpu_b_unary(b, "stablehlo.exponential", y), s));
  } else {
    tpu_val_t gy = tpu_b_binary(b, "stablehlo.multiply", g, y);
    tpu_val_t s = tpu_red_expand(b, tpu_red(b, gy, &rd, TPU_RED_SUM), &in, &rd);
    r = tpu_b_binary(b, "stablehlo.multiply", y, tpu_b_binary(b, "stablehlo.subtract", g, s));
  }
  return tpu_ops_result1(tpu_b_convert(b, r, out), outs, nouts);
}

static tpu_status_t* tpu_lower_softmax_bwd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  return tpu_lower_softmax_bwd_like(b, op, outs, nouts, false);
}
static tpu_status_t* tpu_lower_log_softmax_bwd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  return tpu_lower_softmax_bwd_like(b, op, outs, nouts, true);
}

/* equal(self, other) -> bool: same sizes and every element equal (NaN != NaN). */
static tpu_status_t* tpu_lower_equal(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0), y = tpu_op_aval(op, 1);
  *nouts = 1;
  bool same = x.rank == y.rank;
  for (int i = 0; same && i < x.rank; ++i) same = x.dims[i] == y.dims[i];
  if (!same) {
    outs[0] = tpu_b_const_i(b, TPU_BOOL, 0);
    return NULL;
  }
  int args[2] = {0, 1};
  tpu_dtype_t ct = tpu_ops_result_type(op, 2, args);
  tpu_val_t eq = tpu_b_compare(b, "EQ", tpu_ops_operand(b, op, 0, ct, NULL), tpu_ops_operand(b, op, 1, ct, NULL));
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < x.rank; ++i) dims[i] = i;
  outs[0] = tpu_b_reduce(b, eq, tpu_b_const_i(b, TPU_BOOL, 1), x.rank, dims, "stablehlo.and");
  return NULL;
}

const tpu_lowering_t tpu_lowerings_reduce[] = {
    {"equal", tpu_lower_equal},
    {"sum", tpu_lower_sum},
    {"nansum", tpu_lower_nansum},
    {"prod", tpu_lower_prod},
    {"mean", tpu_lower_mean},
    {"amax", tpu_lower_amax},
    {"amin", tpu_lower_amin},
    {"max", tpu_lower_max},
    {"min", tpu_lower_min},
    {"argmax", tpu_lower_argmax},
    {"argmin", tpu_lower_argmin},
    {"aminmax", tpu_lower_aminmax},
    {"_aminmax", tpu_lower_aminmax}, /* the deprecated spelling: (self) and .dim(self, dim, keepdim) */
    {"any", tpu_lower_any},
    {"all", tpu_lower_all},
    {"hash_tensor", tpu_lower_hash_tensor},
    {"count_nonzero", tpu_lower_count_nonzero},
    {"var", tpu_lower_var},
    {"std", tpu_lower_std},
    {"var_mean", tpu_lower_var_mean},
    {"std_mean", tpu_lower_std_mean},
    {"logsumexp", tpu_lower_logsumexp},
    {"norm", tpu_lower_norm},
    {"linalg_vector_norm", tpu_lower_norm},
    /* native_norm(self, p) and .ScalarOpt_dim_dtype(self, p?, dim, keepdim, dtype?):
     * norm's argument layouts (ATen has it for sparse tensors; dense is norm). */
    {"native_norm", tpu_lower_norm},
    {"cumsum", tpu_lower_cumsum},
    {"cumprod", tpu_lower_cumprod},
    {"logcumsumexp", tpu_lower_logcumsumexp},
    {"_logcumsumexp", tpu_lower_logcumsumexp},
    {"cummax", tpu_lower_cummax},
    {"cummin", tpu_lower_cummin},
    {"_cummax_helper", tpu_lower_cummax},
    {"_cummin_helper", tpu_lower_cummin},
    {"_softmax", tpu_lower_softmax},
    {"_log_softmax", tpu_lower_log_softmax},
    {"_softmax_backward_data", tpu_lower_softmax_bwd},
    {"_log_softmax_backward_data", tpu_lower_log_softmax_bwd},
    {NULL, NULL},
};
