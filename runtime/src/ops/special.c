/* Lowerings: special family — gamma-type functions (lgamma, digamma, polygamma,
 * mvlgamma, zeta, igamma/igammac via igamma.c), modified Bessel functions (i0, i0e, i1, i1e), the normal
 * distribution helpers (ndtri, log_ndtr, erfcx), entr, xlog1py, logaddexp(2).
 *
 * Ops are rows of two tables: unary (one tensor) and binary (two tensors or
 * Scalars with PyTorch's type promotion). A row names the aten op, a formula on
 * values already in the compute type, dtype rules and PyTorch's kernel name for
 * "not implemented for" errors.
 *
 * Numerics follow PyTorch's CPU kernels: integral/bool inputs give float32,
 * f16/bf16 compute in f32 and round once. The gamma family uses CHLO's
 * lgamma/digamma/polygamma/zeta; the Bessel functions evaluate the same Cephes
 * Chebyshev expansions as ATen (Math.h), with the double coefficient sets for
 * every dtype (the float sets are their tails). */
#include "special.h"

#include "matrix.h"

#include <math.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifndef M_LN2
#define M_LN2 0.69314718055994530942
#endif
#ifndef M_SQRT2
#define M_SQRT2 1.41421356237309504880
#endif
#ifndef M_SQRT1_2
#define M_SQRT1_2 0.70710678118654752440
#endif

/* ------------------------------------------------------------ gamma family */

static tpu_val_t sp_lgamma(tpu_builder_t* b, tpu_val_t x) { return sp_un(b, "chlo.lgamma", x); }

/* ATen's calc_digamma: ±0 → ∓inf (copysign(inf, -x)); negative integers → NaN. */
static tpu_val_t sp_digamma(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t y = sp_un(b, "chlo.digamma", x);
  tpu_aval_t ia = *tpu_b_aval(b, x);
  size_t w = tpu_dtype_size(ia.dtype);
  ia.dtype = w == 2 ? TPU_I16 : w == 4 ? TPU_I32 : TPU_I64;
  tpu_val_t neg_zero = sp_cmpc(b, "LT", tpu_b_bitcast(b, x, &ia), 0.0);
  tpu_val_t zero_val = sp_sel(b, neg_zero, sp_c(b, x, INFINITY), sp_c(b, x, -INFINITY));
  tpu_val_t neg_int = sp_and(b, sp_cmpc(b, "LT", x, 0.0), sp_is_int(b, x));
  y = sp_sel(b, neg_int, sp_c(b, x, NAN), y);
  return sp_sel(b, sp_cmpc(b, "EQ", x, 0.0), zero_val, y);
}

/* ATen's zeta(x, q) (Hurwitz), its checks in its order: x == 1 → inf; x < 1 →
 * NaN; q <= 0: integer q → inf, else non-integer x → NaN. Where chlo.zeta gives
 * NaN, the series' limits: x = +inf: the terms (k + q)^-inf give 1 for q == 1, 0
 * for q > 1, else inf; q = +inf: every term is 0. (ATen's series gives NaN for
 * those zeros, inf - inf in its tail terms.) A NaN x is NaN even at q's poles. */
/* Carry of the zeta shift loop: x, the shifted q, the partial sum. */
enum { SP_ZC_X, SP_ZC_Q, SP_ZC_S, SP_ZC_COUNT };

/* Elements whose q still needs a term taken off: q < 0, not a pole, x an
 * integer (else the result is NaN anyway). */
static tpu_val_t sp_zeta_shifting(tpu_builder_t* b, tpu_val_t x, tpu_val_t q) {
  tpu_val_t neg = sp_and(b, sp_cmpc(b, "LT", q, 0.0), tpu_b_compare(b, "NE", sp_un(b, "stablehlo.floor", q), q));
  return sp_and(b, sp_and(b, neg, sp_cmpc(b, "GT", q, -INFINITY)), sp_is_int(b, x));
}

static tpu_val_t sp_zeta_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx, (void)k;
  return tpu_mx_any(b, sp_zeta_shifting(b, in[SP_ZC_X], in[SP_ZC_Q]));
}

