/* The op executor (DESIGN.md §4): snapshot the argument buffers, build the cache
 * key, lower + compile on a miss, execute asynchronously. */
#include "exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "background.h"
#include "cache.h"
#include "check.h"
#include "key.h"
#include "tracing.h"

/* ------------------------------------------------------------ the snapshot */

/* Room for a typical op's arguments without a heap allocation per op. */
#define TPU_SNAPSHOT_SMALL 8

typedef struct tpu_snapshot {
  int nviews;
  tpu_view_arg_t* views;
  int* view_base;
  tpu_view_arg_t small_views[TPU_SNAPSHOT_SMALL];
  int small_base[TPU_SNAPSHOT_SMALL];
} tpu_snapshot_t;

static void tpu_snapshot_release(tpu_snapshot_t* s) {
  for (int i = 0; i < s->nviews; ++i) tpu_buffer_release(s->views[i].buffer);
  if (s->views != s->small_views) free(s->views);
  if (s->view_base != s->small_base) free(s->view_base);
}

/* The kinds whose payload is u.list (n entries): lengths come from the caller
 * and size the snapshot and the cache key, so they are checked first. */
static bool arg_is_list(tpu_arg_kind_t kind) {
  return kind == TPU_ARG_TENSOR_LIST || kind == TPU_ARG_INT_LIST || kind == TPU_ARG_FLOAT_LIST ||
         kind == TPU_ARG_BOOL_LIST || kind == TPU_ARG_VALUE_LIST;
}

/* The buffer a storage not written yet is expected to hold when a program
 * prepared for it runs (tpu_exec_prepare_program): what an op's result leaves.
 * A view that covers the storage densely is the result itself, in its memory
 * order (dims by decreasing stride, as compile.py's outputs come out of their
 * program); anything else sees the storage flat. */
static tpu_aval_t tpu_guess_buffer_aval(const tpu_tensor_t* t, size_t nbytes) {
  int64_t elems = (int64_t)(nbytes / tpu_dtype_size(t->dtype));
  tpu_aval_t flat = tpu_aval_make(t->dtype, 1, &elems);
  if (t->offset != 0 || tpu_tensor_numel(t) != elems) return flat;
  int perm[TPU_MAX_RANK];
  for (int d = 0; d < t->rank; ++d) { /* a stable sort by decreasing stride */
    int k = d;
    for (; k > 0 && t->strides[perm[k - 1]] < t->strides[d]; --k) perm[k] = perm[k - 1];
    perm[k] = d;
  }
  int64_t dims[TPU_MAX_RANK], expect = 1;
  for (int k = t->rank - 1; k >= 0; --k) {
    int64_t size = t->sizes[perm[k]];
    if (size != 1 && t->strides[perm[k]] != expect) return flat;
    expect *= size;
    dims[k] = size;
  }
  return tpu_aval_make(t->dtype, t->rank, dims);
}

/* `guess`: a storage without a buffer stands for one that will have one
 * (tpu_guess_buffer_aval), not for zeros; such a snapshot is never launched. */
