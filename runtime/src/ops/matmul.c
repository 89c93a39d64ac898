/* Lowerings: matmul family (mm, bmm, addmm & co, dot, cross, convolution).
 *
 * matmul, linear, einsum, tensordot, outer, kron, mv and addr are composite in
 * PyTorch: they reach the backend as the ops below plus views. Products of
 * f16/bf16 accumulate in f32 (dot_general's result type) and round once, like
 * PyTorch's CPU gemm; integer products stay in their type (wrapping like C). */
#include "matmul.h"

#include "elementwise.h"
#include "reduce.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ dtype names */

/* The C++ type names of the mm dtype check ("expected m1 and m2 to have the
 * same dtype, but got: float != c10::BFloat16"). */
const char* tpu_mm_cpp_name(tpu_dtype_t t) {
  static const char* const names[TPU_DTYPE_COUNT] = {
      "bool",  "unsigned char", "signed char", "short int", "int", "long int", "c10::Half", "c10::BFloat16",
      "float", "double",        "c10::complex<float>", "c10::complex<double>"};
  return (int)t >= 0 && t < TPU_DTYPE_COUNT && names[t] ? names[t] : "?";
}

/* Products are defined for real and complex numbers and integers, not bool. */
static bool tpu_mm_dtype_ok(tpu_builder_t* b, const char* kernel, tpu_dtype_t t) {
  if (t == TPU_BOOL) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", kernel, tpu_dtype_scalar_type_name(t));
    return false;
  }
  return true;
}

/* ------------------------------------------------------------ products */

tpu_dtype_t tpu_mm_acc_dtype(tpu_dtype_t t) { return tpu_dtype_is_float(t) ? tpu_dtype_opmath(t) : t; }

tpu_val_t tpu_mm_dot(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, int nbatch, int64_t x_contract,
                     int64_t y_contract) {
  int64_t batch[TPU_MAX_RANK];
  for (int i = 0; i < nbatch; ++i) batch[i] = i;
  tpu_dtype_t acc = tpu_mm_acc_dtype(tpu_b_dtype(b, x));
  return tpu_b_dot_general(b, x, y, nbatch, batch, batch, 1, &x_contract, &y_contract, acc);
}

/* ------------------------------------------------------------ argument checks */

static bool tpu_mm_rank(tpu_builder_t* b, const tpu_aval_t* a, int rank, const char* msg) {
  if (a->rank != rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s", msg);
    return false;
  }
  return true;
}

/* Operands of a product share one real or integer dtype. */
static bool tpu_mm_check_dtypes(tpu_builder_t* b, tpu_dtype_t m1, tpu_dtype_t m2) {
  if (m1 != m2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected m1 and m2 to have the same dtype, but got: %s != %s",
               tpu_mm_cpp_name(m1), tpu_mm_cpp_name(m2));
    return false;
  }
  return tpu_mm_dtype_ok(b, "addmm_impl_cpu_", m1);
}

/* mm/addmm: [n, k] x [k', m] with k == k' and equal dtypes. */
static bool tpu_mm_check_mats(tpu_builder_t* b, const tpu_aval_t* m1, const tpu_aval_t* m2) {
  if (m1->dims[1] != m2->dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "mat1 and mat2 shapes cannot be multiplied (%" PRId64 "x%" PRId64 " and %" PRId64 "x%" PRId64 ")",
               m1->dims[0], m1->dims[1], m2->dims[0], m2->dims[1]);
    return false;
  }
  return tpu_mm_check_dtypes(b, m1->dtype, m2->dtype);
}

/* bmm/baddbmm: [B, n, k] x [B, k, m]. */
static bool tpu_mm_check_batches(tpu_builder_t* b, const tpu_aval_t* b1, const tpu_aval_t* b2) {
  if (!tpu_mm_rank(b, b1, 3, "batch1 must be a 3D tensor") || !tpu_mm_rank(b, b2, 3, "batch2 must be a 3D tensor"))
    return false;
  if (b2->dims[0] != b1->dims[0] || b2->dims[1] != b1->dims[2]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Expected size for first two dimensions of batch2 tensor to be: [%" PRId64 ", %" PRId64
               "] but got: [%" PRId64 ", %" PRId64 "].",
               b1->dims[0], b1->dims[2], b2->dims[0], b2->dims[1]);
    return false;
  }
  if (b1->dtype != b2->dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected scalar type %s but found %s", tpu_dtype_scalar_type_name(b1->dtype),
               tpu_dtype_scalar_type_name(b2->dtype));
    return false;
  }
  return tpu_mm_dtype_ok(b, "bmm", b1->dtype);
}

/* `self` of an add*-op must expand to the product's shape (PyTorch's expand message). */
static bool tpu_mm_check_expand(tpu_builder_t* b, const tpu_aval_t* self, const tpu_aval_t* target) {
  bool ok = self->rank <= target->rank;
  int bad = 0;
  for (int i = 0; ok && i < self->rank; ++i) {
    int t = target->rank - self->rank + i;
    if (self->dims[i] != 1 && self->dims[i] != target->dims[t]) {
      ok = false;
      bad = t;
    }
  }
  if (ok) return true;
  char ts[200], ss[200];
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
             "The expanded size of the tensor (%" PRId64 ") must match the existing size (%" PRId64
             ") at non-singleton dimension %d.  Target sizes: %s.  Tensor sizes: %s",
             target->dims[bad], self->rank > target->rank ? 0 : self->dims[bad - (target->rank - self->rank)], bad,
             tpu_fmt_i64_list(ts, sizeof(ts), target->rank, target->dims),
             tpu_fmt_i64_list(ss, sizeof(ss), self->rank, self->dims));
  return false;
}