static void sp_zeta_body(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx, (void)k;
  tpu_val_t x = in[SP_ZC_X], q = in[SP_ZC_Q];
  tpu_val_t m = sp_zeta_shifting(b, x, q);
  tpu_val_t term = tpu_b_binary(b, "stablehlo.power", q, sp_neg(b, x));
  out[SP_ZC_X] = x;
  out[SP_ZC_Q] = sp_sel(b, m, sp_add(b, q, sp_c(b, q, 1.0)), q);
  out[SP_ZC_S] = sp_sel(b, m, sp_add(b, in[SP_ZC_S], term), in[SP_ZC_S]);
}

/* chlo.zeta sums a fixed number of terms before its asymptotic tail, which is
 * wrong for q < 0 (polygamma of negative x); ATen's Cephes loop keeps summing
 * until q is large. So terms (q + k)^-x are taken off one by one until q >= 0
 * (a device loop, as many steps as the most negative q needs). */
static tpu_val_t sp_zeta_series(tpu_builder_t* b, tpu_val_t x, tpu_val_t q) {
  tpu_val_t init[SP_ZC_COUNT] = {x, q, sp_c(b, x, 0.0)}, res[SP_ZC_COUNT];
  tpu_mx_while(b, INT32_MAX - 2, SP_ZC_COUNT, init, sp_zeta_cond, sp_zeta_body, NULL, res, NULL);
  tpu_val_t shifted = sp_zeta_shifting(b, x, q);
  return sp_sel(b, shifted, sp_add(b, res[SP_ZC_S], tpu_b_binary(b, "chlo.zeta", x, res[SP_ZC_Q])),
                tpu_b_binary(b, "chlo.zeta", x, q));
}

static tpu_val_t sp_zeta(tpu_builder_t* b, tpu_val_t x, tpu_val_t q) {
  tpu_val_t y = sp_zeta_series(b, x, q);
  tpu_val_t inf = sp_c(b, x, INFINITY), nan = sp_c(b, x, NAN), zero = sp_c(b, x, 0.0);
  tpu_val_t at_inf = sp_sel(b, sp_cmpc(b, "EQ", q, 1.0), sp_c(b, x, 1.0), inf);
  at_inf = sp_sel(b, sp_cmpc(b, "GT", q, 1.0), zero, at_inf);
  at_inf = sp_sel(b, sp_isnan(b, q), nan, at_inf);
  y = sp_sel(b, sp_cmpc(b, "EQ", x, INFINITY), at_inf, y);
  y = sp_sel(b, sp_cmpc(b, "EQ", q, INFINITY), zero, y);
  tpu_val_t q_nonpos = sp_cmpc(b, "LE", q, 0.0);
  tpu_val_t x_frac = tpu_b_compare(b, "NE", sp_un(b, "stablehlo.floor", x), x);
  tpu_val_t q_int = tpu_b_compare(b, "EQ", sp_un(b, "stablehlo.floor", q), q);
  y = sp_sel(b, sp_and(b, q_nonpos, x_frac), nan, y);
  y = sp_sel(b, sp_and(b, q_nonpos, q_int), inf, y);
  y = sp_sel(b, sp_cmpc(b, "LT", x, 1.0), nan, y);
  y = sp_sel(b, sp_cmpc(b, "EQ", x, 1.0), inf, y);
  return sp_sel(b, sp_isnan(b, x), nan, y);
}

/* ATen's calc_polygamma: n == 0 digamma; n >= 1 (-1)^(n+1) n! zeta(n+1, x). */
static tpu_val_t sp_polygamma(tpu_builder_t* b, int64_t n, tpu_val_t x) {
  if (n == 0) return sp_digamma(b, x);
  double fact = 1.0;
  for (int64_t k = 2; k <= n; ++k) fact *= (double)k;
  double sign = (n % 2) ? 1.0 : -1.0;
  /* zeta(n + 1, +inf) = 0, so psi^(n)(+inf) = 0 (ATen's CPU gives NaN for n >= 2). */
  return sp_mul(b, sp_c(b, x, sign * fact), sp_zeta(b, sp_c(b, x, (double)n + 1.0), x));
}