static tpu_status_t* tpu_snapshot_take(int device, const tpu_arg_t* args, int nargs, bool guess, tpu_snapshot_t* s) {
  s->nviews = 0;
  s->views = s->small_views;
  s->view_base = s->small_base;
  if (nargs < 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "negative argument count %d", nargs);
  int n = 0;
  for (int i = 0; i < nargs; ++i) {
    if (arg_is_list(args[i].kind) && args[i].u.list.n < 0)
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d: negative list length %d", i, args[i].u.list.n);
    if (args[i].kind == TPU_ARG_TENSOR) n += 1;
    else if (args[i].kind == TPU_ARG_TENSOR_LIST) n += args[i].u.list.n;
  }
  if (n > TPU_SNAPSHOT_SMALL) s->views = calloc((size_t)n, sizeof(*s->views));
  else memset(s->small_views, 0, sizeof(tpu_view_arg_t) * (size_t)n);
  if (nargs > TPU_SNAPSHOT_SMALL) s->view_base = calloc((size_t)nargs, sizeof(int));
  if (!s->views || !s->view_base) {
    tpu_snapshot_release(s);
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (int i = 0; i < nargs; ++i) {
    s->view_base[i] = s->nviews;
    int cnt = args[i].kind == TPU_ARG_TENSOR ? 1 : args[i].kind == TPU_ARG_TENSOR_LIST ? args[i].u.list.n : 0;
    for (int j = 0; j < cnt; ++j) {
      const tpu_tensor_t* t = args[i].kind == TPU_ARG_TENSOR ? &args[i].u.tensor : &args[i].u.list.tensors[j];
      tpu_view_arg_t* v = &s->views[s->nviews++];
      if (!t->storage) continue;
      if (t->rank < 0 || t->rank > TPU_MAX_RANK || !tpu_dtype_valid((int)t->dtype)) {
        tpu_snapshot_release(s);
        return TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d: invalid tensor descriptor", i);
      }
      if (tpu_storage_device(t->storage) != device) {
        tpu_snapshot_release(s);
        return TPU_STATUS(TPU_INVALID_ARGUMENT,
                          "Expected all tensors to be on the same device, but found at least two "
                          "devices, tpu:%d and tpu:%d!",
                          device, tpu_storage_device(t->storage));
      }
      /* The view must lie inside its storage (PyTorch checks this for views it makes). */
      size_t isz = tpu_dtype_size(t->dtype);
      int64_t last = t->offset;
      bool empty = false;
      for (int d = 0; d < t->rank; ++d) {
        if (t->sizes[d] == 0) empty = true;
        else last += (t->sizes[d] - 1) * t->strides[d];
      }
      size_t nbytes = tpu_storage_nbytes(t->storage);
      if (!empty && (t->offset < 0 || (size_t)(last + 1) * isz > nbytes)) {
        tpu_snapshot_release(s);
        return TPU_STATUS(TPU_INVALID_ARGUMENT,
                          "argument %d: view (offset %lld, last element %lld) is outside its storage "
                          "of %zu bytes",
                          i, (long long)t->offset, (long long)last, nbytes);
      }
      v->buffer = tpu_storage_buffer(t->storage);
      if (v->buffer) v->buffer_aval = *tpu_buffer_aval(v->buffer);
      /* An empty storage is never written: it has no buffer to guess. */
      bool guessed = guess && !v->buffer && nbytes > 0;
      if (guessed) v->buffer_aval = tpu_guess_buffer_aval(t, nbytes);
      v->storage_elems = (int64_t)(nbytes / isz);
      v->mode = tpu_view_classify_aval(t, v->buffer || guessed ? &v->buffer_aval : NULL);
    }
  }
  return NULL;
}

/* ----------------------------------------------------------- lowering */

static void tpu_dump_module(const char* name, uint64_t hash, const char* text) {
  const char* dir = getenv("TORCHTPU_DUMP_DIR");
  if (!dir || !*dir) return;
  char path[1024];
  snprintf(path, sizeof(path), "%s/%016llx_%s.mlir", dir, (unsigned long long)hash, name);
  FILE* f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* A lowering's op context over snapshot s, with the list-error slot it reports into. */
typedef struct tpu_exec_op {
  tpu_op_t op;
  tpu_op_list_error_t list_error;
  tpu_val_t* vals;
} tpu_exec_op_t;

static void tpu_exec_op_free(tpu_exec_op_t* x) {
  if (!x) return;
  free(x->op.params);
  free(x->vals);
  free(x);
}

static tpu_exec_op_t* tpu_exec_op_new(const char* name, const char* overload, const tpu_arg_t* args, int nargs,
                                      tpu_snapshot_t* s, const void* program) {
  tpu_exec_op_t* x = calloc(1, sizeof(*x));
  int nv = s->nviews ? s->nviews : 1;
  size_t nvals = (size_t)(2 * nv) + (size_t)nargs * TPU_DTYPE_COUNT + 1;
  if (x) x->vals = malloc(sizeof(tpu_val_t) * nvals);
  if (!x || !x->vals) {
    tpu_exec_op_free(x);
    return NULL;
  }
  for (size_t i = 0; i < nvals; ++i) x->vals[i] = TPU_NOVAL;
  tpu_op_t* op = &x->op;
  op->name = name;
  op->overload = overload;
  op->args = args;
  op->nargs = nargs;
  op->program = program;
  op->views = s->views;
  op->nviews = s->nviews;
  op->view_base = s->view_base;
  op->view_vals = x->vals;
  op->buffer_vals = x->vals + nv;
  op->scalar_vals = x->vals + 2 * nv;
  x->list_error.arg = -1;
  x->list_error.runtime_arg = -1;
  x->list_error.complex_arg = -1;
  op->list_error = &x->list_error;
  return x;
}

/* Runs the lowering. An int list it could not hold fails the op whatever the
 * lowering concluded: it saw only a prefix of that list. */
static tpu_status_t* tpu_exec_call(tpu_lower_fn_t fn, tpu_builder_t* b, tpu_exec_op_t* x, int max_outs,
                                   tpu_val_t* outs, int* out_nouts) {
  *out_nouts = 0;
  int nouts = 0;
  tpu_status_t* st = fn(b, &x->op, max_outs, outs, &nouts);
  if (x->list_error.arg >= 0) {
    tpu_status_free(st);
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: argument %d is a list of %d values, more than the %d this op takes",
                      x->op.name, x->list_error.arg, x->list_error.len, x->list_error.cap);
  }
  tpu_status_t* real_read = tpu_op_complex_read_status(&x->list_error, x->op.name);
  if (real_read) {
    tpu_status_free(st);
    return real_read;
  }
  if (!st && !tpu_b_ok(b)) st = tpu_b_take_error(b);
  if (!st && (nouts < 0 || nouts > max_outs))
    st = TPU_STATUS(TPU_INTERNAL, "%s: lowering returned %d results", x->op.name, nouts);
  if (!st) *out_nouts = nouts;
  return st;
}

/* Copies what the compiled form keeps: result avals and the parameter plan. */
static tpu_status_t* tpu_exec_keep(tpu_builder_t* b, const tpu_op_t* op, int nouts, const tpu_val_t* outs,
                                   tpu_compiled_t* out) {
  out->nouts = nouts;
  out->out_avals = calloc((size_t)(nouts ? nouts : 1), sizeof(tpu_aval_t));
  out->nparams = op->nparams;
  out->params = calloc((size_t)(op->nparams ? op->nparams : 1), sizeof(tpu_param_src_t));
  if (!out->out_avals || !out->params) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  for (int i = 0; i < nouts; ++i) out->out_avals[i] = *tpu_b_aval(b, outs[i]);
  if (op->nparams) memcpy(out->params, op->params, sizeof(tpu_param_src_t) * (size_t)op->nparams);
  for (int p = 0; p < op->nparams; ++p) out->donates |= op->params[p].donate_to != 0;
  return NULL;
}

/* `lazy`: the executable compiles at its first launch or load, not now. */
static tpu_status_t* tpu_exec_lower(const char* name, const char* overload, tpu_lower_fn_t fn,
                                    const void* program, const tpu_arg_t* args, int nargs, int max_outs,
                                    tpu_snapshot_t* s, uint64_t hash, bool lazy, tpu_compiled_t* out) {
  memset(out, 0, sizeof(*out));
  if (max_outs < 0) max_outs = 0;
  tpu_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_builder_create(&b));
  if (tpu_runtime_platform_is_cpu()) tpu_builder_set_target(b, TPU_BUILDER_TARGET_XLA_CPU);
  tpu_exec_op_t* x = tpu_exec_op_new(name, overload, args, nargs, s, program);
  /* Sized by the caller: an op may return any number of results (+1: check.h's error word). */
  tpu_val_t* outs = malloc(sizeof(tpu_val_t) * (size_t)(max_outs + 1));
  tpu_status_t* st = NULL;
  if (!x || !outs) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  int nouts = 0;
  if (!st) st = tpu_exec_call(fn, b, x, max_outs, outs, &nouts);
  /* check.h: an op with device-side checks returns its new error word last. */
  tpu_val_t word = TPU_NOVAL;
  if (!st) st = tpu_check_lower(b, &x->op, &word);
  if (!st && word != TPU_NOVAL) outs[nouts++] = word;
  char* text = NULL;
  if (!st) st = tpu_builder_finish(b, nouts, outs, &text);
  if (!st) st = tpu_exec_keep(b, &x->op, nouts, outs, out);
  if (!st) {
    tpu_dump_module(name, hash, text);
    /* Fused eager mode only records an op (fuse.c): it compiles if it ever runs
     * alone. A whole program always runs alone (tpu_executable_set_standalone). */
    lazy = lazy || (tpu_runtime_eager_mode() == TPU_EAGER_FUSED && !program);
    st = lazy ? tpu_executable_create_lazy(text, strlen(text), nouts, &out->exe)
              : tpu_executable_compile(text, strlen(text), nouts, &out->exe);
    if (!st && program) tpu_executable_set_standalone(out->exe);
    if (st) st = tpu_status_annotate(st, "compiling aten::%s%s%s", name, *overload ? "." : "", overload);
  }
  if (!st && word != TPU_NOVAL) { /* the word is not one of the op's results */
    out->nouts = nouts - 1;
    out->checked = true;
  }
  free(text);
  free(outs);
  tpu_exec_op_free(x);
  tpu_builder_destroy(b);
  if (st) tpu_compiled_destroy(out);
  return st;
}

