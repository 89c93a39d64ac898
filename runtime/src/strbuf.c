#include "strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tpu_strbuf_init(tpu_strbuf_t* s) { memset(s, 0, sizeof(*s)); }

void tpu_strbuf_free(tpu_strbuf_t* s) {
  free(s->data);
  memset(s, 0, sizeof(*s));
}

static bool tpu_strbuf_reserve(tpu_strbuf_t* s, size_t extra) {
  if (s->oom) return false;
  size_t need = s->len + extra + 1;
  if (need <= s->cap) return true;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < need) cap *= 2;
  char* data = realloc(s->data, cap);
  if (!data) {
    s->oom = true;
    return false;
  }
  s->data = data;
  s->cap = cap;
  return true;
}

void tpu_strbuf_appendn(tpu_strbuf_t* s, const char* text, size_t n) {
  if (!tpu_strbuf_reserve(s, n)) return;
  memcpy(s->data + s->len, text, n);
  s->len += n;
  s->data[s->len] = '\0';
}

void tpu_strbuf_append(tpu_strbuf_t* s, const char* text) {
  tpu_strbuf_appendn(s, text, strlen(text));
}

void tpu_strbuf_printf(tpu_strbuf_t* s, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n >= 0 && tpu_strbuf_reserve(s, (size_t)n)) {
    vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap2);
    s->len += (size_t)n;
  }
  va_end(ap2);
}

char* tpu_strbuf_take(tpu_strbuf_t* s) {
  char* out = s->data;
  if (!out && !s->oom) out = calloc(1, 1);
  if (s->oom) {
    free(s->data);
    out = NULL;
  }
  memset(s, 0, sizeof(*s));
  return out;
}
