/* The regularized incomplete gamma functions P(a, x) (igamma) and Q(a, x) =
 * 1 - P (igammac), as elementwise formulas for special.c's binary table.
 *
 * StableHLO has no igamma, so it is built from three classical evaluations,
 * each used where it converges fast and stays accurate:
 *   - a >= 100 and |x - a| <= 0.3 a: Temme's uniform asymptotic expansion
 *     (DLMF 8.12.3), whose terms shrink like a^-k; the series and the continued
 *     fraction would need ~sqrt(a) steps there, and f32 could not even count
 *     them once a passes 2^24;
 *   - x < a + 1: the power series P = x^a e^-x / Gamma(a + 1) sum_n x^n / ((a+1)...(a+n));
 *   - otherwise: Legendre's continued fraction for Q, evaluated with the
 *     modified Lentz method (no rescaling needed).
 * The two loops are device while loops that stop when every element has
 * converged (terms below the dtype's epsilon); outside the Temme region their
 * terms shrink geometrically, so they take a few hundred steps at most.
 *
 * The prefactor x^a e^-x / Gamma(a) loses all its digits to cancellation when
 * computed as exp(a log x - x - lgamma(a)) for large a (three terms of size
 * ~a log a for a result of size log sqrt(a)); for a >= 10 it is rewritten with
 * Stirling's series as a (log1p(t) - t) + log(a / 2pi) / 2 - stirling(a),
 * t = x/a - 1, which has no such cancellation.
 *
 * Boundary values are PyTorch's (SciPy's): a < 0 or x < 0 → NaN; a == 0 → 1
 * for x > 0, else NaN; x == 0 → 0; a == inf → 0 (NaN if x is inf too); x == inf
 * → 1; igammac is 1 - igamma at each of them. NaN propagates. */
#include "special.h"

#include "matrix.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Above these loop counts something is wrong (a NaN stops a loop by itself):
 * the loops converge geometrically outside the Temme region. */
#define IG_MAX_ITERS 100000

/* Where Temme's expansion takes over. */
#define IG_TEMME_MIN_A 100.0
#define IG_TEMME_RATIO 0.3

static double ig_eps(tpu_builder_t* b, tpu_val_t like) { return tpu_b_dtype(b, like) == TPU_F64 ? 0x1p-53 : 0x1p-24; }
static double ig_tiny(tpu_builder_t* b, tpu_val_t like) { return tpu_b_dtype(b, like) == TPU_F64 ? 1e-300 : 1e-30; }

/* Horner evaluation of sum_k c[k] t^k. */
static tpu_val_t ig_poly(tpu_builder_t* b, tpu_val_t t, const double* c, size_t n) {
  tpu_val_t s = sp_c(b, t, c[n - 1]);
  for (size_t k = n - 1; k-- > 0;) s = sp_add(b, sp_mul(b, s, t), sp_c(b, t, c[k]));
  return s;
}

/* log1p(t) - t. Near 0 the difference cancels, so |t| < 1/4 sums the series
 * -t^2/2 + t^3/3 - ... (27 terms: 4^-27 / 27 is below f64's epsilon). */
static tpu_val_t ig_log1pmx(tpu_builder_t* b, tpu_val_t t) {
  double c[26];
  for (int k = 0; k < 26; ++k) c[k] = ((k % 2) ? 1.0 : -1.0) / (double)(k + 2); /* coefficient of t^(k+2) */
  tpu_val_t series = sp_mul(b, sp_mul(b, t, t), ig_poly(b, t, c, TPU_ARRAY_LEN(c)));
  tpu_val_t direct = sp_sub(b, sp_un(b, "stablehlo.log_plus_one", t), t);
  return sp_sel(b, sp_cmpc(b, "LT", sp_abs(b, t), 0.25), series, direct);
}

/* lgamma(a) - ((a - 1/2) log a - a + log(2 pi) / 2) for a >= 10 (Stirling). */
static tpu_val_t ig_stirling(tpu_builder_t* b, tpu_val_t a) {
  static const double c[] = {1.0 / 12, -1.0 / 360, 1.0 / 1260, -1.0 / 1680, 1.0 / 1188, -691.0 / 360360};
  tpu_val_t inv = sp_div(b, sp_c(b, a, 1.0), a);
  return sp_mul(b, inv, ig_poly(b, sp_mul(b, inv, inv), c, TPU_ARRAY_LEN(c)));
}

