/* Batched-matrix building blocks (see matrix.h). */
#include "matrix.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* The i32 loop counter's aval. */
static tpu_aval_t tpu_mx_counter_aval(void) { return tpu_aval_make(TPU_I32, 0, NULL); }

void tpu_mx_while(tpu_builder_t* b, int64_t max_iters, int nc, const tpu_val_t* init, tpu_mx_cond_fn cond,
                  tpu_mx_body_fn body, void* ctx, tpu_val_t* outs, tpu_val_t* out_k) {
  for (int i = 0; i < nc; i++) outs[i] = TPU_NOVAL;
  if (out_k) *out_k = TPU_NOVAL;
  if (!tpu_b_ok(b)) return;
  if (nc > TPU_MX_MAX_CARRY) {
    TPU_B_FAIL(b, TPU_INTERNAL, "a loop carries %d values, more than %d", nc, TPU_MX_MAX_CARRY);
    return;
  }
  if (max_iters <= 0) { /* empty matrices: a body slicing index k would not even type-check */
    for (int i = 0; i < nc; i++) outs[i] = init[i];
    if (out_k) *out_k = tpu_b_const_i(b, TPU_I32, 0);
    return;
  }
  tpu_aval_t av[TPU_MX_MAX_CARRY + 1];
  tpu_val_t ins[TPU_MX_MAX_CARRY + 1], args[TPU_MX_MAX_CARRY + 1], next[TPU_MX_MAX_CARRY + 1],
      res[TPU_MX_MAX_CARRY + 1];
  av[0] = tpu_mx_counter_aval();
  ins[0] = tpu_b_const_i(b, TPU_I32, 0);
  for (int i = 0; i < nc; i++) {
    av[i + 1] = *tpu_b_aval(b, init[i]);
    ins[i + 1] = init[i];
  }
  char* regions[2];
  tpu_b_region_begin(b, nc + 1, av, args);
  tpu_val_t go = tpu_b_compare(b, "LT", args[0], tpu_b_const_i(b, TPU_I32, max_iters));
  if (cond) go = tpu_b_binary(b, "stablehlo.and", go, cond(b, ctx, args[0], args + 1));
  regions[0] = tpu_b_region_end(b, 1, &go);
  tpu_b_region_begin(b, nc + 1, av, args);
  next[0] = tpu_b_binary(b, "stablehlo.add", args[0], tpu_b_const_i(b, TPU_I32, 1));
  body(b, ctx, args[0], args + 1, next + 1);
  regions[1] = tpu_b_region_end(b, nc + 1, next);
  if (!regions[0] || !regions[1]) {
    free(regions[0]);
    free(regions[1]);
    if (tpu_b_ok(b)) TPU_B_FAIL(b, TPU_INTERNAL, "while loop: a region failed to build");
    return;
  }
  tpu_b_op(b, "stablehlo.while", nc + 1, ins, 2, regions, NULL, nc + 1, av, res);
  for (int i = 0; i < nc; i++) outs[i] = res[i + 1];
  if (out_k) *out_k = res[0];
}

void tpu_mx_for(tpu_builder_t* b, int64_t n, int nc, const tpu_val_t* init, tpu_mx_body_fn body, void* ctx,
                tpu_val_t* outs) {
  tpu_mx_while(b, n, nc, init, NULL, body, ctx, outs, NULL);
}

tpu_aval_t tpu_mx_retype(const tpu_aval_t* a, tpu_dtype_t t) {
  tpu_aval_t r = *a;
  r.dtype = t;
  return r;
}

tpu_aval_t tpu_mx_drop(const tpu_aval_t* a, int k) {
  tpu_aval_t r = *a;
  r.rank -= k;
  return r;
}

tpu_val_t tpu_mx_mT(tpu_builder_t* b, tpu_val_t x) {
  int r = tpu_b_rank(b, x);
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return tpu_b_transpose(b, x, perm);
}

tpu_val_t tpu_mx_bcast_batch(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* to) {
  int64_t bd[TPU_MAX_RANK];
  int r = tpu_b_rank(b, v);
  for (int i = 0; i < r; i++) bd[i] = i;
  return tpu_b_broadcast_in_dim(b, v, to->rank, to->dims, bd);
}

tpu_val_t tpu_mx_bcast_vec(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* m, bool as_row) {
  int64_t bd[TPU_MAX_RANK];
  int r = m->rank;
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  bd[r - 2] = as_row ? r - 1 : r - 2;
  return tpu_b_broadcast_in_dim(b, v, r, m->dims, bd);
}

