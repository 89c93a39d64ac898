/* Lowerings: fft family — ATen's FFT primitives (_fft_r2c, _fft_c2c, _fft_c2r)
 * that every torch.fft function decomposes into, and the small complex helpers
 * they need (conj_physical, angle).
 *
 * stablehlo.fft transforms the innermost len(fft_length) dims only, so the
 * requested dims are transposed to the end (in the requested order), transformed
 * and transposed back. XLA's FFT/RFFT are unnormalized and its IFFT/IRFFT divide
 * by n; ATen's normalization (fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n,
 * applied in either direction) is reached by rescaling afterwards. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ATen's fft_norm_mode. */
enum { TPU_FFT_NORM_NONE = 0, TPU_FFT_NORM_BY_ROOT_N = 1, TPU_FFT_NORM_BY_N = 2 };

static tpu_dtype_t tpu_fft_real_of(tpu_dtype_t t) { return t == TPU_C128 ? TPU_F64 : TPU_F32; }
static tpu_dtype_t tpu_fft_complex_of(tpu_dtype_t t) { return t == TPU_F64 ? TPU_C128 : TPU_C64; }

/* A transform request: the (wrapped, unique) dims in order, and the signal
 * length along each (the real-domain size). */
typedef struct tpu_fft_plan {
  int rank, ndims;
  int64_t dims[TPU_MAX_RANK];
  int64_t perm[TPU_MAX_RANK];    /* non-fft dims, then dims[] */
  int64_t inv[TPU_MAX_RANK];     /* inverse of perm */
  int64_t lengths[TPU_MAX_RANK]; /* fft_length, filled by the caller */
} tpu_fft_plan_t;

/* Reads the dim list (arg 1) of an fft primitive for an input of rank `rank`. */
static bool tpu_fft_plan(tpu_builder_t* b, const tpu_op_t* op, int rank, tpu_fft_plan_t* p) {
  int64_t raw[TPU_MAX_RANK + 1];
  int n = tpu_op_ints(op, 1, raw, TPU_MAX_RANK + 1);
  if (n > rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "FFT dims must be unique");
    return false;
  }
  p->rank = rank;
  p->ndims = n;
  bool used[TPU_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int d = tpu_ops_dim(b, raw[i], rank);
    if (!tpu_b_ok(b)) return false;
    if (used[d]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "FFT dims must be unique");
      return false;
    }
    used[d] = true;
    p->dims[i] = d;
  }
  int k = 0;
  for (int d = 0; d < rank; d++)
    if (!used[d]) p->perm[k++] = d;
  for (int i = 0; i < n; i++) p->perm[k++] = p->dims[i];
  for (int i = 0; i < rank; i++) p->inv[p->perm[i]] = i;
  return true;
}

static bool tpu_fft_identity_perm(const tpu_fft_plan_t* p) {
  for (int i = 0; i < p->rank; i++)
    if (p->perm[i] != i) return false;
  return true;
}

static tpu_val_t tpu_fft_permute(tpu_builder_t* b, tpu_val_t x, const tpu_fft_plan_t* p, const int64_t* perm) {
  return tpu_fft_identity_perm(p) ? x : tpu_b_transpose(b, x, perm);
}

/* stablehlo.fft over the innermost p->ndims dims of x (already permuted). */
static tpu_val_t tpu_fft_emit(tpu_builder_t* b, tpu_val_t x, const tpu_fft_plan_t* p, const char* type,
                              tpu_dtype_t out_dtype) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t out = *tpu_b_aval(b, x);
  out.dtype = out_dtype;
  int64_t last = p->lengths[p->ndims - 1];
  if (strcmp(type, "RFFT") == 0) out.dims[out.rank - 1] = last / 2 + 1;
  if (strcmp(type, "IRFFT") == 0) out.dims[out.rank - 1] = last;
  char lens[512], attrs[640];
  tpu_fmt_i64_array(lens, sizeof(lens), p->ndims, p->lengths);
  snprintf(attrs, sizeof(attrs), "fft_type = #stablehlo<fft_type %s>, fft_length = %s", type, lens);
  return tpu_b_op1(b, "stablehlo.fft", 1, &x, attrs, &out);
}

/* Multiplies y by `factor` (skipped when 1): the norm mode's scale, times n to
 * undo XLA's 1/n for inverse transforms. */
