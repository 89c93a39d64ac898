#include "kit.h"

#include <stdlib.h>
#include <string.h>

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

tpu_arg_t kit_arg_tensor(const tpu_tensor_t* t) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_TENSOR;
  a.u.tensor = *t;
  return a;
}

tpu_arg_t kit_arg_scalar_f(double v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_SCALAR;
  a.u.scalar.dtype = TPU_F64;
  a.u.scalar.wrapped = true;
  a.u.scalar.f = v;
  return a;
}

tpu_arg_t kit_arg_scalar_i(int64_t v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_SCALAR;
  a.u.scalar.dtype = TPU_I64;
  a.u.scalar.wrapped = true;
  a.u.scalar.i = v;
  return a;
}

tpu_arg_t kit_arg_int(int64_t v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_INT;
  a.u.i = v;
  return a;
}

tpu_arg_t kit_arg_none(void) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  return a;
}

tpu_status_t* kit_run1(const char* name, const char* overload, const tpu_arg_t* args, int nargs, tpu_tensor_t* out) {
  memset(out, 0, sizeof(*out));
  tpu_result_t r[4];
  int n = 0;
  TPU_RETURN_IF_ERROR(tpu_op_run(name, overload, 0, args, nargs, 4, r, &n));
  for (int i = 1; i < n; ++i) tpu_storage_release(r[i].storage);
  if (n < 1) return TPU_STATUS(TPU_INTERNAL, "%s returned no result", name);
  out->storage = r[0].storage;
  out->dtype = r[0].dtype;
  out->rank = r[0].rank;
  memcpy(out->sizes, r[0].sizes, sizeof(out->sizes));
  kit_dense_strides(out);
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