tpu_val_t tpu_mx_take(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t k) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_val_t zero = tpu_b_const_i(b, TPU_I32, 0);
  tpu_val_t starts[TPU_MAX_RANK];
  int64_t sizes[TPU_MAX_RANK], out[TPU_MAX_RANK];
  int o = 0;
  for (int i = 0; i < a.rank; i++) {
    starts[i] = i == dim ? k : zero;
    sizes[i] = i == dim ? 1 : a.dims[i];
    if (i != dim) out[o++] = a.dims[i];
  }
  return tpu_b_reshape(b, tpu_b_dynamic_slice(b, x, starts, sizes), o, out);
}

tpu_val_t tpu_mx_pick(tpu_builder_t* b, tpu_val_t mask, tpu_val_t x, int dim) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_val_t z = tpu_b_full(b, &a, 0);
  int64_t d = dim;
  return tpu_b_reduce(b, tpu_b_select(b, mask, x, z), tpu_b_const(b, a.dtype, 0), 1, &d, "stablehlo.add");
}

/* x with its slices i and j (per batch, i32 of shape batch...) along `dim` exchanged. */
tpu_val_t tpu_mx_swap(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t i, tpu_val_t j) {
  tpu_aval_t a = *tpu_b_aval(b, x), ia = tpu_mx_retype(&a, TPU_I32);
  tpu_val_t idx = tpu_b_iota(b, &ia, dim);
  tpu_val_t is_i = tpu_b_compare(b, "EQ", idx, tpu_mx_bcast_batch(b, i, &ia));
  tpu_val_t is_j = tpu_b_compare(b, "EQ", idx, tpu_mx_bcast_batch(b, j, &ia));
  int64_t bd[TPU_MAX_RANK];
  for (int d = 0, o = 0; d < a.rank; d++)
    if (d != dim) bd[o++] = d;
  tpu_val_t at_i = tpu_b_broadcast_in_dim(b, tpu_mx_pick(b, is_i, x, dim), a.rank, a.dims, bd);
  tpu_val_t at_j = tpu_b_broadcast_in_dim(b, tpu_mx_pick(b, is_j, x, dim), a.rank, a.dims, bd);
  return tpu_b_select(b, is_i, at_j, tpu_b_select(b, is_j, at_i, x));
}

tpu_val_t tpu_mx_diag(tpu_builder_t* b, tpu_val_t x) {
  tpu_aval_t m = *tpu_b_aval(b, x);
  int r = m.rank;
  int64_t k = m.dims[r - 2] < m.dims[r - 1] ? m.dims[r - 2] : m.dims[r - 1];
  if (m.dims[r - 2] != m.dims[r - 1]) { /* the leading k x k block holds the diagonal */
    x = tpu_mx_block(b, x, k, k);
    m.dims[r - 2] = m.dims[r - 1] = k;
  }
  tpu_aval_t im = tpu_mx_retype(&m, TPU_I32);
  tpu_val_t eye = tpu_b_compare(b, "EQ", tpu_b_iota(b, &im, r - 2), tpu_b_iota(b, &im, r - 1));
  return tpu_mx_pick(b, eye, x, r - 1);
}

double tpu_mx_eps(tpu_dtype_t t) { return t == TPU_F64 ? DBL_EPSILON : FLT_EPSILON; }

tpu_val_t tpu_mx_cabs1(tpu_builder_t* b, tpu_val_t x) {
  if (!tpu_dtype_is_complex(tpu_b_dtype(b, x))) return tpu_b_unary(b, "stablehlo.abs", x);
  return tpu_b_binary(b, "stablehlo.add", tpu_b_unary(b, "stablehlo.abs", tpu_ops_part(b, x, false)),
                      tpu_b_unary(b, "stablehlo.abs", tpu_ops_part(b, x, true)));
}

tpu_val_t tpu_mx_column(tpu_builder_t* b, tpu_val_t S, int j) {
  int64_t B = tpu_b_aval(b, S)->dims[0];
  return tpu_b_reshape(b, tpu_mx_slice(b, S, 1, j, j + 1), 1, &B);
}

tpu_val_t tpu_mx_columns(tpu_builder_t* b, int c, const tpu_val_t* v) {
  tpu_val_t cols[TPU_MX_MAX_CARRY];
  int64_t d[2] = {tpu_b_aval(b, v[0])->dims[0], 1};
  if (c > TPU_MX_MAX_CARRY) {
    TPU_B_FAIL(b, TPU_INTERNAL, "a table of %d columns, more than %d", c, TPU_MX_MAX_CARRY);
    return TPU_NOVAL;
  }
  for (int j = 0; j < c; j++) cols[j] = tpu_b_reshape(b, v[j], 2, d);
  return tpu_b_concat(b, c, cols, 1);
}

