/* Lowerings: sampling family — the samplers behind torch.distributions that
 * need rejection: _standard_gamma (Gamma, Beta, Chi2, StudentT ... sample),
 * _sample_dirichlet, poisson and binomial; and _standard_gamma_grad, the
 * gamma's reparameterized gradient (Gamma.rsample's backward).
 *
 * Each is a device while loop over the whole tensor: every iteration draws one
 * proposal per element that is still open and closes the accepted ones; the
 * generator's state is loop-carried, so the stream is the op's own (random.h).
 * The loop stops when every element is accepted (or at a cap far beyond what
 * the acceptance rates need: both samplers accept > 90% per draw, so the cap
 * is never the reason to stop in practice). Algorithms as PyTorch's CPU
 * kernels: Marsaglia-Tsang for the gamma (alpha < 1 boosted by U^(1/alpha)),
 * for poisson the product of uniforms below rate 10 and Hormann's PTRS
 * transformed rejection above, for binomial geometric jumps below a mean of
 * 10 and Hormann's BTRS above; the numbers themselves differ from CPU's. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "matrix.h"
#include "nn.h"
#include "random.h"
#include "special.h"

/* Far beyond the expected iteration counts (about 1.1 per element for the
 * gamma, up to ~30 for a poisson rate just under 10). */
#define TPU_SAMPLE_MAX_ITERS 100000

static tpu_val_t tpu_sm_c(tpu_builder_t* b, tpu_val_t like, double v) { return tpu_ops_like(b, like, v); }
static tpu_val_t tpu_sm_bin(tpu_builder_t* b, const char* hlo, tpu_val_t x, tpu_val_t y) {
  return tpu_b_binary(b, hlo, x, y);
}

static tpu_val_t tpu_sm_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx, (void)k;
  return tpu_mx_any(b, tpu_b_unary(b, "stablehlo.not", in[1]));
}

/* ------------------------------------------------------------------ gamma */

/* Marsaglia-Tsang for shape d + 1/3 >= 1: carry (state, done, value, d). */
static void tpu_gamma_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx, (void)k;
  tpu_rng_t g = {in[0]};
  tpu_val_t d = in[3];
  tpu_aval_t a = *tpu_b_aval(b, d);
  tpu_val_t x = tpu_rng_normal(b, &g, a.dtype, &a), u = tpu_rng_uniform_open(b, &g, a.dtype, &a);
  tpu_val_t c = tpu_b_unary(b, "stablehlo.rsqrt", tpu_nn_mulc(b, d, 9.0));
  tpu_val_t v = tpu_nn_addc(b, tpu_nn_mul(b, c, x), 1.0);
  v = tpu_nn_mul(b, v, tpu_nn_mul(b, v, v));
  /* accept when v > 0 and log u < x^2 / 2 + d - d v + d log v */
  tpu_val_t logv = tpu_b_unary(b, "stablehlo.log", tpu_sm_bin(b, "stablehlo.maximum", v, tpu_sm_c(b, v, FLT_MIN)));
  tpu_val_t rhs = tpu_nn_add(b, tpu_nn_mulc(b, tpu_nn_mul(b, x, x), 0.5),
                             tpu_nn_mul(b, d, tpu_nn_add(b, tpu_nn_sub(b, tpu_sm_c(b, d, 1.0), v), logv)));
  tpu_val_t ok = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GT", v, tpu_sm_c(b, v, 0.0)),
                            tpu_b_compare(b, "LT", tpu_b_unary(b, "stablehlo.log", u), rhs));
  tpu_val_t take = tpu_sm_bin(b, "stablehlo.and", ok, tpu_b_unary(b, "stablehlo.not", in[1]));
  out[0] = g.state;
  out[1] = tpu_sm_bin(b, "stablehlo.or", in[1], ok);
  out[2] = tpu_b_select(b, take, tpu_nn_mul(b, d, v), in[2]);
  out[3] = d;
}

/* Gamma(alpha, 1) samples of alpha's shape in ct (alpha in ct), as the CPU
 * kernel: at least the smallest normal float, alpha = inf gives inf, and alpha
 * <= 0 or NaN the smallest normal float too. */