/* ----------------------------------------------------------- execution */

static tpu_status_t* tpu_scalar_bytes(const tpu_scalar_t* sc, tpu_dtype_t dtype, uint8_t out[16]) {
  memset(out, 0, 16);
  /* Checked per run: the value is not in the cache key. */
  TPU_RETURN_IF_ERROR(tpu_scalar_real_status(sc, dtype));
  bool is_f = tpu_dtype_is_float(sc->dtype) || tpu_dtype_is_complex(sc->dtype);
  double f = tpu_scalar_to_double(sc);
  int64_t i = is_f ? (int64_t)sc->f : sc->i;
  switch (dtype) {
    case TPU_F32: { float v = (float)f; memcpy(out, &v, 4); return NULL; }
    case TPU_F64: memcpy(out, &f, 8); return NULL;
    case TPU_C64: { float v[2] = {(float)f, (float)sc->imag}; memcpy(out, v, 8); return NULL; }
    case TPU_C128: { double v[2] = {f, sc->imag}; memcpy(out, v, 16); return NULL; }
    case TPU_I64: memcpy(out, &i, 8); return NULL;
    case TPU_BOOL: out[0] = is_f ? (f != 0.0) : (i != 0); return NULL;
    default: return TPU_STATUS(TPU_INTERNAL, "scalar operand of dtype %s", tpu_dtype_name(dtype));
  }
}

