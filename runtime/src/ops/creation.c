/* Lowerings: creation family (fill, ranges, identity/triangular masks, diagonals).
 *
 * Factory functions (zeros, ones, full, arange, linspace, eye ...) are composite in
 * PyTorch: they allocate with `empty` (a binding kernel) and call the `*.out` or
 * in-place variant, which is what reaches these lowerings. The out tensor is
 * stripped by the binding, so ops that need its dtype get it as a trailing
 * argument (TPU_LOWER_OUT_DTYPE, listed in table.c). */
#include "creation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"

/* The out tensor's dtype: a TPU_ARG_DTYPE at index >= nfunc (appended by the
 * binding), else `dflt` (PyTorch's inference for the default out tensor). */
static tpu_dtype_t tpu_creation_out_dtype(const tpu_op_t* op, int nfunc, tpu_dtype_t dflt) {
  for (int i = nfunc; i < tpu_op_nargs(op); ++i)
    if (tpu_op_kind(op, i) == TPU_ARG_DTYPE) return tpu_op_dtype(op, i, dflt);
  return dflt;
}

/* ------------------------------------------------------------------ fill */

/* fill.Scalar / fill_.Scalar / fill_.Tensor: self's shape and dtype, every
 * element the value (a runtime operand, so no recompile per value). */
static tpu_status_t* tpu_lower_fill(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                    int* nouts) {
  (void)max_outs;
  tpu_aval_t self = tpu_op_aval(op, 0);
  tpu_val_t v;
  if (tpu_op_kind(op, 1) == TPU_ARG_TENSOR) {
    tpu_aval_t va = tpu_op_aval(op, 1);
    if (va.rank != 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "fill_ only supports 0-dimension value tensor but got tensor with %d dimensions.", va.rank);
      return NULL;
    }
    v = tpu_b_convert(b, tpu_op_tensor(b, op, 1), self.dtype);
  } else {
    v = tpu_op_scalar(b, op, 1, self.dtype);
  }
  return tpu_ops_result1(tpu_ops_bcast(b, v, &self), outs, nouts);
}

static tpu_status_t* tpu_lower_zero(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                    int* nouts) {
  (void)max_outs;
  tpu_aval_t self = tpu_op_aval(op, 0);
  return tpu_ops_result1(tpu_b_full(b, &self, 0.0), outs, nouts);
}

/* ---------------------------------------------------------------- ranges */

/* PyTorch's accumulate type for ranges on CPU: integers in i64; floats in f32
 * here (f64 only for f64 results: TPUs have no fast f64). */
static tpu_dtype_t tpu_range_acc(tpu_dtype_t out) {
  if (tpu_dtype_is_int(out)) return TPU_I64;
  return out == TPU_F64 ? TPU_F64 : TPU_F32;
}

/* Rejects dtypes PyTorch's range kernels do not cover (bool, complex), with the
 * CPU kernel's words ("arange_cpu" not implemented for 'Bool') so that tests can
 * tell this dtype error from a missing lowering. */
static bool tpu_range_dtype_ok(tpu_builder_t* b, const char* what, tpu_dtype_t out) {
  if (out == TPU_BOOL || tpu_dtype_is_complex(out)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s_cpu\" not implemented for '%s'", what, tpu_dtype_scalar_type_name(out));
    return false;
  }
  return true;
}
/* linspace and logspace also take complex results. */
static bool tpu_space_dtype_ok(tpu_builder_t* b, const char* what, tpu_dtype_t out) {
  return tpu_dtype_is_complex(out) || tpu_range_dtype_ok(b, what, out);
}

/* start/end/step of arange and range, as doubles and truncated to integers the
 * way Scalar::to<int64_t>() does. arange.out(end) has start 0 and step 1. */
typedef struct tpu_range {
  double start, end, step;
  int64_t istart, iend, istep;
  bool integral; /* all three are integers (PyTorch infers int64 then) */
} tpu_range_t;

static tpu_range_t tpu_range_read(const tpu_op_t* op) {
  tpu_range_t r = {0, 0, 1, 0, 0, 1, true};
  bool end_only = strcmp(tpu_op_name(op), "arange") == 0 && strcmp(tpu_op_overload(op), "out") == 0;
  int idx[3] = {end_only ? -1 : 0, end_only ? 0 : 1, end_only ? -1 : 2};
  double* f[3] = {&r.start, &r.end, &r.step};
  int64_t* n[3] = {&r.istart, &r.iend, &r.istep};
  for (int k = 0; k < 3; ++k) {
    if (idx[k] < 0) continue;
    const tpu_arg_t* a = tpu_op_arg(op, idx[k]);
    if (!a || a->kind == TPU_ARG_NONE) continue;
    *f[k] = tpu_op_float(op, idx[k], *f[k]);
    *n[k] = tpu_op_int(op, idx[k], *n[k]);
    if (a->kind == TPU_ARG_FLOAT || (a->kind == TPU_ARG_SCALAR && (tpu_dtype_is_float(a->u.scalar.dtype) ||
                                                                    tpu_dtype_is_complex(a->u.scalar.dtype))))
      r.integral = false;
  }
  return r;
}