static tpu_val_t tpu_sm_gamma(tpu_builder_t* b, tpu_rng_t* g, tpu_val_t alpha, double tiny) {
  tpu_aval_t a = *tpu_b_aval(b, alpha);
  tpu_val_t boost = tpu_b_compare(b, "LT", alpha, tpu_sm_c(b, alpha, 1.0));
  tpu_val_t shape = tpu_b_select(b, boost, tpu_nn_addc(b, alpha, 1.0), alpha);
  tpu_val_t valid = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GT", alpha, tpu_sm_c(b, alpha, 0.0)),
                               tpu_b_compare(b, "LT", alpha, tpu_sm_c(b, alpha, INFINITY)));
  tpu_val_t d = tpu_nn_addc(b, shape, -1.0 / 3.0);
  d = tpu_b_select(b, valid, d, tpu_sm_c(b, d, 1.0)); /* closed at once; any finite d */
  tpu_val_t init[4] = {g->state, tpu_b_unary(b, "stablehlo.not", valid), tpu_b_full(b, &a, 0.0), d}, res[4];
  tpu_mx_while(b, TPU_SAMPLE_MAX_ITERS, 4, init, tpu_sm_cond, tpu_gamma_step, NULL, res, NULL);
  g->state = res[0];
  /* alpha < 1: Gamma(alpha + 1) * U^(1 / alpha) */
  tpu_val_t u = tpu_rng_uniform_open(b, g, a.dtype, &a);
  tpu_val_t scale = tpu_b_unary(b, "stablehlo.exponential",
                                tpu_nn_div(b, tpu_b_unary(b, "stablehlo.log", u), alpha));
  tpu_val_t x = tpu_b_select(b, boost, tpu_nn_mul(b, res[2], scale), res[2]);
  x = tpu_b_select(b, tpu_b_compare(b, "EQ", alpha, tpu_sm_c(b, alpha, INFINITY)), tpu_sm_c(b, x, INFINITY), x);
  return tpu_sm_bin(b, "stablehlo.maximum", x, tpu_sm_c(b, x, tiny));
}

/* The smallest normal value of dtype t (the CPU kernels' lower clamp). */
static double tpu_sm_tiny(tpu_dtype_t t) {
  switch (t) {
    case TPU_F64: return DBL_MIN;
    case TPU_F16: return 6.103515625e-05;
    default: return FLT_MIN; /* f32, and bf16 (same exponent range) */
  }
}

/* A float self (arg 0), in its op-math type; else the CPU kernel's dtype error. */
static bool tpu_sm_float_arg(tpu_builder_t* b, tpu_op_t* op, const char* kernel, tpu_val_t* out_x) {
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  if (!tpu_dtype_is_float(t) || tpu_dtype_is_complex(t)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", kernel, tpu_dtype_scalar_type_name(t));
    return false;
  }
  *out_x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(t));
  return true;
}

/* _standard_gamma(self, generator=None): Gamma(self, 1) samples. */
static tpu_status_t* tpu_lower__standard_gamma(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_val_t alpha;
  if (!tpu_sm_float_arg(b, op, "gamma_cpu", &alpha)) return NULL;
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  tpu_rng_t g = tpu_rng_open(b, op);
  return tpu_ops_result1(tpu_b_convert(b, tpu_sm_gamma(b, &g, alpha, tpu_sm_tiny(t)), t), outs, nouts);
}

/* _sample_dirichlet(self, generator=None): Gamma(self) samples normalised over
 * the last dim. */
static tpu_status_t* tpu_lower__sample_dirichlet(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                 int* nouts) {
  (void)max_outs;
  tpu_val_t alpha;
  if (!tpu_sm_float_arg(b, op, "dirichlet", &alpha)) return NULL;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (a.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_sample_dirichlet: expected at least one dimension");
    return NULL;
  }
  tpu_rng_t g = tpu_rng_open(b, op);
  tpu_val_t x = tpu_sm_gamma(b, &g, alpha, tpu_sm_tiny(a.dtype));
  int64_t last = a.rank - 1, keep[TPU_MAX_RANK];
  for (int i = 0; i < a.rank - 1; i++) keep[i] = i;
  tpu_val_t sum = tpu_b_broadcast_in_dim(b, tpu_nn_sum(b, x, 1, &last), a.rank, a.dims, keep);
  return tpu_ops_result1(tpu_b_convert(b, tpu_nn_div(b, x, sum), a.dtype), outs, nouts);
}

/* --------------------------------------------- the gamma's reparameterization */