/* log(x^a e^-x / Gamma(a)). */
static tpu_val_t ig_log_prefactor(tpu_builder_t* b, tpu_val_t a, tpu_val_t x) {
  tpu_val_t direct = sp_sub(b, sp_sub(b, sp_mul(b, a, sp_log(b, x)), x), sp_un(b, "chlo.lgamma", a));
  tpu_val_t big_a = tpu_b_binary(b, "stablehlo.maximum", a, sp_c(b, a, 10.0));
  tpu_val_t t = sp_sub(b, sp_div(b, x, big_a), sp_c(b, a, 1.0));
  tpu_val_t half_log = sp_mul(b, sp_c(b, a, 0.5), sp_log(b, sp_div(b, big_a, sp_c(b, a, 2.0 * M_PI))));
  tpu_val_t stirling = sp_sub(b, sp_add(b, sp_mul(b, big_a, ig_log1pmx(b, t)), half_log), ig_stirling(b, big_a));
  return sp_sel(b, sp_cmpc(b, "LT", a, 10.0), direct, stirling);
}

/* ------------------------------------------------------------ power series */

/* Carry: a, x, the last denominator r = a + n, the term c, the sum, active. */
enum { IG_S_A, IG_S_X, IG_S_R, IG_S_C, IG_S_SUM, IG_S_ACTIVE, IG_S_COUNT };

static tpu_val_t ig_active_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)k;
  return tpu_mx_any(b, in[*(const int*)ctx]);
}

static void ig_series_body(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx, (void)k;
  tpu_val_t act = in[IG_S_ACTIVE];
  tpu_val_t r = sp_add(b, in[IG_S_R], sp_c(b, in[IG_S_R], 1.0));
  tpu_val_t c = sp_mul(b, in[IG_S_C], sp_div(b, in[IG_S_X], r));
  tpu_val_t sum = sp_add(b, in[IG_S_SUM], c);
  out[IG_S_A] = in[IG_S_A];
  out[IG_S_X] = in[IG_S_X];
  out[IG_S_R] = sp_sel(b, act, r, in[IG_S_R]);
  out[IG_S_C] = sp_sel(b, act, c, in[IG_S_C]);
  out[IG_S_SUM] = sp_sel(b, act, sum, in[IG_S_SUM]);
  out[IG_S_ACTIVE] = sp_and(b, act, tpu_b_compare(b, "GT", c, sp_mul(b, sum, sp_c(b, sum, ig_eps(b, sum)))));
}

/* P(a, x) by the series, for the elements of `mask`; `log_d` = ig_log_prefactor. */
static tpu_val_t ig_series(tpu_builder_t* b, tpu_val_t a, tpu_val_t x, tpu_val_t log_d, tpu_val_t mask) {
  tpu_val_t one = sp_c(b, a, 1.0);
  tpu_val_t init[IG_S_COUNT] = {a, x, a, one, one, mask}, res[IG_S_COUNT];
  int active = IG_S_ACTIVE;
  tpu_mx_while(b, IG_MAX_ITERS, IG_S_COUNT, init, ig_active_cond, ig_series_body, &active, res, NULL);
  return sp_div(b, sp_mul(b, res[IG_S_SUM], sp_exp(b, log_d)), a);
}

/* ------------------------------------------------------- continued fraction */

/* Lentz's method on Q = prefactor / (b0 - 1(1-a) / (b1 - 2(2-a) / (b2 - ...))),
 * b_n = x + 1 - a + 2n. Carry: a, n, b_n, C, D, the convergent h, active. */
enum { IG_F_A, IG_F_N, IG_F_B, IG_F_C, IG_F_D, IG_F_H, IG_F_ACTIVE, IG_F_COUNT };

/* v, or +-tiny where |v| < tiny (Lentz's guard against a zero denominator). */
static tpu_val_t ig_nonzero(tpu_builder_t* b, tpu_val_t v) {
  return sp_sel(b, sp_cmpc(b, "LT", sp_abs(b, v), ig_tiny(b, v)), sp_c(b, v, ig_tiny(b, v)), v);
}

