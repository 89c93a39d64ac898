/* Lowerings: orthogonal polynomials (special_*_polynomial_*): Chebyshev T, U, V,
 * W and their shifted forms, Hermite H and He, Laguerre L, Legendre P.
 *
 * Each op takes (x, n) as Tensor-Tensor, Scalar-Tensor or Tensor-Scalar with
 * PyTorch's float promotion. The values follow ATen's CPU kernels (Math.h) step
 * for step: n is truncated to an integer (NaN, inf and values outside int64 give
 * a negative degree, so 0, as the x86 conversion ATen relies on does); then, in
 * ATen's order, n < 0 → 0, the closed forms at the interval ends, the Chebyshev
 * trig forms (|y| < 1 and n above a per-op threshold), n == 0, n == 1, and else
 * the three-term recurrence, which stops at n or once its value is NaN.
 *
 * The recurrence runs for all elements together as one stablehlo.while whose
 * counter j goes 2, 3, ...; an element takes step j only while j <= its n, and
 * the loop ends when no element that still needs the recurrence (not taken by a
 * special case, j <= n, value not NaN) is left, so its trip count is the largest
 * such n, found on the device. Elements that stopped at NaN would only stay NaN.
 * Hermite has ATen's cap (n > 128 for float, 512 for double → NaN); the others
 * have none, apart from the loop's 32-bit counter (2^31 - 3 steps). */
#include <stdint.h>
#include <string.h>

#include "matrix.h"
#include "special.h"

typedef enum { PL_T, PL_U, PL_V, PL_W, PL_H, PL_HE, PL_L, PL_P } pl_family_t;

typedef struct pl_poly {
  const char* name;   /* aten base name */
  const char* kernel; /* PyTorch's CPU kernel, named in dtype errors */
  pl_family_t fam;
  bool shifted; /* Chebyshev in y = 2x - 1, its ends at x = 1 and x = 0 */
  int trig_n;   /* Chebyshev: n above which |y| < 1 takes the trig form */
} pl_poly_t;

static const pl_poly_t pl_polys[] = {
    {"special_chebyshev_polynomial_t", "chebyshev_polynomial_t_cpu", PL_T, false, 6},
    {"special_chebyshev_polynomial_u", "chebyshev_polynomial_u_cpu", PL_U, false, 8},
    {"special_chebyshev_polynomial_v", "chebyshev_polynomial_v_cpu", PL_V, false, 8},
    {"special_chebyshev_polynomial_w", "chebyshev_polynomial_w_cpu", PL_W, false, 8},
    {"special_shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_t_cpu", PL_T, true, 6},
    {"special_shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_u_cpu", PL_U, true, 6},
    {"special_shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_v_cpu", PL_V, true, 6},
    {"special_shifted_chebyshev_polynomial_w", "shifted_chebyshev_polynomial_w_cpu", PL_W, true, 4},
    {"special_hermite_polynomial_h", "hermite_polynomial_h_cpu", PL_H, false, 0},
    {"special_hermite_polynomial_he", "hermite_polynomial_he_cpu", PL_HE, false, 0},
    {"special_laguerre_polynomial_l", "laguerre_polynomial_l_cpu", PL_L, false, 0},
    {"special_legendre_polynomial_p", "legendre_polynomial_p_cpu", PL_P, false, 0},
};

static bool pl_is_chebyshev(pl_family_t f) { return f == PL_T || f == PL_U || f == PL_V || f == PL_W; }

/* The integer degree (i64) of n (compute dtype): truncated toward zero; NaN,
 * inf and values outside int64 become -1 (x86 turns them into INT64_MIN). */
static tpu_val_t pl_degree(tpu_builder_t* b, tpu_val_t n) {
  const double lim = 9223372036854775808.0; /* 2^63, exact in f32 and f64 */
  tpu_val_t ok = sp_and(b, sp_cmpc(b, "GE", n, -lim), sp_cmpc(b, "LT", n, lim));
  tpu_val_t safe = sp_sel(b, ok, n, sp_c(b, n, -1.0));
  return tpu_b_convert(b, safe, TPU_I64);
}

