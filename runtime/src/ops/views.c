/* Lowerings: view family as value semantics (for torch.compile graphs).
 *
 * In eager mode view ops never reach the op table: the binding makes them real
 * aliases of a storage. In a functionalized FX graph they are ordinary nodes whose
 * inputs are logical tensors (dtype + sizes, no strides, no storage), so each
 * lowering here returns the values the view would show: view/reshape reshape,
 * permute transposes, slice slices, and so on. The *_copy variants are the same
 * functions. The scatters (slice_scatter, select_scatter, diagonal_scatter,
 * as_strided_scatter) are functionalization's inverses: self with the view's
 * positions replaced by src.
 *
 * as_strided reads element offset + sum(i_k * stride_k) of the input's flattened
 * logical values: in a graph an input is its own contiguous storage at offset 0. */
#include <stdlib.h>
#include <string.h>

#include "index.h"

static tpu_status_t* tpu_views_one(tpu_val_t v, tpu_val_t* outs, int* nouts) {
  return tpu_ops_result1(v, outs, nouts);
}

static char* tpu_views_fmt(char* buf, size_t cap, int n, const int64_t* v) { return tpu_fmt_i64_list(buf, cap, n, v); }

/* n results must fit the caller's room. */
static bool tpu_views_room(tpu_builder_t* b, const char* name, int64_t n, int max_outs) {
  if (n <= max_outs) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %" PRId64 " results, more than the %d this call has room for", name, n,
             max_outs);
  return false;
}

/* Dims of a tensor of `rank` with dim d removed (out has rank - 1 entries). */
static int tpu_views_drop(const int64_t* dims, int rank, int d, int64_t* out) {
  int m = 0;
  for (int i = 0; i < rank; ++i)
    if (i != d) out[m++] = dims[i];
  return m;
}

/* src (converted to dtype) must have exactly `want`'s sizes: PyTorch's check for
 * the scatters. */
static bool tpu_views_src_ok(tpu_builder_t* b, const tpu_aval_t* src, int rank, const int64_t* want) {
  bool ok = src->rank == rank;
  for (int i = 0; ok && i < rank; ++i) ok = src->dims[i] == want[i];
  if (!ok) {
    char s0[256], s1[256];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "expected src to have a size equal to the slice of self. src size = %s, slice size = %s",
               tpu_views_fmt(s0, sizeof(s0), src->rank, src->dims), tpu_views_fmt(s1, sizeof(s1), rank, want));
  }
  return ok;
}

/* ============================================================ view / reshape */

/* PyTorch's infer_size: one -1 inferred from numel; every size checked. */
static bool tpu_views_infer(tpu_builder_t* b, int64_t numel, int n, const int64_t* in, int64_t* out) {
  char s[256];
  int infer = -1;
  int64_t prod = 1;
  for (int i = 0; i < n; ++i) {
    out[i] = in[i];
    if (in[i] == -1) {
      if (infer >= 0) {
        TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "only one dimension can be inferred");
        return false;
      }
      infer = i;
    } else if (in[i] < 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "invalid shape dimension %" PRId64 " at index %d of shape %s", in[i], i,
                 tpu_views_fmt(s, sizeof(s), n, in));
      return false;
    } else {
      prod = in[i] && prod > INT64_MAX / in[i] ? INT64_MAX : prod * in[i];
    }
  }
  if (infer >= 0) {
    if (prod == 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "cannot reshape tensor of 0 elements into shape %s because the unspecified dimension size -1 can be "
                 "any value and is ambiguous", tpu_views_fmt(s, sizeof(s), n, in));
      return false;
    }
    if (numel % prod == 0) {
      out[infer] = numel / prod;
      return true;
    }
  } else if (prod == numel) {
    return true;
  }
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "shape '%s' is invalid for input of size %" PRId64,
             tpu_views_fmt(s, sizeof(s), n, in), numel);
  return false;
}

/* view.dtype: reinterpret the bytes. Same itemsize: elementwise bitcast; a
 * different itemsize regroups the last dim (PyTorch's rules). Bool travels as u8. */
static tpu_status_t* tpu_views_view_dtype(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_dtype_t to = tpu_op_dtype(op, 1, in.dtype);
  size_t si = tpu_dtype_size(in.dtype), so = tpu_dtype_size(to);
  if (si != so && in.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "self.dim() cannot be 0 to view %s as %s (different element sizes)",
               tpu_dtype_scalar_type_name(in.dtype), tpu_dtype_scalar_type_name(to));
    return NULL;
  }
  int last = in.rank - 1;
  if (so > si && in.dims[last] % (int64_t)(so / si) != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "self.size(-1) must be divisible by %d to view %s as %s (different element sizes), but got %" PRId64,
               (int)(so / si), tpu_dtype_scalar_type_name(in.dtype), tpu_dtype_scalar_type_name(to), in.dims[last]);
    return NULL;
  }
  if (si != so && in.rank + 1 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "view(dtype): rank %d is too large on tpu", in.rank);
    return NULL;
  }
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (in.dtype == to) return tpu_views_one(x, outs, nouts);
  if (in.dtype == TPU_BOOL) {
    x = tpu_b_convert(b, x, TPU_U8);
    in.dtype = TPU_U8;
  }
  tpu_dtype_t mid = to == TPU_BOOL ? TPU_U8 : to;
  tpu_aval_t out = in;
  out.dtype = mid;
  if (in.dtype == mid) {
    /* nothing to reinterpret */
  } else if (si == so) {
    x = tpu_b_bitcast(b, x, &out);
  } else if (so > si) { /* [..., n] -> [..., n/r, r] -> [..., n/r] */
    int64_t r = (int64_t)(so / si), d[TPU_MAX_RANK];
    memcpy(d, in.dims, sizeof(d));
    d[last] = in.dims[last] / r;
    d[last + 1] = r;
    x = tpu_b_reshape(b, x, in.rank + 1, d);
    out.dims[last] = d[last];
    x = tpu_b_bitcast(b, x, &out);
  } else { /* [..., n] -> [..., n, r] -> [..., n*r] */
    int64_t r = (int64_t)(si / so);
    tpu_aval_t wide = in;
    wide.dtype = mid;
    wide.rank = in.rank + 1;
    wide.dims[last + 1] = r;
    x = tpu_b_bitcast(b, x, &wide);
    out.dims[last] = in.dims[last] * r;
    x = tpu_b_reshape(b, x, out.rank, out.dims);
  }
  if (to == TPU_BOOL) x = tpu_b_compare(b, "NE", x, tpu_ops_like(b, x, 0.0));
  return tpu_views_one(x, outs, nouts);
}