/* start + step * iota(n), computed in acc and converted to out: PyTorch's arange
 * kernel. The values are static (table.c lists these ops), so they are constants. */
static tpu_val_t tpu_range_values(tpu_builder_t* b, const tpu_range_t* r, int64_t n, tpu_dtype_t out) {
  tpu_dtype_t acc = tpu_range_acc(out);
  tpu_aval_t a = tpu_aval_make(acc, 1, &n);
  tpu_val_t start, step;
  if (acc == TPU_I64) {
    start = tpu_b_const_i(b, acc, r->istart);
    step = tpu_b_const_i(b, acc, r->istep);
  } else {
    start = tpu_b_const(b, acc, r->start);
    step = tpu_b_const(b, acc, r->step);
  }
  tpu_val_t v = tpu_b_binary(b, "stablehlo.multiply", tpu_b_iota(b, &a, 0), tpu_ops_bcast(b, step, &a));
  v = tpu_b_binary(b, "stablehlo.add", v, tpu_ops_bcast(b, start, &a));
  return tpu_b_convert(b, v, out);
}

/* PyTorch's bound checks for arange/range (on the double values). */
static bool tpu_range_check(tpu_builder_t* b, const tpu_range_t* r) {
  if (!(r->step > 0 || r->step < 0)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "step must be nonzero");
    return false;
  }
  if (!isfinite(r->start) || !isfinite(r->end)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "unsupported range: %g -> %g", r->start, r->end);
    return false;
  }
  if (!((r->step > 0 && r->end >= r->start) || (r->step < 0 && r->end <= r->start))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "upper bound and lower bound inconsistent with step sign");
    return false;
  }
  return true;
}

static bool tpu_range_size_ok(tpu_builder_t* b, double size) {
  if (!(size >= 0 && size <= 9.2e18)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "invalid size, possible overflow?");
    return false;
  }
  return true;
}

/* arange.start_out(start, end, step) and arange.out(end). The length follows
 * PyTorch: exact integer arithmetic for int64 results, ceil of the double
 * quotient otherwise; values start + i*step with start and step truncated for
 * integer results. */
static tpu_status_t* tpu_lower_arange(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                      int* nouts) {
  (void)max_outs;
  tpu_range_t r = tpu_range_read(op);
  int nfunc = strcmp(tpu_op_overload(op), "out") == 0 ? 1 : 3;
  tpu_dtype_t out = tpu_creation_out_dtype(op, nfunc, r.integral ? TPU_I64 : TPU_F32);
  if (!tpu_range_dtype_ok(b, "arange", out) || !tpu_range_check(b, &r)) return NULL;
  double size;
  if (out == TPU_I64) {
    if (r.istep == 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "step must be nonzero");
      return NULL;
    }
    int64_t sgn = (r.istep > 0) - (r.istep < 0);
    size = ceil((double)((r.iend - r.istart + r.istep - sgn) / r.istep));
  } else {
    size = ceil((r.end - r.start) / r.step);
  }
  if (!tpu_range_size_ok(b, size)) return NULL;
  return tpu_ops_result1(tpu_range_values(b, &r, (int64_t)size, out), outs, nouts);
}

/* range.out(start, end, step): the deprecated inclusive torch.range. */
static tpu_status_t* tpu_lower_range(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                     int* nouts) {
  (void)max_outs;
  tpu_range_t r = tpu_range_read(op);
  tpu_dtype_t out = tpu_creation_out_dtype(op, 3, TPU_F32);
  if (!tpu_range_dtype_ok(b, "range", out) || !tpu_range_check(b, &r)) return NULL;
  double size = floor((r.end - r.start) / r.step) + 1;
  if (!tpu_range_size_ok(b, size)) return NULL;
  return tpu_ops_result1(tpu_range_values(b, &r, (int64_t)size, out), outs, nouts);
}

/* PyTorch's symmetric linspace: start + step*i for the first half and
 * end - step*(steps-1-i) for the second, so both ends are exact. */
