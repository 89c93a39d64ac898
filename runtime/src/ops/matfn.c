/* Lowerings: matrix functions (linalg_matrix_exp).
 *
 * matrix_exp: scaling and squaring with a degree-18 Taylor polynomial,
 * exp(A) = T18(A / 2^s)^(2^s), per batch element:
 *  - s = max(0, ceil(log2(||A||_1 / theta))), computed on the device from the
 *    data; 2^-s is built from its exponent bits, so the scaling is exact.
 *  - theta bounds the truncation error: for ||X||_1 <= theta the Taylor
 *    remainder is <= theta^19 / 19! (1 + theta/20 + ...), relative to
 *    ||exp(X)|| >= exp(-theta). theta = 1 (float64: 8.2e-18 / e^-1 = 2.2e-17,
 *    under the unit roundoff 1.1e-16) and theta = 2 (float32 and the half
 *    types, computed in float32: 4.3e-12 / e^-2 = 3e-11, far under 6e-8);
 *    complex128 and complex64 as float64 and float32, with the norm of the
 *    magnitudes.
 *    A Taylor polynomial needs no linear solve (a Pade approximant would), and
 *    degree 18 is the one PyTorch's CPU kernel tops out at.
 *  - T18 by Paterson-Stockmeyer in X^6: X^2 .. X^6 (5 products) then
 *    T = B0 + X^6 (B1 + X^6 (B2 + c18 X^6)), B_j = sum_{i<6} X^i / (6j+i)!,
 *    7 matrix products in all.
 *  - the squarings run in a while loop to the largest s of the batch; element b
 *    is squared only while k < s_b. Shapes stay static. */
#include "matrix.h"

#include <math.h>

static tpu_val_t mf_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_b_binary(b, "stablehlo.multiply", x, y);
}
static tpu_val_t mf_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.add", x, y); }
/* c * x for a constant c. */
static tpu_val_t mf_scale(tpu_builder_t* b, tpu_val_t x, double c) {
  return mf_mul(b, x, tpu_b_full(b, tpu_b_aval(b, x), c));
}

/* sum_{i<6} X^i / (j0 + i)!, P[i] = X^i (P[0] = I). */
static tpu_val_t tpu_matfn_block(tpu_builder_t* b, const tpu_val_t* P, int j0) {
  double f = 1;
  for (int i = 2; i <= j0; i++) f *= i;
  tpu_val_t acc = mf_scale(b, P[0], 1 / f);
  for (int i = 1; i < 6; i++) {
    f *= j0 + i;
    acc = mf_add(b, acc, mf_scale(b, P[i], 1 / f));
  }
  return acc;
}

/* The degree-18 Taylor polynomial of exp at X. */
static tpu_val_t tpu_matfn_taylor18(tpu_builder_t* b, tpu_val_t X) {
  tpu_val_t P[7];
  P[0] = tpu_mx_eye(b, tpu_b_aval(b, X));
  P[1] = X;
  P[2] = tpu_mx_matmul(b, X, X);
  P[3] = tpu_mx_matmul(b, P[2], X);
  P[4] = tpu_mx_matmul(b, P[2], P[2]);
  P[5] = tpu_mx_matmul(b, P[4], X);
  P[6] = tpu_mx_matmul(b, P[3], P[3]);
  double f18 = 1;
  for (int i = 2; i <= 18; i++) f18 *= i;
  tpu_val_t inner = mf_add(b, tpu_matfn_block(b, P, 12), mf_scale(b, P[6], 1 / f18));
  inner = mf_add(b, tpu_matfn_block(b, P, 6), tpu_mx_matmul(b, P[6], inner));
  return mf_add(b, tpu_matfn_block(b, P, 0), tpu_mx_matmul(b, P[6], inner));
}

/* Carry: R (batch..., n, n), s (batch...) i32: R squared where k < s. */
static void tpu_matfn_square(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_aval_t ra = *tpu_b_aval(b, in[0]), sa = *tpu_b_aval(b, in[1]);
  tpu_val_t go = tpu_b_compare(b, "LT", tpu_b_broadcast_in_dim(b, k, sa.rank, sa.dims, NULL), in[1]);
  tpu_aval_t pa = tpu_mx_retype(&ra, TPU_BOOL);
  out[0] = tpu_b_select(b, tpu_mx_bcast_batch(b, go, &pa), tpu_mx_matmul(b, in[0], in[0]), in[0]);
  out[1] = in[1];
}

static tpu_val_t tpu_matfn_more_squarings(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx;
  int64_t d[TPU_MAX_RANK];
  int r = tpu_b_rank(b, in[1]);
  for (int i = 0; i < r; i++) d[i] = i;
  tpu_val_t smax = tpu_b_reduce(b, in[1], tpu_b_const_i(b, TPU_I32, 0), r, d, "stablehlo.maximum");
  return tpu_b_compare(b, "LT", k, smax);
}