/* Series carry: (r_n, h_n, sum r_n, sum r_n h_n, x, alpha); see tpu_gamma_grad. */
static void tpu_gamma_grad_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_aval_t a = *tpu_b_aval(b, in[0]); /* a copy: the builder's avals move as it grows */
  tpu_val_t n = tpu_b_convert(b, tpu_nn_addc(b, tpu_b_convert(b, k, TPU_F64), 1.0), a.dtype);
  tpu_val_t an = tpu_nn_add(b, in[5], tpu_b_broadcast_in_dim(b, n, a.rank, a.dims, NULL));
  tpu_val_t r = tpu_nn_mul(b, in[0], tpu_nn_div(b, in[4], an));
  tpu_val_t h = tpu_nn_add(b, in[1], tpu_nn_div(b, tpu_sm_c(b, an, 1.0), an));
  out[0] = r;
  out[1] = h;
  out[2] = tpu_nn_add(b, in[2], r);
  out[3] = tpu_nn_add(b, in[3], tpu_nn_mul(b, r, h));
  out[4] = in[4];
  out[5] = in[5];
}

/* Until every term is below eps of its sum (the terms only shrink: x < alpha + 1). */
static tpu_val_t tpu_gamma_grad_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)k;
  double eps = *(const double*)ctx;
  tpu_val_t big = tpu_b_compare(b, "GT", in[0], tpu_nn_mulc(b, tpu_b_unary(b, "stablehlo.abs", in[2]), eps));
  return tpu_mx_any(b, big);
}

/* d x / d alpha for x ~ Gamma(alpha) at the sample x (implicit
 * reparameterization): -(dP(alpha, x) / d alpha) / pdf(x). For x < alpha + 1 the
 * series of P differentiated term by term, divided by the pdf in closed form:
 * -[(log x - psi(alpha + 1)) sum r_n - sum r_n h_n] with r_0 = x / alpha,
 * r_n = r_(n-1) x / (alpha + n), h_n = sum_(j <= n) 1 / (alpha + j). Above, a
 * central difference of Q = igammac (accurate relative to Q there) over the
 * pdf. Values in ct. */
static tpu_val_t tpu_gamma_grad(tpu_builder_t* b, tpu_val_t alpha, tpu_val_t x) {
  tpu_aval_t a = *tpu_b_aval(b, alpha);
  tpu_val_t near = tpu_b_compare(b, "LT", x, tpu_nn_addc(b, alpha, 1.0));
  /* series (inputs kept finite where it is not used) */
  tpu_val_t xs = tpu_b_select(b, near, x, tpu_sm_c(b, x, 0.5)), as = tpu_b_select(b, near, alpha, tpu_sm_c(b, x, 1.0));
  tpu_val_t r0 = tpu_nn_div(b, xs, as);
  tpu_val_t init[6] = {r0, tpu_b_full(b, &a, 0.0), r0, tpu_b_full(b, &a, 0.0), xs, as}, res[6];
  double eps = a.dtype == TPU_F64 ? 1e-17 : 1e-8;
  tpu_mx_while(b, TPU_SAMPLE_MAX_ITERS, 6, init, tpu_gamma_grad_cond, tpu_gamma_grad_step, &eps, res, NULL);
  tpu_val_t lead = tpu_nn_sub(b, tpu_b_unary(b, "stablehlo.log", xs), tpu_b_unary(b, "chlo.digamma", tpu_nn_addc(b, as, 1.0)));
  tpu_val_t series = tpu_nn_sub(b, res[3], tpu_nn_mul(b, lead, res[2]));
  /* central difference of Q, step 1% of min(alpha, sqrt alpha): Q's scale in alpha */
  tpu_val_t h = tpu_nn_mulc(b, tpu_sm_bin(b, "stablehlo.minimum", alpha, tpu_b_unary(b, "stablehlo.sqrt", alpha)), 0.01);
  tpu_val_t dq = tpu_nn_sub(b, tpu_special_igamma(b, tpu_nn_add(b, alpha, h), x, true),
                            tpu_special_igamma(b, tpu_nn_sub(b, alpha, h), x, true));
  tpu_val_t log_pdf = tpu_nn_sub(b, tpu_nn_sub(b, tpu_nn_mul(b, tpu_nn_addc(b, alpha, -1.0), tpu_b_unary(b, "stablehlo.log", x)), x),
                                 tpu_b_unary(b, "chlo.lgamma", alpha));
  tpu_val_t diff = tpu_nn_div(b, tpu_nn_div(b, dq, tpu_nn_mulc(b, h, 2.0)), tpu_b_unary(b, "stablehlo.exponential", log_pdf));
  return tpu_b_select(b, near, series, diff);
}