/* view / view_copy / _unsafe_view / reshape / _reshape_copy (self, size):
 * view.dtype and view_copy.dtype are told apart by their dtype argument. */
static tpu_status_t* tpu_lower_view(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  if (tpu_op_kind(op, 1) == TPU_ARG_DTYPE) return tpu_views_view_dtype(b, op, outs, nouts);
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t raw[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  int n = tpu_op_ints(op, 1, raw, TPU_MAX_RANK);
  if (!tpu_views_infer(b, tpu_aval_numel(&in), n, raw, dims)) return NULL;
  return tpu_views_one(tpu_b_reshape(b, tpu_op_tensor(b, op, 0), n, dims), outs, nouts);
}

/* alias / detach / alias_copy / detach_copy: the values themselves. */
static tpu_status_t* tpu_lower_alias(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_views_one(tpu_op_tensor(b, op, 0), outs, nouts);
}

/* view_as_real(self) / view_as_complex(self): a complex tensor as its (re, im)
 * pairs on a trailing dim of 2 and back (tpu_b_bitcast). In eager mode both are
 * metadata kernels of the binding; graphs get values. */
static tpu_status_t* tpu_lower_view_as_real(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (!tpu_dtype_is_complex(in.dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "view_as_real is only supported for complex tensors");
    return NULL;
  }
  if (in.rank >= TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "view_as_real: a rank-%d result is past the tpu limit of %d dims", in.rank + 1,
               TPU_MAX_RANK);
    return NULL;
  }
  tpu_aval_t out = in;
  out.dtype = in.dtype == TPU_C128 ? TPU_F64 : TPU_F32;
  out.dims[out.rank++] = 2;
  return tpu_views_one(tpu_b_bitcast(b, tpu_op_tensor(b, op, 0), &out), outs, nouts);
}

static tpu_status_t* tpu_lower_view_as_complex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.dtype != TPU_F32 && in.dtype != TPU_F64) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "view_as_complex is only supported for float and double tensors, but got a tensor of scalar type: %s",
               tpu_dtype_scalar_type_name(in.dtype));
    return NULL;
  }
  if (in.rank == 0 || in.dims[in.rank - 1] != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Tensor must have a last dimension of size 2");
    return NULL;
  }
  tpu_aval_t out = tpu_aval_make(in.dtype == TPU_F64 ? TPU_C128 : TPU_C64, in.rank - 1, in.dims);
  return tpu_views_one(tpu_b_bitcast(b, tpu_op_tensor(b, op, 0), &out), outs, nouts);
}

/* ====================================================== permutes and expand */

/* permute(self, dims) */
static tpu_status_t* tpu_lower_permute(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t raw[TPU_MAX_RANK], perm[TPU_MAX_RANK];
  int n = tpu_op_ints(op, 1, raw, TPU_MAX_RANK);
  if (n != in.rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "permute(sparse_coo): number of dimensions in the tensor input does not match the length of the "
               "desired ordering of dimensions i.e. input.dim() = %d is not equal to len(dims) = %d", in.rank, n);
    return NULL;
  }
  bool seen[TPU_MAX_RANK] = {false};
  for (int i = 0; i < n; ++i) {
    int d = tpu_ops_dim(b, raw[i], in.rank);
    if (!tpu_b_ok(b)) return NULL;
    if (seen[d]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "permute(): duplicate dims are not allowed.");
      return NULL;
    }
    seen[d] = true;
    perm[i] = d;
  }
  return tpu_views_one(tpu_b_transpose(b, tpu_op_tensor(b, op, 0), perm), outs, nouts);
}

static tpu_val_t tpu_views_swap(tpu_builder_t* b, tpu_val_t x, int rank, int d0, int d1) {
  if (d0 == d1 || rank < 2) return x;
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < rank; ++i) perm[i] = i;
  perm[d0] = d1;
  perm[d1] = d0;
  return tpu_b_transpose(b, x, perm);
}

/* transpose.int(self, dim0, dim1) */
static tpu_status_t* tpu_lower_transpose(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                         int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int d0 = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  int d1 = tpu_ops_dim(b, tpu_op_int(op, 2, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  return tpu_views_one(tpu_views_swap(b, tpu_op_tensor(b, op, 0), in.rank, d0, d1), outs, nouts);
}

/* t(self): transpose of a matrix, identity below rank 2. */
static tpu_status_t* tpu_lower_t(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.rank > 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "t() expects a tensor with <= 2 dimensions, but self is %dD", in.rank);
    return NULL;
  }
  return tpu_views_one(tpu_views_swap(b, tpu_op_tensor(b, op, 0), in.rank, 0, 1), outs, nouts);
}

/* expand(self, size, implicit): -1 keeps a size; new dims lead. */
static tpu_status_t* tpu_lower_expand(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t want[TPU_MAX_RANK], dims[TPU_MAX_RANK], bdims[TPU_MAX_RANK];
  int n = tpu_op_ints(op, 1, want, TPU_MAX_RANK);
  char s0[256], s1[256];
  if (n < in.rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "expand(tensor{%s}, size=%s): the number of sizes provided (%d) must be greater or equal to the "
               "number of dimensions in the tensor (%d)",
               tpu_views_fmt(s0, sizeof(s0), in.rank, in.dims), tpu_views_fmt(s1, sizeof(s1), n, want), n, in.rank);
    return NULL;
  }
  int lead = n - in.rank;
  for (int i = 0; i < n; ++i) {
    if (i < lead) {
      if (want[i] < 0) {
        TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                   "The expanded size of the tensor (%" PRId64 ") isn't allowed in a leading, non-existing dimension %d",
                   want[i], i);
        return NULL;
      }
      dims[i] = want[i];
      continue;
    }
    int64_t have = in.dims[i - lead];
    bdims[i - lead] = i;
    dims[i] = want[i] == -1 ? have : want[i];
    if (have != dims[i] && (have != 1 || dims[i] < 0)) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "The expanded size of the tensor (%" PRId64 ") must match the existing size (%" PRId64
                 ") at non-singleton dimension %d.  Target sizes: %s.  Tensor sizes: %s",
                 want[i], have, i, tpu_views_fmt(s0, sizeof(s0), n, want),
                 tpu_views_fmt(s1, sizeof(s1), in.rank, in.dims));
      return NULL;
    }
  }
  return tpu_views_one(tpu_b_broadcast_in_dim(b, tpu_op_tensor(b, op, 0), n, dims, bdims), outs, nouts);
}

