/* Cache keys: the exact bytes a program depends on (key.h). */
#include "key.h"

#include <stdlib.h>
#include <string.h>

void tpu_key_init(tpu_key_t* k) {
  k->data = k->inline_buf;
  k->len = 0;
  k->cap = sizeof(k->inline_buf);
  k->oom = false;
}

void tpu_key_free(tpu_key_t* k) {
  if (k->data != k->inline_buf) free(k->data);
}

void tpu_key_put(tpu_key_t* k, const void* p, size_t n) {
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

void tpu_key_i64(tpu_key_t* k, int64_t v) { tpu_key_put(k, &v, sizeof(v)); }
void tpu_key_str(tpu_key_t* k, const char* s) { tpu_key_put(k, s ? s : "", strlen(s ? s : "") + 1); }

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


void tpu_key_args(tpu_key_t* k, const char* name, const char* overload, unsigned flags, const tpu_arg_t* args,
                  int nargs, const tpu_view_arg_t* views, const int* view_base) {
  tpu_key_str(k, name);
  tpu_key_str(k, overload);
  for (int i = 0; i < nargs; ++i) {
    const tpu_arg_t* a = &args[i];
    uint8_t kind = (uint8_t)a->kind;
    tpu_key_put(k, &kind, 1);
    switch (a->kind) {
      case TPU_ARG_TENSOR: tpu_key_tensor(k, &a->u.tensor, &views[view_base[i]]); break;
      case TPU_ARG_TENSOR_LIST:
        tpu_key_i64(k, a->u.list.n);
        for (int j = 0; j < a->u.list.n; ++j)
          tpu_key_tensor(k, &a->u.list.tensors[j], &views[view_base[i] + j]);
        break;
      case TPU_ARG_SCALAR: {
        int64_t v[2] = {a->u.scalar.dtype, a->u.scalar.wrapped};
        tpu_key_put(k, v, sizeof(v));
        if (flags & TPU_LOWER_STATIC_SCALARS) {
          tpu_key_put(k, &a->u.scalar.f, sizeof(double));
          tpu_key_put(k, &a->u.scalar.imag, sizeof(double));
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
      case TPU_ARG_VALUE: tpu_key_i64(k, a->u.value); break;
      case TPU_ARG_VALUE_LIST:
        tpu_key_i64(k, a->u.list.n);
        for (int j = 0; j < a->u.list.n; ++j) tpu_key_i64(k, a->u.list.values[j]);
        break;
      case TPU_ARG_VALUE_SCALAR: {
        int64_t v[3] = {a->u.scalar.dtype, a->u.scalar.wrapped, a->u.scalar.i};
        tpu_key_put(k, v, sizeof(v));
        break;
      }
      case TPU_ARG_BOOL_LIST:
        tpu_key_i64(k, a->u.list.n);
        for (int j = 0; j < a->u.list.n; ++j) tpu_key_i64(k, a->u.list.bools[j]);
        break;
      default: break;
    }
  }
}