static tpu_val_t tpu_fft_scale(tpu_builder_t* b, tpu_val_t y, int norm, int64_t n, bool xla_divided) {
  double s = norm == TPU_FFT_NORM_BY_N ? 1.0 / (double)n : norm == TPU_FFT_NORM_BY_ROOT_N ? 1.0 / sqrt((double)n) : 1.0;
  if (xla_divided) s *= (double)n;
  if (s == 1.0 || !tpu_b_ok(b)) return y;
  return tpu_b_binary(b, "stablehlo.multiply", y, tpu_ops_like(b, y, s));
}

static int64_t tpu_fft_signal_numel(const tpu_fft_plan_t* p) {
  int64_t n = 1;
  for (int i = 0; i < p->ndims; i++) n *= p->lengths[i];
  return n;
}

static bool tpu_fft_check_norm(tpu_builder_t* b, int norm) {
  if (norm >= TPU_FFT_NORM_NONE && norm <= TPU_FFT_NORM_BY_N) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Invalid normalization mode: %d", norm);
  return false;
}

static tpu_status_t* tpu_fft_done(tpu_val_t v, tpu_val_t* outs, int* nouts) {
  return tpu_ops_result1(v, outs, nouts);
}

/* Fetches the input and its plan; fails unless its dtype passes `want_complex`. */
static tpu_val_t tpu_fft_input(tpu_builder_t* b, tpu_op_t* op, bool want_complex, tpu_fft_plan_t* p) {
  tpu_aval_t a = tpu_op_aval(op, 0);
  bool ok = want_complex ? (a.dtype == TPU_C64 || a.dtype == TPU_C128) : (a.dtype == TPU_F32 || a.dtype == TPU_F64);
  if (!ok) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: unsupported dtype %s on tpu (expects %s)", tpu_op_name(op),
               tpu_dtype_name(a.dtype), want_complex ? "complex64 or complex128" : "float32 or float64");
    return TPU_NOVAL;
  }
  if (!tpu_fft_check_norm(b, (int)tpu_op_int(op, 2, 0)) || !tpu_fft_plan(b, op, a.rank, p)) return TPU_NOVAL;
  for (int i = 0; i < p->ndims; i++) p->lengths[i] = a.dims[p->dims[i]];
  return tpu_op_tensor(b, op, 0);
}

/* _fft_r2c(self, dim, normalization, onesided): forward transform of a real
 * input; onesided keeps the last dim's n/2+1 non-redundant bins. */
static tpu_status_t* tpu_lower__fft_r2c(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_fft_plan_t p;
  tpu_val_t x = tpu_fft_input(b, op, false, &p);
  if (!tpu_b_ok(b)) return NULL;
  int norm = (int)tpu_op_int(op, 2, 0);
  tpu_dtype_t ct = tpu_fft_complex_of(tpu_b_dtype(b, x));
  if (p.ndims == 0) return tpu_fft_done(tpu_b_convert(b, x, ct), outs, nouts);
  x = tpu_fft_permute(b, x, &p, p.perm);
  tpu_val_t y = tpu_op_bool(op, 3, true) ? tpu_fft_emit(b, x, &p, "RFFT", ct)
                                          : tpu_fft_emit(b, tpu_b_convert(b, x, ct), &p, "FFT", ct);
  y = tpu_fft_scale(b, y, norm, tpu_fft_signal_numel(&p), false);
  return tpu_fft_done(tpu_fft_permute(b, y, &p, p.inv), outs, nouts);
}

/* _fft_c2c(self, dim, normalization, forward) */
static tpu_status_t* tpu_lower__fft_c2c(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_fft_plan_t p;
  tpu_val_t x = tpu_fft_input(b, op, true, &p);
  if (!tpu_b_ok(b)) return NULL;
  if (p.ndims == 0) return tpu_fft_done(x, outs, nouts);
  bool forward = tpu_op_bool(op, 3, true);
  x = tpu_fft_permute(b, x, &p, p.perm);
  tpu_val_t y = tpu_fft_emit(b, x, &p, forward ? "FFT" : "IFFT", tpu_b_dtype(b, x));
  y = tpu_fft_scale(b, y, (int)tpu_op_int(op, 2, 0), tpu_fft_signal_numel(&p), !forward);
  return tpu_fft_done(tpu_fft_permute(b, y, &p, p.inv), outs, nouts);
}