/* The generator an op draws from: its explicit Generator argument, else the
 * device's default. */
static tpu_generator_t* tpu_exec_generator(int device, const tpu_arg_t* args, int nargs) {
  for (int i = 0; i < nargs; ++i)
    if (args[i].kind == TPU_ARG_GENERATOR && args[i].u.generator) return args[i].u.generator;
  return tpu_generator_default(device);
}

static tpu_status_t* tpu_exec_params(const tpu_compiled_t* c, int device, const tpu_arg_t* args, int nargs,
                                     const tpu_snapshot_t* s, tpu_buffer_t** bufs) {
  for (int p = 0; p < c->nparams; ++p) {
    const tpu_param_src_t* src = &c->params[p];
    switch (src->kind) {
      case TPU_PARAM_BUFFER: {
        int vi = s->view_base[src->arg] + (src->item < 0 ? 0 : src->item);
        bufs[p] = tpu_buffer_retain(s->views[vi].buffer);
        if (!bufs[p]) return TPU_STATUS(TPU_INTERNAL, "operand %d has no buffer", p);
        break;
      }
      case TPU_PARAM_OFFSET: {
        const tpu_arg_t* a = &args[src->arg];
        int64_t off = a->kind == TPU_ARG_TENSOR ? a->u.tensor.offset : a->u.list.tensors[src->item].offset;
        TPU_RETURN_IF_ERROR(tpu_scalar_buffer(device, TPU_I64, &off, &bufs[p]));
        break;
      }
      case TPU_PARAM_SCALAR: {
        uint8_t bytes[16];
        TPU_RETURN_IF_ERROR(tpu_scalar_bytes(&args[src->arg].u.scalar, src->dtype, bytes));
        TPU_RETURN_IF_ERROR(tpu_scalar_buffer(device, src->dtype, bytes, &bufs[p]));
        break;
      }
      case TPU_PARAM_RNG: {
        tpu_generator_t* g = tpu_exec_generator(device, args, nargs);
        if (!g) return TPU_STATUS(TPU_INVALID_ARGUMENT, "tpu:%d has no random generator", device);
        uint64_t seed, first;
        tpu_generator_next(g, 1, &seed, &first);
        int64_t state[2] = {(int64_t)seed, (int64_t)first};
        int64_t two = 2;
        tpu_aval_t a = tpu_aval_make(TPU_I64, 1, &two);
        TPU_RETURN_IF_ERROR(tpu_buffer_from_host(device, state, &a, &bufs[p]));
        break;
      }
      case TPU_PARAM_CHECK_WORD:
      case TPU_PARAM_CHECK_CODE: break; /* filled by tpu_check_execute */
    }
  }
  return NULL;
}