/* ====================================================== slice / select ... */

typedef struct tpu_views_slice {
  int dim;
  int64_t start, end, step, len;
} tpu_views_slice_t;

/* (dim, start, end, step) at args first..first+3, PyTorch's clamping. */
static bool tpu_views_slice_args(tpu_builder_t* b, const tpu_op_t* op, int first, const tpu_aval_t* in,
                                 tpu_views_slice_t* s) {
  if (in->rank == 0) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "slice() cannot be applied to a 0-dim tensor.");
    return false;
  }
  s->dim = tpu_ops_dim(b, tpu_op_int(op, first, 0), in->rank);
  if (!tpu_b_ok(b)) return false;
  s->step = tpu_op_int(op, first + 3, 1);
  if (s->step <= 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "slice step must be positive");
    return false;
  }
  int64_t size = in->dims[s->dim];
  int64_t start = tpu_op_int(op, first + 1, 0), end = tpu_op_int(op, first + 2, INT64_MAX);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : (start > size ? size : start);
  end = end < start ? start : (end > size ? size : end);
  s->start = start;
  s->end = end;
  s->len = (end - start + s->step - 1) / s->step;
  return true;
}

/* The bounds of slice s over x's aval. */
static void tpu_views_slice_bounds(const tpu_aval_t* in, const tpu_views_slice_t* s, int64_t* lo, int64_t* hi,
                                   int64_t* st) {
  for (int i = 0; i < in->rank; ++i) {
    lo[i] = 0;
    hi[i] = in->dims[i];
    st[i] = 1;
  }
  lo[s->dim] = s->start;
  hi[s->dim] = s->end;
  st[s->dim] = s->step;
}

/* slice.Tensor(self, dim, start, end, step) */
static tpu_status_t* tpu_lower_slice(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_views_slice_t s;
  if (!tpu_views_slice_args(b, op, 1, &in, &s)) return NULL;
  int64_t lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], st[TPU_MAX_RANK];
  tpu_views_slice_bounds(&in, &s, lo, hi, st);
  return tpu_views_one(tpu_b_slice(b, tpu_op_tensor(b, op, 0), lo, hi, st), outs, nouts);
}

/* (dim, index) at args first, first+1 of select / select_scatter. */
static bool tpu_views_select_args(tpu_builder_t* b, const tpu_op_t* op, int first, const tpu_aval_t* in, int* dim,
                                  int64_t* index) {
  if (in->rank == 0) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "select() cannot be applied to a 0-dim tensor.");
    return false;
  }
  *dim = tpu_ops_dim(b, tpu_op_int(op, first, 0), in->rank);
  if (!tpu_b_ok(b)) return false;
  int64_t size = in->dims[*dim], i = tpu_op_int(op, first + 1, 0);
  if (i < -size || i >= size) {
    char s[256];
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "select(): index %" PRId64 " out of range for tensor of size %s at dimension %d",
               i, tpu_views_fmt(s, sizeof(s), in->rank, in->dims), *dim);
    return false;
  }
  *index = i < 0 ? i + size : i;
  return true;
}

/* select.int(self, dim, index) */
static tpu_status_t* tpu_lower_select(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int dim;
  int64_t index, lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK], rest[TPU_MAX_RANK];
  if (!tpu_views_select_args(b, op, 1, &in, &dim, &index)) return NULL;
  memcpy(hi, in.dims, sizeof(hi));
  lo[dim] = index;
  hi[dim] = index + 1;
  int m = tpu_views_drop(in.dims, in.rank, dim, rest);
  tpu_val_t x = tpu_b_slice(b, tpu_op_tensor(b, op, 0), lo, hi, NULL);
  return tpu_views_one(tpu_b_reshape(b, x, m, rest), outs, nouts);
}

/* narrow(self, dim, start, length); narrow.Tensor takes start as a 0-d tensor,
 * read at run time (clamped into range like dynamic_slice). */
static tpu_status_t* tpu_lower_narrow(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "narrow() cannot be applied to a 0-dim tensor.");
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  int64_t size = in.dims[dim], len = tpu_op_int(op, 3, 0);
  if (len < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "narrow(): length must be non-negative.");
    return NULL;
  }
  tpu_arg_kind_t sk = tpu_op_kind(op, 2);
  if (sk == TPU_ARG_TENSOR || sk == TPU_ARG_SCALAR) {
    if (len > size) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "start + length (%" PRId64 ") exceeds dimension size (%" PRId64 ").", len,
                 size);
      return NULL;
    }
    tpu_val_t st = sk == TPU_ARG_TENSOR ? tpu_b_convert(b, tpu_op_tensor(b, op, 2), TPU_I64)
                                        : tpu_op_scalar(b, op, 2, TPU_I64);
    if (sk == TPU_ARG_TENSOR && tpu_b_rank(b, st) != 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "start must be an 0-dim integral Tensor.");
      return NULL;
    }
    tpu_val_t zero = tpu_b_const_i(b, TPU_I64, 0);
    tpu_val_t neg = tpu_b_compare(b, "LT", st, zero);
    st = tpu_b_select(b, neg, tpu_b_binary(b, "stablehlo.add", st, tpu_b_const_i(b, TPU_I64, size)), st);
    tpu_val_t starts[TPU_MAX_RANK];
    int64_t sizes[TPU_MAX_RANK];
    for (int i = 0; i < in.rank; ++i) {
      starts[i] = i == dim ? st : zero;
      sizes[i] = i == dim ? len : in.dims[i];
    }
    return tpu_views_one(tpu_b_dynamic_slice(b, tpu_op_tensor(b, op, 0), starts, sizes), outs, nouts);
  }
  /* A static start: exactly narrow_copy (ops/shape.c), whose checks and messages it shares. */
  tpu_lower_fn_t narrow_copy = tpu_lowering_find("narrow_copy");
  if (!narrow_copy) return TPU_STATUS(TPU_INTERNAL, "narrow: no narrow_copy lowering");
  return narrow_copy(b, op, max_outs, outs, nouts);
}