/* _standard_gamma_grad(self = alpha, output = the sample x): Gamma.rsample's
 * backward (autograd's formula for _standard_gamma). */
static tpu_status_t* tpu_lower__standard_gamma_grad(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                    int* nouts) {
  (void)max_outs;
  tpu_val_t alpha;
  if (!tpu_sm_float_arg(b, op, "_standard_gamma_grad_cpu", &alpha)) return NULL;
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  int args[2] = {0, 1};
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_val_t x = tpu_ops_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), tpu_b_dtype(b, alpha)), &shape);
  return tpu_ops_result1(tpu_b_convert(b, tpu_gamma_grad(b, tpu_ops_bcast(b, alpha, &shape), x), t), outs, nouts);
}

/* ---------------------------------------------------------------- poisson */

/* log P(X = k) for X ~ Poisson(lam), k >= 0 whole (or anything, rejected
 * later), lam >= 10. k log lam - lam - lgamma(k + 1) cancels terms of size
 * lam log lam, which f32 cannot hold for large rates; from k = 10 on it is
 * written with Stirling's series around k: (k - lam) - k log1p((k - lam) / lam)
 * - log(2 pi k) / 2 - 1 / (12 k) + 1 / (360 k^3), every term small. */
static tpu_val_t tpu_sm_log_poisson_pmf(tpu_builder_t* b, tpu_val_t k, tpu_val_t lam, tpu_val_t loglam) {
  tpu_val_t direct = tpu_nn_sub(b, tpu_nn_sub(b, tpu_nn_mul(b, k, loglam), lam),
                                tpu_b_unary(b, "chlo.lgamma", tpu_nn_addc(b, k, 1.0)));
  tpu_val_t ks = tpu_sm_bin(b, "stablehlo.maximum", k, tpu_sm_c(b, k, 10.0)); /* the series' domain */
  tpu_val_t d = tpu_nn_sub(b, ks, lam), inv = tpu_nn_div(b, tpu_sm_c(b, ks, 1.0), ks);
  tpu_val_t series = tpu_nn_sub(b, d, tpu_nn_mul(b, ks, tpu_b_unary(b, "stablehlo.log_plus_one", tpu_nn_div(b, d, lam))));
  series = tpu_nn_sub(b, series, tpu_nn_mulc(b, tpu_b_unary(b, "stablehlo.log", tpu_nn_mulc(b, ks, 6.28318530717958647692)), 0.5));
  tpu_val_t tail = tpu_nn_mul(b, inv, tpu_nn_sub(b, tpu_sm_c(b, inv, 1.0 / 12.0),
                                                 tpu_nn_mulc(b, tpu_nn_mul(b, inv, inv), 1.0 / 360.0)));
  series = tpu_nn_sub(b, series, tail);
  return tpu_b_select(b, tpu_b_compare(b, "LT", k, tpu_sm_c(b, k, 10.0)), direct, series);
}

/* One draw for every open element; carry (state, done, count, prod, lambda):
 * below rate 10 one factor of the product of uniforms (count the factors
 * while the product stays above e^-lambda), from 10 on one PTRS proposal. */