static tpu_val_t tpu_linspace_part(tpu_builder_t* b, double start, double end, int64_t steps, tpu_dtype_t acc) {
  tpu_aval_t a = tpu_aval_make(acc, 1, &steps);
  if (steps == 1) return tpu_b_full(b, &a, start);
  double step = (end - start) / (double)(steps - 1);
  tpu_val_t i = tpu_b_iota(b, &a, 0);
  tpu_val_t sv = tpu_b_full(b, &a, step);
  tpu_val_t lo = tpu_b_binary(b, "stablehlo.add", tpu_b_full(b, &a, start), tpu_b_binary(b, "stablehlo.multiply", sv, i));
  tpu_val_t rev = tpu_b_binary(b, "stablehlo.subtract", tpu_b_full(b, &a, (double)(steps - 1)), i);
  tpu_val_t hi = tpu_b_binary(b, "stablehlo.subtract", tpu_b_full(b, &a, end), tpu_b_binary(b, "stablehlo.multiply", sv, rev));
  tpu_val_t first = tpu_b_compare(b, "LT", i, tpu_b_full(b, &a, (double)(steps / 2)));
  return tpu_b_select(b, first, lo, hi);
}

/* Integer results truncate start/end first and step in double. A complex
 * linspace is one per part: ATen's complex step divides both parts by steps - 1. */
static tpu_val_t tpu_linspace_values(tpu_builder_t* b, const tpu_op_t* op, int64_t steps, tpu_dtype_t out,
                                     tpu_dtype_t acc) {
  if (tpu_dtype_is_int(out))
    return tpu_linspace_part(b, (double)tpu_op_int(op, 0, 0), (double)tpu_op_int(op, 1, 0), steps, acc);
  if (!tpu_dtype_is_complex(out)) return tpu_linspace_part(b, tpu_op_float(op, 0, 0), tpu_op_float(op, 1, 0), steps, acc);
  double s[2], e[2];
  tpu_op_complex(op, 0, 0, &s[0], &s[1]);
  tpu_op_complex(op, 1, 0, &e[0], &e[1]);
  tpu_dtype_t part = out == TPU_C128 ? TPU_F64 : TPU_F32;
  return tpu_ops_complex(b, tpu_linspace_part(b, s[0], e[0], steps, part), tpu_linspace_part(b, s[1], e[1], steps, part));
}

static bool tpu_linspace_steps(tpu_builder_t* b, const tpu_op_t* op, int64_t* steps) {
  *steps = tpu_op_int(op, 2, 0);
  if (*steps < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "number of steps must be non-negative");
    return false;
  }
  return true;
}

/* linspace.out(start, end, steps). */
static tpu_status_t* tpu_lower_linspace(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                        int* nouts) {
  (void)max_outs;
  tpu_dtype_t out = tpu_creation_out_dtype(op, 3, TPU_F32);
  int64_t steps;
  if (!tpu_space_dtype_ok(b, "linspace", out) || !tpu_linspace_steps(b, op, &steps)) return NULL;
  tpu_dtype_t acc = tpu_dtype_is_int(out) ? TPU_F64 : tpu_range_acc(out);
  return tpu_ops_result1(tpu_b_convert(b, tpu_linspace_values(b, op, steps, out, acc), out), outs, nouts);
}

/* logspace.out(start, end, steps, base): base ** linspace(start, end, steps). */
static tpu_status_t* tpu_lower_logspace(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                        int* nouts) {
  (void)max_outs;
  tpu_dtype_t out = tpu_creation_out_dtype(op, 4, TPU_F32);
  int64_t steps;
  if (!tpu_space_dtype_ok(b, "logspace", out) || !tpu_linspace_steps(b, op, &steps)) return NULL;
  tpu_dtype_t acc = tpu_dtype_is_int(out) ? TPU_F64 : tpu_range_acc(out);
  tpu_val_t e = tpu_linspace_values(b, op, steps, out, acc);
  tpu_val_t base = tpu_b_full(b, tpu_b_aval(b, e), tpu_op_float(op, 3, 10.0));
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_binary(b, "stablehlo.power", base, e), out), outs, nouts);
}

/* ------------------------------------------------------- masks, diagonals */

/* A bool [rows, cols] mask of (col - row) `dir` k: "EQ" for eye, "LE" for tril,
 * "GE" for triu. */