/* squeeze(self) / squeeze.dim(self, dim) / squeeze.dims(self, dims): drops the
 * named (or all) dims of size 1; other named dims stay. */
static tpu_status_t* tpu_lower_squeeze(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool drop[TPU_MAX_RANK] = {false};
  if (tpu_op_kind(op, 1) == TPU_ARG_NONE) {
    for (int i = 0; i < in.rank; ++i) drop[i] = in.dims[i] == 1;
  } else {
    bool seen[TPU_MAX_RANK];
    if (!tpu_ops_dim_set(b, op, 1, in.rank, seen)) return NULL;
    for (int d = 0; d < in.rank; ++d) drop[d] = seen[d] && in.dims[d] == 1;
  }
  int64_t dims[TPU_MAX_RANK];
  int m = 0;
  for (int i = 0; i < in.rank; ++i)
    if (!drop[i]) dims[m++] = in.dims[i];
  return tpu_views_one(tpu_b_reshape(b, tpu_op_tensor(b, op, 0), m, dims), outs, nouts);
}

/* constant_pad_nd(self, pad, value): pad holds (low, high) pairs from the last
 * dim backwards; negative amounts crop (stablehlo.pad does both). */
static tpu_status_t* tpu_lower_constant_pad_nd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* out_nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  int64_t pad[2 * TPU_MAX_RANK];
  int n = tpu_op_ints(op, 1, pad, 2 * TPU_MAX_RANK);
  if (n % 2 != 0 || n / 2 > a.rank)
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "constant_pad_nd: padding length must be even and at most twice the rank %d, got %d", a.rank, n);
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
  for (int k = 0; k < n / 2; ++k) {
    int d = a.rank - 1 - k;
    lo[d] = pad[2 * k];
    hi[d] = pad[2 * k + 1];
    if (a.dims[d] + lo[d] + hi[d] < 0)
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "constant_pad_nd: dim %d of size %lld padded by (%lld, %lld) is negative",
                        d, (long long)a.dims[d], (long long)lo[d], (long long)hi[d]);
  }
  tpu_val_t value = tpu_op_kind(op, 2) == TPU_ARG_NONE ? tpu_b_const(b, a.dtype, 0.0) : tpu_op_scalar(b, op, 2, a.dtype);
  outs[0] = tpu_b_pad(b, tpu_op_tensor(b, op, 0), value, lo, hi, NULL);
  *out_nouts = 1;
  return NULL;
}

/* unsqueeze(self, dim): dim wraps over rank + 1. */
static tpu_status_t* tpu_lower_unsqueeze(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                         int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int d = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank + 1);
  if (!tpu_b_ok(b)) return NULL;
  if (in.rank + 1 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "unsqueeze: rank %d is the most tpu tensors have", TPU_MAX_RANK);
    return NULL;
  }
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0, j = 0; i <= in.rank; ++i) dims[i] = i == d ? 1 : in.dims[j++];
  return tpu_views_one(tpu_b_reshape(b, tpu_op_tensor(b, op, 0), in.rank + 1, dims), outs, nouts);
}

/* ============================================================== diagonal */

/* x transposed so that dim1, dim2 come last, and where its diagonal lies in the
 * flattened last two dims: len elements from `lo` with stride n2 + 1. */
typedef struct tpu_views_diag {
  int rank;
  int64_t perm[TPU_MAX_RANK], inv[TPU_MAX_RANK];
  int64_t tdims[TPU_MAX_RANK]; /* the transposed dims */
  int64_t out[TPU_MAX_RANK];   /* the diagonal's dims: the rest, then len */
  int64_t n1, n2, len, lo;
} tpu_views_diag_t;

static bool tpu_views_diag_args(tpu_builder_t* b, const tpu_op_t* op, int first, const tpu_aval_t* in,
                                tpu_views_diag_t* g) {
  int64_t off = tpu_op_int(op, first, 0);
  int d1 = tpu_ops_dim(b, tpu_op_int(op, first + 1, 0), in->rank);
  int d2 = tpu_ops_dim(b, tpu_op_int(op, first + 2, 1), in->rank);
  if (!tpu_b_ok(b)) return false;
  if (d1 == d2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "diagonal dimensions cannot be identical %" PRId64 ", %" PRId64,
               tpu_op_int(op, first + 1, 0), tpu_op_int(op, first + 2, 1));
    return false;
  }
  if (in->rank < 2) { /* unreachable: two distinct dims need rank 2 */
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "diagonal: expected a tensor of at least 2 dimensions");
    return false;
  }
  g->rank = in->rank;
  int m = 0;
  for (int i = 0; i < in->rank; ++i)
    if (i != d1 && i != d2) g->perm[m++] = i;
  g->perm[m] = d1;
  g->perm[m + 1] = d2;
  for (int i = 0; i < in->rank; ++i) {
    g->tdims[i] = in->dims[g->perm[i]];
    g->inv[g->perm[i]] = i;
  }
  g->n1 = in->dims[d1];
  g->n2 = in->dims[d2];
  int64_t len = off >= 0 ? (g->n1 < g->n2 - off ? g->n1 : g->n2 - off) : (g->n1 + off < g->n2 ? g->n1 + off : g->n2);
  g->len = len > 0 ? len : 0;
  g->lo = g->len == 0 ? 0 : (off >= 0 ? off : -off * g->n2);
  memcpy(g->out, g->tdims, sizeof(int64_t) * (size_t)m);
  g->out[m] = g->len;
  return true;
}