static void tpu_poisson_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx, (void)k;
  tpu_rng_t g = {in[0]};
  tpu_val_t lam = in[4], done = in[1];
  tpu_aval_t a = *tpu_b_aval(b, lam);
  tpu_val_t u0 = tpu_rng_uniform_open(b, &g, a.dtype, &a), v = tpu_rng_uniform_open(b, &g, a.dtype, &a);
  tpu_val_t small = tpu_b_compare(b, "LT", lam, tpu_sm_c(b, lam, 10.0));
  /* product of uniforms */
  tpu_val_t prod = tpu_nn_mul(b, in[3], u0);
  tpu_val_t above = tpu_b_compare(b, "GT", prod, tpu_b_unary(b, "stablehlo.exponential", tpu_b_unary(b, "stablehlo.negate", lam)));
  /* PTRS */
  tpu_val_t slam = tpu_b_unary(b, "stablehlo.sqrt", lam), loglam = tpu_b_unary(b, "stablehlo.log", lam);
  tpu_val_t bb = tpu_nn_addc(b, tpu_nn_mulc(b, slam, 2.53), 0.931);
  tpu_val_t aa = tpu_nn_addc(b, tpu_nn_mulc(b, bb, 0.02483), -0.059);
  tpu_val_t inva = tpu_nn_addc(b, tpu_nn_div(b, tpu_sm_c(b, bb, 1.1328), tpu_nn_addc(b, bb, -3.4)), 1.1239);
  tpu_val_t vr = tpu_nn_sub(b, tpu_sm_c(b, bb, 0.9277), tpu_nn_div(b, tpu_sm_c(b, bb, 3.6224), tpu_nn_addc(b, bb, -2.0)));
  tpu_val_t u = tpu_nn_addc(b, u0, -0.5);
  tpu_val_t us = tpu_nn_sub(b, tpu_sm_c(b, u, 0.5), tpu_b_unary(b, "stablehlo.abs", u));
  tpu_val_t kk = tpu_nn_add(b, tpu_nn_mul(b, tpu_nn_add(b, tpu_nn_div(b, tpu_nn_mulc(b, aa, 2.0), us), bb), u),
                            tpu_nn_addc(b, lam, 0.43));
  kk = tpu_b_unary(b, "stablehlo.floor", kk);
  tpu_val_t quick = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GE", us, tpu_sm_c(b, us, 0.07)),
                               tpu_b_compare(b, "LE", v, vr));
  tpu_val_t lhs = tpu_nn_sub(b, tpu_nn_add(b, tpu_b_unary(b, "stablehlo.log", v), tpu_b_unary(b, "stablehlo.log", inva)),
                             tpu_b_unary(b, "stablehlo.log", tpu_nn_add(b, tpu_nn_div(b, aa, tpu_nn_mul(b, us, us)), bb)));
  tpu_val_t rhs = tpu_sm_log_poisson_pmf(b, kk, lam, loglam);
  tpu_val_t reject = tpu_sm_bin(b, "stablehlo.or", tpu_b_compare(b, "LT", kk, tpu_sm_c(b, kk, 0.0)),
                                tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "LT", us, tpu_sm_c(b, us, 0.013)),
                                           tpu_b_compare(b, "GT", v, us)));
  tpu_val_t ptrs_ok = tpu_sm_bin(b, "stablehlo.or", quick,
                                 tpu_sm_bin(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.not", reject),
                                            tpu_b_compare(b, "LE", lhs, rhs)));
  tpu_val_t open = tpu_b_unary(b, "stablehlo.not", done);
  tpu_val_t small_open = tpu_sm_bin(b, "stablehlo.and", open, small);
  tpu_val_t big_take = tpu_sm_bin(b, "stablehlo.and", tpu_sm_bin(b, "stablehlo.and", open, tpu_b_unary(b, "stablehlo.not", small)), ptrs_ok);
  tpu_val_t count = tpu_b_select(b, tpu_sm_bin(b, "stablehlo.and", small_open, above), tpu_nn_addc(b, in[2], 1.0), in[2]);
  count = tpu_b_select(b, big_take, kk, count);
  tpu_val_t small_done = tpu_sm_bin(b, "stablehlo.and", small_open, tpu_b_unary(b, "stablehlo.not", above));
  out[0] = g.state;
  out[1] = tpu_sm_bin(b, "stablehlo.or", done, tpu_sm_bin(b, "stablehlo.or", small_done, big_take));
  out[2] = count;
  out[3] = tpu_b_select(b, small_open, prod, in[3]);
  out[4] = lam;
}

/* poisson(self, generator=None): Poisson(self) counts in self's dtype; a
 * negative or NaN rate is a device-side check with the CPU's message. */
static tpu_status_t* tpu_lower_poisson(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_val_t lam;
  if (!tpu_sm_float_arg(b, op, "poisson_cpu", &lam)) return NULL;
  tpu_aval_t a = *tpu_b_aval(b, lam);
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < a.rank; i++) dims[i] = i;
  tpu_val_t ok = tpu_b_compare(b, "GE", lam, tpu_sm_c(b, lam, 0.0));
  tpu_val_t all_ok = tpu_b_reduce(b, ok, tpu_b_const_i(b, TPU_BOOL, 1), a.rank, dims, "stablehlo.and");
  tpu_op_check(b, op, tpu_b_unary(b, "stablehlo.not", all_ok), TPU_NOVAL, TPU_INVALID_ARGUMENT,
               "invalid Poisson rate, expected rate to be non-negative");
  /* closed at once: rate 0 (count 0), invalid or infinite rates (no sampler ends) */
  tpu_val_t finite = tpu_b_compare(b, "LT", lam, tpu_sm_c(b, lam, INFINITY));
  tpu_val_t open = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GT", lam, tpu_sm_c(b, lam, 0.0)), finite);
  tpu_val_t safe = tpu_b_select(b, open, lam, tpu_sm_c(b, lam, 1.0));
  tpu_rng_t g = tpu_rng_open(b, op);
  tpu_val_t init[5] = {g.state, tpu_b_unary(b, "stablehlo.not", open), tpu_b_full(b, &a, 0.0), tpu_b_full(b, &a, 1.0),
                       safe};
  tpu_val_t res[5];
  tpu_mx_while(b, TPU_SAMPLE_MAX_ITERS, 5, init, tpu_sm_cond, tpu_poisson_step, NULL, res, NULL);
  tpu_val_t x = tpu_b_select(b, tpu_b_compare(b, "EQ", lam, tpu_sm_c(b, lam, INFINITY)), lam, res[2]);
  return tpu_ops_result1(tpu_b_convert(b, x, tpu_op_aval(op, 0).dtype), outs, nouts);
}