/* The add*-ops' epilogue: beta * self + alpha * prod in the accumulate type,
 * rounded once to `dt`. beta == 0 ignores self entirely (NaN/inf included), as
 * PyTorch documents; beta is a runtime operand, so that is a select. */
static tpu_val_t tpu_mm_epilogue(tpu_builder_t* b, tpu_op_t* op, int self_i, int beta_i, int alpha_i, tpu_val_t prod,
                                 tpu_dtype_t dt) {
  const tpu_aval_t* pa = tpu_b_aval(b, prod);
  tpu_aval_t shape = *pa;
  tpu_aval_t sa = tpu_op_aval(op, self_i);
  if (!tpu_mm_check_expand(b, &sa, &shape)) return TPU_NOVAL;
  tpu_dtype_t ct = shape.dtype;
  tpu_val_t alpha = tpu_ops_bcast(b, tpu_op_scalar(b, op, alpha_i, ct), &shape);
  tpu_val_t beta = tpu_ops_bcast(b, tpu_op_scalar(b, op, beta_i, ct), &shape);
  tpu_val_t self = tpu_ops_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, self_i), ct), &shape);
  tpu_val_t zero = tpu_ops_like(b, prod, 0.0);
  tpu_val_t scaled = tpu_b_select(b, tpu_b_compare(b, "EQ", beta, zero), zero,
                                  tpu_b_binary(b, "stablehlo.multiply", beta, self));
  tpu_val_t r = tpu_b_binary(b, "stablehlo.add", scaled, tpu_b_binary(b, "stablehlo.multiply", alpha, prod));
  return tpu_b_convert(b, r, dt);
}

/* `self` of an add*-op must share the operands' dtype. */
static bool tpu_mm_check_self_dtype(tpu_builder_t* b, const tpu_aval_t* self, const tpu_aval_t* mat2) {
  if (self->dtype == mat2->dtype) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "self and mat2 must have the same dtype, but got %s and %s",
             tpu_dtype_scalar_type_name(self->dtype), tpu_dtype_scalar_type_name(mat2->dtype));
  return false;
}

/* ------------------------------------------------------------ mm family */

/* The product of args first and first + 1 over `nbatch` leading batch dims (the
 * lhs's last dim with the rhs's first non-batch dim), as outs[0] in `dtype`; the
 * add- forms (first > 0) take addmm's epilogue (self 0, beta 3, alpha 4). */
static tpu_status_t* tpu_mm_product_out(tpu_builder_t* b, tpu_op_t* op, int first, int nbatch, tpu_dtype_t dtype,
                                        tpu_val_t* outs, int* nouts) {
  tpu_val_t p = tpu_mm_dot(b, tpu_op_tensor(b, op, first), tpu_op_tensor(b, op, first + 1), nbatch, nbatch + 1,
                           nbatch);
  tpu_val_t y = first > 0 ? tpu_mm_epilogue(b, op, 0, 3, 4, p, dtype) : tpu_b_convert(b, p, dtype);
  return tpu_ops_result1(y, outs, nouts);
}

/* mm(self, mat2) and addmm(self, mat1, mat2, beta, alpha): `first` is mat1's index. */
static tpu_status_t* tpu_lower_mm_like(tpu_builder_t* b, tpu_op_t* op, int first, tpu_val_t* outs, int* nouts) {
  tpu_aval_t m1 = tpu_op_aval(op, first), m2 = tpu_op_aval(op, first + 1);
  bool add = first > 0;
  if (!tpu_mm_rank(b, &m1, 2, add ? "mat1 must be a matrix" : "self must be a matrix") ||
      !tpu_mm_rank(b, &m2, 2, "mat2 must be a matrix"))
    return NULL;
  if (add) {
    tpu_aval_t self = tpu_op_aval(op, 0);
    if (!tpu_mm_check_self_dtype(b, &self, &m2)) return NULL;
  }
  if (!tpu_mm_check_mats(b, &m1, &m2)) return NULL;
  return tpu_mm_product_out(b, op, first, 0, m1.dtype, outs, nouts);
}

static tpu_status_t* tpu_lower_mm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_mm_like(b, op, 0, outs, nouts);
}

static tpu_status_t* tpu_lower_addmm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_mm_like(b, op, 1, outs, nouts);
}

/* _addmm_activation(self, mat1, mat2, beta, alpha, use_gelu): addmm, then relu
 * or gelu of the rounded result, as ATen's CPU kernel (addmm_out, then relu_ or
 * gelu_ with the exact erf form; only CUDA's cuBLASLt epilogue uses tanh). */
