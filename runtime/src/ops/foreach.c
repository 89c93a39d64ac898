/* _foreach_<op>: one lowering for every foreach op. Element j of each tensor
 * list (and of a scalar list) goes to <op>'s own lowering, so a foreach op is
 * exactly its per-tensor op, n times, in one program. Compiled optimizer steps
 * (torch.optim's default foreach path traced by Dynamo) are made of these. */
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "families.h"

#define TPU_FOREACH_PREFIX "_foreach_"

/* The overload of the per-tensor op: List/Tensor operands → "Tensor", Scalar
 * and ScalarList → "Scalar"; unary ops and ternaries keep theirs. */
static const char* tpu_foreach_base_overload(const char* base, const char* ovl) {
  if (strcmp(base, "addcmul") == 0 || strcmp(base, "addcdiv") == 0) return "";
  if (strcmp(ovl, "List") == 0 || strcmp(ovl, "Tensor") == 0) return "Tensor";
  if (strcmp(ovl, "ScalarList") == 0 || strcmp(ovl, "ScalarAndTensor") == 0) return "Scalar";
  return ovl;
}

/* The list length every list argument must have; -1 when they differ. */
static int tpu_foreach_len(const tpu_op_t* op) {
  int n = -2;
  for (int i = 0; i < tpu_op_nargs(op); ++i) {
    tpu_arg_kind_t k = tpu_op_kind(op, i);
    if (k != TPU_ARG_TENSOR_LIST && k != TPU_ARG_FLOAT_LIST && k != TPU_ARG_INT_LIST) continue;
    int len = tpu_op_list_len(op, i);
    if (n == -2) n = len;
    else if (n != len) return -1;
  }
  return n < 0 ? -1 : n;
}

/* Argument i of element j, referencing values it appends to vals[*nv]. A 1-D
 * tensor of n scalars in a ternary's Scalar position (addcdiv.Tensor) gives
 * its element j. */
static tpu_arg_t tpu_foreach_arg(tpu_builder_t* b, tpu_op_t* op, int i, int j, int n, bool ternary,
                                 tpu_val_t* vals, int* nv) {
  tpu_arg_t a = *tpu_op_arg(op, i);
  switch (a.kind) {
    case TPU_ARG_TENSOR_LIST:
      a.kind = TPU_ARG_VALUE;
      a.u.value = *nv;
      vals[(*nv)++] = tpu_op_list_tensor(b, op, i, j);
      break;
    case TPU_ARG_TENSOR: {
      tpu_aval_t av = tpu_op_aval(op, i);
      tpu_val_t t = tpu_op_tensor(b, op, i);
      if (ternary && av.rank == 1 && av.dims[0] == n) {
        int64_t lo = j, hi = j + 1;
        a.kind = TPU_ARG_VALUE_SCALAR;
        a.u.scalar.dtype = av.dtype;
        a.u.scalar.wrapped = true;
        a.u.scalar.i = *nv;
        vals[(*nv)++] = tpu_b_reshape(b, tpu_b_slice(b, t, &lo, &hi, NULL), 0, NULL);
      } else {
        a.kind = TPU_ARG_VALUE;
        a.u.value = *nv;
        vals[(*nv)++] = t;
      }
      break;
    }
    case TPU_ARG_FLOAT_LIST:
    case TPU_ARG_INT_LIST: {
      bool f = a.kind == TPU_ARG_FLOAT_LIST;
      double fv = f ? a.u.list.floats[j] : 0.0;
      int64_t iv = f ? 0 : a.u.list.ints[j];
      memset(&a, 0, sizeof(a));
      a.kind = TPU_ARG_SCALAR;
      a.u.scalar.dtype = f ? TPU_F64 : TPU_I64;
      a.u.scalar.wrapped = true;
      a.u.scalar.f = fv;
      a.u.scalar.i = iv;
      break;
    }
    default: break;
  }
  return a;
}

static tpu_status_t* tpu_lower_foreach(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                       int* out_nouts) {
  const char* name = tpu_op_name(op);
  const char* base = name + strlen(TPU_FOREACH_PREFIX);
  tpu_lower_fn_t fn = tpu_lowering_find(base);
  if (!fn) return TPU_STATUS(TPU_UNIMPLEMENTED, "%s: no lowering for aten::%s", name, base);
  int n = tpu_foreach_len(op), nargs = tpu_op_nargs(op);
  if (n < 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: the tensor lists must have the same length", name);
  if (n > max_outs) return TPU_STATUS(TPU_INTERNAL, "%s: %d results, room for %d", name, n, max_outs);
  bool ternary = strcmp(base, "addcmul") == 0 || strcmp(base, "addcdiv") == 0;
  const char* ovl = tpu_foreach_base_overload(base, tpu_op_overload(op));
  tpu_arg_t* args = calloc((size_t)(nargs ? nargs : 1), sizeof(*args));
  tpu_val_t* vals = malloc(sizeof(tpu_val_t) * (size_t)(nargs ? nargs : 1));
  tpu_status_t* st = args && vals ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "%s: out of host memory", name);
  for (int j = 0; j < n && !st; ++j) {
    int nv = 0, nouts = 0;
    for (int i = 0; i < nargs; ++i) args[i] = tpu_foreach_arg(b, op, i, j, n, ternary, vals, &nv);
    tpu_val_t one[2];
    st = tpu_b_ok(b) ? tpu_op_lower_values(b, op, fn, base, ovl, args, nargs, vals, 2, one, &nouts)
                     : tpu_b_take_error(b);
    if (!st && nouts != 1) st = TPU_STATUS(TPU_INTERNAL, "%s: aten::%s gave %d results", name, base, nouts);
    if (!st) outs[j] = one[0];
  }
  free(args);
  free(vals);
  if (!st) *out_nouts = n;
  return st;
}

#define TPU_FOREACH(op) {TPU_FOREACH_PREFIX #op, tpu_lower_foreach}

const tpu_lowering_t tpu_lowerings_foreach[] = {
    TPU_FOREACH(add),        TPU_FOREACH(sub),       TPU_FOREACH(mul),        TPU_FOREACH(div),
    TPU_FOREACH(clamp_min),  TPU_FOREACH(clamp_max), TPU_FOREACH(maximum),    TPU_FOREACH(minimum),
    TPU_FOREACH(addcdiv),    TPU_FOREACH(addcmul),   TPU_FOREACH(lerp),       TPU_FOREACH(pow),
    TPU_FOREACH(abs),        TPU_FOREACH(acos),      TPU_FOREACH(asin),       TPU_FOREACH(atan),
    TPU_FOREACH(ceil),       TPU_FOREACH(cos),       TPU_FOREACH(cosh),       TPU_FOREACH(erf),
    TPU_FOREACH(erfc),       TPU_FOREACH(exp),       TPU_FOREACH(expm1),      TPU_FOREACH(floor),
    TPU_FOREACH(frac),       TPU_FOREACH(log),       TPU_FOREACH(log10),      TPU_FOREACH(log1p),
    TPU_FOREACH(log2),       TPU_FOREACH(neg),       TPU_FOREACH(reciprocal), TPU_FOREACH(round),
    TPU_FOREACH(sigmoid),    TPU_FOREACH(sign),      TPU_FOREACH(sin),        TPU_FOREACH(sinh),
    TPU_FOREACH(sqrt),       TPU_FOREACH(rsqrt),     TPU_FOREACH(tan),        TPU_FOREACH(tanh),
    TPU_FOREACH(trunc),      TPU_FOREACH(norm),      TPU_FOREACH(zero),       TPU_FOREACH(copy),
    TPU_FOREACH(max),        {NULL, NULL},
};
