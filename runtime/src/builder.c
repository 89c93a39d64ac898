/* The StableHLO text builder. Values are SSA names; ops are written in MLIR's
 * generic syntax (StableHLO's stable textual form); regions are built in nested
 * text buffers and spliced into the op that owns them. */
#include "torchtpu/builder.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

#define TPU_B_MAX_DEPTH 8

typedef struct tpu_value {
  tpu_aval_t aval;
  char name[24];
  /* A transpose's operand and permutation (src: TPU_NOVAL otherwise). XLA folds a
   * transpose into the dot that reads it, so the operand's layout is what the dot
   * reads: tpu_b_dot_general looks through it. */
  tpu_val_t src;
  int8_t perm[TPU_MAX_RANK];
} tpu_value_t;

struct tpu_builder {
  tpu_value_t* values;
  int nvalues, cap;
  int next_ssa;
  tpu_aval_t* params;
  int32_t* param_alias; /* per parameter: the result it may give its buffer to, -1: none */
  int nparams, params_cap;
  tpu_strbuf_t text[TPU_B_MAX_DEPTH]; /* [0] = function body, then open regions */
  int depth;
  tpu_status_t* error;
  tpu_builder_target_t target;
};

tpu_aval_t tpu_aval_make(tpu_dtype_t dtype, int rank, const int64_t* dims) {
  tpu_aval_t a;
  memset(&a, 0, sizeof(a));
  a.dtype = dtype;
  a.rank = rank;
  for (int i = 0; i < rank; ++i) a.dims[i] = dims[i];
  return a;
}

int64_t tpu_aval_numel(const tpu_aval_t* a) {
  int64_t n = 1;
  for (int i = 0; i < a->rank; ++i) n *= a->dims[i];
  return n;
}

bool tpu_aval_equal(const tpu_aval_t* a, const tpu_aval_t* b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; ++i)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

tpu_status_t* tpu_builder_create(tpu_builder_t** out_builder) {
  *out_builder = NULL;
  tpu_builder_t* b = calloc(1, sizeof(*b));
  if (!b) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
  for (int i = 0; i < TPU_B_MAX_DEPTH; ++i) tpu_strbuf_init(&b->text[i]);
  *out_builder = b;
  return NULL;
}

void tpu_builder_set_target(tpu_builder_t* b, tpu_builder_target_t target) { b->target = target; }

void tpu_builder_destroy(tpu_builder_t* b) {
  if (!b) return;
  for (int i = 0; i < TPU_B_MAX_DEPTH; ++i) tpu_strbuf_free(&b->text[i]);
  free(b->values);
  free(b->params);
  free(b->param_alias);
  tpu_status_free(b->error);
  free(b);
}

void tpu_b_fail(tpu_builder_t* b, tpu_status_t* status) {
  if (!status) return;
  if (b->error) {
    tpu_status_free(status);
    return;
  }
  b->error = status;
}

bool tpu_b_ok(const tpu_builder_t* b) { return b->error == NULL; }
const tpu_status_t* tpu_b_error(const tpu_builder_t* b) { return b->error; }
tpu_status_t* tpu_b_take_error(tpu_builder_t* b) {
  tpu_status_t* s = b->error;
  b->error = NULL;
  return s;
}

static bool tpu_b_valid(const tpu_builder_t* b, tpu_val_t v) {
  return v >= 0 && v < b->nvalues;
}

static const tpu_aval_t tpu_b_empty_aval;

const tpu_aval_t* tpu_b_aval(const tpu_builder_t* b, tpu_val_t v) {
  return tpu_b_valid(b, v) ? &b->values[v].aval : &tpu_b_empty_aval;
}
tpu_dtype_t tpu_b_dtype(const tpu_builder_t* b, tpu_val_t v) { return tpu_b_aval(b, v)->dtype; }
int tpu_b_rank(const tpu_builder_t* b, tpu_val_t v) { return tpu_b_aval(b, v)->rank; }

/* A new value named by the caller's format; TPU_NOVAL on allocation failure. */
static tpu_val_t tpu_b_new_value(tpu_builder_t* b, const tpu_aval_t* aval_in, const char* name) {
  /* `aval_in` may point into b->values (tpu_b_aval), which the realloc moves. */
  const tpu_aval_t aval_copy = *aval_in;
  const tpu_aval_t* aval = &aval_copy;
  if (b->nvalues == b->cap) {
    int cap = b->cap ? b->cap * 2 : 64;
    tpu_value_t* values = realloc(b->values, (size_t)cap * sizeof(*values));
    if (!values) {
      TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
      return TPU_NOVAL;
    }
    b->values = values;
    b->cap = cap;
  }
  tpu_value_t* v = &b->values[b->nvalues];
  v->aval = *aval;
  snprintf(v->name, sizeof(v->name), "%s", name);
  v->src = TPU_NOVAL;
  return b->nvalues++;
}

static const char* tpu_b_name(const tpu_builder_t* b, tpu_val_t v) { return b->values[v].name; }

char* tpu_fmt_type(char* buf, size_t cap, const tpu_aval_t* a) {
  size_t n = (size_t)snprintf(buf, cap, "tensor<");
  for (int i = 0; i < a->rank && n < cap; ++i)
    n += (size_t)snprintf(buf + n, cap - n, "%" PRId64 "x", a->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "%s>", tpu_dtype_mlir(a->dtype));
  return buf;
}

static char* tpu_fmt_join(char* buf, size_t cap, const char* open, const char* close, int n,
                          const int64_t* v) {
  size_t len = (size_t)snprintf(buf, cap, "%s", open);
  for (int i = 0; i < n && len < cap; ++i)
    len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", v[i]);
  if (len < cap) snprintf(buf + len, cap - len, "%s", close);
  return buf;
}

char* tpu_fmt_i64_array(char* buf, size_t cap, int n, const int64_t* v) {
  return n ? tpu_fmt_join(buf, cap, "array<i64: ", ">", n, v)
           : (snprintf(buf, cap, "array<i64>"), buf);
}

char* tpu_fmt_i64_list(char* buf, size_t cap, int n, const int64_t* v) {
  return tpu_fmt_join(buf, cap, "[", "]", n, v);
}

static tpu_strbuf_t* tpu_b_out(tpu_builder_t* b) { return &b->text[b->depth]; }

tpu_val_t tpu_b_param(tpu_builder_t* b, const tpu_aval_t* aval) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  if (b->nparams == b->params_cap) {
    int cap = b->params_cap ? b->params_cap * 2 : 16;
    tpu_aval_t* p = realloc(b->params, (size_t)cap * sizeof(*p));
    if (p) b->params = p;
    int32_t* al = p ? realloc(b->param_alias, (size_t)cap * sizeof(*al)) : NULL;
    if (!p || !al) {
      TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
      return TPU_NOVAL;
    }
    b->param_alias = al;
    b->params_cap = cap;
  }
  char name[24];
  snprintf(name, sizeof(name), "%%arg%d", b->nparams);
  b->param_alias[b->nparams] = -1;
  b->params[b->nparams++] = *aval;
  return tpu_b_new_value(b, aval, name);
}

