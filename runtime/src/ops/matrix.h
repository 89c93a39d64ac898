/* Batched-matrix building blocks shared by the linear-algebra families (LU,
 * Cholesky and triangular solves, QR, eigh, SVD, matrix functions): counted and
 * conditional loops (stablehlo.while), per-batch indexing with static shapes,
 * and the small reshapes every factorisation needs. A "matrix" value has shape
 * (batch..., m, n); a "vector" (batch..., n). */
#ifndef TORCHTPU_SRC_OPS_MATRIX_H_
#define TORCHTPU_SRC_OPS_MATRIX_H_
#include "common.h"

/* The most values a loop carries (an internal bound: lowerings carry a few). */
#define TPU_MX_MAX_CARRY 8

/* A loop body: gets the i32 counter k and the carried values, writes the new
 * carried values. ctx is the caller's. */
typedef void (*tpu_mx_body_fn)(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out);
/* A loop condition over (k, carry): a 0-d i1 value. */
typedef tpu_val_t (*tpu_mx_cond_fn)(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in);

/* for k in [0, n): carry = body(k, carry). Writes the final carry to outs. */
void tpu_mx_for(tpu_builder_t* b, int64_t n, int nc, const tpu_val_t* init, tpu_mx_body_fn body, void* ctx,
                tpu_val_t* outs);
/* k = 0; while k < max_iters && cond(k, carry): carry = body(k, carry), k++.
 * cond may be NULL (a counted loop). Writes the final carry to outs and, if
 * out_k is not NULL, the final counter (0-d i32). */
void tpu_mx_while(tpu_builder_t* b, int64_t max_iters, int nc, const tpu_val_t* init, tpu_mx_cond_fn cond,
                  tpu_mx_body_fn body, void* ctx, tpu_val_t* outs, tpu_val_t* out_k);

/* a with dtype t. */
tpu_aval_t tpu_mx_retype(const tpu_aval_t* a, tpu_dtype_t t);
/* a without its last k dims. */
tpu_aval_t tpu_mx_drop(const tpu_aval_t* a, int k);
/* Swaps the last two dims (mT). */
tpu_val_t tpu_mx_mT(tpu_builder_t* b, tpu_val_t x);
/* A per-batch value (batch...) broadcast to `to` (batch..., more dims). */
tpu_val_t tpu_mx_bcast_batch(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* to);
/* A vector (batch..., n) broadcast to the matrix shape m along its rows (as_row:
 * v[j] fills column j) or along its columns (v[i] fills row i). */
tpu_val_t tpu_mx_bcast_vec(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* m, bool as_row);
/* The (same-for-every-batch) slice at index k (0-d i32) of dim `dim`, that dim dropped. */
tpu_val_t tpu_mx_take(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t k);
/* Sum over `dim` of x where mask, else 0: the one entry a one-hot mask selects
 * (a per-batch index, which dynamic_slice cannot take). */
tpu_val_t tpu_mx_pick(tpu_builder_t* b, tpu_val_t mask, tpu_val_t x, int dim);
/* x with its slices i and j along `dim` exchanged; i and j are per-batch i32
 * indices (batch...), as row exchanges of pivoting factorisations need. */
tpu_val_t tpu_mx_swap(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t i, tpu_val_t j);
/* The diagonal (batch..., min(m, n)) of matrices x. */
tpu_val_t tpu_mx_diag(tpu_builder_t* b, tpu_val_t x);
/* x (batch..., n, n) padded to (n + 1) x (n + 1): zeros, and 1 in the new corner
 * when corner_one (an orthogonal matrix stays orthogonal). */