/* --------------------------------------------------------------- binomial */

/* Per element: n, p' = min(p, 1 - p) and BTRS's constants (Hormann 1993). */
typedef struct tpu_btrs {
  tpu_val_t n, p, btrs; /* btrs: n p' >= 10, else inversion */
  tpu_val_t a, b, c, vr, alpha, m, lpq, r;
} tpu_btrs_t;

#define TPU_BTRS_NCARRY 4 /* state, done, result, geometric sum (inversion) */

static tpu_val_t tpu_sm_ln(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.log", x); }
static tpu_val_t tpu_sm_ln1p(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.log_plus_one", x); }

/* BTRS's Stirling tail f(k) = lgamma(k + 1) - log(2 pi) / 2 - (k + 1/2) log(k + 1) + k + 1:
 * directly below 10, else its series in 1 / (k + 1). */
static tpu_val_t tpu_btrs_tail(tpu_builder_t* b, tpu_val_t k) {
  tpu_val_t k1 = tpu_nn_addc(b, k, 1.0);
  tpu_val_t direct = tpu_nn_add(b, tpu_nn_sub(b, tpu_b_unary(b, "chlo.lgamma", k1), tpu_nn_mul(b, tpu_nn_addc(b, k, 0.5), tpu_sm_ln(b, k1))),
                                tpu_nn_addc(b, k1, -0.91893853320467274178));
  tpu_val_t inv = tpu_nn_div(b, tpu_sm_c(b, k1, 1.0), k1), inv2 = tpu_nn_mul(b, inv, inv);
  tpu_val_t inner = tpu_nn_sub(b, tpu_sm_c(b, inv, 1.0 / 360.0), tpu_nn_mulc(b, inv2, 1.0 / 1260.0));
  tpu_val_t series = tpu_nn_mul(b, inv, tpu_nn_sub(b, tpu_sm_c(b, inv, 1.0 / 12.0), tpu_nn_mul(b, inner, inv2)));
  return tpu_b_select(b, tpu_b_compare(b, "LT", k, tpu_sm_c(b, k, 10.0)), direct, series);
}

/* log(f(k) / f(m)) for the binomial pmf f, as BTRS's bound with Stirling
 * tails, regrouped so that no two large terms cancel in f32: (k - m) times
 * the log of a ratio near 1, plus log1p terms of small arguments. */
static tpu_val_t tpu_btrs_log_ratio(tpu_builder_t* b, const tpu_btrs_t* t, tpu_val_t k) {
  tpu_val_t n1m = tpu_nn_addc(b, tpu_nn_sub(b, t->n, t->m), 1.0), n1k = tpu_nn_addc(b, tpu_nn_sub(b, t->n, k), 1.0);
  tpu_val_t m1 = tpu_nn_addc(b, t->m, 1.0), kh = tpu_nn_addc(b, k, 0.5), km = tpu_nn_sub(b, k, t->m);
  tpu_val_t r = tpu_nn_mul(b, km, tpu_sm_ln(b, tpu_nn_div(b, tpu_nn_mul(b, t->r, n1m), m1)));
  r = tpu_nn_sub(b, r, tpu_nn_mul(b, kh, tpu_sm_ln1p(b, tpu_nn_div(b, km, m1))));
  r = tpu_nn_add(b, r, tpu_nn_mul(b, kh, tpu_sm_ln1p(b, tpu_nn_div(b, tpu_b_unary(b, "stablehlo.negate", km), n1m))));
  r = tpu_nn_add(b, r, tpu_nn_mul(b, tpu_nn_addc(b, t->n, 1.0), tpu_sm_ln1p(b, tpu_nn_div(b, km, n1k))));
  tpu_val_t tails = tpu_nn_add(b, tpu_btrs_tail(b, t->m), tpu_btrs_tail(b, tpu_nn_sub(b, t->n, t->m)));
  tails = tpu_nn_sub(b, tails, tpu_nn_add(b, tpu_btrs_tail(b, k), tpu_btrs_tail(b, tpu_nn_sub(b, t->n, k))));
  return tpu_nn_add(b, r, tails);
}

/* One BTRS proposal from u0, v: k, and whether it is accepted. */
static tpu_val_t tpu_btrs_try(tpu_builder_t* b, const tpu_btrs_t* t, tpu_val_t u0, tpu_val_t v, tpu_val_t* out_k) {
  tpu_val_t u = tpu_nn_addc(b, u0, -0.5);
  tpu_val_t us = tpu_nn_sub(b, tpu_sm_c(b, u, 0.5), tpu_b_unary(b, "stablehlo.abs", u));
  tpu_val_t k = tpu_nn_add(b, tpu_nn_mul(b, tpu_nn_add(b, tpu_nn_div(b, tpu_nn_mulc(b, t->a, 2.0), us), t->b), u), t->c);
  k = tpu_b_unary(b, "stablehlo.floor", k);
  *out_k = k;
  tpu_val_t in_range = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GE", k, tpu_sm_c(b, k, 0.0)),
                                  tpu_b_compare(b, "LE", k, t->n));
  tpu_val_t quick = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GE", us, tpu_sm_c(b, us, 0.07)),
                               tpu_b_compare(b, "LE", v, t->vr));
  tpu_val_t lv = tpu_sm_ln(b, tpu_nn_div(b, tpu_nn_mul(b, v, t->alpha), tpu_nn_add(b, tpu_nn_div(b, t->a, tpu_nn_mul(b, us, us)), t->b)));
  tpu_val_t ok = tpu_sm_bin(b, "stablehlo.or", quick, tpu_b_compare(b, "LE", lv, tpu_btrs_log_ratio(b, t, k)));
  return tpu_sm_bin(b, "stablehlo.and", in_range, ok);
}