int tpu_builder_num_params(const tpu_builder_t* b) { return b->nparams; }

void tpu_b_param_alias(tpu_builder_t* b, int param, int result) {
  if (!tpu_b_ok(b)) return;
  if (param < 0 || param >= b->nparams || result < 0)
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: cannot alias parameter %d to result %d", param, result);
  else
    b->param_alias[param] = result;
}

/* Each aliased parameter names an existing result of its own type. */
static tpu_status_t* tpu_b_check_aliases(const tpu_builder_t* b, int nresults, const tpu_val_t* results) {
  for (int i = 0; i < b->nparams; ++i) {
    int r = b->param_alias[i];
    if (r < 0) continue;
    if (r >= nresults || !tpu_aval_equal(&b->params[i], tpu_b_aval(b, results[r])))
      return TPU_STATUS(TPU_INTERNAL, "builder: parameter %d is aliased to result %d of another type", i, r);
    for (int j = 0; j < i; ++j)
      if (b->param_alias[j] == r) return TPU_STATUS(TPU_INTERNAL, "builder: result %d is aliased twice", r);
  }
  return NULL;
}

/* Writes "(T0, T1)" of the given values. */
static void tpu_b_types(tpu_builder_t* b, tpu_strbuf_t* s, int n, const tpu_val_t* vs) {
  char t[256];
  tpu_strbuf_append(s, "(");
  for (int i = 0; i < n; ++i) {
    tpu_strbuf_printf(s, "%s%s", i ? ", " : "", tpu_fmt_type(t, sizeof(t), tpu_b_aval(b, vs[i])));
  }
  tpu_strbuf_append(s, ")");
}

void tpu_b_op(tpu_builder_t* b, const char* op, int nin, const tpu_val_t* ins, int nregions,
              char** regions, const char* attrs, int nout, const tpu_aval_t* out_avals,
              tpu_val_t* outs) {
  for (int i = 0; i < nout; ++i) outs[i] = TPU_NOVAL;
  bool ok = tpu_b_ok(b);
  for (int i = 0; ok && i < nin; ++i) ok = tpu_b_valid(b, ins[i]);
  for (int i = 0; i < nregions; ++i) ok = ok && regions[i];
  if (!ok) {
    for (int i = 0; i < nregions; ++i) free(regions[i]);
    if (tpu_b_ok(b)) TPU_B_FAIL(b, TPU_INTERNAL, "builder: %s got an invalid operand", op);
    return;
  }
  /* out_avals may point into b->values, which creating the outputs reallocates. */
  tpu_aval_t avals_small[4];
  tpu_aval_t* avals = nout <= 4 ? avals_small : malloc(sizeof(tpu_aval_t) * (size_t)nout);
  if (!avals) {
    for (int i = 0; i < nregions; ++i) free(regions[i]);
    TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
    return;
  }
  memcpy(avals, out_avals, sizeof(tpu_aval_t) * (size_t)nout);
  out_avals = avals;
  int id = b->next_ssa++;
  for (int i = 0; i < nout; ++i) {
    char name[24];
    if (nout == 1) snprintf(name, sizeof(name), "%%%d", id);
    else snprintf(name, sizeof(name), "%%%d#%d", id, i);
    outs[i] = tpu_b_new_value(b, &out_avals[i], name);
  }
  tpu_strbuf_t* s = tpu_b_out(b);
  tpu_strbuf_append(s, "    ");
  if (nout == 1) tpu_strbuf_printf(s, "%%%d = ", id);
  else if (nout > 1) tpu_strbuf_printf(s, "%%%d:%d = ", id, nout);
  tpu_strbuf_printf(s, "\"%s\"(", op);
  for (int i = 0; i < nin; ++i) tpu_strbuf_printf(s, "%s%s", i ? ", " : "", tpu_b_name(b, ins[i]));
  tpu_strbuf_append(s, ")");
  if (nregions) {
    tpu_strbuf_append(s, " (");
    for (int i = 0; i < nregions; ++i) {
      tpu_strbuf_printf(s, "%s%s", i ? ", " : "", regions[i]);
      free(regions[i]);
    }
    tpu_strbuf_append(s, ")");
  }
  if (attrs && *attrs) tpu_strbuf_printf(s, " {%s}", attrs);
  tpu_strbuf_append(s, " : ");
  tpu_b_types(b, s, nin, ins);
  tpu_strbuf_append(s, " -> ");
  char t[256];
  if (nout == 1) {
    tpu_strbuf_append(s, tpu_fmt_type(t, sizeof(t), &out_avals[0]));
  } else {
    tpu_strbuf_append(s, "(");
    for (int i = 0; i < nout; ++i)
      tpu_strbuf_printf(s, "%s%s", i ? ", " : "", tpu_fmt_type(t, sizeof(t), &out_avals[i]));
    tpu_strbuf_append(s, ")");
  }
  tpu_strbuf_append(s, "\n");
  if (avals != avals_small) free(avals);
}

tpu_val_t tpu_b_op1(tpu_builder_t* b, const char* op, int nin, const tpu_val_t* ins,
                    const char* attrs, const tpu_aval_t* out_aval) {
  tpu_val_t out;
  tpu_b_op(b, op, nin, ins, 0, NULL, attrs, 1, out_aval, &out);
  return out;
}

void tpu_b_region_begin(tpu_builder_t* b, int nargs, const tpu_aval_t* arg_avals,
                        tpu_val_t* out_args) {
  for (int i = 0; i < nargs; ++i) out_args[i] = TPU_NOVAL;
  if (!tpu_b_ok(b)) return;
  if (b->depth + 1 >= TPU_B_MAX_DEPTH) {
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: regions nested too deeply");
    return;
  }
  b->depth++;
  tpu_strbuf_t* s = tpu_b_out(b);
  tpu_strbuf_append(s, "{\n  ^bb0(");
  char t[256];
  for (int i = 0; i < nargs; ++i) {
    char name[24];
    snprintf(name, sizeof(name), "%%r%d", b->next_ssa++);
    out_args[i] = tpu_b_new_value(b, &arg_avals[i], name);
    tpu_strbuf_printf(s, "%s%s: %s", i ? ", " : "", name, tpu_fmt_type(t, sizeof(t), &arg_avals[i]));
  }
  tpu_strbuf_append(s, "):\n");
}

