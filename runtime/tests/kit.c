#include "kit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static void kit_dense_strides(tpu_tensor_t* t) {
  int64_t st = 1;
  for (int i = t->rank - 1; i >= 0; --i) {
    t->strides[i] = st;
    st *= t->sizes[i] ? t->sizes[i] : 1;
  }
}

tpu_status_t* kit_tensor(tpu_dtype_t dtype, int rank, const int64_t* sizes, const void* data, tpu_tensor_t* out) {
  memset(out, 0, sizeof(*out));
  out->dtype = dtype;
  out->rank = rank;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= (out->sizes[i] = sizes[i]);
  kit_dense_strides(out);
  TPU_RETURN_IF_ERROR(tpu_storage_create(0, (size_t)n * tpu_dtype_size(dtype), &out->storage));
  return data ? tpu_tensor_upload(out, data, dtype) : NULL;
}

tpu_tensor_t kit_view(const tpu_tensor_t* base, int rank, const int64_t* sizes, const int64_t* strides,
                      int64_t offset) {
  tpu_tensor_t t = *base;
  t.rank = rank;
  for (int i = 0; i < rank; ++i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = strides[i];
  }
  t.offset = offset;
  return t;
}

/* A zeroed argument of `kind`. */
static tpu_arg_t kit_arg_of(tpu_arg_kind_t kind) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = kind;
  return a;
}

/* A list argument of `kind` with n elements; the caller sets the pointer. */
static tpu_arg_t kit_arg_list(tpu_arg_kind_t kind, int n) {
  tpu_arg_t a = kit_arg_of(kind);
  a.u.list.n = n;
  return a;
}

/* A wrapped-number Scalar of `dtype`; the caller sets the value. */
static tpu_arg_t kit_arg_scalar(tpu_dtype_t dtype) {
  tpu_arg_t a = kit_arg_of(TPU_ARG_SCALAR);
  a.u.scalar.dtype = dtype;
  a.u.scalar.wrapped = true;
  return a;
}

tpu_arg_t kit_arg_none(void) { return kit_arg_of(TPU_ARG_NONE); }

tpu_arg_t kit_arg_tensor(const tpu_tensor_t* t) {
  tpu_arg_t a = kit_arg_of(TPU_ARG_TENSOR);
  a.u.tensor = *t;
  return a;
}

tpu_arg_t kit_arg_scalar_f(double v) {
  tpu_arg_t a = kit_arg_scalar(TPU_F64);
  a.u.scalar.f = v;
  return a;
}

tpu_arg_t kit_arg_scalar_i(int64_t v) {
  tpu_arg_t a = kit_arg_scalar(TPU_I64);
  a.u.scalar.i = v;
  return a;
}

tpu_arg_t kit_arg_int(int64_t v) {
  tpu_arg_t a = kit_arg_of(TPU_ARG_INT);
  a.u.i = v;
  return a;
}

tpu_arg_t kit_arg_float(double v) {
  tpu_arg_t a = kit_arg_of(TPU_ARG_FLOAT);
  a.u.f = v;
  return a;
}

tpu_arg_t kit_arg_bool(bool v) {
  tpu_arg_t a = kit_arg_of(TPU_ARG_BOOL);
  a.u.b = v;
  return a;
}

tpu_arg_t kit_arg_dtype(tpu_dtype_t t) {
  tpu_arg_t a = kit_arg_of(TPU_ARG_DTYPE);
  a.u.dtype = t;
  return a;
}

tpu_arg_t kit_arg_ints(int n, const int64_t* v) {
  static const int64_t none[1] = {0}; /* an empty list still points somewhere, as the binding's do */
  tpu_arg_t a = kit_arg_list(TPU_ARG_INT_LIST, n);
  a.u.list.ints = v ? v : none;
  return a;
}

tpu_arg_t kit_arg_bools(int n, const bool* v) {
  tpu_arg_t a = kit_arg_list(TPU_ARG_BOOL_LIST, n);
  a.u.list.bools = v;
  return a;
}

tpu_arg_t kit_arg_tensors(int n, const tpu_tensor_t* ts) {
  tpu_arg_t a = kit_arg_list(TPU_ARG_TENSOR_LIST, n);
  a.u.list.tensors = ts;
  return a;
}