static tpu_val_t tpu_diag_mask(tpu_builder_t* b, int64_t rows, int64_t cols, const char* dir, int64_t k) {
  tpu_aval_t a = tpu_aval_make(TPU_I64, 2, (int64_t[]){rows, cols});
  tpu_val_t d = tpu_b_binary(b, "stablehlo.subtract", tpu_b_iota(b, &a, 1), tpu_b_iota(b, &a, 0));
  return tpu_b_compare(b, dir, d, tpu_b_full(b, &a, (double)k));
}

/* eye.out(n) / eye.m_out(n, m). */
static tpu_status_t* tpu_lower_eye(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  bool has_m = strcmp(tpu_op_overload(op), "m_out") == 0;
  int64_t n = tpu_op_int(op, 0, 0), m = has_m ? tpu_op_int(op, 1, 0) : n;
  if (n < 0 || m < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be greater or equal to 0, got %" PRId64, n < 0 ? "n" : "m",
               n < 0 ? n : m);
    return NULL;
  }
  tpu_dtype_t out = tpu_creation_out_dtype(op, has_m ? 2 : 1, TPU_F32);
  return tpu_ops_result1(tpu_b_convert(b, tpu_diag_mask(b, n, m, "EQ", 0), out), outs, nouts);
}

/* tril/triu(self, diagonal): keep the elements on one side of the k-th diagonal
 * of the last two dims. */
static tpu_status_t* tpu_lower_tri(tpu_builder_t* b, tpu_op_t* op, const char* name, const char* dir,
                                   tpu_val_t* outs, int* nouts) {
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (a.rank < 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: input tensor must have at least 2 dimensions", name);
    return NULL;
  }
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  tpu_val_t mask = tpu_diag_mask(b, a.dims[a.rank - 2], a.dims[a.rank - 1], dir, tpu_op_int(op, 1, 0));
  mask = tpu_b_broadcast_to(b, mask, a.rank, a.dims);
  return tpu_ops_result1(tpu_b_select(b, mask, x, tpu_b_full(b, &a, 0.0)), outs, nouts);
}

static tpu_status_t* tpu_lower_tril(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_tri(b, op, "tril", "LE", outs, nouts);
}

static tpu_status_t* tpu_lower_triu(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_tri(b, op, "triu", "GE", outs, nouts);
}

/* tril_indices/triu_indices(row, col, offset, dtype): the [2, N] coordinates of
 * the kept triangle in row-major order. Everything is static, so the result is a
 * constant computed on the host. */
static tpu_status_t* tpu_lower_tri_indices(tpu_builder_t* b, tpu_op_t* op, const char* name, bool lower,
                                           tpu_val_t* outs, int* nouts) {
  int64_t row = tpu_op_int(op, 0, 0), col = tpu_op_int(op, 1, 0), k = tpu_op_int(op, 2, 0);
  tpu_dtype_t dt = tpu_op_dtype(op, 3, TPU_I64);
  if (row < 0 || col < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be non-negative, got%" PRId64, row < 0 ? "row" : "col",
               row < 0 ? row : col);
    return NULL;
  }
  if (dt != TPU_I64 && dt != TPU_I32) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", name, tpu_dtype_name(dt));
    return NULL;
  }
  int64_t n = 0;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = 0; j < col; ++j) n += lower ? (j - i <= k) : (j - i >= k);
  int64_t* data = malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
  if (!data) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  int64_t p = 0;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = 0; j < col; ++j)
      if (lower ? (j - i <= k) : (j - i >= k)) {
        data[p] = i;
        data[n + p] = j;
        ++p;
      }
  tpu_val_t flat = tpu_idx_const_vec(b, TPU_I64, 2 * n, data);
  free(data);
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_reshape(b, flat, 2, (int64_t[]){2, n}), dt), outs, nouts);
}

static tpu_status_t* tpu_lower_tril_indices(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  return tpu_lower_tri_indices(b, op, "tril_indices", true, outs, nouts);
}

static tpu_status_t* tpu_lower_triu_indices(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  return tpu_lower_tri_indices(b, op, "triu_indices", false, outs, nouts);
}

const tpu_lowering_t tpu_lowerings_creation[] = {
    {"fill", tpu_lower_fill},
    {"zero", tpu_lower_zero},
    {"arange", tpu_lower_arange},
    {"range", tpu_lower_range},
    {"linspace", tpu_lower_linspace},
    {"logspace", tpu_lower_logspace},
    {"eye", tpu_lower_eye},
    {"tril", tpu_lower_tril},
    {"triu", tpu_lower_triu},
    {"tril_indices", tpu_lower_tril_indices},
    {"triu_indices", tpu_lower_triu_indices},
    {NULL, NULL},
};