/* ------------------------------------------- data-range pre-pass (TPU_LOWER_DATA_RANGE) */

/* i64[3] = {min, max, sum} of tensor argument 0 (integral, with elements). */
static tpu_status_t* tpu_lower_data_range(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* out_nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  int64_t n = tpu_aval_numel(&a), d0 = 0, one = 1;
  tpu_val_t x = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_I64), 1, &n);
  tpu_val_t lo = tpu_b_reduce(b, x, tpu_b_const_i(b, TPU_I64, INT64_MAX), 1, &d0, "stablehlo.minimum");
  tpu_val_t hi = tpu_b_reduce(b, x, tpu_b_const_i(b, TPU_I64, INT64_MIN), 1, &d0, "stablehlo.maximum");
  tpu_val_t sum = tpu_b_reduce(b, x, tpu_b_const_i(b, TPU_I64, 0), 1, &d0, "stablehlo.add");
  tpu_val_t parts[3] = {tpu_b_reshape(b, lo, 1, &one), tpu_b_reshape(b, hi, 1, &one), tpu_b_reshape(b, sum, 1, &one)};
  outs[0] = tpu_b_concat(b, 3, parts, 0);
  *out_nouts = 1;
  return NULL;
}

/* {min, max, sum} of argument 0 read back to the host; {0, -1, 0} when it is not
 * an integral tensor with elements (the lowering then rejects or sizes by minlength). */
static tpu_status_t* tpu_exec_data_range(int device, const tpu_arg_t* args, int nargs, int64_t range[3]) {
  range[0] = 0;
  range[1] = -1;
  range[2] = 0;
  if (nargs < 1 || args[0].kind != TPU_ARG_TENSOR || !tpu_dtype_is_int(args[0].u.tensor.dtype)) return NULL;
  const tpu_tensor_t* t = &args[0].u.tensor;
  for (int d = 0; d < t->rank; ++d)
    if (t->sizes[d] == 0) return NULL;
  tpu_buffer_t* buf = NULL;
  int n = 0;
  TPU_RETURN_IF_ERROR(tpu_exec_run("tpu.data_range", "", tpu_lower_data_range, 0, device, args, 1, 1, &buf, &n));
  tpu_status_t* st = n == 1 ? tpu_buffer_to_host(buf, range, 3 * sizeof(int64_t))
                            : TPU_STATUS(TPU_INTERNAL, "data range: %d results", n);
  tpu_buffer_release(buf);
  /* Reading the range synchronised: report check failures (check.h) as a sync does. */
  if (!st) st = tpu_check_sync(device);
  return st;
}