char* tpu_b_region_end(tpu_builder_t* b, int nrets, const tpu_val_t* rets) {
  if (b->depth == 0) {
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: region_end without region_begin");
    return NULL;
  }
  bool ok = tpu_b_ok(b);
  for (int i = 0; ok && i < nrets; ++i) ok = tpu_b_valid(b, rets[i]);
  tpu_strbuf_t* s = tpu_b_out(b);
  if (ok) {
    tpu_strbuf_append(s, "    \"stablehlo.return\"(");
    for (int i = 0; i < nrets; ++i) tpu_strbuf_printf(s, "%s%s", i ? ", " : "", tpu_b_name(b, rets[i]));
    tpu_strbuf_append(s, ") : ");
    tpu_b_types(b, s, nrets, rets);
    tpu_strbuf_append(s, " -> ()\n  }");
  }
  char* text = tpu_strbuf_take(s);
  b->depth--;
  if (!ok) {
    free(text);
    return NULL;
  }
  if (!text) TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
  return text;
}

tpu_status_t* tpu_builder_finish(tpu_builder_t* b, int nresults, const tpu_val_t* results,
                                 char** out_text) {
  *out_text = NULL;
  if (b->error) return tpu_b_take_error(b);
  if (b->depth != 0) return TPU_STATUS(TPU_INTERNAL, "builder: unclosed region");
  for (int i = 0; i < nresults; ++i)
    if (!tpu_b_valid(b, results[i])) return TPU_STATUS(TPU_INTERNAL, "builder: invalid result %d", i);
  TPU_RETURN_IF_ERROR(tpu_b_check_aliases(b, nresults, results));
  tpu_strbuf_t m;
  tpu_strbuf_init(&m);
  char t[256];
  tpu_strbuf_append(&m, "module @torchtpu {\n  func.func public @main(");
  for (int i = 0; i < b->nparams; ++i) {
    tpu_strbuf_printf(&m, "%s%%arg%d: %s", i ? ", " : "", i, tpu_fmt_type(t, sizeof(t), &b->params[i]));
    if (b->param_alias[i] >= 0) tpu_strbuf_printf(&m, " {%s = %d : i32}", TPU_B_ALIAS_ATTR, b->param_alias[i]);
  }
  tpu_strbuf_append(&m, ") -> ");
  tpu_b_types(b, &m, nresults, results);
  tpu_strbuf_append(&m, " {\n");
  if (b->text[0].data) tpu_strbuf_append(&m, b->text[0].data);
  tpu_strbuf_append(&m, "    \"func.return\"(");
  for (int i = 0; i < nresults; ++i) tpu_strbuf_printf(&m, "%s%s", i ? ", " : "", tpu_b_name(b, results[i]));
  tpu_strbuf_append(&m, ") : ");
  tpu_b_types(b, &m, nresults, results);
  tpu_strbuf_append(&m, " -> ()\n  }\n}\n");
  if (b->text[0].oom) m.oom = true;
  char* text = tpu_strbuf_take(&m);
  if (!text) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "builder: out of host memory");
  *out_text = text;
  return NULL;
}

/* ---------------------------------------------------------------- constants */

/* IEEE bits of a double rounded to the float type, written as MLIR hex. */
static void tpu_fmt_float_bits(char* buf, size_t cap, tpu_dtype_t dtype, double value) {
  if (dtype == TPU_F64) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    snprintf(buf, cap, "0x%016" PRIX64, bits);
  } else {
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    snprintf(buf, cap, "0x%08" PRIX32, bits);
  }
}

tpu_val_t tpu_b_const(tpu_builder_t* b, tpu_dtype_t dtype, double value) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  if (!tpu_dtype_is_float(dtype)) {
    if (tpu_dtype_is_complex(dtype)) return tpu_b_const_complex(b, dtype, value, 0.0);
    if (dtype == TPU_BOOL) return tpu_b_const_i(b, dtype, value != 0.0);
    if (isnan(value)) return tpu_b_const_i(b, dtype, 0);
    if (dtype == TPU_U64 && value >= 0x1p63 && value < 0x1p64) /* beyond int64: through uint64 */
      return tpu_b_const_i(b, dtype, (int64_t)(uint64_t)value);
    return tpu_b_const_i(b, dtype, (int64_t)value);
  }
  /* f16/bf16: an f32 constant converted, so rounding follows XLA's convert. */
  tpu_dtype_t ct = dtype == TPU_F64 ? TPU_F64 : TPU_F32;
  char bits[40], attrs[96];
  tpu_fmt_float_bits(bits, sizeof(bits), ct, value);
  snprintf(attrs, sizeof(attrs), "value = dense<%s> : tensor<%s>", bits, tpu_dtype_mlir(ct));
  tpu_aval_t a = tpu_aval_make(ct, 0, NULL);
  tpu_val_t c = tpu_b_op1(b, "stablehlo.constant", 0, NULL, attrs, &a);
  return tpu_b_convert(b, c, dtype);
}

tpu_val_t tpu_b_const_complex(tpu_builder_t* b, tpu_dtype_t dtype, double re, double im) {
  if (!tpu_dtype_is_complex(dtype)) {
    TPU_B_FAIL(b, TPU_INTERNAL, "complex constant of dtype %s", tpu_dtype_name(dtype));
    return TPU_NOVAL;
  }
  tpu_dtype_t part = dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  tpu_val_t ins[2] = {tpu_b_const(b, part, re), tpu_b_const(b, part, im)};
  tpu_aval_t a = tpu_aval_make(dtype, 0, NULL);
  return tpu_b_op1(b, "stablehlo.complex", 2, ins, NULL, &a);
}

tpu_val_t tpu_b_const_i(tpu_builder_t* b, tpu_dtype_t dtype, int64_t value) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  if (tpu_dtype_is_float(dtype) || tpu_dtype_is_complex(dtype)) return tpu_b_const(b, dtype, (double)value);
  char attrs[96];
  if (dtype == TPU_BOOL) {
    snprintf(attrs, sizeof(attrs), "value = dense<%s> : tensor<i1>", value ? "true" : "false");
  } else {
    /* Wrap into the type's range the way a C cast does; an unsigned type's
     * constant is printed unsigned (MLIR rejects a negative ui64 literal). */
    int64_t v = value;
    switch (dtype) {
      case TPU_U8: v = (uint8_t)value; break;
      case TPU_I8: v = (int8_t)value; break;
      case TPU_I16: v = (int16_t)value; break;
      case TPU_I32: v = (int32_t)value; break;
      case TPU_U16: v = (uint16_t)value; break;
      case TPU_U32: v = (uint32_t)value; break;
      default: break;
    }
    if (dtype == TPU_U64)
      snprintf(attrs, sizeof(attrs), "value = dense<%" PRIu64 "> : tensor<ui64>", (uint64_t)value);
    else
      snprintf(attrs, sizeof(attrs), "value = dense<%" PRId64 "> : tensor<%s>", v, tpu_dtype_mlir(dtype));
  }
  tpu_aval_t a = tpu_aval_make(dtype, 0, NULL);
  return tpu_b_op1(b, "stablehlo.constant", 0, NULL, attrs, &a);
}