/* ------------------------------------------------------ Bessel (Cephes) */

/* Chebyshev coefficients from Cephes (as in ATen's Math.h). */
static const double sp_i0e_a[] = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,  -2.67079385394061173391E-7, 1.11738753912010371815E-6,
    -4.41673835845875056359E-6,  1.64484480707288970893E-5,  -5.75419501008210370398E-5, 1.88502885095841655729E-4,
    -5.76375574538582365885E-4,  1.63947561694133579842E-3,  -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,  -9.49010970480476444210E-2, 1.71620901522208775349E-1,
    -3.04682672343198398683E-1,  6.76795274409476084995E-1};
static const double sp_i0e_b[] = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,  3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15,  3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11,  4.94060238822496958910E-10,  3.39623202570838634515E-9,   2.26666899049817806459E-8,
    2.04891858946906374183E-7,   2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
    8.04490411014108831608E-1};
static const double sp_i1e_a[] = {
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16, -1.10559694773538630805E-15,
    7.60068429473540693410E-15, -5.04218550472791168711E-14, 3.22379336594557470981E-13, -1.98397439776494371520E-12,
    1.17361862988909016308E-11, -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
    9.38153738649577178388E-9,  -4.44505912879632808065E-8,  2.00329475355213526229E-7,  -8.56872026469545474066E-7,
    3.47025130813767847674E-6,  -1.32731636560394358279E-5,  4.78156510755005422638E-5,  -1.61760815825896745588E-4,
    5.12285956168575772895E-4,  -1.51357245063125314899E-3,  4.15642294431288815669E-3,  -1.05640848946261981558E-2,
    2.47264490306265168283E-2,  -5.29459812080949914269E-2,  1.02643658689847095384E-1,  -1.76416518357834055153E-1,
    2.52587186443633654823E-1};
static const double sp_i1e_b[] = {
    7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17, -3.20952592199342395980E-17,
    2.96262899764595013876E-16,  3.30820231092092828324E-16,  -1.88035477551078244854E-15, -3.81440307243700780478E-15,
    1.04202769841288027642E-14,  4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11,  3.25260358301548823856E-11,
    -1.89749581235054123450E-11, -5.58974346219658380687E-10, -3.83538038596423702205E-9,  -2.63146884688951950684E-8,
    -2.51223623787020892529E-7,  -3.88256480887769039346E-6,  -1.10588938762623716291E-4,  -9.76109749136146840777E-3,
    7.78576235018280120474E-1};

/* Cephes chbevl: Clenshaw recurrence of a Chebyshev series at y. */
tpu_val_t tpu_special_chbevl(tpu_builder_t* b, tpu_val_t y, const double* c, size_t n) {
  tpu_val_t b0 = sp_c(b, y, c[0]), b1 = sp_c(b, y, 0.0), b2 = b1;
  for (size_t i = 1; i < n; ++i) {
    b2 = b1;
    b1 = b0;
    b0 = sp_add(b, sp_sub(b, sp_mul(b, y, b1), b2), sp_c(b, y, c[i]));
  }
  return sp_mul(b, sp_c(b, y, 0.5), sp_sub(b, b0, b2));
}

/* exp(-|x|) I_k(|x|) (k = 0, 1; without the factor |x| on [0, 8] for k = 1), the
 * two Cephes ranges selected per element. `ax` = |x|. */
