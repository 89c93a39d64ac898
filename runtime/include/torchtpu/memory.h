/* Device memory accounting: the bytes of the device buffers torchtpu holds,
 * per device, in the shape of PyTorch's allocator statistics.
 *
 * What is counted: every device buffer from the moment torchtpu owns it (an
 * op's output, an upload, a cached scalar) until its last reference goes. A
 * storage takes device memory at its first write, so `torch.empty` counts
 * nothing until then. The PJRT plugin allocates device memory itself and
 * torchtpu keeps no pool of its own, so "reserved" equals "allocated".
 * Buffers are pooled by size as PyTorch's CUDA allocator does: "small" up to
 * 1 MiB, "large" above.
 *
 * Thread-safe. Functions returning a status fail only for a device index out
 * of range or a NULL/too-small output. */
#ifndef TORCHTPU_MEMORY_H_
#define TORCHTPU_MEMORY_H_

#include <stddef.h>
#include <stdint.h>

#include "torchtpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_memory_pool {
  TPU_MEMORY_POOL_ALL = 0,
  TPU_MEMORY_POOL_SMALL, /* buffers of at most TPU_MEMORY_SMALL_BYTES */
  TPU_MEMORY_POOL_LARGE,
  TPU_MEMORY_POOL_COUNT,
} tpu_memory_pool_t;

#define TPU_MEMORY_SMALL_BYTES ((int64_t)1 << 20)

/* PyTorch's Stat: the present, the peak since the last peak reset, and the
 * totals allocated and freed since the last accumulated reset. */
typedef struct tpu_memory_stat {
  int64_t current;
  int64_t peak;
  int64_t allocated;
  int64_t freed;
} tpu_memory_stat_t;

typedef struct tpu_memory_stats {
  size_t struct_size; /* set by the caller: sizeof(tpu_memory_stats_t) */
  tpu_memory_stat_t bytes[TPU_MEMORY_POOL_COUNT];   /* bytes of device buffers */
  tpu_memory_stat_t buffers[TPU_MEMORY_POOL_COUNT]; /* number of device buffers */
} tpu_memory_stats_t;

/* Finished in-flight work is retired first, so a buffer whose tensor died is
 * no longer counted (no wait: work still running keeps its buffers). */
tpu_status_t* tpu_memory_stats(int device, tpu_memory_stats_t* out_stats);
/* Peaks restart from the current values. */
tpu_status_t* tpu_memory_reset_peak(int device);
/* The allocated/freed totals restart from zero. */
tpu_status_t* tpu_memory_reset_accumulated(int device);
/* Releases device buffers torchtpu keeps only to save work (the cache of
 * uploaded scalars) and retires finished in-flight work. */
void tpu_memory_empty_cache(void);
/* Free and total bytes of the device's memory. The CPU plugin's device memory
 * is the host's (MemAvailable and MemTotal of /proc/meminfo); other plugins'
 * is their allocator's (PJRT_Device_MemoryStats: total = bytes_limit, free =
 * bytes_limit - bytes_in_use), TPU_UNIMPLEMENTED when the plugin gives no limit. */
tpu_status_t* tpu_memory_info(int device, int64_t* out_free, int64_t* out_total);

#ifdef __cplusplus
}
#endif

#endif
