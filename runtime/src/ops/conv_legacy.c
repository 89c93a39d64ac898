/* Lowerings: the legacy convolution overloads (_conv_depthwise2d,
 * conv_depthwise3d, slow_conv3d_forward, slow_conv_dilated{2,3}d,
 * slow_conv_transpose{2,3}d, _slow_conv2d_forward / _backward).
 *
 * They are the kernels aten::convolution picks on CPU and CUDA, each with a
 * fixed subset of convolution's parameters and an explicit kernel_size, so all
 * of them are convolution's lowering (matmul.h) after reading their arguments:
 * (self, weight, kernel_size, bias, stride, padding, [output_padding],
 * [dilation]); the backward is (grad_output, self, weight, kernel_size, stride,
 * padding, [output_mask]). */
#include <stdio.h>
#include <string.h>

#include "matmul.h"

/* What an input of rank nsp + 1 (no batch dim) becomes. */
typedef enum {
  TPU_CL_BATCHED_ONLY, /* rejected with rank_msg */
  TPU_CL_SQUEEZE,      /* convolved as a batch of one, the batch dim dropped again */
  TPU_CL_KEEP,         /* ... and kept: slow_conv_transpose2d's CPU kernel returns [1, C, H, W] */
} tpu_cl_unbatched_t;

typedef struct tpu_conv_legacy {
  const char* name;
  int nsp;
  bool transposed;
  bool depthwise;   /* groups = input channels */
  int outpad_i;     /* arg index of output_padding, -1: none */
  int dil_i;        /* arg index of dilation, -1: none (1) */
  bool flat_weight; /* also takes weight as [O, C * prod(kernel_size)] (the im2col kernel's layout) */
  tpu_cl_unbatched_t unbatched;
  const char* rank_msg; /* PyTorch's message for a wrong input rank */
} tpu_conv_legacy_t;

static const tpu_conv_legacy_t tpu_conv_legacies[] = {
    {"_conv_depthwise2d", 2, false, true, -1, 6, false, TPU_CL_BATCHED_ONLY, "Expected 4D input tensor, but got: %s"},
    {"conv_depthwise3d", 3, false, true, -1, 6, false, TPU_CL_BATCHED_ONLY, "non-empty 5D tensor expected for input"},
    {"slow_conv3d_forward", 3, false, false, -1, -1, false, TPU_CL_BATCHED_ONLY,
     "non-empty 5D input tensor expected but got: %s"},
    {"slow_conv_dilated2d", 2, false, false, -1, 6, false, TPU_CL_SQUEEZE, "input must be 4D or 5D tensor but got %dD tensor"},
    {"slow_conv_dilated3d", 3, false, false, -1, 6, false, TPU_CL_SQUEEZE, "input must be 4D or 5D tensor but got %dD tensor"},
    {"slow_conv_transpose2d", 2, true, false, 6, 7, false, TPU_CL_KEEP,
     "non-empty 3D or 4D input tensor expected but got a tensor with size %s"},
    {"slow_conv_transpose3d", 3, true, false, 6, 7, false, TPU_CL_SQUEEZE,
     "non-empty 4D or 5D (batch mode) tensor expected for input, but got: %s"},
    {"_slow_conv2d_forward", 2, false, false, -1, -1, true, TPU_CL_BATCHED_ONLY, "Expected 4D input tensor, but got: %s"},
    {"_slow_conv2d_backward", 2, false, false, -1, -1, true, TPU_CL_BATCHED_ONLY, "Expected 4D input tensor, but got: %s"},
};

static const tpu_conv_legacy_t* tpu_conv_legacy_find(tpu_builder_t* b, const tpu_op_t* op) {
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_conv_legacies); ++i)
    if (strcmp(tpu_op_name(op), tpu_conv_legacies[i].name) == 0) return &tpu_conv_legacies[i];
  TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: not a legacy convolution", tpu_op_name(op));
  return NULL;
}

/* a with a leading batch dim of 1 when its rank is rank - 1 (an unbatched input). */
static tpu_aval_t tpu_conv_batch1(const tpu_aval_t* a, int rank) {
  tpu_aval_t r = *a;
  if (a->rank == rank - 1) {
    r.rank = rank;
    r.dims[0] = 1;
    memcpy(r.dims + 1, a->dims, sizeof(int64_t) * (size_t)a->rank);
  }
  return r;
}