static tpu_val_t sp_bessel_ie(tpu_builder_t* b, tpu_val_t ax, bool order1) {
  const double* a = order1 ? sp_i1e_a : sp_i0e_a;
  size_t na = order1 ? TPU_ARRAY_LEN(sp_i1e_a) : TPU_ARRAY_LEN(sp_i0e_a);
  const double* c = order1 ? sp_i1e_b : sp_i0e_b;
  size_t nc = order1 ? TPU_ARRAY_LEN(sp_i1e_b) : TPU_ARRAY_LEN(sp_i0e_b);
  tpu_val_t small = tpu_special_chbevl(b, sp_sub(b, sp_mul(b, ax, sp_c(b, ax, 0.5)), sp_c(b, ax, 2.0)), a, na);
  if (order1) small = sp_mul(b, small, ax);
  /* The large branch at 32/|x| - 2; |x| <= 8 would leave its range, so clamp. */
  tpu_val_t big_x = tpu_b_binary(b, "stablehlo.maximum", ax, sp_c(b, ax, 8.0));
  tpu_val_t big = tpu_special_chbevl(b, sp_sub(b, sp_div(b, sp_c(b, ax, 32.0), big_x), sp_c(b, ax, 2.0)), c, nc);
  big = sp_div(b, big, sp_un(b, "stablehlo.sqrt", big_x));
  return sp_sel(b, sp_cmpc(b, "LE", ax, 8.0), small, big);
}

/* I1 and I1e are odd: the sign of x goes back on (x itself at +-0, so that
 * I1(-0) = -0). */
static tpu_val_t sp_odd(tpu_builder_t* b, tpu_val_t x, tpu_val_t v) {
  tpu_val_t y = sp_sel(b, sp_cmpc(b, "LT", x, 0.0), sp_neg(b, v), v);
  return sp_sel(b, sp_cmpc(b, "EQ", x, 0.0), x, y);
}
static tpu_val_t sp_i0e(tpu_builder_t* b, tpu_val_t x) { return sp_bessel_ie(b, sp_abs(b, x), false); }
static tpu_val_t sp_i1e(tpu_builder_t* b, tpu_val_t x) { return sp_odd(b, x, sp_bessel_ie(b, sp_abs(b, x), true)); }
/* exp(|x|) times the scaled value, as ATen does (so overflow happens where it
 * does). At |x| = inf that product is inf * 0; the limits are I0 = +inf and
 * I1(+-inf) = +-inf (ATen's CPU kernels give NaN there). */
tpu_val_t tpu_special_i0(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t ax = sp_abs(b, x);
  tpu_val_t y = sp_mul(b, sp_exp(b, ax), sp_bessel_ie(b, ax, false));
  return sp_sel(b, sp_cmpc(b, "EQ", ax, INFINITY), ax, y);
}
tpu_val_t tpu_special_i1(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t ax = sp_abs(b, x);
  tpu_val_t y = sp_odd(b, x, sp_mul(b, sp_exp(b, ax), sp_bessel_ie(b, ax, true)));
  return sp_sel(b, sp_cmpc(b, "EQ", ax, INFINITY), x, y);
}

/* ------------------------------------------------------ normal distribution */

/* erfcx(x) = exp(x^2) erfc(x). Directly below a threshold where erfc still has
 * full relative precision (5 for f32, 25 for f64); above, the asymptotic series
 * 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2x^2)^k, whose 10 terms there are below
 * the dtype's epsilon. */
static tpu_val_t sp_erfcx(tpu_builder_t* b, tpu_val_t x) {
  double thr = tpu_b_dtype(b, x) == TPU_F64 ? 25.0 : 5.0;
  tpu_val_t direct = sp_mul(b, sp_exp(b, sp_mul(b, x, x)), sp_un(b, "chlo.erfc", x));
  tpu_val_t ax = tpu_b_binary(b, "stablehlo.maximum", x, sp_c(b, x, thr));
  tpu_val_t inv = sp_div(b, sp_c(b, x, 1.0), sp_mul(b, sp_mul(b, ax, ax), sp_c(b, x, 2.0)));
  /* Horner from the last term: s = 1 - 1 inv (1 - 3 inv (1 - 5 inv (...))) */
  tpu_val_t s = sp_c(b, x, 1.0);
  for (int k = 10; k >= 1; --k) s = sp_sub(b, sp_c(b, x, 1.0), sp_mul(b, sp_mul(b, inv, sp_c(b, x, 2.0 * k - 1.0)), s));
  tpu_val_t asym = sp_div(b, s, sp_mul(b, ax, sp_c(b, x, sqrt(M_PI))));
  return sp_sel(b, sp_cmpc(b, "LT", x, thr), direct, asym);
}