/* diagonal(self, offset, dim1, dim2): the diagonal becomes the last dim. */
static tpu_status_t* tpu_lower_diagonal(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                        int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_views_diag_t g;
  if (!tpu_views_diag_args(b, op, 1, &in, &g)) return NULL;
  int r = in.rank - 1;
  tpu_aval_t oa = tpu_aval_make(in.dtype, r, g.out);
  if (tpu_aval_numel(&oa) == 0) return tpu_views_one(tpu_b_full(b, &oa, 0.0), outs, nouts);
  tpu_val_t x = tpu_b_transpose(b, tpu_op_tensor(b, op, 0), g.perm);
  int64_t flat[TPU_MAX_RANK], lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK], st[TPU_MAX_RANK];
  memcpy(flat, g.tdims, sizeof(flat));
  flat[r - 1] = g.n1 * g.n2;
  x = tpu_b_reshape(b, x, r, flat);
  for (int i = 0; i < r; ++i) {
    hi[i] = flat[i];
    st[i] = 1;
  }
  lo[r - 1] = g.lo;
  hi[r - 1] = g.lo + (g.len - 1) * (g.n2 + 1) + 1;
  st[r - 1] = g.n2 + 1;
  return tpu_views_one(tpu_b_slice(b, x, lo, hi, st), outs, nouts);
}

/* diagonal_scatter(self, src, offset, dim1, dim2): src spread along the diagonal
 * with an interior pad (n2 zeros between elements), chosen by a diagonal mask. */
static tpu_status_t* tpu_lower_diagonal_scatter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 1);
  tpu_views_diag_t g;
  if (!tpu_views_diag_args(b, op, 2, &in, &g)) return NULL;
  int r = in.rank - 1;
  if (!tpu_views_src_ok(b, &sa, r, g.out)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  tpu_aval_t oa = tpu_aval_make(in.dtype, r, g.out);
  if (tpu_aval_numel(&oa) == 0) return tpu_views_one(x, outs, nouts);
  tpu_val_t src = tpu_b_convert(b, tpu_op_tensor(b, op, 1), in.dtype);
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, inner[TPU_MAX_RANK] = {0};
  int64_t nn = g.n1 * g.n2;
  lo[r - 1] = g.lo;
  inner[r - 1] = g.n2;
  hi[r - 1] = nn - g.lo - (g.len - 1) * (g.n2 + 1) - 1;
  tpu_val_t spread = tpu_b_pad(b, src, tpu_b_const(b, in.dtype, 0.0), lo, hi, inner);
  spread = tpu_b_reshape(b, spread, in.rank, g.tdims);
  /* mask[i, j] = (j - i == offset) over the last two dims */
  tpu_aval_t ma = tpu_aval_make(TPU_I64, 2, (int64_t[]){g.n1, g.n2});
  tpu_val_t diff = tpu_b_binary(b, "stablehlo.subtract", tpu_b_iota(b, &ma, 1), tpu_b_iota(b, &ma, 0));
  tpu_val_t mask = tpu_b_compare(b, "EQ", diff, tpu_b_full(b, &ma, (double)tpu_op_int(op, 2, 0)));
  int64_t bd[2] = {in.rank - 2, in.rank - 1};
  mask = tpu_b_broadcast_in_dim(b, mask, in.rank, g.tdims, bd);
  tpu_val_t xt = tpu_b_transpose(b, x, g.perm);
  tpu_val_t y = tpu_b_select(b, mask, spread, xt);
  return tpu_views_one(tpu_b_transpose(b, y, g.inv), outs, nouts);
}

/* ================================================================= unfold */

/* unfold(self, dimension, size, step): windows along dimension, the window
 * elements as a new last dim. One gather of window*step + k. */
static tpu_status_t* tpu_lower_unfold(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  int d = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  int64_t size = tpu_op_int(op, 2, 0), step = tpu_op_int(op, 3, 1);
  tpu_aval_t x1 = in; /* a 0-dim tensor unfolds as [1] */
  if (in.rank == 0) {
    x1.rank = 1;
    x1.dims[0] = 1;
  }
  int64_t n = x1.dims[d];
  if (size > n) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "maximum size for tensor at dimension %d is %" PRId64 " but size is %" PRId64,
               d, n, size);
    return NULL;
  }
  if (size < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "size is %" PRId64 " but must be >= 0", size);
    return NULL;
  }
  if (step <= 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "step is %" PRId64 " but must be > 0", step);
    return NULL;
  }
  if (x1.rank + 1 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "unfold: rank %d is the most tpu tensors have", TPU_MAX_RANK);
    return NULL;
  }
  int64_t nwin = (n - size) / step + 1;
  int64_t od[TPU_MAX_RANK], wd[TPU_MAX_RANK], perm[TPU_MAX_RANK];
  memcpy(od, x1.dims, sizeof(od));
  od[d] = nwin;
  od[x1.rank] = size;
  int orank = in.rank == 0 ? 1 : in.rank + 1;
  if (in.rank == 0) od[0] = size;
  tpu_aval_t oa = tpu_aval_make(in.dtype, orank, od);
  if (tpu_aval_numel(&oa) == 0) return tpu_views_one(tpu_b_full(b, &oa, 0.0), outs, nouts);
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), x1.rank, x1.dims);
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2, (int64_t[]){nwin, size});
  tpu_val_t idx = tpu_b_binary(b, "stablehlo.add",
                               tpu_b_binary(b, "stablehlo.multiply", tpu_b_iota(b, &ia, 0), tpu_b_full(b, &ia, (double)step)),
                               tpu_b_iota(b, &ia, 1));
  int64_t nk = nwin * size;
  x = tpu_idx_select(b, x, d, tpu_b_reshape(b, idx, 1, &nk));
  /* [.., nwin*size, ..] -> [.., nwin, size, ..] -> size moved last */
  for (int i = 0, j = 0; i < x1.rank; ++i, ++j) {
    if (i == d) {
      wd[j++] = nwin;
      wd[j] = size;
    } else {
      wd[j] = x1.dims[i];
    }
  }
  x = tpu_b_reshape(b, x, x1.rank + 1, wd);
  for (int i = 0, j = 0; i <= x1.rank; ++i)
    if (i != d + 1) perm[j++] = i;
  perm[x1.rank] = d + 1;
  x = tpu_b_transpose(b, x, perm);
  return tpu_views_one(tpu_b_reshape(b, x, orank, od), outs, nouts);
}

/* ============================================================ split/unbind */