static tpu_status_t* tpu_lower_addmm_activation(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_status_t* st = tpu_lower_mm_like(b, op, 1, outs, nouts);
  if (st || !tpu_b_ok(b)) return st;
  tpu_dtype_t t = tpu_b_dtype(b, outs[0]);
  if (!tpu_op_bool(op, 5, false)) {
    outs[0] = tpu_ew_relu(b, outs[0]);
  } else if (!tpu_dtype_is_float(t)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"GeluKernelImpl\" not implemented for '%s'", tpu_dtype_scalar_type_name(t));
  } else {
    outs[0] = tpu_b_convert(b, tpu_ew_gelu(b, tpu_b_convert(b, outs[0], tpu_dtype_opmath(t)), false), t);
  }
  return NULL;
}

/* bmm(self, mat2) and baddbmm(self, batch1, batch2, beta, alpha). */
static tpu_status_t* tpu_lower_bmm_like(tpu_builder_t* b, tpu_op_t* op, int first, tpu_val_t* outs, int* nouts) {
  tpu_aval_t b1 = tpu_op_aval(op, first), b2 = tpu_op_aval(op, first + 1);
  bool add = first > 0;
  if (!tpu_mm_check_batches(b, &b1, &b2)) return NULL;
  tpu_aval_t self = tpu_op_aval(op, 0);
  if (add && self.dtype != b1.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Input dtypes must be the same, got: input %s, batch1: %s, batch2: %s",
               tpu_mm_cpp_name(self.dtype), tpu_mm_cpp_name(b1.dtype), tpu_mm_cpp_name(b2.dtype));
    return NULL;
  }
  return tpu_mm_product_out(b, op, first, 1, b1.dtype, outs, nouts);
}

static tpu_status_t* tpu_lower_bmm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_bmm_like(b, op, 0, outs, nouts);
}

static tpu_status_t* tpu_lower_baddbmm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                       int* nouts) {
  (void)max_outs;
  return tpu_lower_bmm_like(b, op, 1, outs, nouts);
}

/* addbmm(self, batch1, batch2, beta, alpha): the batch is contracted too. */
static tpu_status_t* tpu_lower_addbmm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                      int* nouts) {
  (void)max_outs;
  tpu_aval_t self = tpu_op_aval(op, 0), b1 = tpu_op_aval(op, 1), b2 = tpu_op_aval(op, 2);
  if (!tpu_mm_rank(b, &b1, 3, "batch1 must be a 3D tensor") || !tpu_mm_rank(b, &b2, 3, "batch2 must be a 3D tensor"))
    return NULL;
  if (b1.dims[0] != b2.dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "batch1 and batch2 must have same number of batches, got %" PRId64 " and %" PRId64,
               b1.dims[0], b2.dims[0]);
    return NULL;
  }
  if (b1.dims[2] != b2.dims[1]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Incompatible matrix sizes for bmm (%" PRId64 "x%" PRId64 " and %" PRId64 "x%" PRId64 ")", b1.dims[1],
               b1.dims[2], b2.dims[1], b2.dims[2]);
    return NULL;
  }
  if (!tpu_mm_check_self_dtype(b, &self, &b2) || !tpu_mm_check_dtypes(b, b1.dtype, b2.dtype)) return NULL;
  int64_t lc[2] = {0, 2}, rc[2] = {0, 1};
  tpu_val_t p = tpu_b_dot_general(b, tpu_op_tensor(b, op, 1), tpu_op_tensor(b, op, 2), 0, NULL, NULL, 2, lc, rc,
                                  tpu_mm_acc_dtype(b1.dtype));
  return tpu_ops_result1(tpu_mm_epilogue(b, op, 0, 3, 4, p, b1.dtype), outs, nouts);
}

/* addmv(self, mat, vec, beta, alpha); mv arrives here as addmv with beta = 0. */
static tpu_status_t* tpu_lower_addmv(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t self = tpu_op_aval(op, 0), mat = tpu_op_aval(op, 1), vec = tpu_op_aval(op, 2);
  if (mat.rank != 2 || vec.rank != 1 || self.rank > 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "vector + matrix @ vector expected, got %d, %d, %d", self.rank, mat.rank,
               vec.rank);
    return NULL;
  }
  if (mat.dims[1] != vec.dims[0] || (self.rank == 1 && self.dims[0] != mat.dims[0] && self.dims[0] != 1)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "size mismatch, got input (%" PRId64 "), mat (%" PRId64 "x%" PRId64 "), vec (%" PRId64 ")",
               self.rank ? self.dims[0] : 1, mat.dims[0], mat.dims[1], vec.dims[0]);
    return NULL;
  }
  if (self.dtype != mat.dtype || mat.dtype != vec.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "addmv input tensors must have the same dtype, but got %s, %s, and %s",
               tpu_dtype_scalar_type_name(self.dtype), tpu_dtype_scalar_type_name(mat.dtype), tpu_dtype_scalar_type_name(vec.dtype));
    return NULL;
  }
  if (!tpu_mm_dtype_ok(b, "addmv_impl_cpu", mat.dtype)) return NULL;
  return tpu_mm_product_out(b, op, 1, 0, mat.dtype, outs, nouts);
}