tpu_val_t tpu_b_const_extreme(tpu_builder_t* b, tpu_dtype_t t, bool lowest) {
  if (tpu_dtype_is_float(t)) return tpu_b_const(b, t, lowest ? -INFINITY : INFINITY);
  int64_t lo, hi;
  switch (t) {
    case TPU_BOOL: lo = 0; hi = 1; break;
    case TPU_U8: lo = 0; hi = UINT8_MAX; break;
    case TPU_I8: lo = INT8_MIN; hi = INT8_MAX; break;
    case TPU_I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case TPU_I32: lo = INT32_MIN; hi = INT32_MAX; break;
    case TPU_U16: lo = 0; hi = UINT16_MAX; break;
    case TPU_U32: lo = 0; hi = UINT32_MAX; break;
    case TPU_U64: lo = 0; hi = -1; break; /* all ones: UINT64_MAX's bit pattern */
    default: lo = INT64_MIN; hi = INT64_MAX; break;
  }
  return tpu_b_const_i(b, t, lowest ? lo : hi);
}

tpu_val_t tpu_b_full(tpu_builder_t* b, const tpu_aval_t* aval_in, double value) {
  const tpu_aval_t aval = *aval_in; /* may point into the value table */
  tpu_val_t c = tpu_b_const(b, aval.dtype, value);
  return tpu_b_broadcast_in_dim(b, c, aval.rank, aval.dims, NULL);
}

tpu_val_t tpu_b_iota(tpu_builder_t* b, const tpu_aval_t* aval_in, int dim) {
  const tpu_aval_t av = *aval_in;
  const tpu_aval_t* aval = &av;
  if (dim < 0 || dim >= aval->rank) {
    TPU_B_FAIL(b, TPU_INTERNAL, "iota: dimension %d out of range for rank %d", dim, aval->rank);
    return TPU_NOVAL;
  }
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "iota_dimension = %d : i64", dim);
  return tpu_b_op1(b, "stablehlo.iota", 0, NULL, attrs, aval);
}

/* -------------------------------------------------------------- elementwise */

static bool tpu_b_same_shape(tpu_builder_t* b, const char* op, tpu_val_t x, tpu_val_t y) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x) || !tpu_b_valid(b, y)) return false;
  const tpu_aval_t* a = tpu_b_aval(b, x);
  const tpu_aval_t* c = tpu_b_aval(b, y);
  bool same = a->rank == c->rank;
  for (int i = 0; same && i < a->rank; ++i) same = a->dims[i] == c->dims[i];
  if (!same) TPU_B_FAIL(b, TPU_INTERNAL, "builder: %s operands differ in shape", op);
  return same;
}

tpu_val_t tpu_b_unary(tpu_builder_t* b, const char* op, tpu_val_t x) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, x);
  if (strcmp(op, "stablehlo.is_finite") == 0) a.dtype = TPU_BOOL;
  if (strcmp(op, "stablehlo.abs") == 0 && tpu_dtype_is_complex(a.dtype))
    a.dtype = a.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  return tpu_b_op1(b, op, 1, &x, NULL, &a);
}

tpu_val_t tpu_b_binary(tpu_builder_t* b, const char* op, tpu_val_t x, tpu_val_t y) {
  if (!tpu_b_same_shape(b, op, x, y)) return TPU_NOVAL;
  if (tpu_b_dtype(b, x) != tpu_b_dtype(b, y)) {
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: %s operands differ in dtype (%s vs %s)", op,
               tpu_dtype_name(tpu_b_dtype(b, x)), tpu_dtype_name(tpu_b_dtype(b, y)));
    return TPU_NOVAL;
  }
  tpu_val_t ins[2] = {x, y};
  return tpu_b_op1(b, op, 2, ins, NULL, tpu_b_aval(b, x));
}

tpu_val_t tpu_b_compare(tpu_builder_t* b, const char* dir, tpu_val_t x, tpu_val_t y) {
  if (!tpu_b_same_shape(b, "compare", x, y)) return TPU_NOVAL;
  tpu_dtype_t t = tpu_b_dtype(b, x);
  if (t != tpu_b_dtype(b, y)) {
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: compare operands differ in dtype");
    return TPU_NOVAL;
  }
  const char* type = (tpu_dtype_is_float(t) || tpu_dtype_is_complex(t)) ? "FLOAT"
                     : tpu_dtype_is_signed(t)                            ? "SIGNED"
                                                                         : "UNSIGNED";
  char attrs[160];
  snprintf(attrs, sizeof(attrs),
           "comparison_direction = #stablehlo<comparison_direction %s>, "
           "compare_type = #stablehlo<comparison_type %s>",
           dir, type);
  tpu_aval_t a = *tpu_b_aval(b, x);
  a.dtype = TPU_BOOL;
  tpu_val_t ins[2] = {x, y};
  return tpu_b_op1(b, "stablehlo.compare", 2, ins, attrs, &a);
}

tpu_val_t tpu_b_select(tpu_builder_t* b, tpu_val_t pred, tpu_val_t on_true, tpu_val_t on_false) {
  if (!tpu_b_same_shape(b, "select", on_true, on_false)) return TPU_NOVAL;
  if (tpu_b_rank(b, pred) != 0 && !tpu_b_same_shape(b, "select", pred, on_true)) return TPU_NOVAL;
  if (tpu_b_dtype(b, on_true) != tpu_b_dtype(b, on_false) || tpu_b_dtype(b, pred) != TPU_BOOL) {
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: select dtype mismatch");
    return TPU_NOVAL;
  }
  tpu_val_t ins[3] = {pred, on_true, on_false};
  return tpu_b_op1(b, "stablehlo.select", 3, ins, NULL, tpu_b_aval(b, on_true));
}

tpu_val_t tpu_b_convert(tpu_builder_t* b, tpu_val_t x, tpu_dtype_t dtype) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, x);
  if (a.dtype == dtype) return x;
  /* Complex → bool is z != 0: either part nonzero. */
  if (tpu_dtype_is_complex(a.dtype) && dtype == TPU_BOOL) {
    tpu_aval_t r = a;
    r.dtype = a.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
    tpu_val_t re = tpu_b_op1(b, "stablehlo.real", 1, &x, NULL, &r), im = tpu_b_op1(b, "stablehlo.imag", 1, &x, NULL, &r);
    return tpu_b_binary(b, "stablehlo.or", tpu_b_convert(b, re, TPU_BOOL), tpu_b_convert(b, im, TPU_BOOL));
  }
  /* Complex → real keeps the real part (PyTorch warns and discards imag). */
  if (tpu_dtype_is_complex(a.dtype) && !tpu_dtype_is_complex(dtype)) {
    tpu_aval_t r = a;
    r.dtype = a.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
    x = tpu_b_op1(b, "stablehlo.real", 1, &x, NULL, &r);
    return tpu_b_convert(b, x, dtype);
  }
  /* Float → bool is x != 0 in PyTorch; make it explicit. */
  if (dtype == TPU_BOOL) {
    tpu_val_t zero = tpu_b_full(b, &a, 0.0);
    return tpu_b_compare(b, "NE", x, zero);
  }
  a.dtype = dtype;
  return tpu_b_op1(b, "stablehlo.convert", 1, &x, NULL, &a);
}

