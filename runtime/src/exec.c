/* The op executor (DESIGN.md §4): snapshot the argument buffers, build the cache
 * key, lower + compile on a miss, execute asynchronously. */
#include "exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"

/* ---------------------------------------------------------------- key bytes */

typedef struct tpu_key {
  uint8_t inline_buf[1024];
  uint8_t* data;
  size_t len, cap;
  bool oom;
} tpu_key_t;

static void tpu_key_init(tpu_key_t* k) {
  k->data = k->inline_buf;
  k->len = 0;
  k->cap = sizeof(k->inline_buf);
  k->oom = false;
}

static void tpu_key_free(tpu_key_t* k) {
  if (k->data != k->inline_buf) free(k->data);
}

static void tpu_key_put(tpu_key_t* k, const void* p, size_t n) {
  if (k->oom || n == 0) return;
  if (k->len + n > k->cap) {
    size_t cap = k->cap * 2;
    while (cap < k->len + n) cap *= 2;
    uint8_t* d = k->data == k->inline_buf ? malloc(cap) : realloc(k->data, cap);
    if (!d) {
      k->oom = true;
      return;
    }
    if (k->data == k->inline_buf) memcpy(d, k->inline_buf, k->len);
    k->data = d;
    k->cap = cap;
  }
  memcpy(k->data + k->len, p, n);
  k->len += n;
}

static void tpu_key_i64(tpu_key_t* k, int64_t v) { tpu_key_put(k, &v, sizeof(v)); }
static void tpu_key_str(tpu_key_t* k, const char* s) { tpu_key_put(k, s ? s : "", strlen(s ? s : "") + 1); }

static void tpu_key_tensor(tpu_key_t* k, const tpu_tensor_t* t, const tpu_view_arg_t* v) {
  int64_t head[3] = {v->mode, t->dtype, t->rank};
  tpu_key_put(k, head, sizeof(head));
  if (v->mode == TPU_VIEW_ABSENT) return;
  tpu_key_put(k, t->sizes, sizeof(int64_t) * (size_t)t->rank);
  if (v->mode == TPU_VIEW_ZEROS) {
    /* Reads ignore the layout, but a write into this view (copy_) depends on it. */
    tpu_key_i64(k, v->storage_elems);
    tpu_key_put(k, t->strides, sizeof(int64_t) * (size_t)t->rank);
    tpu_key_i64(k, t->offset);
    return;
  }
  const tpu_aval_t* ba = &v->buffer_aval;
  int64_t bh[2] = {ba->dtype, ba->rank};
  tpu_key_put(k, bh, sizeof(bh));
  tpu_key_put(k, ba->dims, sizeof(int64_t) * (size_t)ba->rank);
  if (v->mode == TPU_VIEW_FULL) return;
  tpu_key_put(k, t->strides, sizeof(int64_t) * (size_t)t->rank);
  if (v->mode == TPU_VIEW_STATIC) tpu_key_i64(k, t->offset);
}

/* ------------------------------------------------------------ the snapshot */

typedef struct tpu_snapshot {
  int nviews;
  tpu_view_arg_t* views;
  int* view_base;
} tpu_snapshot_t;

static void tpu_snapshot_release(tpu_snapshot_t* s) {
  for (int i = 0; i < s->nviews; ++i) tpu_buffer_release(s->views[i].buffer);
  free(s->views);
  free(s->view_base);
}

static tpu_status_t* tpu_snapshot_take(int device, const tpu_arg_t* args, int nargs, tpu_snapshot_t* s) {
  memset(s, 0, sizeof(*s));
  int n = 0;
  for (int i = 0; i < nargs; ++i) {
    if (args[i].kind == TPU_ARG_TENSOR) n += 1;
    else if (args[i].kind == TPU_ARG_TENSOR_LIST) n += args[i].u.list.n;
  }
  s->views = calloc((size_t)(n ? n : 1), sizeof(*s->views));
  s->view_base = calloc((size_t)(nargs ? nargs : 1), sizeof(int));
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
      v->storage_elems = (int64_t)(nbytes / isz);
      v->mode = tpu_view_classify(t, v->buffer);
    }
  }
  return NULL;
}

/* ------------------------------------------------------------- the key */