/* Runs the op with its argument 0's {min, max} (TPU_LOWER_DATA_RANGE) or {min,
 * sum} (TPU_LOWER_DATA_SUM) appended as two INT arguments. */
static tpu_status_t* tpu_exec_run_ranged(const char* name, const char* overload, tpu_lower_fn_t fn, unsigned flags,
                                         int device, const tpu_arg_t* args, int nargs, int max_outs,
                                         tpu_buffer_t** out_buffers, int* out_nouts) {
  int64_t range[3];
  tpu_status_t* st = tpu_exec_data_range(device, args, nargs, range);
  if (st) return tpu_status_annotate(st, "%s", name);
  if (flags & TPU_LOWER_DATA_SUM) range[1] = range[2]; /* {min, sum} */
  tpu_arg_t* ext = calloc((size_t)nargs + 2, sizeof(*ext));
  if (!ext) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  if (nargs > 0) memcpy(ext, args, sizeof(*ext) * (size_t)nargs);
  for (int i = 0; i < 2; ++i) {
    ext[nargs + i].kind = TPU_ARG_INT;
    ext[nargs + i].u.i = range[i];
  }
  unsigned plain = flags & ~(unsigned)(TPU_LOWER_DATA_RANGE | TPU_LOWER_DATA_SUM);
  st = tpu_exec_run(name, overload, fn, plain, device, ext, nargs + 2, max_outs, out_buffers, out_nouts);
  free(ext);
  return st;
}

/* ----------------------------------------------------------- the entry point */

/* What one execution needs: the op or program, its arguments and room for results. */
typedef struct tpu_exec_req {
  const char* name;
  const char* overload;
  tpu_lower_fn_t fn;
  unsigned flags;
  const tpu_exec_program_t* program; /* NULL for an aten op */
  int device;
  const tpu_arg_t* args;
  int nargs;
  int max_outs;
  bool prepare; /* build the compiled form ahead of its first run; launch nothing */
} tpu_exec_req_t;

/* A miss of a prepare request (tpu_exec_prepare_program): the lazy entry it
 * inserted is compiled on the background thread and marked for its first run. */
static void tpu_exec_prepared(tpu_cache_entry_t* e, const tpu_executable_t* ours) {
  tpu_executable_t* exe = tpu_cache_entry_compiled(e)->exe;
  if (exe != ours) return; /* another thread inserted this key first: it is theirs */
  tpu_status_t* st = tpu_executable_load_async(exe);
  if (st) { /* no background thread: the first launch compiles it */
    tpu_status_free(st);
    return;
  }
  tpu_cache_entry_mark_prepared(e);
  tpu_metric_add(TPU_METRIC_PREPARED_PROGRAMS, 1);
}

/* The compiled form for this request and snapshot: from the cache, or lowered,
 * compiled and inserted. Returns a referenced entry; out_fresh: whether this
 * request built it or is the first to run one prepared for it. */