/* ndtri(p) = sqrt(2) erfinv(2p - 1); 0 → -inf, 1 → inf, outside [0, 1] NaN. */
static tpu_val_t sp_ndtri(tpu_builder_t* b, tpu_val_t p) {
  tpu_val_t t = sp_sub(b, sp_mul(b, p, sp_c(b, p, 2.0)), sp_c(b, p, 1.0));
  tpu_val_t y = sp_mul(b, sp_c(b, p, M_SQRT2), sp_un(b, "chlo.erf_inv", t));
  y = sp_sel(b, sp_cmpc(b, "EQ", p, 0.0), sp_c(b, p, -INFINITY), y);
  y = sp_sel(b, sp_cmpc(b, "EQ", p, 1.0), sp_c(b, p, INFINITY), y);
  return sp_sel(b, sp_or(b, sp_cmpc(b, "LT", p, 0.0), sp_cmpc(b, "GT", p, 1.0)), sp_c(b, p, NAN), y);
}

/* ATen's calc_log_ndtr: t = x/sqrt2; x < -1: log(erfcx(-t)/2) - t^2, else
 * log1p(-erfc(t)/2). */
static tpu_val_t sp_log_ndtr(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t t = sp_mul(b, x, sp_c(b, x, M_SQRT1_2));
  tpu_val_t lo = sp_sub(b, sp_log(b, sp_mul(b, sp_erfcx(b, sp_neg(b, t)), sp_c(b, x, 0.5))), sp_mul(b, t, t));
  tpu_val_t hi = sp_un(b, "stablehlo.log_plus_one", sp_mul(b, sp_un(b, "chlo.erfc", t), sp_c(b, x, -0.5)));
  return sp_sel(b, sp_cmpc(b, "LT", x, -1.0), lo, hi);
}

/* entr(x) = -x log x; 0 at 0; -inf below 0; NaN stays NaN. */
static tpu_val_t sp_entr(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t y = sp_neg(b, sp_mul(b, x, sp_log(b, x)));
  y = sp_sel(b, sp_cmpc(b, "EQ", x, 0.0), sp_c(b, x, 0.0), y);
  return sp_sel(b, sp_cmpc(b, "LT", x, 0.0), sp_c(b, x, -INFINITY), y);
}

/* ---------------------------------------------------------- binary formulas */

/* x * log1p(y), 0 where x == 0, NaN where y is NaN (ATen's xlog1py). */
static tpu_val_t sp_xlog1py(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t v = sp_mul(b, x, sp_un(b, "stablehlo.log_plus_one", y));
  v = sp_sel(b, sp_cmpc(b, "EQ", x, 0.0), sp_c(b, x, 0.0), v);
  return sp_sel(b, sp_isnan(b, y), sp_c(b, x, NAN), v);
}

/* ATen's logaddexp(2): equal infinities return themselves (inf - inf would be
 * NaN); otherwise m + log1p(base^-|a-b|) / ln(base), m = max (NaN propagates). */
static tpu_val_t sp_logaddexp_base(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, bool base2) {
  tpu_val_t m = tpu_b_binary(b, "stablehlo.maximum", x, y);
  tpu_val_t d = sp_neg(b, sp_abs(b, sp_sub(b, x, y)));
  tpu_val_t e = base2 ? sp_exp(b, sp_mul(b, d, sp_c(b, d, M_LN2))) : sp_exp(b, d);
  tpu_val_t l = sp_un(b, "stablehlo.log_plus_one", e);
  if (base2) l = sp_div(b, l, sp_c(b, l, M_LN2));
  tpu_val_t v = sp_add(b, m, l);
  tpu_val_t nan = sp_or(b, sp_isnan(b, x), sp_isnan(b, y));
  v = sp_sel(b, nan, sp_c(b, x, NAN), v);
  tpu_val_t same_inf = sp_and(b, sp_cmpc(b, "EQ", sp_abs(b, x), INFINITY), tpu_b_compare(b, "EQ", x, y));
  return sp_sel(b, same_inf, x, v);
}
/* Complex logaddexp as ATen's CPU kernel: max + log1p(exp(min - max)) with min
 * and max ordered by real part; any NaN part gives NaN + NaN i; equal infinite
 * real parts: min for -inf, log(exp(min) + exp(max)) for +inf. */