static void tpu_key_args(tpu_key_t* k, const char* name, const char* overload, unsigned flags,
                         const tpu_arg_t* args, int nargs, const tpu_snapshot_t* s) {
  tpu_key_str(k, name);
  tpu_key_str(k, overload);
  for (int i = 0; i < nargs; ++i) {
    const tpu_arg_t* a = &args[i];
    uint8_t kind = (uint8_t)a->kind;
    tpu_key_put(k, &kind, 1);
    switch (a->kind) {
      case TPU_ARG_TENSOR: tpu_key_tensor(k, &a->u.tensor, &s->views[s->view_base[i]]); break;
      case TPU_ARG_TENSOR_LIST:
        tpu_key_i64(k, a->u.list.n);
        for (int j = 0; j < a->u.list.n; ++j)
          tpu_key_tensor(k, &a->u.list.tensors[j], &s->views[s->view_base[i] + j]);
        break;
      case TPU_ARG_SCALAR: {
        int64_t v[2] = {a->u.scalar.dtype, a->u.scalar.wrapped};
        tpu_key_put(k, v, sizeof(v));
        if (flags & TPU_LOWER_STATIC_SCALARS) {
          tpu_key_put(k, &a->u.scalar.f, sizeof(double));
          tpu_key_i64(k, a->u.scalar.i);
        }
        break;
      }
      case TPU_ARG_INT: tpu_key_i64(k, a->u.i); break;
      case TPU_ARG_FLOAT: tpu_key_put(k, &a->u.f, sizeof(double)); break;
      case TPU_ARG_BOOL: tpu_key_i64(k, a->u.b); break;
      case TPU_ARG_DTYPE: tpu_key_i64(k, a->u.dtype); break;
      case TPU_ARG_STRING: tpu_key_str(k, a->u.str); break;
      case TPU_ARG_INT_LIST:
        tpu_key_i64(k, a->u.list.n);
        tpu_key_put(k, a->u.list.ints, sizeof(int64_t) * (size_t)a->u.list.n);
        break;
      case TPU_ARG_FLOAT_LIST:
        tpu_key_i64(k, a->u.list.n);
        tpu_key_put(k, a->u.list.floats, sizeof(double) * (size_t)a->u.list.n);
        break;
      case TPU_ARG_BOOL_LIST:
        tpu_key_i64(k, a->u.list.n);
        for (int j = 0; j < a->u.list.n; ++j) tpu_key_i64(k, a->u.list.bools[j]);
        break;
      default: break;
    }
  }
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

static tpu_status_t* tpu_exec_lower(const char* name, const char* overload, tpu_lower_fn_t fn,
                                    const tpu_arg_t* args, int nargs, int max_outs, tpu_snapshot_t* s,
                                    uint64_t hash, tpu_compiled_t* out) {
  memset(out, 0, sizeof(*out));
  tpu_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_builder_create(&b));
  tpu_op_t* op = calloc(1, sizeof(*op));
  int nv = s->nviews ? s->nviews : 1;
  tpu_val_t* vals = malloc(sizeof(tpu_val_t) * (size_t)(2 * nv + nargs * TPU_DTYPE_COUNT + 1));
  if (!op || !vals) {
    free(op);
    free(vals);
    tpu_builder_destroy(b);
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (int i = 0; i < 2 * nv + nargs * TPU_DTYPE_COUNT + 1; ++i) vals[i] = TPU_NOVAL;
  op->name = name;
  op->overload = overload;
  op->args = args;
  op->nargs = nargs;
  op->views = s->views;
  op->nviews = s->nviews;
  op->view_base = s->view_base;
  op->view_vals = vals;
  op->buffer_vals = vals + nv;
  op->scalar_vals = vals + 2 * nv;

  tpu_val_t outs[TPU_MAX_RESULTS];
  int nouts = 0;
  int cap = max_outs < TPU_MAX_RESULTS ? max_outs : TPU_MAX_RESULTS;
  tpu_status_t* st = fn(b, op, cap, outs, &nouts);
  if (!st && !tpu_b_ok(b)) st = tpu_b_take_error(b);
  if (!st && (nouts < 0 || nouts > cap)) st = TPU_STATUS(TPU_INTERNAL, "%s: lowering returned %d results", name, nouts);
  char* text = NULL;
  if (!st) st = tpu_builder_finish(b, nouts, outs, &text);
  if (!st) {
    out->nouts = nouts;
    out->out_avals = calloc((size_t)(nouts ? nouts : 1), sizeof(tpu_aval_t));
    out->nparams = op->nparams;
    out->params = calloc((size_t)(op->nparams ? op->nparams : 1), sizeof(tpu_param_src_t));
    if (!out->out_avals || !out->params) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  if (!st) {
    for (int i = 0; i < nouts; ++i) out->out_avals[i] = *tpu_b_aval(b, outs[i]);
    memcpy(out->params, op->params, sizeof(tpu_param_src_t) * (size_t)op->nparams);
    tpu_dump_module(name, hash, text);
    st = tpu_executable_compile(text, strlen(text), nouts, &out->exe);
    if (st) st = tpu_status_annotate(st, "compiling aten::%s%s%s", name, *overload ? "." : "", overload);
  }
  (void)overload;
  free(text);
  free(vals);
  free(op);
  tpu_builder_destroy(b);
  if (st) tpu_compiled_destroy(out);
  return st;
}

/* ----------------------------------------------------------- execution */

static tpu_status_t* tpu_scalar_bytes(const tpu_scalar_t* sc, tpu_dtype_t dtype, uint8_t out[8]) {
  memset(out, 0, 8);
  bool is_f = tpu_dtype_is_float(sc->dtype) || tpu_dtype_is_complex(sc->dtype);
  double f = is_f ? sc->f : (double)sc->i;
  int64_t i = is_f ? (int64_t)sc->f : sc->i;
  switch (dtype) {
    case TPU_F32: { float v = (float)f; memcpy(out, &v, 4); return NULL; }
    case TPU_F64: memcpy(out, &f, 8); return NULL;
    case TPU_I64: memcpy(out, &i, 8); return NULL;
    case TPU_BOOL: out[0] = is_f ? (f != 0.0) : (i != 0); return NULL;
    default: return TPU_STATUS(TPU_INTERNAL, "scalar operand of dtype %s", tpu_dtype_name(dtype));
  }
}

static tpu_status_t* tpu_exec_params(const tpu_compiled_t* c, int device, const tpu_arg_t* args,
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
        uint8_t bytes[8];
        TPU_RETURN_IF_ERROR(tpu_scalar_bytes(&args[src->arg].u.scalar, src->dtype, bytes));
        TPU_RETURN_IF_ERROR(tpu_scalar_buffer(device, src->dtype, bytes, &bufs[p]));
        break;
      }
      case TPU_PARAM_RNG: {
        uint64_t seed, offset;
        tpu_rng_get_state(&seed, &offset);
        int64_t state[2] = {(int64_t)seed, (int64_t)tpu_rng_next(1)};
        int64_t two = 2;
        tpu_aval_t a = tpu_aval_make(TPU_I64, 1, &two);
        TPU_RETURN_IF_ERROR(tpu_buffer_from_host(device, state, &a, &bufs[p]));
        break;
      }
    }
  }
  return NULL;
}