/* bitcast_convert rejects complex types: a complex value is its (real, imag) pair
 * along a trailing dim of 2, which is exactly its memory layout. */
static tpu_val_t tpu_b_complex_bitcast(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* out) {
  const tpu_aval_t in = *tpu_b_aval(b, x);
  bool to_real = tpu_dtype_is_complex(in.dtype);
  const tpu_aval_t* c = to_real ? &in : out;   /* the complex side */
  const tpu_aval_t* r = to_real ? out : &in;   /* the real side: c's dims + [2] */
  tpu_dtype_t comp = c->dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  bool ok = r->dtype == comp && r->rank == c->rank + 1 && r->dims[r->rank - 1] == 2;
  for (int i = 0; ok && i < c->rank; ++i) ok = r->dims[i] == c->dims[i];
  if (!ok) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "reinterpreting %s as %s", tpu_dtype_name(in.dtype), tpu_dtype_name(out->dtype));
    return TPU_NOVAL;
  }
  tpu_aval_t part = *c;
  part.dtype = comp;
  if (to_real) {
    tpu_aval_t col = *r;
    col.dims[col.rank - 1] = 1;
    tpu_val_t re = tpu_b_reshape(b, tpu_b_op1(b, "stablehlo.real", 1, &x, NULL, &part), col.rank, col.dims);
    tpu_val_t im = tpu_b_reshape(b, tpu_b_op1(b, "stablehlo.imag", 1, &x, NULL, &part), col.rank, col.dims);
    tpu_val_t pair[2] = {re, im};
    return tpu_b_concat(b, 2, pair, col.rank - 1);
  }
  int64_t start[TPU_MAX_RANK + 1] = {0}, limit[TPU_MAX_RANK + 1];
  for (int i = 0; i < r->rank; ++i) limit[i] = r->dims[i];
  limit[r->rank - 1] = 1;
  tpu_val_t re = tpu_b_reshape(b, tpu_b_slice(b, x, start, limit, NULL), part.rank, part.dims);
  start[r->rank - 1] = 1;
  limit[r->rank - 1] = 2;
  tpu_val_t im = tpu_b_reshape(b, tpu_b_slice(b, x, start, limit, NULL), part.rank, part.dims);
  tpu_val_t ins[2] = {re, im};
  return tpu_b_op1(b, "stablehlo.complex", 2, ins, NULL, c);
}

tpu_val_t tpu_b_bitcast(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* out) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  if (tpu_dtype_is_complex(tpu_b_dtype(b, x)) != tpu_dtype_is_complex(out->dtype))
    return tpu_b_complex_bitcast(b, x, out);
  return tpu_b_op1(b, "stablehlo.bitcast_convert", 1, &x, NULL, out);
}

/* ------------------------------------------------------------------- shapes */

tpu_val_t tpu_b_reshape(tpu_builder_t* b, tpu_val_t x, int rank, const int64_t* dims) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  tpu_aval_t a = tpu_aval_make(tpu_b_dtype(b, x), rank, dims);
  if (tpu_aval_numel(&a) != tpu_aval_numel(tpu_b_aval(b, x))) {
    TPU_B_FAIL(b, TPU_INTERNAL, "builder: reshape changes the element count");
    return TPU_NOVAL;
  }
  if (tpu_aval_equal(&a, tpu_b_aval(b, x))) return x;
  return tpu_b_op1(b, "stablehlo.reshape", 1, &x, NULL, &a);
}

tpu_val_t tpu_b_broadcast_in_dim(tpu_builder_t* b, tpu_val_t x, int rank, const int64_t* dims,
                                 const int64_t* bdims) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  for (int i = 0; i < in->rank; ++i) {
    if (!bdims || bdims[i] < 0 || bdims[i] >= rank ||
        (in->dims[i] != 1 && in->dims[i] != dims[bdims[i]])) {
      TPU_B_FAIL(b, TPU_INTERNAL, "builder: bad broadcast_in_dim");
      return TPU_NOVAL;
    }
  }
  tpu_aval_t a = tpu_aval_make(in->dtype, rank, dims);
  if (tpu_aval_equal(&a, in)) return x;
  char attrs[512], arr[480];
  snprintf(attrs, sizeof(attrs), "broadcast_dimensions = %s",
           tpu_fmt_i64_array(arr, sizeof(arr), in->rank, bdims));
  return tpu_b_op1(b, "stablehlo.broadcast_in_dim", 1, &x, attrs, &a);
}

tpu_val_t tpu_b_broadcast_to(tpu_builder_t* b, tpu_val_t x, int rank, const int64_t* dims) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  if (in->rank > rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "cannot broadcast a rank-%d tensor to rank %d", in->rank, rank);
    return TPU_NOVAL;
  }
  /* Size-1 dims that stretch must be dropped first: broadcast_in_dim maps 1→N only
   * when declared, which it is; so map operand dim i to result dim i + (rank - in.rank). */
  int64_t bdims[TPU_MAX_RANK];
  for (int i = 0; i < in->rank; ++i) {
    bdims[i] = i + (rank - in->rank);
    if (in->dims[i] != 1 && in->dims[i] != dims[bdims[i]]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                 ") at non-singleton dimension %d",
                 in->dims[i], dims[bdims[i]], (int)bdims[i]);
      return TPU_NOVAL;
    }
  }
  return tpu_b_broadcast_in_dim(b, x, rank, dims, bdims);
}

tpu_val_t tpu_b_transpose(tpu_builder_t* b, tpu_val_t x, const int64_t* perm) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  tpu_aval_t a = *in;
  bool identity = true;
  for (int i = 0; i < in->rank; ++i) {
    if (perm[i] < 0 || perm[i] >= in->rank) {
      TPU_B_FAIL(b, TPU_INTERNAL, "builder: bad permutation");
      return TPU_NOVAL;
    }
    a.dims[i] = in->dims[perm[i]];
    identity = identity && perm[i] == i;
  }
  if (identity) return x;
  char attrs[512], arr[480];
  snprintf(attrs, sizeof(attrs), "permutation = %s", tpu_fmt_i64_array(arr, sizeof(arr), in->rank, perm));
  tpu_val_t y = tpu_b_op1(b, "stablehlo.transpose", 1, &x, attrs, &a);
  if (y == TPU_NOVAL) return y;
  b->values[y].src = x;
  for (int i = 0; i < a.rank; ++i) b->values[y].perm[i] = (int8_t)perm[i];
  return y;
}