/* The integer k (i64, 0-d) as a constant-dtype value shaped like `like`. */
static tpu_val_t pl_coef(tpu_builder_t* b, tpu_val_t k, tpu_val_t like) {
  tpu_aval_t a = *tpu_b_aval(b, like); /* a copy: converting k may move the builder's avals */
  return tpu_b_broadcast_to(b, tpu_b_convert(b, k, a.dtype), a.rank, a.dims);
}
static tpu_val_t pl_i64(tpu_builder_t* b, int64_t v) { return tpu_b_const_i(b, TPU_I64, v); }

/* The value at n == 1 (the recurrence's second term); z is y for Chebyshev. */
static tpu_val_t pl_first(tpu_builder_t* b, pl_family_t f, tpu_val_t z) {
  switch (f) {
    case PL_T: return z;
    case PL_U: return sp_add(b, z, z);
    case PL_V: return sp_sub(b, sp_add(b, z, z), sp_c(b, z, 1.0));
    case PL_W: return sp_add(b, sp_add(b, z, z), sp_c(b, z, 1.0));
    case PL_H: return sp_add(b, z, z);
    case PL_HE: return z;
    case PL_L: return sp_sub(b, sp_c(b, z, 1.0), z);
    case PL_P: return z;
  }
  return TPU_NOVAL;
}

/* Step j (i64, 0-d) of the recurrence: the value at degree j from p (degree j-2)
 * and q (degree j-1), with ATen's operation order. ATen's 1-based loops use
 * k = j - 1. */
static tpu_val_t pl_step(tpu_builder_t* b, pl_family_t f, tpu_val_t z, tpu_val_t j, tpu_val_t p, tpu_val_t q) {
  tpu_val_t k = tpu_b_binary(b, "stablehlo.subtract", j, pl_i64(b, 1));
  tpu_val_t kk = tpu_b_binary(b, "stablehlo.add", k, k);
  tpu_val_t k1 = pl_coef(b, j, z);
  switch (f) {
    case PL_T:
    case PL_U:
    case PL_V:
    case PL_W: return sp_sub(b, sp_mul(b, sp_add(b, z, z), q), p);
    case PL_H: return sp_sub(b, sp_mul(b, sp_add(b, z, z), q), sp_mul(b, pl_coef(b, kk, z), p));
    case PL_HE: return sp_sub(b, sp_mul(b, z, q), sp_mul(b, pl_coef(b, k, z), p));
    case PL_L: {
      tpu_val_t a = sp_add(b, pl_coef(b, kk, z), sp_sub(b, sp_c(b, z, 1.0), z));
      return sp_div(b, sp_sub(b, sp_mul(b, a, q), sp_mul(b, pl_coef(b, k, z), p)), k1);
    }
    case PL_P: {
      tpu_val_t a = sp_mul(b, pl_coef(b, tpu_b_binary(b, "stablehlo.add", kk, pl_i64(b, 1)), z), z);
      return sp_div(b, sp_sub(b, sp_mul(b, a, q), sp_mul(b, pl_coef(b, k, z), p)), k1);
    }
  }
  return TPU_NOVAL;
}

/* ------------------------------------------------------------ the loop */

/* Carried: p, q, z, the per-element degree to run to (0 where a special case
 * takes the element). */
enum { PL_CP, PL_CQ, PL_CZ, PL_CN, PL_NCARRY };

static tpu_val_t pl_step_index(tpu_builder_t* b, tpu_val_t k) {
  return tpu_b_binary(b, "stablehlo.add", tpu_b_convert(b, k, TPU_I64), pl_i64(b, 2));
}