tpu_status_t* tpu_exec_run(const char* name, const char* overload, tpu_lower_fn_t fn, unsigned flags, int device,
                           const tpu_arg_t* args, int nargs, int max_outs, tpu_buffer_t** out_buffers,
                           int* out_nouts) {
  *out_nouts = 0;
  if (!tpu_runtime_initialized()) return TPU_STATUS(TPU_FAILED_PRECONDITION, "torchtpu runtime is not initialised");
  if (device < 0 || device >= tpu_runtime_device_count())
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "tpu:%d is not a device", device);
  if (!overload) overload = "";
  tpu_snapshot_t s;
  TPU_RETURN_IF_ERROR(tpu_snapshot_take(device, args, nargs, &s));
  tpu_key_t k;
  tpu_key_init(&k);
  tpu_key_args(&k, name, overload, flags, args, nargs, &s);
  tpu_status_t* st = NULL;
  tpu_cache_entry_t* entry = NULL;
  if (k.oom) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  uint64_t hash = st ? 0 : tpu_hash_bytes(k.data, k.len);
  if (!st) entry = tpu_cache_lookup(k.data, k.len, hash);
  if (!st && entry) {
    tpu_metric_add(TPU_METRIC_CACHE_HITS, 1);
  } else if (!st) {
    tpu_metric_add(TPU_METRIC_CACHE_MISSES, 1);
    tpu_compiled_t c;
    st = tpu_exec_lower(name, overload, fn, args, nargs, max_outs, &s, hash, &c);
    if (!st) st = tpu_cache_insert(k.data, k.len, hash, &c, &entry);
  }
  tpu_key_free(&k);
  if (!st) {
    const tpu_compiled_t* c = tpu_cache_entry_compiled(entry);
    tpu_buffer_t* stack_bufs[32];
    tpu_buffer_t** bufs = c->nparams <= 32 ? stack_bufs : calloc((size_t)c->nparams, sizeof(*bufs));
    if (!bufs) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
    if (!st) {
      memset(bufs, 0, sizeof(*bufs) * (size_t)c->nparams);
      st = tpu_exec_params(c, device, args, &s, bufs);
      if (!st && c->nouts > max_outs) st = TPU_STATUS(TPU_INTERNAL, "%s: too many results", name);
      if (!st) st = tpu_executable_execute(c->exe, device, c->nparams, bufs, c->nouts, c->out_avals, name, out_buffers);
      if (!st) *out_nouts = c->nouts;
      for (int p = 0; p < c->nparams; ++p) tpu_buffer_release(bufs[p]);
      if (bufs != stack_bufs) free(bufs);
    }
    tpu_metric_add(TPU_METRIC_OPS_EXECUTED, 1);
  }
  tpu_cache_entry_release(entry);
  tpu_snapshot_release(&s);
  return st;
}