tpu_val_t tpu_b_slice(tpu_builder_t* b, tpu_val_t x, const int64_t* start, const int64_t* limit,
                      const int64_t* strides) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  tpu_aval_t a = *in;
  int64_t ones[TPU_MAX_RANK];
  bool identity = true;
  for (int i = 0; i < in->rank; ++i) {
    ones[i] = strides ? strides[i] : 1;
    if (start[i] < 0 || limit[i] > in->dims[i] || start[i] > limit[i] || ones[i] < 1) {
      TPU_B_FAIL(b, TPU_INTERNAL, "builder: slice out of bounds");
      return TPU_NOVAL;
    }
    a.dims[i] = (limit[i] - start[i] + ones[i] - 1) / ones[i];
    identity = identity && start[i] == 0 && limit[i] == in->dims[i] && ones[i] == 1;
  }
  if (identity) return x;
  char attrs[1024], s0[300], s1[300], s2[300];
  snprintf(attrs, sizeof(attrs), "start_indices = %s, limit_indices = %s, strides = %s",
           tpu_fmt_i64_array(s0, sizeof(s0), in->rank, start),
           tpu_fmt_i64_array(s1, sizeof(s1), in->rank, limit),
           tpu_fmt_i64_array(s2, sizeof(s2), in->rank, ones));
  return tpu_b_op1(b, "stablehlo.slice", 1, &x, attrs, &a);
}

tpu_val_t tpu_b_dynamic_slice(tpu_builder_t* b, tpu_val_t x, const tpu_val_t* starts,
                              const int64_t* sizes) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  tpu_val_t ins[TPU_MAX_RANK + 1];
  ins[0] = x;
  for (int i = 0; i < in->rank; ++i) ins[i + 1] = starts[i];
  tpu_aval_t a = tpu_aval_make(in->dtype, in->rank, sizes);
  char attrs[512], arr[480];
  snprintf(attrs, sizeof(attrs), "slice_sizes = %s", tpu_fmt_i64_array(arr, sizeof(arr), in->rank, sizes));
  return tpu_b_op1(b, "stablehlo.dynamic_slice", in->rank + 1, ins, attrs, &a);
}

tpu_val_t tpu_b_dynamic_update_slice(tpu_builder_t* b, tpu_val_t x, tpu_val_t update,
                                     const tpu_val_t* starts) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  tpu_val_t ins[TPU_MAX_RANK + 2];
  ins[0] = x;
  ins[1] = update;
  for (int i = 0; i < in->rank; ++i) ins[i + 2] = starts[i];
  return tpu_b_op1(b, "stablehlo.dynamic_update_slice", in->rank + 2, ins, NULL, in);
}

tpu_val_t tpu_b_concat(tpu_builder_t* b, int n, const tpu_val_t* xs, int dim) {
  if (!tpu_b_ok(b) || n < 1) return TPU_NOVAL;
  if (n == 1) return xs[0];
  tpu_aval_t a = *tpu_b_aval(b, xs[0]);
  a.dims[dim] = 0;
  for (int i = 0; i < n; ++i) a.dims[dim] += tpu_b_aval(b, xs[i])->dims[dim];
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimension = %d : i64", dim);
  return tpu_b_op1(b, "stablehlo.concatenate", n, xs, attrs, &a);
}

tpu_val_t tpu_b_pad(tpu_builder_t* b, tpu_val_t x, tpu_val_t pad_value, const int64_t* lo,
                    const int64_t* hi, const int64_t* interior) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t* in = tpu_b_aval(b, x);
  int64_t zeros[TPU_MAX_RANK] = {0};
  const int64_t* inner = interior ? interior : zeros;
  tpu_aval_t a = *in;
  for (int i = 0; i < in->rank; ++i) {
    a.dims[i] = lo[i] + hi[i] + in->dims[i] + (in->dims[i] > 0 ? (in->dims[i] - 1) * inner[i] : 0);
    if (a.dims[i] < 0) {
      TPU_B_FAIL(b, TPU_INTERNAL, "builder: pad gives a negative size");
      return TPU_NOVAL;
    }
  }
  char attrs[1024], s0[300], s1[300], s2[300];
  snprintf(attrs, sizeof(attrs), "edge_padding_low = %s, edge_padding_high = %s, interior_padding = %s",
           tpu_fmt_i64_array(s0, sizeof(s0), in->rank, lo),
           tpu_fmt_i64_array(s1, sizeof(s1), in->rank, hi),
           tpu_fmt_i64_array(s2, sizeof(s2), in->rank, inner));
  tpu_val_t ins[2] = {x, pad_value};
  return tpu_b_op1(b, "stablehlo.pad", 2, ins, attrs, &a);
}

tpu_val_t tpu_b_reverse(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims) {
  if (ndims == 0) return x;
  char attrs[512], arr[480];
  snprintf(attrs, sizeof(attrs), "dimensions = %s", tpu_fmt_i64_array(arr, sizeof(arr), ndims, dims));
  return tpu_b_op1(b, "stablehlo.reverse", 1, &x, attrs, tpu_b_aval(b, x));
}

/* --------------------------------------------------------------- reductions */

/* A region (lhs, rhs) -> body(lhs, rhs) over 0-d values of `dtype`. */
static char* tpu_b_binary_region(tpu_builder_t* b, tpu_dtype_t dtype, const char* body) {
  tpu_aval_t s = tpu_aval_make(dtype, 0, NULL);
  tpu_aval_t args_av[2] = {s, s};
  tpu_val_t args[2];
  tpu_b_region_begin(b, 2, args_av, args);
  tpu_val_t r = body ? tpu_b_binary(b, body, args[0], args[1]) : args[1];
  return tpu_b_region_end(b, 1, &r);
}

tpu_val_t tpu_b_reduce(tpu_builder_t* b, tpu_val_t x, tpu_val_t init, int ndims,
                       const int64_t* dims, const char* body) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return TPU_NOVAL;
  const tpu_aval_t in_copy = *tpu_b_aval(b, x); /* the region below grows the value table */
  const tpu_aval_t* in = &in_copy;
  tpu_aval_t a;
  memset(&a, 0, sizeof(a));
  a.dtype = in->dtype;
  for (int i = 0; i < in->rank; ++i) {
    bool reduced = false;
    for (int j = 0; j < ndims; ++j) reduced = reduced || dims[j] == i;
    if (!reduced) a.dims[a.rank++] = in->dims[i];
  }
  if (ndims == 0) return x;
  char* region = tpu_b_binary_region(b, in->dtype, body);
  char attrs[512], arr[480];
  snprintf(attrs, sizeof(attrs), "dimensions = %s", tpu_fmt_i64_array(arr, sizeof(arr), ndims, dims));
  tpu_val_t ins[2] = {x, init};
  tpu_val_t out;
  tpu_b_op(b, "stablehlo.reduce", 2, ins, 1, &region, attrs, 1, &a, &out);
  return out;
}