/* dot(self, other) and vdot (conj(self) . other: dot for real inputs). */
static tpu_status_t* tpu_lower_dot_like(tpu_builder_t* b, tpu_op_t* op, const char* name, tpu_val_t* outs,
                                        int* nouts) {
  tpu_aval_t x = tpu_op_aval(op, 0), y = tpu_op_aval(op, 1);
  if (x.rank != 1 || y.rank != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "1D tensors expected, but got %dD and %dD tensors", x.rank, y.rank);
    return NULL;
  }
  if (x.dtype != y.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s : expected both vectors to have same dtype, but found %s and %s", name,
               tpu_dtype_scalar_type_name(x.dtype), tpu_dtype_scalar_type_name(y.dtype));
    return NULL;
  }
  if (x.dims[0] != y.dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "inconsistent tensor size, expected tensor [%" PRId64 "] and src [%" PRId64
               "] to have the same number of elements, but got %" PRId64 " and %" PRId64 " elements respectively",
               x.dims[0], y.dims[0], x.dims[0], y.dims[0]);
    return NULL;
  }
  if (!tpu_mm_dtype_ok(b, name, x.dtype)) return NULL;
  tpu_val_t lhs = tpu_op_tensor(b, op, 0);
  if (strcmp(name, "vdot") == 0) lhs = tpu_ops_conj(b, lhs);
  tpu_val_t p = tpu_mm_dot(b, lhs, tpu_op_tensor(b, op, 1), 0, 0, 0);
  return tpu_ops_result1(tpu_b_convert(b, p, x.dtype), outs, nouts);
}

static tpu_status_t* tpu_lower_dot(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_dot_like(b, op, "dot", outs, nouts);
}

static tpu_status_t* tpu_lower_vdot(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_dot_like(b, op, "vdot", outs, nouts);
}

/* linalg_cross(self, other, dim): broadcast, then the three 2x2 minors along dim. */
static tpu_status_t* tpu_lower_linalg_cross(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0), y = tpu_op_aval(op, 1), shape;
  if (x.rank != y.rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "linalg.cross: inputs must have the same number of dimensions.");
    return NULL;
  }
  int args[2] = {0, 1};
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  int64_t raw = tpu_op_int(op, 2, -1);
  int dim = tpu_ops_dim(b, raw, shape.rank);
  if (!tpu_b_ok(b)) return NULL;
  if (x.dims[dim] != 3 || y.dims[dim] != 3) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "linalg.cross: inputs dimension %" PRId64 " must have length 3. Got %" PRId64
               " and %" PRId64, raw, x.dims[dim], y.dims[dim]);
    return NULL;
  }
  if (x.dtype != y.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected scalar type %s but found %s", tpu_dtype_scalar_type_name(x.dtype),
               tpu_dtype_scalar_type_name(y.dtype));
    return NULL;
  }
  if (x.dtype == TPU_BOOL) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"linalg_cross\" not implemented for 'Bool'");
    return NULL;
  }
  tpu_dtype_t ct = tpu_mm_acc_dtype(x.dtype);
  tpu_val_t xs[3], ys[3];
  for (int side = 0; side < 2; ++side) {
    tpu_val_t v = tpu_ops_operand(b, op, side, ct, &shape);
    for (int k = 0; k < 3; ++k) {
      int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK];
      memcpy(hi, shape.dims, sizeof(int64_t) * (size_t)shape.rank);
      lo[dim] = k;
      hi[dim] = k + 1;
      (side ? ys : xs)[k] = tpu_b_slice(b, v, lo, hi, NULL);
    }
  }
  tpu_val_t c[3];
  for (int k = 0; k < 3; ++k) {
    int i = (k + 1) % 3, j = (k + 2) % 3;
    c[k] = tpu_b_binary(b, "stablehlo.subtract", tpu_b_binary(b, "stablehlo.multiply", xs[i], ys[j]),
                        tpu_b_binary(b, "stablehlo.multiply", xs[j], ys[i]));
  }
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_concat(b, 3, c, dim), x.dtype), outs, nouts);
}

/* ------------------------------------------------------------ convolution */

/* One stablehlo.convolution. Operands have their two non-spatial dims first (in
 * either order, named by the fields) and nsp spatial dims after them. */
typedef struct tpu_conv {
  int nsp;
  int in_batch, in_feat;   /* lhs dims 0/1 */
  int k_out, k_in;         /* rhs dims 0/1 */
  int out_batch, out_feat; /* result dims 0/1 */
  int64_t stride[TPU_MAX_RANK], pad_lo[TPU_MAX_RANK], pad_hi[TPU_MAX_RANK];
  int64_t lhs_dil[TPU_MAX_RANK], rhs_dil[TPU_MAX_RANK];
  int64_t feature_groups, batch_groups;
} tpu_conv_t;

static tpu_conv_t tpu_conv_make(int nsp) {
  tpu_conv_t c;
  memset(&c, 0, sizeof(c));
  c.nsp = nsp;
  c.in_feat = c.k_in = c.out_feat = 1;
  for (int i = 0; i < nsp; ++i) c.stride[i] = c.lhs_dil[i] = c.rhs_dil[i] = 1;
  c.feature_groups = c.batch_groups = 1;
  return c;
}

/* Emits the convolution; operands are converted to their accumulate dtype
 * (f32 for f16/bf16) and so is the result. */