tpu_status_t* kit_run(const char* name, const char* overload, const tpu_arg_t* args, int nargs, int max,
                      tpu_tensor_t* outs, int* n) {
  tpu_result_t r[KIT_MAX_OUTS];
  *n = 0;
  if (max > KIT_MAX_OUTS) max = KIT_MAX_OUTS;
  TPU_RETURN_IF_ERROR(tpu_op_run(name, overload, 0, args, nargs, max, r, n));
  for (int i = 0; i < *n; ++i) {
    memset(&outs[i], 0, sizeof(outs[i]));
    outs[i].storage = r[i].storage;
    outs[i].dtype = r[i].dtype;
    outs[i].rank = r[i].rank;
    memcpy(outs[i].sizes, r[i].sizes, sizeof(outs[i].sizes));
    kit_dense_strides(&outs[i]);
  }
  return NULL;
}

tpu_status_t* kit_run1(const char* name, const char* overload, const tpu_arg_t* args, int nargs, tpu_tensor_t* out) {
  memset(out, 0, sizeof(*out));
  tpu_tensor_t outs[4];
  int n = 0;
  TPU_RETURN_IF_ERROR(kit_run(name, overload, args, nargs, 4, outs, &n));
  kit_release_all(outs + 1, n - 1);
  if (n < 1) return TPU_STATUS(TPU_INTERNAL, "%s returned no result", name);
  *out = outs[0];
  return NULL;
}

tpu_status_t* kit_read_f32(const tpu_tensor_t* t, float* out, int64_t n) {
  int64_t numel = tpu_tensor_numel(t);
  if (numel != n) return TPU_STATUS(TPU_INVALID_ARGUMENT, "kit_read_f32: %lld elements, expected %lld",
                                    (long long)numel, (long long)n);
  size_t isz = tpu_dtype_size(t->dtype);
  unsigned char* raw = malloc((size_t)n * isz + 1);
  if (!raw) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "oom");
  tpu_status_t* st = tpu_tensor_download(t, raw, (size_t)n * isz);
  for (int64_t i = 0; !st && i < n; ++i) {
    const unsigned char* p = raw + i * (int64_t)isz;
    switch (t->dtype) {
      case TPU_F32: { float v; memcpy(&v, p, 4); out[i] = v; break; }
      case TPU_F64: { double v; memcpy(&v, p, 8); out[i] = (float)v; break; }
      case TPU_I64: { int64_t v; memcpy(&v, p, 8); out[i] = (float)v; break; }
      case TPU_I32: { int32_t v; memcpy(&v, p, 4); out[i] = (float)v; break; }
      case TPU_BOOL: case TPU_U8: out[i] = p[0]; break;
      case TPU_I8: out[i] = (signed char)p[0]; break;
      case TPU_BF16: { uint32_t v = (uint32_t)(p[0] | (p[1] << 8)) << 16; float f; memcpy(&f, &v, 4); out[i] = f; break; }
      default: st = TPU_STATUS(TPU_UNIMPLEMENTED, "kit_read_f32: dtype %s", tpu_dtype_name(t->dtype));
    }
  }
  free(raw);
  return st;
}

void kit_release(tpu_tensor_t* t) {
  tpu_storage_release(t->storage);
  t->storage = NULL;
}

void kit_release_all(tpu_tensor_t* t, int n) {
  for (int i = 0; i < n; ++i) kit_release(&t[i]);
}

void kit_check(const char* file, int line, const char* what, tpu_tensor_t* r, tpu_dtype_t dtype, int rank,
               const int64_t* sizes, const float* want, int n, double tol) {
  if (r->dtype != dtype) tpu_test_fail(file, line, "%s: dtype %d, want %d", what, (int)r->dtype, (int)dtype);
  if (rank >= 0) {
    if (r->rank != rank) tpu_test_fail(file, line, "%s: rank %d, want %d", what, r->rank, rank);
    for (int i = 0; i < rank && i < r->rank; ++i)
      if (r->sizes[i] != sizes[i]) tpu_test_fail(file, line, "%s: size[%d] %lld, want %lld", what, i,
                                                 (long long)r->sizes[i], (long long)sizes[i]);
  }
  float* got = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  if (!got) tpu_test_fail(file, line, "%s: out of memory", what);
  if (got && tpu_test_check_ok(kit_read_f32(r, got, n), what, file, line)) {
    for (int i = 0; i < n; ++i) {
      bool ok = isnan(want[i])   ? isnan(got[i])
                : isinf(want[i]) ? got[i] == want[i]
                                 : fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]));
      if (!ok) tpu_test_fail(file, line, "%s[%d]: got %g, want %g", what, i, got[i], want[i]);
    }
  }
  free(got);
  kit_release(r);
}

bool kit_on_cpu_plugin(void) { return strcmp(tpu_runtime_platform_name(), "cpu") == 0; }