/* The input as convolution's [N, C, S...]: a batch of one for an unbatched input. */
static bool tpu_conv_legacy_input(tpu_builder_t* b, const tpu_conv_legacy_t* v, const tpu_aval_t* x, tpu_aval_t* x4) {
  *x4 = *x;
  bool unbatched = x->rank == v->nsp + 1 && v->unbatched != TPU_CL_BATCHED_ONLY;
  if (x->rank != v->nsp + 2 && !unbatched) {
    char s[256], msg[400];
    tpu_fmt_i64_list(s, sizeof(s), x->rank, x->dims);
    /* The message names the input's sizes (%s), its rank (%d) or neither. */
    if (strstr(v->rank_msg, "%d"))
      snprintf(msg, sizeof(msg), v->rank_msg, x->rank);
    else
      snprintf(msg, sizeof(msg), v->rank_msg, s);
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s", msg);
    return false;
  }
  if (unbatched) *x4 = tpu_conv_batch1(x, x->rank + 1);
  return true;
}

/* The weight as convolution's [O, C/g, K...], checked against kernel_size. */
static bool tpu_conv_legacy_weight(tpu_builder_t* b, const tpu_conv_legacy_t* v, const int64_t* k, const tpu_aval_t* w,
                                   tpu_aval_t* w4) {
  char ws[200], ks[200];
  int64_t kn = 1;
  for (int i = 0; i < v->nsp; ++i) kn *= k[i];
  *w4 = *w;
  if (v->flat_weight && w->rank == 2 && kn > 0 && w->dims[1] % kn == 0) {
    w4->rank = v->nsp + 2;
    w4->dims[1] = w->dims[1] / kn;
    memcpy(w4->dims + 2, k, sizeof(int64_t) * (size_t)v->nsp);
  }
  if (w4->rank != v->nsp + 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "weight must be %dD tensor but got %dD tensor dim=%d", v->nsp + 2, w->rank,
               w->rank);
    return false;
  }
  if (memcmp(w4->dims + 2, k, sizeof(int64_t) * (size_t)v->nsp) != 0) {
    tpu_fmt_i64_list(ws, sizeof(ws), v->nsp, w4->dims + 2);
    tpu_fmt_i64_list(ks, sizeof(ks), v->nsp, k);
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "weight[2:] shape %s must be equal to kernel_size %s", ws, ks);
    return false;
  }
  return true;
}

/* Appends " <what>_<dim name>: v" for each spatial dim, as PyTorch's messages. */
static int tpu_conv_legacy_fmt_dims(char* buf, size_t cap, const char* what, int nsp, const int64_t* v) {
  static const char* names[3] = {"depth", "height", "width"};
  int n = 0;
  for (int i = 0; i < nsp && (size_t)n < cap; ++i)
    n += snprintf(buf + n, cap - (size_t)n, " %s_%s: %" PRId64, what, names[3 - nsp + i], v[i]);
  return n;
}

/* A transposed conv's output_padding must be below stride or dilation (the
 * slow_conv_transpose kernels' check; aten::convolution has none). */
static bool tpu_conv_legacy_outpad(tpu_builder_t* b, const tpu_conv_params_t* p) {
  for (int i = 0; i < p->nsp; ++i) {
    if (p->output_padding[i] >= p->stride[i] && p->output_padding[i] >= p->dilation[i]) {
      char s[512];
      int n = tpu_conv_legacy_fmt_dims(s, sizeof(s), "output_padding", p->nsp, p->output_padding);
      n += tpu_conv_legacy_fmt_dims(s + n, sizeof(s) - (size_t)n, "stride", p->nsp, p->stride);
      tpu_conv_legacy_fmt_dims(s + n, sizeof(s) - (size_t)n, "dilation", p->nsp, p->dilation);
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "output padding must be smaller than either stride or dilation, but got%s",
                 s);
      return false;
    }
  }
  return true;
}

/* grad_output must have the forward's output shape (the slow_conv2d kernel's
 * shape check, dim 1 first). */
static bool tpu_conv_legacy_grad_shape(tpu_builder_t* b, const tpu_aval_t* ga, const tpu_aval_t* x4,
                                       const tpu_aval_t* w4, const tpu_conv_params_t* p) {
  int64_t want[TPU_MAX_RANK] = {x4->dims[0], w4->dims[0]};
  for (int i = 0; i < p->nsp; ++i)
    want[2 + i] = (x4->dims[2 + i] + 2 * p->padding[i] - p->dilation[i] * (w4->dims[2 + i] - 1) - 1) / p->stride[i] + 1;
  int r = x4->rank;
  for (int j = 0; j < r; ++j) {
    int d = (j + 1) % r;
    if (ga->rank != r || ga->dims[d] != want[d]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Expected a tensor of dimension %d and tensor.size[%d] == %" PRId64
                 " but got: dimension %d and tensor.size[%d] = %" PRId64,
                 r, d, want[d], ga->rank, d, d < ga->rank ? ga->dims[d] : 0);
      return false;
    }
  }
  return true;
}

/* Reads kernel_size (arg ks_i), stride (4), padding (5), output_padding and
 * dilation (the variant's args) into convolution's params for x4 and w (its
 * conv shape into w4), and checks them as convolution does. */