/* Pieces of x along dim with the given sizes (all >= 0, summing to the size). */
static void tpu_views_pieces(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* in, int dim, int64_t n,
                             const int64_t* sizes, int64_t uniform, tpu_val_t* outs) {
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK];
  memcpy(hi, in->dims, sizeof(hi));
  int64_t at = 0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t len = sizes ? sizes[k] : (uniform < in->dims[dim] - at ? uniform : in->dims[dim] - at);
    lo[dim] = at;
    hi[dim] = at + len;
    outs[k] = tpu_b_slice(b, x, lo, hi, NULL);
    at += len;
  }
}

/* split.Tensor(self, split_size, dim) / split.sizes / split_with_sizes(self,
 * split_sizes, dim) and their _copy forms: an INT_LIST is a list of sizes. */
static tpu_status_t* tpu_lower_split(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  const char* name = tpu_op_name(op);
  if (in.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s expects at least a 1-dimensional tensor", name);
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  int64_t size = in.dims[dim];
  if (tpu_op_kind(op, 1) == TPU_ARG_INT_LIST) {
    int n = tpu_op_list_len(op, 1);
    if (!tpu_views_room(b, name, n, max_outs)) return NULL;
    int64_t* sizes = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!sizes) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
    n = tpu_op_ints(op, 1, sizes, n);
    int64_t sum = 0;
    bool neg = false, over = false;
    for (int k = 0; k < n; ++k) {
      neg = neg || sizes[k] < 0;
      if (sizes[k] > 0 && sizes[k] > INT64_MAX - sum) over = true;
      else if (sizes[k] > 0) sum += sizes[k];
    }
    if (neg || over || sum != size) {
      char s[512];
      tpu_views_fmt(s, sizeof(s), n, sizes);
      if (neg)
        TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                   "split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes=%s", s);
      else
        TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                   "split_with_sizes expects split_sizes to sum exactly to %" PRId64
                   " (input tensor's size at dimension %d), but got split_sizes=%s", size, dim, s);
    } else {
      tpu_views_pieces(b, tpu_op_tensor(b, op, 0), &in, dim, n, sizes, 0, outs);
      *nouts = n;
    }
    free(sizes);
    return NULL;
  }
  int64_t split = tpu_op_int(op, 1, 0);
  if (split < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "split expects split_size be non-negative, but got split_size=%" PRId64, split);
    return NULL;
  }
  if (split == 0 && size != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "split_size can only be 0 if dimension size is 0, but got dimension size of %" PRId64, size);
    return NULL;
  }
  int64_t n = split == 0 ? 1 : size / split + (size % split != 0);
  if (n == 0) n = 1; /* an empty dim still gives one (empty) piece */
  if (!tpu_views_room(b, name, n, max_outs)) return NULL;
  tpu_views_pieces(b, tpu_op_tensor(b, op, 0), &in, dim, n, NULL, split, outs);
  *nouts = (int)n;
  return NULL;
}

/* unbind.int(self, dim): one result per index along dim, dim removed. */
static tpu_status_t* tpu_lower_unbind(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.rank == 0) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension specified as 0 but tensor has no dimensions");
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  int64_t n = in.dims[dim], rest[TPU_MAX_RANK];
  if (!tpu_views_room(b, tpu_op_name(op), n, max_outs)) return NULL;
  int m = tpu_views_drop(in.dims, in.rank, dim, rest);
  tpu_views_pieces(b, tpu_op_tensor(b, op, 0), &in, dim, n, NULL, 1, outs);
  for (int64_t k = 0; k < n; ++k) outs[k] = tpu_b_reshape(b, outs[k], m, rest);
  *nouts = (int)n;
  return NULL;
}

/* stack(tensors, dim): cat of the inputs unsqueezed at dim (dtypes promote). */
static tpu_status_t* tpu_lower_stack(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int n = tpu_op_list_len(op, 0);
  if (n == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "stack expects a non-empty TensorList");
    return NULL;
  }
  tpu_aval_t a0 = tpu_op_list_aval(op, 0, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, 0), a0.rank + 1);
  if (!tpu_b_ok(b)) return NULL;
  if (a0.rank + 1 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "stack: rank %d is the most tpu tensors have", TPU_MAX_RANK);
    return NULL;
  }
  tpu_dtype_t rt = a0.dtype;
  for (int j = 1; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, 0, j);
    bool same = a.rank == a0.rank;
    for (int i = 0; same && i < a.rank; ++i) same = a.dims[i] == a0.dims[i];
    if (!same) {
      char s0[256], s1[256];
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "stack expects each tensor to be equal size, but got %s at entry 0 and %s at entry %d",
                 tpu_views_fmt(s0, sizeof(s0), a0.rank, a0.dims), tpu_views_fmt(s1, sizeof(s1), a.rank, a.dims), j);
      return NULL;
    }
    rt = tpu_dtype_promote(rt, a.dtype);
  }
  int64_t one[TPU_MAX_RANK];
  for (int i = 0, j = 0; i <= a0.rank; ++i) one[i] = i == dim ? 1 : a0.dims[j++];
  tpu_val_t* parts = malloc(sizeof(tpu_val_t) * (size_t)n);
  if (!parts) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  for (int j = 0; j < n; ++j)
    parts[j] = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_list_tensor(b, op, 0, j), rt), a0.rank + 1, one);
  tpu_val_t r = tpu_b_concat(b, n, parts, dim);
  free(parts);
  return tpu_views_one(r, outs, nouts);
}

/* ============================================================== as_strided */

/* The flat positions offset + sum(i_k * stride_k) of a (size, stride,
 * storage_offset) view at args first..first+2 over a storage of `numel`
 * elements, as a 1-D i64 value; *out gets the view's sizes. */
