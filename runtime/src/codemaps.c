/* Counting the memory mappings compiled code adds (codemaps.h). */
#include "codemaps.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* Per kind: compiles seen, and the running mean of counted ones in 1/16ths
 * (0 until the first count). Races between compiling threads may drop an
 * update of the mean, which only delays it. */
static struct {
  atomic_long compiles;
  atomic_long mean_x16;
} g_kinds[TPU_CODEMAPS_KINDS];

/* The process's memory mappings (lines of /proc/self/maps); 0 where unknown. */
static long process_maps(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char buf[1 << 15];
  long lines = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; ++i) lines += buf[i] == '\n';
  fclose(f);
  return lines;
}

void tpu_codemaps_begin(int kind, tpu_codemaps_probe_t* out_probe) {
  if (kind < 0 || kind >= TPU_CODEMAPS_KINDS) kind = TPU_CODEMAPS_KINDS - 1;
  long n = atomic_fetch_add_explicit(&g_kinds[kind].compiles, 1, memory_order_relaxed);
  out_probe->kind = kind;
  out_probe->exact = n < TPU_CODEMAPS_EXACT || n % TPU_CODEMAPS_EVERY == 0;
  out_probe->before = out_probe->exact ? process_maps() : 0;
}

int tpu_codemaps_end(const tpu_codemaps_probe_t* probe) {
  atomic_long* mean = &g_kinds[probe->kind].mean_x16;
  long m = atomic_load_explicit(mean, memory_order_relaxed);
  if (!probe->exact) return m > 0 ? (int)((m + 15) / 16) : 1;
  long added = process_maps() - probe->before; /* other threads' mappings may blur it */
  if (added < 1) added = 1;
  if (added > INT32_MAX / 16) added = INT32_MAX / 16;
  /* A quarter of the way to each new count: a change of workload (elementwise
   * ops, then decompositions) shows in the mean within a few counts. */
  long next = m > 0 ? m + (added * 16 - m) / 4 : added * 16;
  atomic_store_explicit(mean, next > 16 ? next : 16, memory_order_relaxed);
  return (int)added;
}