static bool tpu_conv_legacy_read(tpu_builder_t* b, const tpu_op_t* op, const tpu_conv_legacy_t* v, int ks_i,
                                 const tpu_aval_t* x4, const tpu_aval_t* w, tpu_aval_t* w4, tpu_conv_params_t* p) {
  memset(p, 0, sizeof(*p));
  p->nsp = v->nsp;
  p->transposed = v->transposed;
  int64_t k[TPU_MAX_RANK];
  for (int i = 0; i < v->nsp; ++i) p->dilation[i] = 1;
  if (!tpu_conv_param_list(b, op, ks_i, "kernel_size", v->nsp, k) ||
      !tpu_conv_param_list(b, op, 4, "stride", v->nsp, p->stride) ||
      !tpu_conv_param_list(b, op, 5, "padding", v->nsp, p->padding) ||
      (v->outpad_i >= 0 && !tpu_conv_param_list(b, op, v->outpad_i, "output_padding", v->nsp, p->output_padding)) ||
      (v->dil_i >= 0 && !tpu_conv_param_list(b, op, v->dil_i, "dilation", v->nsp, p->dilation)))
    return false;
  if (!tpu_conv_legacy_weight(b, v, k, w, w4)) return false;
  p->groups = v->depthwise ? x4->dims[1] : 1;
  if (!tpu_conv_check(b, x4, w4, p)) return false;
  return !v->transposed || tpu_conv_legacy_outpad(b, p);
}

/* The forward ops: (self, weight, kernel_size, bias, stride, padding, ...). */
static tpu_status_t* tpu_lower_conv_legacy(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  const tpu_conv_legacy_t* v = tpu_conv_legacy_find(b, op);
  tpu_aval_t xa = tpu_op_aval(op, 0), wa = tpu_op_aval(op, 1), x4, w4;
  tpu_conv_params_t p;
  if (!v || !tpu_conv_legacy_input(b, v, &xa, &x4) || !tpu_conv_legacy_read(b, op, v, 2, &x4, &wa, &w4, &p))
    return NULL;
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), x4.rank, x4.dims);
  tpu_val_t w = tpu_b_reshape(b, tpu_op_tensor(b, op, 1), w4.rank, w4.dims);
  tpu_val_t y = tpu_b_convert(b, tpu_conv_add_bias(b, op, 3, tpu_conv_apply(b, x, w, &p)), xa.dtype);
  if (tpu_b_ok(b) && x4.rank != xa.rank && v->unbatched == TPU_CL_SQUEEZE) {
    const tpu_aval_t* ya = tpu_b_aval(b, y);
    y = tpu_b_reshape(b, y, ya->rank - 1, ya->dims + 1);
  }
  return tpu_ops_result1(y, outs, nouts);
}

/* _slow_conv2d_backward(grad_output, self, weight, kernel_size, stride, padding,
 * [output_mask]) -> (grad_input, grad_weight, grad_bias), grad_weight in
 * weight's own layout (4-D or flat). */
static tpu_status_t* tpu_lower_slow_conv2d_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                    int* nouts) {
  (void)max_outs;
  const tpu_conv_legacy_t* v = tpu_conv_legacy_find(b, op);
  tpu_aval_t xa = tpu_op_aval(op, 1), wa = tpu_op_aval(op, 2), x4, w4;
  tpu_conv_params_t p;
  tpu_aval_t ga = tpu_op_aval(op, 0);
  if (!v || !tpu_conv_legacy_input(b, v, &xa, &x4) || !tpu_conv_legacy_read(b, op, v, 3, &x4, &wa, &w4, &p) ||
      !tpu_conv_legacy_grad_shape(b, &ga, &x4, &w4, &p))
    return NULL;
  bool mask[3];
  tpu_conv_mask(op, 6, mask);
  tpu_conv_grads(b, op, &p, mask, &xa, &w4, outs);
  outs[1] = tpu_b_reshape(b, outs[1], wa.rank, wa.dims);
  *nouts = 3;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_conv_legacy[] = {
    {"_conv_depthwise2d", tpu_lower_conv_legacy},
    {"conv_depthwise3d", tpu_lower_conv_legacy},
    {"slow_conv3d_forward", tpu_lower_conv_legacy},
    {"slow_conv_dilated2d", tpu_lower_conv_legacy},
    {"slow_conv_dilated3d", tpu_lower_conv_legacy},
    {"slow_conv_transpose2d", tpu_lower_conv_legacy},
    {"slow_conv_transpose3d", tpu_lower_conv_legacy},
    {"_slow_conv2d_forward", tpu_lower_conv_legacy},
    {"_slow_conv2d_backward", tpu_lower_slow_conv2d_backward},
    {NULL, NULL},
};