static tpu_val_t tpu_conv_emit(tpu_builder_t* b, tpu_val_t lhs, tpu_val_t rhs, const tpu_conv_t* c) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_dtype_t acc = tpu_mm_acc_dtype(tpu_b_dtype(b, lhs));
  tpu_val_t ins[2] = {tpu_b_convert(b, lhs, acc), tpu_b_convert(b, rhs, acc)};
  const tpu_aval_t* l = tpu_b_aval(b, ins[0]);
  const tpu_aval_t* r = tpu_b_aval(b, ins[1]);
  int n = c->nsp;
  tpu_aval_t out;
  memset(&out, 0, sizeof(out));
  out.dtype = acc;
  out.rank = n + 2;
  out.dims[c->out_batch] = l->dims[c->in_batch] / c->batch_groups;
  out.dims[c->out_feat] = r->dims[c->k_out];
  int64_t sp[TPU_MAX_RANK], pads[2 * TPU_MAX_RANK];
  for (int i = 0; i < n; ++i) {
    int64_t in = (l->dims[2 + i] - 1) * c->lhs_dil[i] + 1 + c->pad_lo[i] + c->pad_hi[i];
    int64_t k = (r->dims[2 + i] - 1) * c->rhs_dil[i] + 1;
    out.dims[2 + i] = in >= k ? (in - k) / c->stride[i] + 1 : 0;
    sp[i] = 2 + i;
    pads[2 * i] = c->pad_lo[i];
    pads[2 * i + 1] = c->pad_hi[i];
  }
  char s_sp[96], s_st[96], s_ld[96], s_rd[96], s_pad[256], attrs[2048];
  tpu_fmt_i64_list(s_sp, sizeof(s_sp), n, sp);
  int p = snprintf(s_pad, sizeof(s_pad), "dense<[");
  for (int i = 0; i < n; ++i)
    p += snprintf(s_pad + p, sizeof(s_pad) - (size_t)p, "%s[%" PRId64 ", %" PRId64 "]", i ? ", " : "", pads[2 * i],
                  pads[2 * i + 1]);
  snprintf(s_pad + p, sizeof(s_pad) - (size_t)p, "]> : tensor<%dx2xi64>", n);
  snprintf(attrs, sizeof(attrs),
           "dimension_numbers = #stablehlo.conv<raw input_batch_dimension = %d, input_feature_dimension = %d, "
           "input_spatial_dimensions = %s, kernel_input_feature_dimension = %d, kernel_output_feature_dimension = %d, "
           "kernel_spatial_dimensions = %s, output_batch_dimension = %d, output_feature_dimension = %d, "
           "output_spatial_dimensions = %s>, window_strides = %s, padding = %s, lhs_dilation = %s, rhs_dilation = %s, "
           "feature_group_count = %" PRId64 " : i64, batch_group_count = %" PRId64 " : i64, "
           "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
           c->in_batch, c->in_feat, s_sp, c->k_in, c->k_out, s_sp, c->out_batch, c->out_feat, s_sp,
           tpu_fmt_i64_array(s_st, sizeof(s_st), n, c->stride), s_pad,
           tpu_fmt_i64_array(s_ld, sizeof(s_ld), n, c->lhs_dil), tpu_fmt_i64_array(s_rd, sizeof(s_rd), n, c->rhs_dil),
           c->feature_groups, c->batch_groups);
  return tpu_b_op1(b, "stablehlo.convolution", 2, ins, attrs, &out);
}

/* A conv parameter list: nsp values, or one value for every spatial dim. */
bool tpu_conv_param_list(tpu_builder_t* b, const tpu_op_t* op, int i, const char* name, int nsp, int64_t* out) {
  int64_t v[TPU_MAX_RANK];
  int n = tpu_op_ints(op, i, v, TPU_MAX_RANK);
  if (n != nsp && n != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "expected %s to be a single integer value or a list of %d values to match the convolution dimensions, "
               "but got %s=[...]",
               name, nsp, name);
    return false;
  }
  for (int k = 0; k < nsp; ++k) out[k] = v[n == 1 ? 0 : k];
  return true;
}

/* Reads (stride, padding, dilation, transposed, output_padding, groups) from
 * argument `first` on and checks them and the shapes as PyTorch's
 * _convolution does. */
static bool tpu_conv_read(tpu_builder_t* b, const tpu_op_t* op, int first, const tpu_aval_t* x, const tpu_aval_t* w,
                          tpu_conv_params_t* p) {
  memset(p, 0, sizeof(*p));
  if (x->rank < 3 || x->rank != w->rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Expected %d-dimensional input for %d-dimensional weight, but got %d-dimensional input", w->rank, w->rank,
               x->rank);
    return false;
  }
  p->nsp = x->rank - 2;
  if (!tpu_conv_param_list(b, op, first, "stride", p->nsp, p->stride) ||
      !tpu_conv_param_list(b, op, first + 1, "padding", p->nsp, p->padding) ||
      !tpu_conv_param_list(b, op, first + 2, "dilation", p->nsp, p->dilation) ||
      !tpu_conv_param_list(b, op, first + 4, "output_padding", p->nsp, p->output_padding))
    return false;
  p->transposed = tpu_op_bool(op, first + 3, false);
  p->groups = tpu_op_int(op, first + 5, 1);
  return tpu_conv_check(b, x, w, p);
}