static tpu_val_t tpu_views_strided_index(tpu_builder_t* b, const tpu_op_t* op, int first, const tpu_aval_t* in,
                                         tpu_aval_t* out) {
  int64_t size[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  int n = tpu_op_ints(op, first, size, TPU_MAX_RANK);
  int ns = tpu_op_ints(op, first + 1, stride, TPU_MAX_RANK);
  int64_t offset = tpu_op_int(op, first + 2, 0);
  char s0[256], s1[256];
  if (n != ns) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "mismatch in length of strides and shape");
    return TPU_NOVAL;
  }
  for (int k = 0; k < n; ++k) {
    if (stride[k] < 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "as_strided: Negative strides are not supported at the moment, got strides: %s",
                 tpu_views_fmt(s0, sizeof(s0), ns, stride));
      return TPU_NOVAL;
    }
    if (size[k] < 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Trying to create tensor with negative dimension %" PRId64 ": %s", size[k],
                 tpu_views_fmt(s0, sizeof(s0), n, size));
      return TPU_NOVAL;
    }
  }
  if (offset < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Tensor: invalid storage offset %" PRId64, offset);
    return TPU_NOVAL;
  }
  *out = tpu_aval_make(in->dtype, n, size);
  int64_t numel = tpu_aval_numel(out), have = tpu_aval_numel(in);
  /* the last element read: offset + sum((size_k - 1) * stride_k), overflow-safe */
  bool oob = false;
  int64_t need = offset;
  for (int k = 0; numel > 0 && k < n && !oob; ++k) {
    if (stride[k] != 0 && size[k] - 1 > (INT64_MAX - need) / stride[k]) oob = true;
    else need += (size[k] - 1) * stride[k];
  }
  if (numel > 0 && (oob || need >= have)) {
    size_t isz = tpu_dtype_size(in->dtype);
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "setStorage: sizes %s, strides %s, storage offset %" PRId64 ", and itemsize %zu requiring a storage "
               "size of %" PRId64 " are out of bounds for storage of size %" PRId64,
               tpu_views_fmt(s0, sizeof(s0), n, size), tpu_views_fmt(s1, sizeof(s1), n, stride), offset, isz,
               oob ? INT64_MAX : (need + 1) * (int64_t)isz, have * (int64_t)isz);
    return TPU_NOVAL;
  }
  if (numel == 0) return TPU_NOVAL;
  tpu_aval_t ia = tpu_aval_make(TPU_I64, n, size);
  tpu_val_t idx = tpu_ops_bcast(b, tpu_b_const_i(b, TPU_I64, offset), &ia);
  for (int k = 0; k < n; ++k) {
    if (stride[k] == 0 || size[k] == 1) continue;
    tpu_val_t term = tpu_b_binary(b, "stablehlo.multiply", tpu_b_iota(b, &ia, k),
                                  tpu_ops_bcast(b, tpu_b_const_i(b, TPU_I64, stride[k]), &ia));
    idx = tpu_b_binary(b, "stablehlo.add", idx, term);
  }
  return tpu_b_reshape(b, idx, 1, &numel);
}

/* as_strided(self, size, stride, storage_offset) */
static tpu_status_t* tpu_lower_as_strided(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), oa;
  tpu_val_t idx = tpu_views_strided_index(b, op, 1, &in, &oa);
  if (!tpu_b_ok(b)) return NULL;
  if (idx == TPU_NOVAL) return tpu_views_one(tpu_b_full(b, &oa, 0.0), outs, nouts);
  int64_t have = tpu_aval_numel(&in);
  tpu_val_t flat = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 1, &have);
  tpu_val_t r = tpu_idx_select(b, flat, 0, idx);
  return tpu_views_one(tpu_b_reshape(b, r, oa.rank, oa.dims), outs, nouts);
}

/* as_strided_scatter(self, src, size, stride, storage_offset): self's flat
 * positions of the view replaced by src. */
static tpu_status_t* tpu_lower_as_strided_scatter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                  int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 1), oa;
  tpu_val_t idx = tpu_views_strided_index(b, op, 2, &in, &oa);
  if (!tpu_b_ok(b) || !tpu_views_src_ok(b, &sa, oa.rank, oa.dims)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (idx == TPU_NOVAL) return tpu_views_one(x, outs, nouts);
  int64_t have = tpu_aval_numel(&in), n = tpu_aval_numel(&oa);
  tpu_val_t flat = tpu_b_reshape(b, x, 1, &have);
  tpu_val_t src = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), in.dtype), 1, &n);
  flat = tpu_idx_put_along(b, flat, 0, idx, src, NULL);
  return tpu_views_one(tpu_b_reshape(b, flat, in.rank, in.dims), outs, nouts);
}

/* ============================================================== scatters */

/* slice_scatter with a runtime start (a KV cache written at the decode position
 * inside a program): src's length along dim is the slice's, the end is implied,
 * the step must be 1; the start is clamped into range like dynamic_update_slice. */
static tpu_status_t* tpu_views_slice_scatter_at(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 1);
  if (in.rank == 0 || sa.rank != in.rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "slice_scatter: src rank %d for a tensor of rank %d", sa.rank, in.rank);
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  if (tpu_op_int(op, 5, 1) != 1) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "slice_scatter: a runtime start needs step 1");
    return NULL;
  }
  for (int i = 0; i < in.rank; ++i)
    if (sa.dims[i] != in.dims[i] && i != dim) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "slice_scatter: src size %lld at dim %d, expected %lld",
                 (long long)sa.dims[i], i, (long long)in.dims[i]);
      return NULL;
    }
  tpu_val_t start = tpu_op_index(b, op, 3);
  tpu_val_t size = tpu_b_const_i(b, TPU_I64, in.dims[dim]);
  tpu_val_t neg = tpu_b_compare(b, "LT", start, tpu_b_const_i(b, TPU_I64, 0));
  start = tpu_b_select(b, neg, tpu_b_binary(b, "stablehlo.add", start, size), start);
  tpu_val_t starts[TPU_MAX_RANK], zero = tpu_b_const_i(b, TPU_I64, 0);
  for (int i = 0; i < in.rank; ++i) starts[i] = i == dim ? start : zero;
  tpu_val_t src = tpu_b_convert(b, tpu_op_tensor(b, op, 1), in.dtype);
  return tpu_views_one(tpu_b_dynamic_update_slice(b, tpu_op_tensor(b, op, 0), src, starts), outs, nouts);
}