/* One draw per open element: a BTRS proposal, or one more geometric jump of
 * the inversion (the count of jumps that fit in n is the sample). */
static void tpu_binomial_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_btrs_t* t = ctx;
  tpu_rng_t g = {in[0]};
  tpu_aval_t a = *tpu_b_aval(b, in[2]);
  tpu_val_t u0 = tpu_rng_uniform_open(b, &g, a.dtype, &a), v = tpu_rng_uniform_open(b, &g, a.dtype, &a);
  tpu_val_t open = tpu_b_unary(b, "stablehlo.not", in[1]), kk;
  tpu_val_t btrs_take = tpu_sm_bin(b, "stablehlo.and", tpu_sm_bin(b, "stablehlo.and", open, t->btrs),
                                   tpu_btrs_try(b, t, u0, v, &kk));
  tpu_val_t geom = tpu_b_unary(b, "stablehlo.ceil", tpu_nn_div(b, tpu_sm_ln(b, u0), t->lpq));
  tpu_val_t inv_open = tpu_sm_bin(b, "stablehlo.and", open, tpu_b_unary(b, "stablehlo.not", t->btrs));
  tpu_val_t sum = tpu_nn_add(b, in[3], geom);
  tpu_val_t past = tpu_sm_bin(b, "stablehlo.and", inv_open, tpu_b_compare(b, "GT", sum, t->n));
  tpu_val_t more = tpu_sm_bin(b, "stablehlo.and", inv_open, tpu_b_unary(b, "stablehlo.not", past));
  tpu_val_t res = tpu_b_select(b, more, tpu_nn_addc(b, in[2], 1.0), in[2]);
  out[0] = g.state;
  out[1] = tpu_sm_bin(b, "stablehlo.or", in[1], tpu_sm_bin(b, "stablehlo.or", past, btrs_take));
  out[2] = tpu_b_select(b, btrs_take, kk, res);
  out[3] = tpu_b_select(b, inv_open, sum, in[3]);
}