tpu_val_t tpu_mx_pad1(tpu_builder_t* b, tpu_val_t x, bool corner_one);
/* Identity matrices of shape m (batch..., n, n), dtype m->dtype. */
tpu_val_t tpu_mx_eye(tpu_builder_t* b, const tpu_aval_t* m);
/* x @ y over the last two dims, batch dims equal; result in x's dtype. */
tpu_val_t tpu_mx_matmul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
/* row >= col (lower) or row <= col (upper) over shape's last two dims, as i1. */
tpu_val_t tpu_mx_tri_pred(tpu_builder_t* b, const tpu_aval_t* shape, bool lower);
/* x[..., lo:hi, ...] along dim `dim`. */
tpu_val_t tpu_mx_slice(tpu_builder_t* b, tpu_val_t x, int dim, int64_t lo, int64_t hi);
/* The leading rows x cols block of matrices x (batch..., >= rows, >= cols). */
tpu_val_t tpu_mx_block(tpu_builder_t* b, tpu_val_t x, int64_t rows, int64_t cols);
/* Any element of the bool value m true (a 0-d bool): a loop condition. */
tpu_val_t tpu_mx_any(tpu_builder_t* b, tpu_val_t m);
/* Some element of the real x not in [lo, hi] (NaN is in no range; hi = INFINITY:
 * no upper bound), a 0-d bool: a device-side check's condition. */
tpu_val_t tpu_mx_any_outside(tpu_builder_t* b, tpu_val_t x, double lo, double hi);
/* ATen's checks on a linalg input A for `api` ("torch.linalg.lu_factor" ...): f32
 * or f64 (complex: not on tpu yet; f16/bf16: `"<half_kernel>" not implemented`, or
 * when half_kernel is NULL ATen's "Low precision dtypes not supported"), at least 2
 * dims, square when `square`. Records the failure and returns false otherwise. */
bool tpu_mx_check_input(tpu_builder_t* b, const tpu_aval_t* a, const char* api, const char* half_kernel,
                        bool square);
/* A 0-d i1: every element of A is finite. */
tpu_val_t tpu_mx_all_finite(tpu_builder_t* b, tpu_val_t A);
/* LAPACK refuses non-finite input, and so does ATen: a device-side check of op
 * that fails the next sync with "<api>: The algorithm failed to converge
 * because the input matrix contained non-finite values." (LinAlgError) when A
 * has a NaN or an infinity. */
void tpu_mx_check_finite(tpu_builder_t* b, tpu_op_t* op, tpu_val_t A, const char* api);
/* A nonzero LAPACK-style info (batch...) i32 as a device-side check of op (what
 * ATen's check_errors=True does with it): the next sync fails with `code` and
 * `message`, each "{}" in it the first failing matrix's info. */
void tpu_mx_check_info(tpu_builder_t* b, tpu_op_t* op, tpu_val_t info, tpu_status_code_t code, const char* message);
/* |x| for real x, |re| + |im| (LAPACK's cabs1, izamax's pivot size) for complex x. */
tpu_val_t tpu_mx_cabs1(tpu_builder_t* b, tpu_val_t x);
/* The unit roundoff eps of a linalg dtype (f32 or f64). */
double tpu_mx_eps(tpu_dtype_t t);
/* x (batch..., n) with its entry k (0-d i32) set to v (batch...). */
tpu_val_t tpu_mx_put(tpu_builder_t* b, tpu_val_t x, tpu_val_t k, tpu_val_t v);
/* Per-batch tables (B, c) of values (B): column j of S, and c values stacked
 * as columns (loop carries pack several per-batch counters into one). */
tpu_val_t tpu_mx_column(tpu_builder_t* b, tpu_val_t S, int j);
tpu_val_t tpu_mx_columns(tpu_builder_t* b, int c, const tpu_val_t* v);
/* The sum of x over dim `dim` (that dim dropped). */
tpu_val_t tpu_mx_sum(tpu_builder_t* b, tpu_val_t x, int dim);
/* op(a) in a triangular solve: a, a^T or a^H (the conjugate transpose; a^T for
 * real a). */
typedef enum { TPU_MX_N, TPU_MX_T, TPU_MX_H, TPU_MX_OP_COUNT } tpu_mx_op_t;
/* stablehlo.triangular_solve: op(a) x = rhs (left) or x op(a) = rhs (right);
 * a and rhs share batch dims. Only a's `lower` (or upper) triangle is read; an
 * empty rhs is returned as it is. */
tpu_val_t tpu_mx_trisolve(tpu_builder_t* b, tpu_val_t a, tpu_val_t rhs, bool left, bool lower, bool unit,
                          tpu_mx_op_t op);
#endif