/* j <= n per element. */
static tpu_val_t pl_running(tpu_builder_t* b, tpu_val_t j, tpu_val_t n) {
  const tpu_aval_t a = *tpu_b_aval(b, n); /* a copy: new values move the table */
  return tpu_b_compare(b, "LE", tpu_b_broadcast_to(b, j, a.rank, a.dims), n);
}

static tpu_val_t pl_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx;
  tpu_val_t live = pl_running(b, pl_step_index(b, k), in[PL_CN]);
  live = sp_and(b, live, tpu_b_compare(b, "EQ", in[PL_CQ], in[PL_CQ]));
  int64_t numel = tpu_aval_numel(tpu_b_aval(b, live)), d0 = 0;
  live = tpu_b_reshape(b, live, 1, &numel);
  return tpu_b_reduce(b, live, tpu_b_const_i(b, TPU_BOOL, 0), 1, &d0, "stablehlo.or");
}

static void pl_body(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  const pl_poly_t* d = ctx;
  tpu_val_t j = pl_step_index(b, k);
  tpu_val_t r = pl_step(b, d->fam, in[PL_CZ], j, in[PL_CP], in[PL_CQ]);
  tpu_val_t m = pl_running(b, j, in[PL_CN]);
  out[PL_CP] = sp_sel(b, m, in[PL_CQ], in[PL_CP]);
  out[PL_CQ] = sp_sel(b, m, r, in[PL_CQ]);
  out[PL_CZ] = in[PL_CZ];
  out[PL_CN] = in[PL_CN];
}

/* The recurrence's value at degree n (>= 1; q0 where n <= 1), run only where
 * `done` is false. */
static tpu_val_t pl_recurrence(tpu_builder_t* b, const pl_poly_t* d, tpu_val_t z, tpu_val_t n, tpu_val_t done) {
  tpu_val_t init[PL_NCARRY], outs[PL_NCARRY];
  init[PL_CP] = sp_c(b, z, 1.0);
  init[PL_CQ] = pl_first(b, d->fam, z);
  init[PL_CZ] = z;
  init[PL_CN] = sp_sel(b, done, sp_c(b, n, 0.0), n);
  tpu_mx_while(b, INT32_MAX - 2, PL_NCARRY, init, pl_cond, pl_body, (void*)d, outs, NULL);
  return outs[PL_CQ];
}

/* ------------------------------------------------------- special cases */

/* Closed forms of a Chebyshev family in terms of the degree (ct values n1 =
 * n + 1, n21 = 2n + 1 and the parity sign (-1)^n). */
typedef struct pl_ends {
  tpu_val_t n, n1, n21, sgn;
} pl_ends_t;

static pl_ends_t pl_ends_make(tpu_builder_t* b, tpu_val_t n, tpu_val_t like) {
  pl_ends_t e;
  tpu_val_t one = sp_c(b, n, 1.0);
  e.n = tpu_b_convert(b, n, tpu_b_dtype(b, like));
  e.n1 = tpu_b_convert(b, sp_add(b, n, one), tpu_b_dtype(b, like));
  e.n21 = tpu_b_convert(b, sp_add(b, sp_add(b, n, n), one), tpu_b_dtype(b, like));
  tpu_val_t odd = tpu_b_compare(b, "EQ", tpu_b_binary(b, "stablehlo.and", n, one), one);
  e.sgn = sp_sel(b, odd, sp_c(b, like, -1.0), sp_c(b, like, 1.0));
  return e;
}

/* The value at the end y = 1 (pos) or y = -1. */
static tpu_val_t pl_end_value(tpu_builder_t* b, pl_family_t f, const pl_ends_t* e, bool pos) {
  switch (f) {
    case PL_T: return pos ? sp_c(b, e->sgn, 1.0) : e->sgn;
    case PL_U: return pos ? e->n1 : sp_mul(b, e->sgn, e->n1);
    case PL_V: return pos ? sp_c(b, e->sgn, 1.0) : sp_mul(b, e->sgn, e->n21);
    case PL_W: return pos ? e->n21 : e->sgn;
    default: return TPU_NOVAL;
  }
}