/* The per-element parameters; `open`: elements that need a draw. */
static void tpu_btrs_setup(tpu_builder_t* b, tpu_val_t n, tpu_val_t p, tpu_val_t open, tpu_btrs_t* t) {
  tpu_val_t one = tpu_sm_c(b, p, 1.0);
  t->p = tpu_b_select(b, open, tpu_sm_bin(b, "stablehlo.minimum", p, tpu_nn_sub(b, one, p)), tpu_sm_c(b, p, 0.25));
  t->n = tpu_b_select(b, open, n, tpu_sm_c(b, n, 1.0));
  tpu_val_t q = tpu_nn_sub(b, one, t->p), np = tpu_nn_mul(b, t->n, t->p);
  t->btrs = tpu_b_compare(b, "GE", np, tpu_sm_c(b, np, 10.0));
  tpu_val_t spq = tpu_b_unary(b, "stablehlo.sqrt", tpu_nn_mul(b, np, q));
  t->b = tpu_nn_addc(b, tpu_nn_mulc(b, spq, 2.53), 1.15);
  t->a = tpu_nn_add(b, tpu_nn_addc(b, tpu_nn_mulc(b, t->b, 0.0248), -0.0873), tpu_nn_mulc(b, t->p, 0.01));
  t->c = tpu_nn_addc(b, np, 0.5);
  t->vr = tpu_nn_sub(b, tpu_sm_c(b, t->b, 0.92), tpu_nn_div(b, tpu_sm_c(b, t->b, 4.2), t->b));
  t->r = tpu_nn_div(b, t->p, q);
  t->alpha = tpu_nn_mul(b, tpu_nn_addc(b, tpu_nn_div(b, tpu_sm_c(b, t->b, 5.1), t->b), 2.83), spq);
  t->m = tpu_b_unary(b, "stablehlo.floor", tpu_nn_mul(b, tpu_nn_addc(b, t->n, 1.0), t->p));
  t->lpq = tpu_sm_ln1p(b, tpu_b_unary(b, "stablehlo.negate", t->p));
}

/* binomial(count, prob, generator=None): counts of successes in count's dtype,
 * with the CPU kernel's edges: count <= 0 or prob <= 0 give 0, prob >= 1
 * gives count, a NaN prob NaN. prob > 1/2 samples the failures. */
static tpu_status_t* tpu_lower_binomial(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  if (!tpu_dtype_is_float(t) || tpu_dtype_is_complex(t)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "binomial only supports floating-point dtypes for count, got: %s",
               tpu_dtype_scalar_type_name(t));
    return NULL;
  }
  int args[2] = {0, 1};
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(t);
  tpu_val_t n = tpu_ops_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), &shape);
  tpu_val_t p = tpu_ops_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct), &shape);
  tpu_val_t zero = tpu_sm_c(b, p, 0.0), one = tpu_sm_c(b, p, 1.0);
  tpu_val_t open = tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GT", n, zero),
                              tpu_sm_bin(b, "stablehlo.and", tpu_b_compare(b, "GT", p, zero), tpu_b_compare(b, "LT", p, one)));
  tpu_btrs_t bt;
  tpu_btrs_setup(b, n, p, open, &bt);
  tpu_rng_t g = tpu_rng_open(b, op);
  tpu_aval_t ca = *tpu_b_aval(b, p);
  tpu_val_t init[TPU_BTRS_NCARRY] = {g.state, tpu_b_unary(b, "stablehlo.not", open), tpu_b_full(b, &ca, 0.0),
                                     tpu_b_full(b, &ca, 0.0)};
  tpu_val_t res[TPU_BTRS_NCARRY];
  tpu_mx_while(b, TPU_SAMPLE_MAX_ITERS, TPU_BTRS_NCARRY, init, tpu_sm_cond, tpu_binomial_step, &bt, res, NULL);
  tpu_val_t x = res[2];
  x = tpu_b_select(b, tpu_b_compare(b, "GT", p, tpu_sm_c(b, p, 0.5)), tpu_nn_sub(b, n, x), x);
  x = tpu_b_select(b, open, x, tpu_b_select(b, tpu_b_compare(b, "GE", p, one), tpu_sm_bin(b, "stablehlo.maximum", n, zero), zero));
  x = tpu_b_select(b, tpu_b_compare(b, "NE", p, p), p, x);
  return tpu_ops_result1(tpu_b_convert(b, x, t), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_sampling[] = {
    {"_standard_gamma", tpu_lower__standard_gamma},
    {"_standard_gamma_grad", tpu_lower__standard_gamma_grad},
    {"_sample_dirichlet", tpu_lower__sample_dirichlet},
    {"poisson", tpu_lower_poisson},
    {"binomial", tpu_lower_binomial},
    {NULL, NULL},
};
