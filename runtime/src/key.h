/* Internal: cache keys. An op's key is the exact bytes of everything its
 * program depends on (name, overload, static arguments, each tensor's view
 * layout); the in-memory cache compares keys byte for byte, so two programs
 * never share an entry by a hash collision. Graphs (graph.c) serialise their
 * recorded ops with the same encoder. */
#ifndef TORCHTPU_SRC_KEY_H_
#define TORCHTPU_SRC_KEY_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec.h"

typedef struct tpu_key {
  uint8_t inline_buf[1024]; /* most ops' keys fit: no allocation per op */
  uint8_t* data;
  size_t len, cap;
  bool oom; /* an append failed: the key is unusable */
} tpu_key_t;

void tpu_key_init(tpu_key_t* k);
void tpu_key_free(tpu_key_t* k);
void tpu_key_put(tpu_key_t* k, const void* p, size_t n);
void tpu_key_i64(tpu_key_t* k, int64_t v);
void tpu_key_str(tpu_key_t* k, const char* s);
/* Appends op `name.overload` with its arguments. Tensor (arg i, item j) is keyed
 * by views[view_base[i] + j] (views may be NULL when no argument is a tensor);
 * graph values by their ids; TPU_ARG_SCALAR by kind only unless `flags` has
 * TPU_LOWER_STATIC_SCALARS. */
void tpu_key_args(tpu_key_t* k, const char* name, const char* overload, unsigned flags, const tpu_arg_t* args,
                  int nargs, const tpu_view_arg_t* views, const int* view_base);

#endif