void tpu_b_argreduce(tpu_builder_t* b, tpu_val_t x, int dim, bool is_max, tpu_val_t* out_values,
                     tpu_val_t* out_indices) {
  if (out_values) *out_values = TPU_NOVAL;
  if (out_indices) *out_indices = TPU_NOVAL;
  if (!tpu_b_ok(b) || !tpu_b_valid(b, x)) return;
  const tpu_aval_t in = *tpu_b_aval(b, x);
  tpu_dtype_t t = in.dtype;
  tpu_aval_t idx_av = in;
  idx_av.dtype = TPU_I64;
  tpu_val_t idx = tpu_b_iota(b, &idx_av, dim);
  tpu_val_t init_v = tpu_b_const_extreme(b, t, is_max);
  tpu_val_t init_i = tpu_b_const_i(b, TPU_I64, INT64_MAX);

  tpu_aval_t sv = tpu_aval_make(t, 0, NULL), si = tpu_aval_make(TPU_I64, 0, NULL);
  tpu_aval_t rargs_av[4] = {sv, si, sv, si};
  tpu_val_t r[4];
  tpu_b_region_begin(b, 4, rargs_av, r);
  tpu_val_t av = r[0], ai = r[1], bv = r[2], bi = r[3];
  tpu_val_t better = tpu_b_compare(b, is_max ? "GT" : "LT", av, bv);
  tpu_val_t eq = tpu_b_compare(b, "EQ", av, bv);
  tpu_val_t first = tpu_b_compare(b, "LT", ai, bi);
  tpu_val_t pick = tpu_b_binary(b, "stablehlo.or", better, tpu_b_binary(b, "stablehlo.and", eq, first));
  if (tpu_dtype_is_float(t)) {
    /* NaN wins (PyTorch propagates it); between two NaNs the first index. */
    tpu_val_t a_nan = tpu_b_compare(b, "NE", av, av);
    tpu_val_t b_nan = tpu_b_compare(b, "NE", bv, bv);
    tpu_val_t not_b_nan = tpu_b_unary(b, "stablehlo.not", b_nan);
    tpu_val_t nan_pick = tpu_b_binary(b, "stablehlo.and", a_nan,
                                      tpu_b_binary(b, "stablehlo.or", not_b_nan, first));
    tpu_val_t neither = tpu_b_binary(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.not", a_nan), not_b_nan);
    pick = tpu_b_binary(b, "stablehlo.or", nan_pick, tpu_b_binary(b, "stablehlo.and", neither, pick));
  }
  tpu_val_t rets[2] = {tpu_b_select(b, pick, av, bv), tpu_b_select(b, pick, ai, bi)};
  char* region = tpu_b_region_end(b, 2, rets);

  tpu_aval_t ov;
  memset(&ov, 0, sizeof(ov));
  ov.dtype = t;
  for (int i = 0; i < in.rank; ++i)
    if (i != dim) ov.dims[ov.rank++] = in.dims[i];
  tpu_aval_t oi = ov;
  oi.dtype = TPU_I64;
  tpu_aval_t outs_av[2] = {ov, oi};
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimensions = array<i64: %d>", dim);
  tpu_val_t ins[4] = {x, idx, init_v, init_i};
  tpu_val_t outs[2];
  tpu_b_op(b, "stablehlo.reduce", 4, ins, 1, &region, attrs, 2, outs_av, outs);
  if (out_values) *out_values = outs[0];
  if (out_indices) *out_indices = outs[1];
}

/* -------------------------------------------------------------- contraction */

/* The dimension of v stored innermost, assuming default (row-major) layouts and
 * transposes folded into their readers, as XLA does. */
static int tpu_b_minor_dim(const tpu_builder_t* b, tpu_val_t v) {
  const tpu_value_t* x = &b->values[v];
  if (x->src == TPU_NOVAL) return x->aval.rank - 1;
  int src_minor = tpu_b_minor_dim(b, x->src);
  for (int i = 0; i < x->aval.rank; ++i)
    if (x->perm[i] == src_minor) return i;
  return x->aval.rank - 1;
}

/* v with n zeros appended along dim. A transpose is padded before it, so that XLA
 * still folds it into the dot rather than copying it transposed. */
static tpu_val_t tpu_b_pad_dim(tpu_builder_t* b, tpu_val_t v, int dim, int64_t n) {
  /* Copies: new values may move b->values. */
  const tpu_value_t x = b->values[v];
  if (x.src != TPU_NOVAL) {
    int64_t perm[TPU_MAX_RANK];
    for (int i = 0; i < x.aval.rank; ++i) perm[i] = x.perm[i];
    tpu_val_t padded = tpu_b_pad_dim(b, x.src, (int)perm[dim], n);
    return tpu_b_transpose(b, padded, perm);
  }
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
  hi[dim] = n;
  tpu_val_t zero = tpu_b_const(b, x.aval.dtype, 0.0);
  return tpu_b_pad(b, v, zero, lo, hi, NULL);
}

static int64_t tpu_b_free_size(const tpu_aval_t* a, int nbatch, const int64_t* batch, int64_t contract) {
  int64_t n = 1;
  for (int i = 0; i < a->rank; ++i) {
    bool used = i == contract;
    for (int j = 0; j < nbatch; ++j) used = used || batch[j] == i;
    if (!used) n *= a->dims[i];
  }
  return n;
}

/* XLA:CPU's f32 matmul (Eigen) runs up to 3x slower when the right operand is
 * contracted along its minor dimension (x @ W.t(): every nn.Linear) and its rows are
 * a multiple of 2 KiB apart: the packing's strided loads land in the same cache sets
 * and evict each other. Sixteen zeros appended to the contraction on both sides move
 * the stride off the power of two. The copy costs less than it saves up to 256 left
 * rows; from 512 rows on, the packing is spread over more work and padding was a
 * wash or a loss (a GPT train step 5 % slower). A matrix-vector product takes another
 * path without the weakness. docs/platforms.md has the measurements. The zeros add
 * nothing to the sums. */
#define TPU_DOT_PAD 16
#define TPU_DOT_PAD_MAX_ROWS 256
static void tpu_b_dot_pad_for_target(tpu_builder_t* b, tpu_val_t* lhs, tpu_val_t* rhs, int nbatch,
                                     const int64_t* lhs_batch, const int64_t* rhs_batch, int ncontract,
                                     const int64_t* lhs_contract, const int64_t* rhs_contract) {
  if (b->target != TPU_BUILDER_TARGET_XLA_CPU || ncontract != 1) return;
  const tpu_aval_t* l = tpu_b_aval(b, *lhs);
  const tpu_aval_t* r = tpu_b_aval(b, *rhs);
  if (l->dtype != TPU_F32 || r->dtype != TPU_F32) return;
  int64_t k = r->dims[rhs_contract[0]];
  if (k <= 0 || k != l->dims[lhs_contract[0]] || (k * 4) % 2048 != 0 /* rows 2 KiB-aligned */ ||
      tpu_b_minor_dim(b, *rhs) != rhs_contract[0])
    return;
  int64_t m = tpu_b_free_size(l, nbatch, lhs_batch, lhs_contract[0]);
  if (m < 2 || m > TPU_DOT_PAD_MAX_ROWS || tpu_b_free_size(r, nbatch, rhs_batch, rhs_contract[0]) < 2) return;
  *lhs = tpu_b_pad_dim(b, *lhs, (int)lhs_contract[0], TPU_DOT_PAD);
  *rhs = tpu_b_pad_dim(b, *rhs, (int)rhs_contract[0], TPU_DOT_PAD);
}

tpu_val_t tpu_b_dot_general(tpu_builder_t* b, tpu_val_t lhs, tpu_val_t rhs, int nbatch,
                            const int64_t* lhs_batch, const int64_t* rhs_batch, int ncontract,
                            const int64_t* lhs_contract, const int64_t* rhs_contract,
                            tpu_dtype_t out_dtype) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, lhs) || !tpu_b_valid(b, rhs)) return TPU_NOVAL;
  tpu_b_dot_pad_for_target(b, &lhs, &rhs, nbatch, lhs_batch, rhs_batch, ncontract, lhs_contract, rhs_contract);
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  const tpu_aval_t* l = tpu_b_aval(b, lhs);
  const tpu_aval_t* r = tpu_b_aval(b, rhs);
  tpu_aval_t a;
  memset(&a, 0, sizeof(a));
  a.dtype = out_dtype;
  for (int i = 0; i < nbatch; ++i) a.dims[a.rank++] = l->dims[lhs_batch[i]];
  for (int side = 0; side < 2; ++side) {
    const tpu_aval_t* s = side ? r : l;
    const int64_t* bd = side ? rhs_batch : lhs_batch;
    const int64_t* cd = side ? rhs_contract : lhs_contract;
    for (int i = 0; i < s->rank; ++i) {
      bool used = false;
      for (int j = 0; j < nbatch; ++j) used = used || bd[j] == i;
      for (int j = 0; j < ncontract; ++j) used = used || cd[j] == i;
      if (!used) a.dims[a.rank++] = s->dims[i];
    }
  }
  for (int j = 0; j < ncontract; ++j) {
    if (l->dims[lhs_contract[j]] != r->dims[rhs_contract[j]]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "contraction sizes differ (%" PRId64 " vs %" PRId64 ")",
                 l->dims[lhs_contract[j]], r->dims[rhs_contract[j]]);
      return TPU_NOVAL;
    }
  }
  char attrs[1024], s0[200], s1[200], s2[200], s3[200];
  int n = snprintf(attrs, sizeof(attrs), "dot_dimension_numbers = #stablehlo.dot<");
  if (nbatch)
    n += snprintf(attrs + n, sizeof(attrs) - (size_t)n,
                  "lhs_batching_dimensions = %s, rhs_batching_dimensions = %s, ",
                  tpu_fmt_i64_list(s0, sizeof(s0), nbatch, lhs_batch),
                  tpu_fmt_i64_list(s1, sizeof(s1), nbatch, rhs_batch));
  snprintf(attrs + n, sizeof(attrs) - (size_t)n,
           "lhs_contracting_dimensions = %s, rhs_contracting_dimensions = %s>, "
           "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
           tpu_fmt_i64_list(s2, sizeof(s2), ncontract, lhs_contract),
           tpu_fmt_i64_list(s3, sizeof(s3), ncontract, rhs_contract));
  tpu_val_t ins[2] = {lhs, rhs};
  return tpu_b_op1(b, "stablehlo.dot_general", 2, ins, attrs, &a);
}