static tpu_status_t* tpu_exec_entry(const tpu_exec_req_t* r, tpu_snapshot_t* s, bool* out_fresh,
                                    tpu_cache_entry_t** out_entry) {
  *out_entry = NULL;
  *out_fresh = false;
  tpu_key_t k;
  tpu_key_init(&k);
  if (r->program) tpu_key_put(&k, r->program->key, r->program->key_len);
  tpu_key_args(&k, r->name, r->overload, r->flags, r->args, r->nargs, s->views, s->view_base);
  tpu_status_t* st = k.oom ? TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory") : NULL;
  uint64_t hash = st ? 0 : tpu_hash_bytes(k.data, k.len);
  if (!st) *out_entry = tpu_cache_lookup(k.data, k.len, hash);
  if (!st && *out_entry && !r->prepare) { /* a prepare request that finds its entry has nothing to do */
    tpu_metric_add(TPU_METRIC_CACHE_HITS, 1);
    tpu_trace_mark(TPU_TRACE_CACHE_HIT, r->name);
    *out_fresh = r->program && tpu_cache_entry_take_prepared(*out_entry); /* only programs are prepared */
    if (*out_fresh) tpu_metric_add(TPU_METRIC_PREPARED_HITS, 1);
  } else if (!st && !*out_entry) {
    tpu_metric_add(TPU_METRIC_CACHE_MISSES, 1);
    tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_CACHE_MISS, r->name);
    tpu_compiled_t c;
    st = tpu_exec_lower(r->name, r->overload, r->fn, r->program ? r->program->program : NULL, r->args, r->nargs,
                        r->max_outs, s, hash, r->prepare, &c);
    /* held across the insert, which destroys c when another thread's entry wins */
    tpu_executable_t* ours = st ? NULL : tpu_executable_retain(c.exe);
    if (!st) st = tpu_cache_insert(k.data, k.len, hash, &c, out_entry);
    if (!st && r->prepare) tpu_exec_prepared(*out_entry, ours);
    tpu_executable_destroy(ours);
    *out_fresh = !st;
    tpu_trace_end(range);
  }
  tpu_key_free(&k);
  return st;
}

/* Which aliased parameters give their buffer to the run (donate[p]): those held
 * only by their storage, this op's snapshot and the launch itself, read by no
 * other parameter, and whose storage is exactly the buffer (so the write-back
 * adopts the output). Anything else (a clone sharing the buffer, a lent upload)
 * keeps its buffer, and the output is a new one. Returns whether any does. */
static bool tpu_exec_donations(const tpu_compiled_t* c, const tpu_exec_req_t* r, const tpu_snapshot_t* s,
                               tpu_buffer_t* const* bufs, bool* donate) {
  bool any = false;
  for (int p = 0; p < c->nparams; ++p) {
    donate[p] = false;
    const tpu_param_src_t* src = &c->params[p];
    if (src->kind != TPU_PARAM_BUFFER || src->donate_to == 0 || src->item >= 0) continue;
    const tpu_arg_t* a = &r->args[src->arg];
    if (a->kind != TPU_ARG_TENSOR || tpu_storage_nbytes(a->u.tensor.storage) != tpu_buffer_nbytes(bufs[p]))
      continue;
    bool shared = false;
    for (int q = 0; q < c->nparams && !shared; ++q) shared = q != p && bufs[q] == bufs[p];
    /* The storage, bufs[p], the snapshot's views of it, and the in-flight list
     * while its producer runs (the donating run waits for that producer). */
    int holders = 2 + tpu_runtime_inflight_holds(bufs[p]);
    for (int v = 0; v < s->nviews; ++v) holders += s->views[v].buffer == bufs[p];
    donate[p] = !shared && tpu_buffer_donatable(bufs[p], holders);
    any |= donate[p];
  }
  return any;
}