/* ATen's trig forms for |y| < 1, theta = acos(y), with their fallbacks where a
 * denominator rounds to 0 (exactly ATen's tests). */
static tpu_val_t pl_trig(tpu_builder_t* b, const pl_poly_t* d, tpu_val_t y, const pl_ends_t* e) {
  tpu_val_t th = sp_un(b, "chlo.acos", y);
  tpu_val_t half = sp_mul(b, th, sp_c(b, th, 0.5));
  tpu_val_t nh = sp_mul(b, sp_add(b, e->n, sp_c(b, y, 0.5)), th);
  switch (d->fam) {
    case PL_T: return sp_un(b, "stablehlo.cosine", sp_mul(b, e->n, th));
    case PL_U: {
      tpu_val_t s = sp_un(b, "stablehlo.sine", th), a = sp_mul(b, e->n1, th);
      tpu_val_t alt = sp_div(b, sp_mul(b, e->n1, sp_un(b, "stablehlo.cosine", a)), y);
      return sp_sel(b, sp_cmpc(b, "NE", s, 0.0), sp_div(b, sp_un(b, "stablehlo.sine", a), s), alt);
    }
    case PL_V: {
      tpu_val_t v = sp_div(b, sp_un(b, "stablehlo.cosine", nh), sp_un(b, "stablehlo.cosine", half));
      return sp_sel(b, sp_cmpc(b, "NE", sp_un(b, "stablehlo.sine", half), 1.0), v, pl_end_value(b, PL_V, e, false));
    }
    case PL_W: {
      tpu_val_t v = sp_div(b, sp_un(b, "stablehlo.sine", nh), sp_un(b, "stablehlo.sine", half));
      tpu_val_t alt = pl_end_value(b, PL_W, e, false);
      if (!d->shifted) alt = sp_sel(b, sp_cmpc(b, "GT", y, 0.0), pl_end_value(b, PL_W, e, true), alt);
      return sp_sel(b, sp_cmpc(b, "NE", sp_un(b, "stablehlo.cosine", half), 1.0), v, alt);
    }
    default: return TPU_NOVAL;
  }
}

/* A Chebyshev family at (x, n): y = x, or 2x - 1 shifted. */
static tpu_val_t pl_chebyshev(tpu_builder_t* b, const pl_poly_t* d, tpu_val_t x, tpu_val_t n) {
  tpu_val_t y = d->shifted ? sp_sub(b, sp_add(b, x, x), sp_c(b, x, 1.0)) : x;
  pl_ends_t e = pl_ends_make(b, n, x);
  tpu_val_t neg = sp_cmpc(b, "LT", n, 0.0);
  tpu_val_t at_pos = sp_cmpc(b, "EQ", x, 1.0);
  tpu_val_t at_neg = sp_cmpc(b, "EQ", x, d->shifted ? 0.0 : -1.0);
  tpu_val_t trig = sp_and(b, sp_cmpc(b, "GT", n, (double)d->trig_n), sp_cmpc(b, "LT", sp_abs(b, y), 1.0));
  tpu_val_t done = sp_or(b, sp_or(b, neg, trig), sp_or(b, at_pos, at_neg));
  tpu_val_t v = pl_recurrence(b, d, y, n, done);
  v = sp_sel(b, sp_cmpc(b, "EQ", n, 0.0), sp_c(b, x, 1.0), v);
  v = sp_sel(b, trig, pl_trig(b, d, y, &e), v);
  v = sp_sel(b, at_neg, pl_end_value(b, d->fam, &e, false), v);
  v = sp_sel(b, at_pos, pl_end_value(b, d->fam, &e, true), v);
  return sp_sel(b, neg, sp_c(b, x, 0.0), v);
}