static tpu_val_t sp_logaddexp_complex(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t xr = tpu_ops_part(b, x, false), yr = tpu_ops_part(b, y, false);
  tpu_val_t nan = sp_or(b, sp_or(b, sp_isnan(b, xr), sp_isnan(b, tpu_ops_part(b, x, true))),
                        sp_or(b, sp_isnan(b, yr), sp_isnan(b, tpu_ops_part(b, y, true))));
  tpu_val_t x_lt = tpu_b_compare(b, "LT", xr, yr);
  tpu_val_t mn = sp_sel(b, x_lt, x, y), mx = sp_sel(b, x_lt, y, x);
  tpu_val_t v = sp_add(b, mx, sp_un(b, "stablehlo.log_plus_one", sp_exp(b, sp_sub(b, mn, mx))));
  tpu_val_t mnr = tpu_ops_part(b, mn, false);
  tpu_val_t same_inf = sp_and(b, sp_cmpc(b, "EQ", sp_abs(b, mnr), INFINITY),
                              tpu_b_compare(b, "EQ", mnr, tpu_ops_part(b, mx, false)));
  tpu_val_t at_inf = sp_sel(b, sp_cmpc(b, "LT", mnr, 0.0), mn,
                            sp_un(b, "stablehlo.log", sp_add(b, sp_exp(b, mn), sp_exp(b, mx))));
  v = sp_sel(b, same_inf, at_inf, v);
  tpu_val_t nn = sp_c(b, xr, NAN);
  return sp_sel(b, nan, tpu_ops_complex(b, nn, nn), v);
}
static tpu_val_t sp_logaddexp(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  if (tpu_dtype_is_complex(tpu_b_dtype(b, x))) return sp_logaddexp_complex(b, x, y);
  return sp_logaddexp_base(b, x, y, false);
}
static tpu_val_t sp_logaddexp2(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return sp_logaddexp_base(b, x, y, true); }
static tpu_val_t sp_igamma(tpu_builder_t* b, tpu_val_t a, tpu_val_t x) { return tpu_special_igamma(b, a, x, false); }
static tpu_val_t sp_igammac(tpu_builder_t* b, tpu_val_t a, tpu_val_t x) { return tpu_special_igamma(b, a, x, true); }

/* ------------------------------------------------------------------ dtypes */

/* PyTorch's dtype checks for kernel `kernel` dispatched on dtype t. */
bool tpu_special_check_dtype(tpu_builder_t* b, const char* name, unsigned flags, const char* kernel,
                             tpu_dtype_t t) {
  if (tpu_dtype_is_complex(t) && !(flags & SP_COMPLEX)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: complex tensors are not supported on tpu", name);
    return false;
  }
  bool half = t == TPU_F16 || t == TPU_BF16;
  bool integral = !tpu_dtype_is_float(t) && !tpu_dtype_is_complex(t);
  bool bad = (half && (flags & SP_NO_HALF)) || (integral && (flags & SP_NO_INT));
  if (bad) TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", kernel, tpu_dtype_scalar_type_name(t));
  return !bad;
}

/* Tensor arg i in its float result dtype *rt and compute dtype (returned). */
tpu_val_t tpu_special_float_input(tpu_builder_t* b, tpu_op_t* op, int i, const char* name, unsigned flags,
                                  const char* kernel, tpu_dtype_t* rt) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected a tensor argument", name);
    return TPU_NOVAL;
  }
  tpu_dtype_t in = tpu_op_aval(op, i).dtype;
  if (!tpu_special_check_dtype(b, name, flags, kernel, in)) return TPU_NOVAL;
  *rt = tpu_dtype_to_float(in);
  return tpu_b_convert(b, tpu_op_tensor(b, op, i), tpu_dtype_opmath(*rt));
}