/* slice_scatter(self, src, dim, start, end, step) */
static tpu_status_t* tpu_lower_slice_scatter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  (void)max_outs;
  if (tpu_op_is_runtime(op, 3)) return tpu_views_slice_scatter_at(b, op, outs, nouts);
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 1);
  tpu_views_slice_t s;
  if (!tpu_views_slice_args(b, op, 2, &in, &s)) return NULL;
  int64_t want[TPU_MAX_RANK];
  memcpy(want, in.dims, sizeof(want));
  want[s.dim] = s.len;
  if (!tpu_views_src_ok(b, &sa, in.rank, want)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  tpu_aval_t wa = tpu_aval_make(in.dtype, in.rank, want);
  if (tpu_aval_numel(&wa) == 0) return tpu_views_one(x, outs, nouts);
  tpu_val_t src = tpu_b_convert(b, tpu_op_tensor(b, op, 1), in.dtype);
  if (s.step == 1) {
    tpu_val_t starts[TPU_MAX_RANK];
    tpu_val_t zero = tpu_b_const_i(b, TPU_I64, 0);
    for (int i = 0; i < in.rank; ++i) starts[i] = i == s.dim ? tpu_b_const_i(b, TPU_I64, s.start) : zero;
    return tpu_views_one(tpu_b_dynamic_update_slice(b, x, src, starts), outs, nouts);
  }
  /* step > 1: src spread by an interior pad, chosen by a mask along dim */
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, inner[TPU_MAX_RANK] = {0};
  int64_t span = (s.len - 1) * s.step + 1;
  lo[s.dim] = s.start;
  inner[s.dim] = s.step - 1;
  hi[s.dim] = in.dims[s.dim] - s.start - span;
  tpu_val_t spread = tpu_b_pad(b, src, tpu_b_const(b, in.dtype, 0.0), lo, hi, inner);
  int64_t n = in.dims[s.dim];
  tpu_aval_t ma = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t rel = tpu_b_binary(b, "stablehlo.subtract", tpu_b_iota(b, &ma, 0), tpu_b_full(b, &ma, (double)s.start));
  tpu_val_t in_span = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", rel, tpu_b_full(b, &ma, 0.0)),
                                   tpu_b_compare(b, "LT", rel, tpu_b_full(b, &ma, (double)span)));
  tpu_val_t on_step = tpu_b_compare(b, "EQ", tpu_b_binary(b, "stablehlo.remainder", rel, tpu_b_full(b, &ma, (double)s.step)),
                                    tpu_b_full(b, &ma, 0.0));
  tpu_val_t mask = tpu_b_binary(b, "stablehlo.and", in_span, on_step);
  int64_t bd = s.dim;
  mask = tpu_b_broadcast_in_dim(b, mask, in.rank, in.dims, &bd);
  return tpu_views_one(tpu_b_select(b, mask, spread, x), outs, nouts);
}

/* select_scatter(self, src, dim, index) */
static tpu_status_t* tpu_lower_select_scatter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0), sa = tpu_op_aval(op, 1);
  int dim;
  int64_t index, rest[TPU_MAX_RANK], one[TPU_MAX_RANK];
  if (!tpu_views_select_args(b, op, 2, &in, &dim, &index)) return NULL;
  int m = tpu_views_drop(in.dims, in.rank, dim, rest);
  if (!tpu_views_src_ok(b, &sa, m, rest)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  memcpy(one, in.dims, sizeof(one));
  one[dim] = 1;
  tpu_aval_t oa = tpu_aval_make(in.dtype, in.rank, one);
  if (tpu_aval_numel(&oa) == 0) return tpu_views_one(x, outs, nouts);
  tpu_val_t src = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), in.dtype), in.rank, one);
  tpu_val_t starts[TPU_MAX_RANK];
  tpu_val_t zero = tpu_b_const_i(b, TPU_I64, 0);
  for (int i = 0; i < in.rank; ++i) starts[i] = i == dim ? tpu_b_const_i(b, TPU_I64, index) : zero;
  return tpu_views_one(tpu_b_dynamic_update_slice(b, x, src, starts), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_views[] = {
    {"view", tpu_lower_view},
    {"view_copy", tpu_lower_view},
    {"_unsafe_view", tpu_lower_view},
    {"reshape", tpu_lower_view},
    {"_reshape_copy", tpu_lower_view},
    {"alias", tpu_lower_alias},
    {"view_as_real", tpu_lower_view_as_real},
    {"view_as_real_copy", tpu_lower_view_as_real},
    {"view_as_complex", tpu_lower_view_as_complex},
    {"view_as_complex_copy", tpu_lower_view_as_complex},
    {"alias_copy", tpu_lower_alias},
    {"detach", tpu_lower_alias},
    {"detach_copy", tpu_lower_alias},
    {"permute", tpu_lower_permute},
    {"permute_copy", tpu_lower_permute},
    {"transpose", tpu_lower_transpose},
    {"transpose_copy", tpu_lower_transpose},
    {"t", tpu_lower_t},
    {"t_copy", tpu_lower_t},
    {"expand", tpu_lower_expand},
    {"expand_copy", tpu_lower_expand},
    {"slice", tpu_lower_slice},
    {"slice_copy", tpu_lower_slice},
    {"select", tpu_lower_select},
    {"select_copy", tpu_lower_select},
    {"narrow", tpu_lower_narrow},
    {"squeeze", tpu_lower_squeeze},
    {"squeeze_copy", tpu_lower_squeeze},
    {"unsqueeze", tpu_lower_unsqueeze},
    {"unsqueeze_copy", tpu_lower_unsqueeze},
    {"diagonal", tpu_lower_diagonal},
    {"diagonal_copy", tpu_lower_diagonal},
    {"unfold", tpu_lower_unfold},
    {"unfold_copy", tpu_lower_unfold},
    {"split", tpu_lower_split},
    {"split_copy", tpu_lower_split},
    {"split_with_sizes", tpu_lower_split},
    {"split_with_sizes_copy", tpu_lower_split},
    {"unbind", tpu_lower_unbind},
    {"unbind_copy", tpu_lower_unbind},
    {"stack", tpu_lower_stack},
    {"as_strided", tpu_lower_as_strided},
    {"as_strided_copy", tpu_lower_as_strided},
    {"slice_scatter", tpu_lower_slice_scatter},
    {"select_scatter", tpu_lower_select_scatter},
    {"diagonal_scatter", tpu_lower_diagonal_scatter},
    {"as_strided_scatter", tpu_lower_as_strided_scatter},
    {"constant_pad_nd", tpu_lower_constant_pad_nd},
    {NULL, NULL},
};