/* Hermite, Laguerre, Legendre at (x, n). */
static tpu_val_t pl_classical(tpu_builder_t* b, const pl_poly_t* d, tpu_val_t x, tpu_val_t n) {
  tpu_val_t neg = sp_cmpc(b, "LT", n, 0.0), one = sp_c(b, x, 1.0);
  tpu_val_t edge = neg, edge_v = one;
  bool hermite = d->fam == PL_H || d->fam == PL_HE;
  if (hermite) {
    edge = sp_cmpc(b, "GT", n, tpu_b_dtype(b, x) == TPU_F64 ? 512.0 : 128.0);
    edge_v = sp_c(b, x, NAN);
  } else if (d->fam == PL_L) {
    edge = sp_cmpc(b, "EQ", x, 0.0);
  } else {
    edge = sp_cmpc(b, "EQ", sp_abs(b, x), 1.0);
    tpu_val_t plus = sp_or(b, sp_cmpc(b, "GT", x, 0.0), sp_cmpc(b, "EQ", pl_ends_make(b, n, x).sgn, 1.0));
    edge_v = sp_sel(b, plus, one, sp_c(b, x, -1.0));
  }
  tpu_val_t v = pl_recurrence(b, d, x, n, sp_or(b, neg, edge));
  if (hermite) v = sp_sel(b, edge, edge_v, v); /* after n == 0 and 1 in ATen, never both */
  v = sp_sel(b, sp_cmpc(b, "EQ", n, 0.0), one, v);
  if (!hermite) v = sp_sel(b, edge, edge_v, v);
  return sp_sel(b, neg, sp_c(b, x, 0.0), v);
}

/* ------------------------------------------------------------ lowering */

static tpu_status_t* tpu_lower_polynomial(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  const char* name = tpu_op_name(op);
  const pl_poly_t* d = NULL;
  for (size_t i = 0; i < TPU_ARRAY_LEN(pl_polys) && !d; ++i)
    if (strcmp(pl_polys[i].name, name) == 0) d = &pl_polys[i];
  if (!d) return TPU_STATUS(TPU_INTERNAL, "polynomial: no row for %s", name);
  int args[2] = {0, 1};
  tpu_dtype_t common = tpu_ops_result_type(op, 2, args);
  if (!tpu_special_check_dtype(b, name, SP_NO_HALF, d->kernel, common)) return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t rt = tpu_dtype_to_float(common), ct = tpu_dtype_opmath(rt);
  shape.dtype = ct;
  tpu_val_t x = tpu_special_operand(b, op, 0, common, ct, &shape);
  tpu_val_t n = pl_degree(b, tpu_special_operand(b, op, 1, common, ct, &shape));
  if (!tpu_b_ok(b)) return NULL;
  tpu_val_t v = pl_is_chebyshev(d->fam) ? pl_chebyshev(b, d, x, n) : pl_classical(b, d, x, n);
  return tpu_ops_result1(tpu_b_convert(b, v, rt), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_polynomial[] = {
    {"special_chebyshev_polynomial_t", tpu_lower_polynomial},
    {"special_chebyshev_polynomial_u", tpu_lower_polynomial},
    {"special_chebyshev_polynomial_v", tpu_lower_polynomial},
    {"special_chebyshev_polynomial_w", tpu_lower_polynomial},
    {"special_shifted_chebyshev_polynomial_t", tpu_lower_polynomial},
    {"special_shifted_chebyshev_polynomial_u", tpu_lower_polynomial},
    {"special_shifted_chebyshev_polynomial_v", tpu_lower_polynomial},
    {"special_shifted_chebyshev_polynomial_w", tpu_lower_polynomial},
    {"special_hermite_polynomial_h", tpu_lower_polynomial},
    {"special_hermite_polynomial_he", tpu_lower_polynomial},
    {"special_laguerre_polynomial_l", tpu_lower_polynomial},
    {"special_legendre_polynomial_p", tpu_lower_polynomial},
    {NULL, NULL},
};