/* ------------------------------------------------------------ unary table */

typedef tpu_val_t (*sp_unary_fn_t)(tpu_builder_t* b, tpu_val_t x);
typedef struct sp_unary {
  const char* name;
  sp_unary_fn_t fn;
  unsigned flags;     /* SP_* */
  const char* kernel; /* PyTorch's kernel name for dtype errors */
} sp_unary_t;

static const sp_unary_t sp_unaries[] = {
    {"lgamma", sp_lgamma, 0, "lgamma_vml_cpu"},
    {"digamma", sp_digamma, 0, "digamma"},
    {"i0", tpu_special_i0, 0, "i0_cpu"},
    {"special_i0e", sp_i0e, 0, "i0e_cpu"},
    {"special_i1", tpu_special_i1, 0, "i1_cpu"},
    {"special_i1e", sp_i1e, 0, "i1e_cpu"},
    {"special_modified_bessel_i0", tpu_special_i0, SP_NO_HALF, "modified_bessel_i0_cpu"},
    {"special_modified_bessel_i1", tpu_special_i1, SP_NO_HALF, "modified_bessel_i1_cpu"},
    {"special_ndtri", sp_ndtri, SP_NO_HALF, "ndtri_cpu"},
    {"special_log_ndtr", sp_log_ndtr, SP_NO_HALF, "log_ndtr_cpu"},
    {"special_erfcx", sp_erfcx, SP_NO_HALF, "erfcx_cpu"},
    {"special_entr", sp_entr, 0, "entr_cpu"},
};

static tpu_status_t* tpu_lower_special_unary(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  (void)max_outs;
  const char* name = tpu_op_name(op);
  const sp_unary_t* d = NULL;
  for (size_t i = 0; i < TPU_ARRAY_LEN(sp_unaries) && !d; ++i)
    if (strcmp(sp_unaries[i].name, name) == 0) d = &sp_unaries[i];
  if (!d) return TPU_STATUS(TPU_INTERNAL, "special: no unary row for %s", name);
  tpu_dtype_t rt = TPU_F32;
  tpu_val_t x = tpu_special_float_input(b, op, 0, name, d->flags, d->kernel, &rt);
  if (!tpu_b_ok(b)) return NULL;
  return tpu_ops_result1(tpu_b_convert(b, d->fn(b, x), rt), outs, nouts);
}

/* ----------------------------------------------------------- binary table */

typedef tpu_val_t (*sp_binary_fn_t)(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
typedef struct sp_binary {
  const char* name;
  sp_binary_fn_t fn;
  unsigned flags;
  const char* kernel;
} sp_binary_t;

static const sp_binary_t sp_binaries[] = {
    {"logaddexp", sp_logaddexp, SP_NO_INT | SP_COMPLEX, "logaddexp_cpu"},
    {"logaddexp2", sp_logaddexp2, SP_NO_INT, "logaddexp2_cpu"},
    {"special_xlog1py", sp_xlog1py, 0, "xlog1py_cpu"},
    {"special_zeta", sp_zeta, SP_NO_HALF, "zeta_cpu"},
    {"igamma", sp_igamma, SP_NO_INT, "igamma_cpu"},
    {"igammac", sp_igammac, SP_NO_INT, "igammac_cpu"},
};

/* Arg i broadcast to `shape` in compute type ct: tensors cast to the common dtype
 * first (TensorIterator), Scalars straight to ct (ATen reads them in opmath). */
tpu_val_t tpu_special_operand(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t common, tpu_dtype_t ct,
                              const tpu_aval_t* shape) {
  tpu_val_t v = tpu_op_kind(op, i) == TPU_ARG_TENSOR
                    ? tpu_b_convert(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), common), ct)
                    : tpu_op_scalar(b, op, i, ct);
  return tpu_ops_bcast(b, v, shape);
}

