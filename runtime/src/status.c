/* Status objects: one heap block holding code, location and message. */
#include "torchtpu/status.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_status {
  tpu_status_code_t code;
  int line;
  char* file;    /* points into `text` */
  char* message; /* points into `text` */
  char text[];
};

/* Returned when a status cannot be allocated: never freed, never annotated. */
static char g_oom_message[] = "out of memory";
static char g_oom_file[] = "";
static struct tpu_status g_oom = {TPU_RESOURCE_EXHAUSTED, 0, g_oom_file, g_oom_message};

static tpu_status_t* oom_status(void) { return &g_oom; }

static tpu_status_t* status_alloc(tpu_status_code_t code, const char* file, int line,
                                  const char* message, size_t message_len) {
  if (code == TPU_OK) code = TPU_UNKNOWN; /* a status is an error by definition */
  if (!file) file = "";
  size_t file_len = strlen(file);
  tpu_status_t* s = malloc(sizeof *s + file_len + 1 + message_len + 1);
  if (!s) return oom_status();
  s->code = code;
  s->line = line;
  s->file = s->text;
  memcpy(s->file, file, file_len + 1);
  s->message = s->text + file_len + 1;
  memcpy(s->message, message, message_len);
  s->message[message_len] = '\0';
  return s;
}

tpu_status_t* tpu_status_makev(tpu_status_code_t code, const char* file, int line,
                               const char* fmt, va_list ap) {
  if (!fmt) return status_alloc(code, file, line, "", 0);
  char small[256];
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap2);
  va_end(ap2);
  if (n < 0) return status_alloc(code, file, line, "(bad format)", 12);
  if ((size_t)n < sizeof small) return status_alloc(code, file, line, small, (size_t)n);
  char* big = malloc((size_t)n + 1);
  if (!big) return oom_status();
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  tpu_status_t* s = status_alloc(code, file, line, big, (size_t)n);
  free(big);
  return s;
}

tpu_status_t* tpu_status_make(tpu_status_code_t code, const char* file, int line,
                              const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_status_t* s = tpu_status_makev(code, file, line, fmt, ap);
  va_end(ap);
  return s;
}

tpu_status_t* tpu_status_annotate(tpu_status_t* status, const char* fmt, ...) {
  if (!status || status == &g_oom || !fmt) return status;
  char prefix[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  if (n < 0) return status;
  size_t plen = strlen(prefix); /* a longer prefix is truncated: it is only context */
  size_t mlen = strlen(status->message);
  tpu_status_t* s = malloc(sizeof *s + strlen(status->file) + 1 + plen + 2 + mlen + 1);
  if (!s) return status; /* keep the original error rather than lose it */
  size_t flen = strlen(status->file);
  s->code = status->code;
  s->line = status->line;
  s->file = s->text;
  memcpy(s->file, status->file, flen + 1);
  s->message = s->text + flen + 1;
  memcpy(s->message, prefix, plen);
  memcpy(s->message + plen, ": ", 2);
  memcpy(s->message + plen + 2, status->message, mlen + 1);
  free(status);
  return s;
}

tpu_status_code_t tpu_status_code(const tpu_status_t* status) {
  return status ? status->code : TPU_OK;
}
const char* tpu_status_message(const tpu_status_t* status) {
  return status ? status->message : "";
}
const char* tpu_status_file(const tpu_status_t* status) { return status ? status->file : ""; }
int tpu_status_line(const tpu_status_t* status) { return status ? status->line : 0; }

const char* tpu_status_code_name(tpu_status_code_t code) {
  static const char* const names[] = {
      "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED", "LINALG_ERROR",
  };
  static_assert(sizeof names / sizeof names[0] == TPU_LINALG_ERROR + 1, "a name for every status code");
  if ((int)code < 0 || (size_t)code >= sizeof names / sizeof names[0]) return "UNKNOWN_CODE";
  return names[code];
}

void tpu_status_free(tpu_status_t* status) {
  if (status && status != &g_oom) free(status);
}