/* The real dtype of A's entries' magnitudes. */
static tpu_dtype_t tpu_matfn_real(tpu_dtype_t t) {
  return t == TPU_C128 ? TPU_F64 : t == TPU_C64 ? TPU_F32 : t;
}

/* s per batch element (0-d per matrix, i32) and 2^-s (the real dtype of A's parts). */
static void tpu_matfn_scaling(tpu_builder_t* b, tpu_val_t A, double theta, tpu_val_t* s, tpu_val_t* pow2) {
  tpu_aval_t a = *tpu_b_aval(b, A);
  a.dtype = tpu_matfn_real(a.dtype);
  tpu_aval_t ba = tpu_mx_drop(&a, 2);
  int r = a.rank;
  bool f64 = a.dtype == TPU_F64;
  double smax = f64 ? 1000 : 120; /* 2^-smax stays a normal number */
  int64_t rows = r - 2, cols = r - 2; /* column sums, then their max */
  tpu_val_t colsum = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.abs", A), tpu_b_const(b, a.dtype, 0), 1, &rows,
                                  "stablehlo.add");
  tpu_val_t nrm = tpu_b_reduce(b, colsum, tpu_b_const(b, a.dtype, 0), 1, &cols, "stablehlo.maximum");
  tpu_val_t l2 = mf_scale(b, tpu_b_unary(b, "stablehlo.log", mf_scale(b, nrm, 1 / theta)), 1 / log(2.0));
  tpu_val_t sf = tpu_b_unary(b, "stablehlo.ceil", l2);
  sf = tpu_b_select(b, tpu_b_compare(b, "GT", sf, tpu_b_full(b, &ba, 0)), sf, tpu_b_full(b, &ba, 0)); /* NaN: 0 */
  sf = tpu_b_binary(b, "stablehlo.minimum", sf, tpu_b_full(b, &ba, smax));
  tpu_dtype_t it = f64 ? TPU_I64 : TPU_I32;
  tpu_aval_t ia = tpu_mx_retype(&ba, it);
  tpu_val_t si = tpu_b_convert(b, sf, it);
  tpu_val_t bits = tpu_b_binary(b, "stablehlo.shift_left",
                                tpu_b_binary(b, "stablehlo.subtract", tpu_b_full(b, &ia, f64 ? 1023 : 127), si),
                                tpu_b_full(b, &ia, f64 ? 52 : 23));
  *pow2 = tpu_b_bitcast(b, bits, &ba);
  *s = tpu_b_convert(b, si, TPU_I32);
}

/* exp(A) for A (batch..., n, n) of dtype f32, f64, c64 or c128 (the same
 * series and squarings; the scaling from the magnitudes' norm). */
static tpu_val_t tpu_matfn_exp(tpu_builder_t* b, tpu_val_t A) {
  tpu_aval_t a = *tpu_b_aval(b, A);
  if (a.dims[a.rank - 1] == 0) return A;
  bool f64 = tpu_matfn_real(a.dtype) == TPU_F64;
  tpu_val_t s, pow2;
  tpu_matfn_scaling(b, A, f64 ? 1.0 : 2.0, &s, &pow2);
  if (tpu_dtype_is_complex(a.dtype)) pow2 = tpu_ops_complex(b, pow2, tpu_b_full(b, tpu_b_aval(b, pow2), 0));
  tpu_val_t X = mf_mul(b, A, tpu_mx_bcast_batch(b, pow2, &a));
  tpu_val_t init[2] = {tpu_matfn_taylor18(b, X), s}, res[2];
  tpu_mx_while(b, f64 ? 1000 : 120, 2, init, tpu_matfn_more_squarings, tpu_matfn_square, NULL, res, NULL);
  return res[0];
}

/* linalg_matrix_exp(A) -> Tensor */
static tpu_status_t* tpu_lower_linalg_matrix_exp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                 int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_dtype_is_float(a.dtype) && !tpu_dtype_is_complex(a.dtype))
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "linalg.matrix_exp: Expected a floating point or complex tensor as input. Got %s",
                      tpu_dtype_scalar_type_name(a.dtype));
  if (a.rank < 2)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.matrix_exp: The input tensor A must have at least 2 dimensions.");
  if (a.dims[a.rank - 1] != a.dims[a.rank - 2])
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "linalg.matrix_exp: A must be batches of square matrices, but they are %" PRId64 " by %" PRId64
                      " matrices",
                      a.dims[a.rank - 2], a.dims[a.rank - 1]);
  tpu_dtype_t ct = tpu_dtype_is_complex(a.dtype) || a.dtype == TPU_F64 ? a.dtype : TPU_F32; /* f16/bf16 in f32, like ATen */
  tpu_val_t A = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  return tpu_ops_result1(tpu_b_convert(b, tpu_matfn_exp(b, A), a.dtype), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_matfn[] = {
    {"linalg_matrix_exp", tpu_lower_linalg_matrix_exp},
    {NULL, NULL},
};
