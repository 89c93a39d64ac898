/* Lowering: linalg_lstsq (torch.linalg.lstsq) — least squares through the SVD.
 *
 * X = V diag(1/s_i for s_i > rcond * s_max, else 0) U^T B: the minimum-norm
 * solution, which is what LAPACK's gelsy (the CPU default), gelsd and gelss
 * return, and gels's for full-rank A. rcond defaults to eps(dtype) * max(m, n)
 * like PyTorch. The other results follow the CPU's per-driver shapes: rank for
 * gelsy/gelsd/gelss, singular values for gelsd/gelss, residuals (sum of squared
 * residuals per column) for every driver but gelsy when m > n. PyTorch leaves
 * the residuals empty when some matrix is rank-deficient (a shape only the data
 * decides); here they are always computed for m > n. */
#include <float.h>
#include <string.h>

#include "nn.h"
#include "svd.h"

typedef enum { TPU_LS_GELS, TPU_LS_GELSY, TPU_LS_GELSD, TPU_LS_GELSS } tpu_ls_driver_t;

/* The driver argument (a string or None: gelsy). False with ATen's error if unknown. */
static bool tpu_ls_driver(tpu_builder_t* b, const tpu_op_t* op, int i, tpu_ls_driver_t* out) {
  static const char* const names[] = {"gels", "gelsy", "gelsd", "gelss"};
  *out = TPU_LS_GELSY;
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || a->kind != TPU_ARG_STRING) return true;
  for (int d = 0; d < 4; d++)
    if (strcmp(a->u.str, names[d]) == 0) {
      *out = (tpu_ls_driver_t)d;
      return true;
    }
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
             "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  return false;
}

/* Checks A (batch..., m, n) and B (batch..., m, k) or (batch..., m); *vec for the latter. */
static bool tpu_ls_check(tpu_builder_t* b, const tpu_aval_t* a, const tpu_aval_t* bb, bool* vec) {
  if (a->dtype != TPU_F32 && a->dtype != TPU_F64) {
    TPU_B_FAIL(b, a->dtype == TPU_C64 || a->dtype == TPU_C128 ? TPU_UNIMPLEMENTED : TPU_INVALID_ARGUMENT,
               "torch.linalg.lstsq: only float32 and float64 inputs are supported on tpu, got %s",
               tpu_dtype_name(a->dtype));
    return false;
  }
  if (a->rank < 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.linalg.lstsq: input must have at least 2 dimensions.");
    return false;
  }
  if (bb->dtype != a->dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.linalg.lstsq: Expected input and other to have the same dtype, but "
               "got input's dtype %s and other's dtype %s", tpu_dtype_name(a->dtype), tpu_dtype_name(bb->dtype));
    return false;
  }
  *vec = bb->rank == a->rank - 1;
  int batch = a->rank - 2;
  bool ok = *vec ? bb->dims[bb->rank - 1] == a->dims[a->rank - 2] : bb->rank == a->rank && bb->dims[batch] == a->dims[batch];
  for (int i = 0; ok && i < batch; i++) ok = bb->dims[i] == a->dims[i];
  if (!ok) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.linalg.lstsq: input.size(-2) should match other.size(-%d) and the "
               "batch dims should be equal on tpu", *vec ? 1 : 2);
    return false;
  }
  return true;
}

/* The per-batch count of s_i > rcond * s_max (i64), and 1/s_i on those, else 0. */
static tpu_val_t tpu_ls_pinv_scale(tpu_builder_t* b, tpu_val_t S, double rcond, tpu_val_t* out_rank) {
  tpu_aval_t sa = *tpu_b_aval(b, S);
  tpu_val_t smax = tpu_mx_take(b, S, sa.rank - 1, tpu_b_const_i(b, TPU_I32, 0));
  tpu_val_t cut = tpu_nn_mulc(b, tpu_mx_bcast_batch(b, smax, &sa), rcond);
  tpu_val_t keep = tpu_b_compare(b, "GT", S, cut);
  int64_t last = sa.rank - 1;
  *out_rank = tpu_b_reduce(b, tpu_b_convert(b, keep, TPU_I64), tpu_b_const_i(b, TPU_I64, 0), 1, &last, "stablehlo.add");
  tpu_val_t one = tpu_b_full(b, &sa, 1);
  return tpu_b_select(b, keep, tpu_nn_div(b, one, tpu_b_select(b, keep, S, one)), tpu_b_full(b, &sa, 0));
}