static void ig_cf_body(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx, (void)k;
  tpu_val_t act = in[IG_F_ACTIVE], a = in[IG_F_A];
  tpu_val_t n = sp_add(b, in[IG_F_N], sp_c(b, a, 1.0));
  tpu_val_t an = sp_mul(b, n, sp_sub(b, a, n)); /* -n (n - a) */
  tpu_val_t bn = sp_add(b, in[IG_F_B], sp_c(b, a, 2.0));
  tpu_val_t d = sp_div(b, sp_c(b, a, 1.0), ig_nonzero(b, sp_add(b, sp_mul(b, an, in[IG_F_D]), bn)));
  tpu_val_t c = ig_nonzero(b, sp_add(b, bn, sp_div(b, an, in[IG_F_C])));
  tpu_val_t delta = sp_mul(b, c, d);
  tpu_val_t h = sp_mul(b, in[IG_F_H], delta);
  tpu_val_t vals[IG_F_ACTIVE] = {a, n, bn, c, d, h};
  for (int i = 0; i < IG_F_ACTIVE; ++i) out[i] = sp_sel(b, act, vals[i], in[i]);
  tpu_val_t moving = sp_cmpc(b, "GT", sp_abs(b, sp_sub(b, delta, sp_c(b, a, 1.0))), ig_eps(b, a));
  out[IG_F_ACTIVE] = sp_and(b, act, moving);
}

/* Q(a, x) by the continued fraction, for the elements of `mask`. */
static tpu_val_t ig_cf(tpu_builder_t* b, tpu_val_t a, tpu_val_t x, tpu_val_t log_d, tpu_val_t mask) {
  tpu_val_t b0 = ig_nonzero(b, sp_sub(b, sp_add(b, x, sp_c(b, x, 1.0)), a));
  tpu_val_t d0 = sp_div(b, sp_c(b, a, 1.0), b0);
  tpu_val_t c0 = sp_c(b, a, 1.0 / ig_tiny(b, a));
  tpu_val_t init[IG_F_COUNT] = {a, sp_c(b, a, 0.0), b0, c0, d0, d0, mask}, res[IG_F_COUNT];
  int active = IG_F_ACTIVE;
  tpu_mx_while(b, IG_MAX_ITERS, IG_F_COUNT, init, ig_active_cond, ig_cf_body, &active, res, NULL);
  return sp_mul(b, res[IG_F_H], sp_exp(b, log_d));
}

/* ------------------------------------------------------------------- Temme */

/* The Taylor coefficients in eta of Temme's c_0(eta) = 1/(lambda-1) - 1/eta and
 * c_1(eta) = 1/eta^3 - 1/(lambda-1)^3 - 1/(lambda-1)^2 - 1/(12 (lambda-1))
 * (DLMF 8.12.8-9), derived by series reversion of eta^2/2 = lambda - 1 - log
 * lambda. The closed forms cancel near eta = 0; in the Temme region |eta| <
 * 0.34, where these truncations are exact to f64. */
static const double ig_temme_c0[] = {
    -1.0 / 3,          1.0 / 12,          -2.0 / 135,        1.0 / 864,
    1.0 / 2835,        -139.0 / 777600,   1.0 / 25515,       -571.0 / 261273600,
    -281.0 / 151559100, 163879.0 / 197522841600, -5221.0 / 29554024500, 5246819.0 / 782190452736000,
    5459.0 / 531972441000, -534703531.0 / 122021710626816000};
static const double ig_temme_c1[] = {
    -1.0 / 540,         -1.0 / 288,           1.0 / 378,           -77.0 / 77760,
    1.0 / 4860,         -1.0 / 2488320,       -2743.0 / 151559100, 41969.0 / 5486745600,
    -11.0 / 6823440,    47207.0 / 10158317568000, 3761.0 / 27280638000, -3599669.0 / 62575236218880};

/* Q (upper) or P by Temme's expansion to the a^-1 term: Q = erfc(eta sqrt(a/2))/2
 * + R, P = erfc(-eta sqrt(a/2))/2 - R, R = e^(-a eta^2/2) / sqrt(2 pi a)
 * (c_0 + c_1 / a). The next term is below 1e-8 for a >= 100. */