bool tpu_conv_check(tpu_builder_t* b, const tpu_aval_t* x, const tpu_aval_t* w, const tpu_conv_params_t* p) {
  for (int i = 0; i < p->nsp; ++i) {
    const char* bad = p->stride[i] <= 0 ? "non-positive stride is not supported"
                      : p->padding[i] < 0 ? "negative padding is not supported"
                      : p->dilation[i] <= 0 ? "dilation should be greater than zero"
                      : p->output_padding[i] < 0 ? "negative output_padding is not supported"
                      : NULL;
    if (bad) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s", bad);
      return false;
    }
  }
  char ws[200], xs[200];
  tpu_fmt_i64_list(ws, sizeof(ws), w->rank, w->dims);
  tpu_fmt_i64_list(xs, sizeof(xs), x->rank, x->dims);
  if (p->groups <= 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "non-positive groups is not supported");
    return false;
  }
  if (!p->transposed && w->dims[0] % p->groups != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Given groups=%" PRId64 ", expected weight to be divisible by %" PRId64
               " at dimension 0, but got weight of size [%s] instead",
               p->groups, p->groups, ws);
    return false;
  }
  int64_t want = p->transposed ? w->dims[0] : w->dims[1] * p->groups;
  if (x->dims[1] != want) {
    if (p->transposed)
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Given transposed=1, weight of size %s, expected input%s to have %" PRId64
                 " channels, but got %" PRId64 " channels instead",
                 ws, xs, want, x->dims[1]);
    else
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Given groups=%" PRId64 ", weight of size %s, expected input%s to have %" PRId64
                 " channels, but got %" PRId64 " channels instead",
                 p->groups, ws, xs, want, x->dims[1]);
    return false;
  }
  if (p->transposed && w->dims[0] % p->groups != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Given groups=%" PRId64 ", expected input channels to be divisible by groups",
               p->groups);
    return false;
  }
  for (int i = 0; !p->transposed && i < p->nsp; ++i) {
    if (x->dims[2 + i] + 2 * p->padding[i] < p->dilation[i] * (w->dims[2 + i] - 1) + 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Calculated padded input size per channel: (%" PRId64 "). Kernel size: (%" PRId64
                 "). Kernel size can't be greater than actual input size",
                 x->dims[2 + i] + 2 * p->padding[i], p->dilation[i] * (w->dims[2 + i] - 1) + 1);
      return false;
    }
  }
  if (!tpu_dtype_is_float(x->dtype) && !tpu_dtype_is_int(x->dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "convolution is not implemented for '%s'", tpu_dtype_scalar_type_name(x->dtype));
    return false;
  }
  if (x->dtype != w->dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Input type (%s) and weight type (%s) should be the same", tpu_dtype_scalar_type_name(x->dtype),
               tpu_dtype_scalar_type_name(w->dtype));
    return false;
  }
  return true;
}

/* y = conv(x, w): x [N, C, S...], w [O, C/g, K...]. */
static tpu_val_t tpu_conv_forward(tpu_builder_t* b, tpu_val_t x, tpu_val_t w, const tpu_conv_params_t* p) {
  tpu_conv_t c = tpu_conv_make(p->nsp);
  for (int i = 0; i < p->nsp; ++i) {
    c.stride[i] = p->stride[i];
    c.pad_lo[i] = c.pad_hi[i] = p->padding[i];
    c.rhs_dil[i] = p->dilation[i];
  }
  c.feature_groups = p->groups;
  return tpu_conv_emit(b, x, w, &c);
}

/* y = conv_transpose(x, w): x [N, Cin, S...], w [Cin, Cout/g, K...]. The adjoint
 * of conv: dilate x by the stride, pad by d*(K-1) - p (+ output_padding at the
 * end), and convolve with the flipped kernel regrouped as [Cout, Cin/g, K...].
 * The padding may be negative (a crop), so it is applied by stablehlo.pad. */
static tpu_val_t tpu_conv_transposed(tpu_builder_t* b, tpu_val_t x, tpu_val_t w, const tpu_conv_params_t* p) {
  const tpu_aval_t* wa = tpu_b_aval(b, w);
  int n = p->nsp, r = n + 2;
  int64_t g = p->groups, cin = wa->dims[0], coutg = wa->dims[1];
  int64_t split[TPU_MAX_RANK + 1] = {g, cin / g, coutg}, perm[TPU_MAX_RANK + 1] = {0, 2, 1}, merged[TPU_MAX_RANK];
  merged[0] = g * coutg;
  merged[1] = cin / g;
  int64_t spatial[TPU_MAX_RANK];
  for (int i = 0; i < n; ++i) {
    split[3 + i] = wa->dims[2 + i];
    perm[3 + i] = 3 + i;
    merged[2 + i] = wa->dims[2 + i];
    spatial[i] = 2 + i;
  }
  tpu_val_t k = tpu_b_reshape(b, w, r + 1, split);
  k = tpu_b_reshape(b, tpu_b_transpose(b, k, perm), r, merged);
  k = tpu_b_reverse(b, k, n, spatial);
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, interior[TPU_MAX_RANK] = {0};
  for (int i = 0; i < n; ++i) {
    int64_t edge = p->dilation[i] * (wa->dims[2 + i] - 1) - p->padding[i];
    lo[2 + i] = edge;
    hi[2 + i] = edge + p->output_padding[i];
    interior[2 + i] = p->stride[i] - 1;
  }
  tpu_val_t xp = tpu_b_pad(b, x, tpu_b_const(b, tpu_b_dtype(b, x), 0.0), lo, hi, interior);
  tpu_conv_params_t q = *p;
  for (int i = 0; i < n; ++i) q.stride[i] = 1, q.padding[i] = 0;
  return tpu_conv_forward(b, xp, k, &q);
}