tpu_val_t tpu_mx_put(tpu_builder_t* b, tpu_val_t x, tpu_val_t k, tpu_val_t v) {
  tpu_aval_t a = *tpu_b_aval(b, x), ia = tpu_mx_retype(&a, TPU_I32);
  tpu_val_t at = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, a.rank - 1),
                               tpu_b_broadcast_in_dim(b, k, ia.rank, ia.dims, NULL));
  return tpu_b_select(b, at, tpu_mx_bcast_batch(b, v, &a), x);
}

tpu_val_t tpu_mx_all_finite(tpu_builder_t* b, tpu_val_t A) {
  tpu_val_t f = tpu_dtype_is_complex(tpu_b_dtype(b, A))
                    ? tpu_b_binary(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.is_finite", tpu_ops_part(b, A, false)),
                                   tpu_b_unary(b, "stablehlo.is_finite", tpu_ops_part(b, A, true)))
                    : tpu_b_unary(b, "stablehlo.is_finite", A);
  tpu_val_t fin = tpu_b_convert(b, f, TPU_I32);
  int64_t d[TPU_MAX_RANK];
  int r = tpu_b_rank(b, A);
  for (int i = 0; i < r; i++) d[i] = i;
  tpu_val_t all = tpu_b_reduce(b, fin, tpu_b_const_i(b, TPU_I32, 1), r, d, "stablehlo.minimum");
  return tpu_b_compare(b, "EQ", all, tpu_b_const_i(b, TPU_I32, 1));
}

void tpu_mx_check_finite(tpu_builder_t* b, tpu_op_t* op, tpu_val_t A, const char* api) {
  tpu_op_check(b, op, tpu_b_unary(b, "stablehlo.not", tpu_mx_all_finite(b, A)), TPU_NOVAL, TPU_LINALG_ERROR,
               "%s: The algorithm failed to converge because the input matrix contained non-finite values.", api);
}

void tpu_mx_check_info(tpu_builder_t* b, tpu_op_t* op, tpu_val_t info, tpu_status_code_t code, const char* message) {
  tpu_val_t order = info;
  if (tpu_b_rank(b, info) > 0) { /* the first nonzero info: the largest of (nonzero) - position */
    tpu_aval_t ia = *tpu_b_aval(b, info);
    tpu_val_t flat = tpu_b_reshape(b, info, 1, (int64_t[]){tpu_aval_numel(&ia)});
    tpu_aval_t fa = *tpu_b_aval(b, flat);
    tpu_val_t from_end =
        tpu_b_binary(b, "stablehlo.subtract", tpu_b_full(b, &fa, (double)fa.dims[0]), tpu_b_iota(b, &fa, 0));
    tpu_val_t key = tpu_b_select(b, tpu_b_compare(b, "NE", flat, tpu_b_full(b, &fa, 0.0)), from_end,
                                 tpu_b_full(b, &fa, 0.0));
    int64_t d0 = 0;
    tpu_val_t best = tpu_b_reduce(b, key, tpu_b_const_i(b, TPU_I32, 0), 1, &d0, "stablehlo.maximum");
    tpu_val_t hit = tpu_b_compare(b, "EQ", key, tpu_b_broadcast_in_dim(b, best, 1, fa.dims, NULL));
    order = tpu_b_reduce(b, tpu_b_select(b, hit, flat, tpu_b_full(b, &fa, 0.0)), tpu_b_const_i(b, TPU_I32, 0), 1,
                         &d0, "stablehlo.maximum");
  }
  tpu_val_t bad = tpu_b_compare(b, "NE", order, tpu_b_const_i(b, TPU_I32, 0));
  tpu_op_check(b, op, bad, tpu_b_convert(b, order, TPU_I64), code, "%s", message);
}

tpu_val_t tpu_mx_pad1(tpu_builder_t* b, tpu_val_t x, bool corner_one) {
  tpu_aval_t m = *tpu_b_aval(b, x);
  int r = m.rank;
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
  hi[r - 2] = hi[r - 1] = 1;
  x = tpu_b_pad(b, x, tpu_b_const(b, m.dtype, 0), lo, hi, NULL);
  if (!corner_one) return x;
  tpu_aval_t p = *tpu_b_aval(b, x), ip = tpu_mx_retype(&p, TPU_I32);
  tpu_val_t last = tpu_b_full(b, &ip, (double)m.dims[r - 1]);
  tpu_val_t corner = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "EQ", tpu_b_iota(b, &ip, r - 2), last),
                                  tpu_b_compare(b, "EQ", tpu_b_iota(b, &ip, r - 1), last));
  return tpu_b_select(b, corner, tpu_b_full(b, &p, 1), x);
}

tpu_val_t tpu_mx_eye(tpu_builder_t* b, const tpu_aval_t* m) {
  tpu_aval_t im = tpu_mx_retype(m, TPU_I32);
  tpu_val_t on = tpu_b_compare(b, "EQ", tpu_b_iota(b, &im, m->rank - 2), tpu_b_iota(b, &im, m->rank - 1));
  return tpu_b_convert(b, on, m->dtype);
}

