/* Internal: a growable string. Allocation failure is recorded, not fatal. */
#ifndef TORCHTPU_SRC_STRBUF_H_
#define TORCHTPU_SRC_STRBUF_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "torchtpu/status.h"

typedef struct tpu_strbuf {
  char* data;
  size_t len;
  size_t cap;
  bool oom;
} tpu_strbuf_t;

void tpu_strbuf_init(tpu_strbuf_t* s);
void tpu_strbuf_free(tpu_strbuf_t* s);
void tpu_strbuf_append(tpu_strbuf_t* s, const char* text);
void tpu_strbuf_appendn(tpu_strbuf_t* s, const char* text, size_t n);
void tpu_strbuf_printf(tpu_strbuf_t* s, const char* fmt, ...) TPU_PRINTF_ATTR(2, 3);
/* Hands the string to the caller (owned, NUL-terminated) and resets `s`. */
char* tpu_strbuf_take(tpu_strbuf_t* s);

#endif