/* dW of y = conv(x, W) given dy: x [N, C, S...], dy [N, O, S'...] → [O, C/g, K...].
 * A convolution over the batch: x with batch and feature swapped, dy as the
 * kernel, the stride as rhs dilation and the dilation as window stride; groups
 * become batch groups. The window may overshoot K (floor in the forward
 * output size), so the result is cropped to K. */
static tpu_val_t tpu_conv_weight_grad(tpu_builder_t* b, tpu_val_t x, tpu_val_t dy, const tpu_conv_params_t* p,
                                      const int64_t* ksizes) {
  tpu_conv_t c = tpu_conv_make(p->nsp);
  c.in_batch = 1, c.in_feat = 0;
  c.k_out = 1, c.k_in = 0;
  c.out_batch = 1, c.out_feat = 0;
  for (int i = 0; i < p->nsp; ++i) {
    c.stride[i] = p->dilation[i];
    c.rhs_dil[i] = p->stride[i];
    c.pad_lo[i] = c.pad_hi[i] = p->padding[i];
  }
  c.batch_groups = p->groups;
  tpu_val_t g = tpu_conv_emit(b, x, dy, &c);
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t ga = *tpu_b_aval(b, g);
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK];
  memcpy(hi, ga.dims, sizeof(int64_t) * (size_t)ga.rank);
  for (int i = 0; i < p->nsp; ++i) hi[2 + i] = ksizes[i];
  return tpu_b_slice(b, g, lo, hi, NULL);
}

tpu_val_t tpu_conv_apply(tpu_builder_t* b, tpu_val_t x, tpu_val_t w, const tpu_conv_params_t* p) {
  return p->transposed ? tpu_conv_transposed(b, x, w, p) : tpu_conv_forward(b, x, w, p);
}

/* Adds bias [O] along dim 1. */
tpu_val_t tpu_conv_add_bias(tpu_builder_t* b, tpu_op_t* op, int i, tpu_val_t y) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR) return y;
  const tpu_aval_t ya = *tpu_b_aval(b, y); /* a copy: new values move the table */
  tpu_aval_t ba = tpu_op_aval(op, i);
  if (ba.rank != 1 || ba.dims[0] != ya.dims[1]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Given weight of size with %" PRId64
               " output channels, expected bias to be 1-dimensional with %" PRId64 " elements, but got bias of size [%" PRId64 "] instead",
               ya.dims[1], ya.dims[1], ba.rank ? ba.dims[0] : 1);
    return TPU_NOVAL;
  }
  int64_t bd = 1;
  tpu_val_t bias = tpu_b_convert(b, tpu_op_tensor(b, op, i), ya.dtype);
  return tpu_b_binary(b, "stablehlo.add", y, tpu_b_broadcast_in_dim(b, bias, ya.rank, ya.dims, &bd));
}

/* convolution / convolution_overrideable(input, weight, bias, stride, padding,
 * dilation, transposed, output_padding, groups). */
static tpu_status_t* tpu_lower_convolution(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  tpu_aval_t xa = tpu_op_aval(op, 0), wa = tpu_op_aval(op, 1);
  tpu_conv_params_t p;
  if (!tpu_conv_read(b, op, 3, &xa, &wa, &p)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0), w = tpu_op_tensor(b, op, 1);
  tpu_val_t y = tpu_conv_add_bias(b, op, 2, tpu_conv_apply(b, x, w, &p));
  return tpu_ops_result1(tpu_b_convert(b, y, xa.dtype), outs, nouts);
}

/* The conv's grad_input: the transposed conv of dy (or, for a transposed conv,
 * the forward conv of dy). */
static tpu_val_t tpu_conv_input_grad(tpu_builder_t* b, tpu_val_t dy, tpu_val_t w, const tpu_conv_params_t* p,
                                     const tpu_aval_t* ga, const tpu_aval_t* xa, const tpu_aval_t* wa) {
  if (p->transposed) {
    /* output_padding may reach past the last window (allowed up to
     * max(stride, dilation) - 1), so the forward conv of dy can be larger
     * than the input: crop it to the input's sizes. */
    tpu_val_t gx = tpu_conv_forward(b, dy, w, p);
    int64_t lo[TPU_MAX_RANK] = {0};
    return tpu_b_ok(b) ? tpu_b_slice(b, gx, lo, xa->dims, NULL) : TPU_NOVAL;
  }
  /* output_padding recovers the input sizes that the forward's floor lost. */
  tpu_conv_params_t q = *p;
  for (int i = 0; i < p->nsp; ++i) {
    int64_t full = (ga->dims[2 + i] - 1) * p->stride[i] - 2 * p->padding[i] + p->dilation[i] * (wa->dims[2 + i] - 1) + 1;
    q.output_padding[i] = xa->dims[2 + i] - full;
  }
  return tpu_conv_transposed(b, dy, w, &q);
}