static tpu_val_t ig_temme(tpu_builder_t* b, tpu_val_t a, tpu_val_t x, bool upper) {
  tpu_val_t t = sp_sub(b, sp_div(b, x, a), sp_c(b, a, 1.0));
  tpu_val_t lm = ig_log1pmx(b, t); /* -eta^2 / 2 */
  tpu_val_t eta = sp_un(b, "stablehlo.sqrt", sp_mul(b, lm, sp_c(b, lm, -2.0)));
  eta = sp_sel(b, sp_cmpc(b, "LT", t, 0.0), sp_neg(b, eta), eta);
  tpu_val_t s = sp_mul(b, eta, sp_un(b, "stablehlo.sqrt", sp_mul(b, a, sp_c(b, a, 0.5))));
  tpu_val_t series = sp_add(b, ig_poly(b, eta, ig_temme_c0, TPU_ARRAY_LEN(ig_temme_c0)),
                            sp_div(b, ig_poly(b, eta, ig_temme_c1, TPU_ARRAY_LEN(ig_temme_c1)), a));
  tpu_val_t scale = sp_div(b, sp_exp(b, sp_mul(b, a, lm)),
                           sp_un(b, "stablehlo.sqrt", sp_mul(b, a, sp_c(b, a, 2.0 * M_PI))));
  tpu_val_t r = sp_mul(b, scale, series);
  tpu_val_t half_erfc = sp_mul(b, sp_c(b, a, 0.5), sp_un(b, "chlo.erfc", upper ? s : sp_neg(b, s)));
  return upper ? sp_add(b, half_erfc, r) : sp_sub(b, half_erfc, r);
}

/* --------------------------------------------------------------- the op */

/* P at PyTorch's boundary values (module comment): every element where a or
 * x is not finite and positive. */
static tpu_val_t ig_boundaries(tpu_builder_t* b, tpu_val_t a, tpu_val_t x) {
  tpu_val_t nan = sp_c(b, a, NAN), zero = sp_c(b, a, 0.0), one = sp_c(b, a, 1.0);
  tpu_val_t x_inf = sp_cmpc(b, "EQ", x, INFINITY);
  tpu_val_t p = sp_sel(b, x_inf, one, nan);
  p = sp_sel(b, sp_cmpc(b, "EQ", a, INFINITY), sp_sel(b, x_inf, nan, zero), p);
  p = sp_sel(b, sp_cmpc(b, "EQ", x, 0.0), zero, p);
  p = sp_sel(b, sp_cmpc(b, "EQ", a, 0.0), sp_sel(b, sp_cmpc(b, "GT", x, 0.0), one, nan), p);
  tpu_val_t bad = sp_or(b, sp_or(b, sp_cmpc(b, "LT", a, 0.0), sp_cmpc(b, "LT", x, 0.0)),
                        sp_or(b, sp_isnan(b, a), sp_isnan(b, x)));
  return sp_sel(b, bad, nan, p);
}

/* P(a, x) (upper: Q(a, x)) of values of equal shape in a float compute type. */
tpu_val_t tpu_special_igamma(tpu_builder_t* b, tpu_val_t a, tpu_val_t x, bool upper) {
  tpu_val_t fin_a = sp_and(b, sp_cmpc(b, "GT", a, 0.0), sp_cmpc(b, "LT", a, INFINITY));
  tpu_val_t fin_x = sp_and(b, sp_cmpc(b, "GT", x, 0.0), sp_cmpc(b, "LT", x, INFINITY));
  tpu_val_t inner = sp_and(b, fin_a, fin_x);
  tpu_val_t near = sp_cmpc(b, "LE", sp_abs(b, sp_div(b, sp_sub(b, x, a), a)), IG_TEMME_RATIO);
  tpu_val_t temme = sp_and(b, inner, sp_and(b, sp_cmpc(b, "GE", a, IG_TEMME_MIN_A), near));
  tpu_val_t use_cf = tpu_b_compare(b, "GE", x, sp_add(b, a, sp_c(b, a, 1.0)));
  tpu_val_t loops = sp_and(b, inner, tpu_b_unary(b, "stablehlo.not", temme));
  tpu_val_t log_d = ig_log_prefactor(b, a, x);
  tpu_val_t p = ig_series(b, a, x, log_d, sp_and(b, loops, tpu_b_unary(b, "stablehlo.not", use_cf)));
  tpu_val_t q = ig_cf(b, a, x, log_d, sp_and(b, loops, use_cf));
  tpu_val_t one = sp_c(b, a, 1.0);
  tpu_val_t v = upper ? sp_sel(b, use_cf, q, sp_sub(b, one, p)) : sp_sel(b, use_cf, sp_sub(b, one, q), p);
  v = sp_sel(b, temme, ig_temme(b, a, x, upper), v);
  tpu_val_t edge = ig_boundaries(b, a, x);
  return sp_sel(b, inner, v, upper ? sp_sub(b, one, edge) : edge);
}