tpu_val_t tpu_mx_matmul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  int r = tpu_b_rank(b, x);
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  int64_t xc = r - 1, yc = r - 2;
  return tpu_b_dot_general(b, x, y, r - 2, bd, bd, 1, &xc, &yc, tpu_b_dtype(b, x));
}

tpu_val_t tpu_mx_tri_pred(tpu_builder_t* b, const tpu_aval_t* shape, bool lower) {
  tpu_aval_t ia = tpu_mx_retype(shape, TPU_I64);
  tpu_val_t row = tpu_b_iota(b, &ia, ia.rank - 2), col = tpu_b_iota(b, &ia, ia.rank - 1);
  return tpu_b_compare(b, lower ? "GE" : "LE", row, col);
}

tpu_val_t tpu_mx_slice(tpu_builder_t* b, tpu_val_t x, int dim, int64_t lo, int64_t hi) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
  for (int i = 0; i < a.rank; i++) limit[i] = a.dims[i];
  start[dim] = lo;
  limit[dim] = hi;
  return tpu_b_slice(b, x, start, limit, NULL);
}

tpu_val_t tpu_mx_sum(tpu_builder_t* b, tpu_val_t x, int dim) {
  int64_t d = dim;
  return tpu_b_reduce(b, x, tpu_b_const(b, tpu_b_dtype(b, x), 0), 1, &d, "stablehlo.add");
}

tpu_val_t tpu_mx_block(tpu_builder_t* b, tpu_val_t x, int64_t rows, int64_t cols) {
  int r = tpu_b_rank(b, x);
  return tpu_mx_slice(b, tpu_mx_slice(b, x, r - 2, 0, rows), r - 1, 0, cols);
}

tpu_val_t tpu_mx_any(tpu_builder_t* b, tpu_val_t m) {
  int rank = tpu_b_rank(b, m);
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = i;
  return rank ? tpu_b_reduce(b, m, tpu_b_const_i(b, TPU_BOOL, 0), rank, dims, "stablehlo.or") : m;
}

tpu_val_t tpu_mx_any_outside(tpu_builder_t* b, tpu_val_t x, double lo, double hi) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_val_t in = tpu_b_compare(b, "GE", x, tpu_b_full(b, &a, lo));
  if (hi < INFINITY) in = tpu_b_binary(b, "stablehlo.and", in, tpu_b_compare(b, "LE", x, tpu_b_full(b, &a, hi)));
  return tpu_mx_any(b, tpu_b_unary(b, "stablehlo.not", in));
}

bool tpu_mx_check_input(tpu_builder_t* b, const tpu_aval_t* a, const char* api, const char* half_kernel,
                        bool square) {
  const char* name = tpu_dtype_scalar_type_name(a->dtype);
  if (a->dtype == TPU_C64 || a->dtype == TPU_C128) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: complex inputs are not supported on tpu yet", api);
    return false;
  }
  if ((a->dtype == TPU_F16 || a->dtype == TPU_BF16) && half_kernel) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", half_kernel, name);
    return false;
  }
  if (a->dtype == TPU_F16 || a->dtype == TPU_BF16) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Low precision dtypes not supported. Got %s", api, name);
    return false;
  }
  if (a->dtype != TPU_F32 && a->dtype != TPU_F64) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected a floating point or complex tensor as input. Got %s", api, name);
    return false;
  }
  if (a->rank < 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: The input tensor A must have at least 2 dimensions.", api);
    return false;
  }
  if (square && a->dims[a->rank - 1] != a->dims[a->rank - 2]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: A must be batches of square matrices, but they are %" PRId64 " by %" PRId64
               " matrices", api, a->dims[a->rank - 2], a->dims[a->rank - 1]);
    return false;
  }
  return true;
}

tpu_val_t tpu_mx_trisolve(tpu_builder_t* b, tpu_val_t a, tpu_val_t rhs, bool left, bool lower, bool unit,
                          tpu_mx_op_t op) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t ra = *tpu_b_aval(b, rhs);
  if (tpu_aval_numel(&ra) == 0) return rhs; /* nothing to solve */
  static const char* const names[TPU_MX_OP_COUNT] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  if (op == TPU_MX_H && !tpu_dtype_is_complex(ra.dtype)) op = TPU_MX_T;
  char attrs[256];
  snprintf(attrs, sizeof(attrs),
           "left_side = %s, lower = %s, unit_diagonal = %s, transpose_a = #stablehlo<transpose %s>",
           left ? "true" : "false", lower ? "true" : "false", unit ? "true" : "false", names[op]);
  tpu_val_t ins[2] = {a, rhs};
  return tpu_b_op1(b, "stablehlo.triangular_solve", 2, ins, attrs, &ra);
}
