/* Internal: opening and closing trace ranges (torchtpu/trace.h installs the hooks). */
#ifndef TORCHTPU_SRC_TRACING_H_
#define TORCHTPU_SRC_TRACING_H_

#include <stdbool.h>

#include "torchtpu/trace.h"

typedef struct tpu_trace_range {
  void* handle;
  bool open;
} tpu_trace_range_t;

/* `detail` may be NULL; both are no-ops without hooks. */
tpu_trace_range_t tpu_trace_begin(tpu_trace_kind_t kind, const char* detail);
void tpu_trace_end(tpu_trace_range_t range);
/* A range that closes at once. */
void tpu_trace_mark(tpu_trace_kind_t kind, const char* detail);
#endif