/* Feeds the operands and launches the compiled form. */
static tpu_status_t* tpu_exec_launch(const tpu_exec_req_t* r, const tpu_compiled_t* c, const tpu_snapshot_t* s,
                                     tpu_buffer_t** out_buffers, int* out_nouts) {
  /* Checked before the parameters: they may draw from the generator. */
  if (c->nouts > r->max_outs)
    return TPU_STATUS(TPU_INTERNAL, "%s: %d results, room for %d", r->name, c->nouts, r->max_outs);
  tpu_buffer_t* stack_bufs[32];
  tpu_buffer_t** bufs = c->nparams <= 32 ? stack_bufs : calloc((size_t)c->nparams, sizeof(*bufs));
  if (!bufs) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  memset(bufs, 0, sizeof(*bufs) * (size_t)c->nparams);
  tpu_status_t* st = tpu_exec_params(c, r->device, r->args, r->nargs, s, bufs);
  /* Only graphs with in-place outputs get here (c->donates); no malloc per op. */
  bool donate_small[32];
  bool* donate = NULL;
  if (!st && c->donates) {
    donate = c->nparams <= 32 ? donate_small : malloc(sizeof(bool) * (size_t)c->nparams);
    if (donate && !tpu_exec_donations(c, r, s, bufs, donate)) {
      if (donate != donate_small) free(donate);
      donate = NULL;
    }
  }
  if (!st && c->checked) st = tpu_check_execute(c, r->device, bufs, donate, r->name, out_buffers);
  else if (!st)
    st = tpu_executable_execute_donating(c->exe, r->device, c->nparams, bufs, donate, c->nouts, c->out_avals, r->name,
                                         out_buffers);
  if (donate != donate_small) free(donate);
  if (!st) *out_nouts = c->nouts;
  for (int p = 0; p < c->nparams; ++p) tpu_buffer_release(bufs[p]);
  if (bufs != stack_bufs) free(bufs);
  return st;
}

static tpu_status_t* tpu_exec_run_req(const tpu_exec_req_t* r, tpu_buffer_t** out_buffers, int* out_nouts,
                                      bool* out_fresh) {
  *out_nouts = 0;
  *out_fresh = false;
  if (!tpu_runtime_initialized()) return TPU_STATUS(TPU_FAILED_PRECONDITION, "torchtpu runtime is not initialised");
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(r->device));
  tpu_snapshot_t s;
  TPU_RETURN_IF_ERROR(tpu_snapshot_take(r->device, r->args, r->nargs, r->prepare, &s));
  tpu_cache_entry_t* entry = NULL;
  tpu_status_t* st = tpu_exec_entry(r, &s, out_fresh, &entry);
  if (!st && !r->prepare) {
    st = tpu_exec_launch(r, tpu_cache_entry_compiled(entry), &s, out_buffers, out_nouts);
    tpu_metric_add(TPU_METRIC_OPS_EXECUTED, 1);
  }
  tpu_cache_entry_release(entry);
  tpu_snapshot_release(&s);
  return st;
}

tpu_status_t* tpu_exec_run(const char* name, const char* overload, tpu_lower_fn_t fn, unsigned flags, int device,
                           const tpu_arg_t* args, int nargs, int max_outs, tpu_buffer_t** out_buffers,
                           int* out_nouts) {
  *out_nouts = 0;
  bool summed = (flags & TPU_LOWER_DATA_SUM) && nargs >= 2 && args[1].kind == TPU_ARG_NONE;
  if ((flags & TPU_LOWER_DATA_RANGE) || summed)
    return tpu_exec_run_ranged(name, overload, fn, flags, device, args, nargs, max_outs, out_buffers, out_nouts);
  tpu_exec_req_t r = {name, overload ? overload : "", fn, flags, NULL, device, args, nargs, max_outs, false};
  bool fresh;
  return tpu_exec_run_req(&r, out_buffers, out_nouts, &fresh);
}

tpu_status_t* tpu_exec_run_program(const char* name, tpu_lower_fn_t fn, const tpu_exec_program_t* program,
                                   int device, const tpu_arg_t* args, int nargs, int max_outs,
                                   tpu_buffer_t** out_buffers, int* out_nouts, bool* out_fresh) {
  tpu_exec_req_t r = {name, "", fn, 0, program, device, args, nargs, max_outs, false};
  return tpu_exec_run_req(&r, out_buffers, out_nouts, out_fresh);
}

tpu_status_t* tpu_exec_prepare_program(const char* name, tpu_lower_fn_t fn, const tpu_exec_program_t* program,
                                       int device, const tpu_arg_t* args, int nargs, int max_outs) {
  if (!tpu_background_enabled()) return NULL;
  tpu_exec_req_t r = {name, "", fn, 0, program, device, args, nargs, max_outs, true};
  int nouts = 0;
  bool fresh = false;
  return tpu_exec_run_req(&r, NULL, &nouts, &fresh);
}
