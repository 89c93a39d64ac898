/* How many memory mappings an executable's code added to the process: what the
 * in-memory executable cache weighs it by (cache.c). The CPU plugin maps
 * generated code per kernel, and a process may hold only vm.max_map_count
 * mappings (65530 by default): a while-loop decomposition maps about 90, an
 * elementwise op 3.
 *
 * Counting is two reads of /proc/self/maps around the compile, about 0.6 us
 * per mapping each: 12 ms a compile once a process holds 10000 mappings, as
 * much as compiling a small op. So the first TPU_CODEMAPS_EXACT compiles of each
 * kind (the caller's: compile tier and loop) are counted, then every TPU_CODEMAPS_EVERY-th;
 * the others weigh a running mean of their kind's counted ones. The cache needs
 * a bound on its total, which the mean keeps, not each program's exact share. */
#ifndef TORCHTPU_CODEMAPS_H_
#define TORCHTPU_CODEMAPS_H_

#include <stdbool.h>

#define TPU_CODEMAPS_KINDS 8
#define TPU_CODEMAPS_EXACT 32
#define TPU_CODEMAPS_EVERY 8

typedef struct {
  int kind;
  bool exact;  /* whether this compile is counted */
  long before; /* the process's mappings before it, when counted */
} tpu_codemaps_probe_t;

/* Before a compile or load of kind `kind` (0 .. TPU_CODEMAPS_KINDS - 1). */
void tpu_codemaps_begin(int kind, tpu_codemaps_probe_t* out_probe);
/* After it succeeded: the mappings it added (counted or estimated), >= 1. */
int tpu_codemaps_end(const tpu_codemaps_probe_t* probe);

#endif /* TORCHTPU_CODEMAPS_H_ */