/* ----------------------------------------------------------- gather/scatter */

tpu_val_t tpu_b_gather(tpu_builder_t* b, tpu_val_t operand, tpu_val_t indices,
                       const tpu_gather_dims_t* d, const tpu_aval_t* out) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  int rank = tpu_b_rank(b, operand);
  char attrs[1400], s0[200], s1[200], s2[200], s3[300];
  snprintf(attrs, sizeof(attrs),
           "dimension_numbers = #stablehlo.gather<offset_dims = %s, collapsed_slice_dims = %s, "
           "start_index_map = %s, index_vector_dim = %" PRId64 ">, slice_sizes = %s, "
           "indices_are_sorted = false",
           tpu_fmt_i64_list(s0, sizeof(s0), d->n_offset, d->offset_dims),
           tpu_fmt_i64_list(s1, sizeof(s1), d->n_collapsed, d->collapsed_slice_dims),
           tpu_fmt_i64_list(s2, sizeof(s2), d->n_start_map, d->start_index_map), d->index_vector_dim,
           tpu_fmt_i64_array(s3, sizeof(s3), rank, d->slice_sizes));
  tpu_val_t ins[2] = {operand, indices};
  return tpu_b_op1(b, "stablehlo.gather", 2, ins, attrs, out);
}

tpu_val_t tpu_b_scatter(tpu_builder_t* b, tpu_val_t operand, tpu_val_t indices, tpu_val_t updates,
                        const tpu_scatter_dims_t* d, const char* body) {
  if (!tpu_b_ok(b) || !tpu_b_valid(b, operand)) return TPU_NOVAL;
  tpu_aval_t out = *tpu_b_aval(b, operand);
  char* region = tpu_b_binary_region(b, out.dtype, body);
  char attrs[1400], s0[200], s1[200], s2[200];
  snprintf(attrs, sizeof(attrs),
           "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = %s, "
           "inserted_window_dims = %s, scatter_dims_to_operand_dims = %s, index_vector_dim = %" PRId64
           ">, indices_are_sorted = false, unique_indices = false",
           tpu_fmt_i64_list(s0, sizeof(s0), d->n_update_window, d->update_window_dims),
           tpu_fmt_i64_list(s1, sizeof(s1), d->n_inserted_window, d->inserted_window_dims),
           tpu_fmt_i64_list(s2, sizeof(s2), d->n_to_operand, d->scatter_dims_to_operand_dims),
           d->index_vector_dim);
  tpu_val_t ins[3] = {operand, indices, updates};
  tpu_val_t res;
  tpu_b_op(b, "stablehlo.scatter", 3, ins, 1, &region, attrs, 1, &out, &res);
  return res;
}