/* _fft_c2r(self, dim, normalization, last_dim_size): inverse transform to a real
 * signal whose last transformed dim has last_dim_size points. The input's last
 * transformed dim is cropped or zero-padded to last_dim_size/2+1 bins, as the
 * hermitian half the transform reads. */
static tpu_status_t* tpu_lower__fft_c2r(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_fft_plan_t p;
  tpu_val_t x = tpu_fft_input(b, op, true, &p);
  if (!tpu_b_ok(b)) return NULL;
  tpu_dtype_t rt = tpu_fft_real_of(tpu_b_dtype(b, x));
  if (p.ndims == 0) return tpu_fft_done(tpu_b_convert(b, x, rt), outs, nouts);
  int64_t last = tpu_op_int(op, 3, 0);
  if (last < 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Invalid number of data points (%" PRId64 ") specified", last);
    return NULL;
  }
  p.lengths[p.ndims - 1] = last;
  x = tpu_fft_permute(b, x, &p, p.perm);
  int r = p.rank;
  int64_t have = tpu_b_aval(b, x)->dims[r - 1], want = last / 2 + 1;
  if (have != want) {
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    hi[r - 1] = want - have; /* negative crops */
    x = tpu_b_pad(b, x, tpu_b_const(b, tpu_b_dtype(b, x), 0.0), lo, hi, NULL);
  }
  tpu_val_t y = tpu_fft_emit(b, x, &p, "IRFFT", rt);
  y = tpu_fft_scale(b, y, (int)tpu_op_int(op, 2, 0), tpu_fft_signal_numel(&p), true);
  return tpu_fft_done(tpu_fft_permute(b, y, &p, p.inv), outs, nouts);
}

/* ------------------------------------------------------------ complex helpers */

/* conj_physical: real - i imag for complex; the identity for real dtypes. */
static tpu_status_t* tpu_lower_conj_physical(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  (void)max_outs;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  return tpu_fft_done(tpu_ops_conj(b, x), outs, nouts);
}

/* _neg_view: -x. Like _conj (served by conj_physical), a view bit in eager mode
 * (the dispatcher resolves it); a graph that saves one gets its value. */
static tpu_status_t* tpu_lower_neg_view(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_fft_done(tpu_b_unary(b, "stablehlo.negate", tpu_op_tensor(b, op, 0)), outs, nouts);
}

/* angle: atan2(imag, real) for complex; for real x, pi where x < 0, else 0, and
 * NaN stays NaN (ATen's angle_impl). Integral and bool inputs give float32. */
static tpu_status_t* tpu_lower_angle(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (!tpu_b_ok(b)) return NULL;
  tpu_dtype_t t = tpu_b_dtype(b, x);
  if (tpu_dtype_is_complex(t)) {
    tpu_val_t re = tpu_ops_part(b, x, false), im = tpu_ops_part(b, x, true);
    return tpu_fft_done(tpu_b_binary(b, "stablehlo.atan2", im, re), outs, nouts);
  }
  tpu_dtype_t out = tpu_dtype_is_float(t) ? t : TPU_F32;
  x = tpu_b_convert(b, x, out);
  tpu_val_t y = tpu_b_select(b, tpu_b_compare(b, "LT", x, tpu_ops_like(b, x, 0.0)), tpu_ops_like(b, x, M_PI),
                             tpu_ops_like(b, x, 0.0));
  y = tpu_b_select(b, tpu_b_compare(b, "NE", x, x), x, y);
  return tpu_fft_done(y, outs, nouts);
}

const tpu_lowering_t tpu_lowerings_fft[] = {
    {"_fft_r2c", tpu_lower__fft_r2c},
    {"_fft_c2c", tpu_lower__fft_c2c},
    {"_fft_c2r", tpu_lower__fft_c2r},
    {"conj_physical", tpu_lower_conj_physical},
    {"_conj", tpu_lower_conj_physical},
    {"_conj_copy", tpu_lower_conj_physical},
    {"_neg_view", tpu_lower_neg_view},
    {"_neg_view_copy", tpu_lower_neg_view},
    {"angle", tpu_lower_angle},
    {NULL, NULL},
};