static tpu_status_t* tpu_lower_special_binary(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  const char* name = tpu_op_name(op);
  const sp_binary_t* d = NULL;
  for (size_t i = 0; i < TPU_ARRAY_LEN(sp_binaries) && !d; ++i)
    if (strcmp(sp_binaries[i].name, name) == 0) d = &sp_binaries[i];
  if (!d) return TPU_STATUS(TPU_INTERNAL, "special: no binary row for %s", name);
  int args[2] = {0, 1};
  tpu_dtype_t common = tpu_ops_result_type(op, 2, args);
  if (!tpu_special_check_dtype(b, name, d->flags, d->kernel, common)) return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t rt = tpu_dtype_to_float(common), ct = tpu_dtype_opmath(rt);
  shape.dtype = ct;
  tpu_val_t x = tpu_special_operand(b, op, 0, common, ct, &shape);
  tpu_val_t y = tpu_special_operand(b, op, 1, common, ct, &shape);
  if (!tpu_b_ok(b)) return NULL;
  return tpu_ops_result1(tpu_b_convert(b, d->fn(b, x, y), rt), outs, nouts);
}

/* ------------------------------------------------- polygamma and mvlgamma */

/* polygamma(int n, Tensor self) */
static tpu_status_t* tpu_lower_polygamma(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int64_t n = tpu_op_int(op, 0, 0);
  if (n < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "polygamma(n, x) does not support negative n.");
    return NULL;
  }
  tpu_dtype_t rt = TPU_F32;
  tpu_val_t x = tpu_special_float_input(b, op, 1, "polygamma", 0, "polygamma", &rt);
  if (!tpu_b_ok(b)) return NULL;
  return tpu_ops_result1(tpu_b_convert(b, sp_polygamma(b, n, x), rt), outs, nouts);
}

/* mvlgamma(x, p) = p(p-1)/4 log(pi) + sum_{j<p} lgamma(x - j/2). ATen also checks
 * every x > (p-1)/2, a data-dependent error this lowering cannot raise without a
 * sync; such elements get the (finite or NaN) formula value instead. */
static tpu_status_t* tpu_lower_mvlgamma(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int64_t p = tpu_op_int(op, 1, 1);
  if (p < 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "p has to be greater than or equal to 1");
    return NULL;
  }
  tpu_dtype_t rt = TPU_F32;
  tpu_val_t x = tpu_special_float_input(b, op, 0, "mvlgamma", 0, "mvlgamma", &rt);
  if (!tpu_b_ok(b)) return NULL;
  tpu_val_t s = sp_c(b, x, (double)p * (double)(p - 1) * 0.25 * log(M_PI));
  for (int64_t j = 0; j < p; ++j) s = sp_add(b, s, sp_lgamma(b, sp_sub(b, x, sp_c(b, x, 0.5 * (double)j))));
  return tpu_ops_result1(tpu_b_convert(b, s, rt), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_special[] = {
    {"lgamma", tpu_lower_special_unary},
    {"digamma", tpu_lower_special_unary},
    {"i0", tpu_lower_special_unary},
    {"special_i0e", tpu_lower_special_unary},
    {"special_i1", tpu_lower_special_unary},
    {"special_i1e", tpu_lower_special_unary},
    {"special_modified_bessel_i0", tpu_lower_special_unary},
    {"special_modified_bessel_i1", tpu_lower_special_unary},
    {"special_ndtri", tpu_lower_special_unary},
    {"special_log_ndtr", tpu_lower_special_unary},
    {"special_erfcx", tpu_lower_special_unary},
    {"special_entr", tpu_lower_special_unary},
    {"logaddexp", tpu_lower_special_binary},
    {"logaddexp2", tpu_lower_special_binary},
    {"special_xlog1py", tpu_lower_special_binary},
    {"special_zeta", tpu_lower_special_binary},
    {"igamma", tpu_lower_special_binary},
    {"igammac", tpu_lower_special_binary},
    {"polygamma", tpu_lower_polygamma},
    {"mvlgamma", tpu_lower_mvlgamma},
    {NULL, NULL},
};