void tpu_conv_mask(const tpu_op_t* op, int i, bool mask[3]) {
  const tpu_arg_t* arg = tpu_op_arg(op, i);
  for (int k = 0; k < 3; ++k) {
    bool given = arg && arg->kind == TPU_ARG_BOOL_LIST && k < arg->u.list.n;
    mask[k] = given ? arg->u.list.bools[k] : true;
  }
}

void tpu_conv_grads(tpu_builder_t* b, tpu_op_t* op, const tpu_conv_params_t* p, const bool mask[3],
                    const tpu_aval_t* xa, const tpu_aval_t* wa, tpu_val_t* outs) {
  tpu_aval_t ga = tpu_op_aval(op, 0);
  tpu_val_t dy = tpu_op_tensor(b, op, 0);
  tpu_dtype_t dt = xa->dtype;
  tpu_aval_t bias_aval = tpu_aval_make(dt, 1, &ga.dims[1]);
  tpu_val_t gx = TPU_NOVAL, gw = TPU_NOVAL;
  if (mask[0]) {
    tpu_val_t w = tpu_b_reshape(b, tpu_op_tensor(b, op, 2), wa->rank, wa->dims);
    gx = tpu_conv_input_grad(b, dy, w, p, &ga, xa, wa);
  }
  if (mask[1]) {
    tpu_val_t x = tpu_op_tensor(b, op, 1);
    gw = p->transposed ? tpu_conv_weight_grad(b, dy, x, p, &wa->dims[2]) : tpu_conv_weight_grad(b, x, dy, p, &wa->dims[2]);
  }
  outs[0] = mask[0] ? tpu_b_convert(b, gx, dt) : tpu_b_full(b, xa, 0.0);
  outs[1] = mask[1] ? tpu_b_convert(b, gw, dt) : tpu_b_full(b, wa, 0.0);
  if (mask[2]) {
    int64_t dims[TPU_MAX_RANK], nd = 0;
    for (int i = 0; i < ga.rank; ++i)
      if (i != 1) dims[nd++] = i;
    /* the accurate sum: a bias gradient sums N * spatial terms (18k in OpInfo's
     * conv_transpose3d sample, where a plain f32 reduce erred 10x more than CPU) */
    tpu_val_t s = tpu_red_sum_accurate(b, tpu_b_convert(b, dy, tpu_mm_acc_dtype(dt)), (int)nd, dims);
    outs[2] = tpu_b_convert(b, s, dt);
  } else {
    outs[2] = tpu_b_full(b, &bias_aval, 0.0);
  }
}

/* convolution_backward[_overrideable](grad_output, input, weight, [bias_sizes,]
 * stride, padding, dilation, transposed, output_padding, groups, output_mask)
 * → (grad_input, grad_weight, grad_bias). Masked-off gradients are returned as
 * zeros of the right shape (the binding cannot return undefined tensors). */
static tpu_status_t* tpu_lower_conv_backward_at(tpu_builder_t* b, tpu_op_t* op, int first, tpu_val_t* outs,
                                                int* nouts) {
  tpu_aval_t xa = tpu_op_aval(op, 1), wa = tpu_op_aval(op, 2);
  tpu_conv_params_t p;
  if (!tpu_conv_read(b, op, first, &xa, &wa, &p)) return NULL;
  bool mask[3];
  tpu_conv_mask(op, first + 6, mask);
  tpu_conv_grads(b, op, &p, mask, &xa, &wa, outs);
  *nouts = 3;
  return NULL;
}

static tpu_status_t* tpu_lower_convolution_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                    int* nouts) {
  (void)max_outs;
  return tpu_lower_conv_backward_at(b, op, 4, outs, nouts);
}

static tpu_status_t* tpu_lower_convolution_backward_overrideable(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                                 tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_conv_backward_at(b, op, 3, outs, nouts);
}

const tpu_lowering_t tpu_lowerings_matmul[] = {
    {"mm", tpu_lower_mm},
    {"addmm", tpu_lower_addmm},
    {"_addmm_activation", tpu_lower_addmm_activation},
    {"bmm", tpu_lower_bmm},
    {"baddbmm", tpu_lower_baddbmm},
    {"addbmm", tpu_lower_addbmm},
    {"addmv", tpu_lower_addmv},
    {"dot", tpu_lower_dot},
    {"vdot", tpu_lower_vdot},
    {"linalg_cross", tpu_lower_linalg_cross},
    {"convolution", tpu_lower_convolution},
    {"convolution_overrideable", tpu_lower_convolution},
    {"convolution_backward", tpu_lower_convolution_backward},
    {"convolution_backward_overrideable", tpu_lower_convolution_backward_overrideable},
    {NULL, NULL},
};