/* linalg_lstsq(A, B, rcond=None, *, driver=None) -> (solution, residuals, rank, singular_values) */
tpu_status_t* tpu_lower_linalg_lstsq(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0), ba = tpu_op_aval(op, 1);
  bool vec;
  tpu_ls_driver_t driver;
  if (!tpu_ls_check(b, &a, &ba, &vec) || !tpu_ls_driver(b, op, 3, &driver)) return NULL;
  int r = a.rank;
  int64_t m = a.dims[r - 2], n = a.dims[r - 1], k = vec ? 1 : ba.dims[r - 1], zero = 0;
  double eps = tpu_mx_eps(a.dtype);
  double rcond = tpu_op_kind(op, 2) == TPU_ARG_FLOAT ? tpu_op_float(op, 2, -1) : -1;
  if (rcond < 0) rcond = eps * (double)(m > n ? m : n);
  tpu_val_t A = tpu_op_tensor(b, op, 0), B = tpu_op_tensor(b, op, 1);
  tpu_aval_t bm = a;
  bm.dims[r - 1] = k;
  if (vec) B = tpu_b_reshape(b, B, r, bm.dims);
  tpu_svd_t f = tpu_svd_factor(b, op, A, true, false);
  tpu_aval_t ra = tpu_mx_drop(&a, 2), empty = tpu_aval_make(a.dtype, 1, &zero);
  ra.dtype = TPU_I64;
  tpu_val_t X, rank;
  if (m == 0 || n == 0 || k == 0) { /* nothing to solve: LAPACK is not called, rank 0 */
    tpu_aval_t xa = bm;
    xa.dims[r - 2] = n;
    X = tpu_b_full(b, &xa, 0);
    rank = tpu_b_full(b, &ra, 0);
  } else {
    tpu_val_t inv = tpu_ls_pinv_scale(b, f.S, rcond, &rank);
    tpu_val_t utb = tpu_mx_matmul(b, tpu_mx_mT(b, f.U), B); /* (min(m, n), k) */
    tpu_aval_t ua = *tpu_b_aval(b, utb);
    utb = tpu_nn_mul(b, utb, tpu_mx_bcast_vec(b, inv, &ua, false));
    X = tpu_mx_matmul(b, tpu_mx_mT(b, f.Vh), utb);
  }
  outs[1] = tpu_b_full(b, &empty, 0);
  if (driver != TPU_LS_GELSY && m > n) { /* sum over rows of (A X - B)^2, per column */
    tpu_val_t res = tpu_nn_sub(b, tpu_mx_matmul(b, A, X), B);
    outs[1] = tpu_mx_sum(b, tpu_nn_mul(b, res, res), r - 2); /* (batch..., k): k = 1 for a vector B too */
  }
  if (vec) { /* (batch..., n) */
    int64_t xd[TPU_MAX_RANK];
    memcpy(xd, a.dims, sizeof(int64_t) * (size_t)(r - 2));
    xd[r - 2] = n;
    X = tpu_b_reshape(b, X, r - 1, xd);
  }
  tpu_aval_t no_rank = tpu_aval_make(TPU_I64, 1, &zero);
  outs[0] = X;
  outs[2] = driver == TPU_LS_GELS ? tpu_b_full(b, &no_rank, 0) : rank;
  outs[3] = driver == TPU_LS_GELSD || driver == TPU_LS_GELSS ? f.S : tpu_b_full(b, &empty, 0);
  *nouts = 4;
  return NULL;
}
