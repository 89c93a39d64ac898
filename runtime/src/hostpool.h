/* Host memory blocks lent to device buffers of host-memory plugins (the CPU
 * plugin), so that a large upload is one memcpy into reused memory instead of a
 * fresh allocation the kernel must fault in page by page (PJRT's own copy of a
 * 64 MiB upload spent most of its time in page faults).
 *
 * buffer.c copies the host data into a block and hands it to PJRT with
 * zero-copy semantics: the device buffer is the block, immutable while the
 * buffer lives. PJRT's done-with-host-buffer event fires when the buffer is
 * destroyed (or at once, if the plugin copied after all) and gives the block
 * back here. A lent buffer is never donated to an executable
 * (tpu_buffer_donatable), so no program writes into a lent block.
 *
 * The public tpu_host_block_* functions (tensor.h) hand blocks to callers that
 * fill them themselves (the c10d backend's host staging): the filled block is
 * lent as it is by tpu_tensor_upload_block, with no copy at all.
 *
 * Free blocks are kept per size (rounded up to pages), at most
 * TPU_HOSTPOOL_CACHE_BYTES in all; beyond that a returned block is freed.
 * tpu_memory_empty_cache() frees every cached block. Thread-safe: blocks come
 * back on PJRT's threads. */
#ifndef TORCHTPU_SRC_HOSTPOOL_H_
#define TORCHTPU_SRC_HOSTPOOL_H_

#include <stddef.h>

#include "torchtpu/status.h"
#include "torchtpu/tensor.h"

/* Uploads below this size keep PJRT's copying path (small allocations come from
 * the malloc heap, already faulted in). */
#define TPU_HOSTPOOL_MIN_BYTES ((size_t)1 << 20)
/* The most free bytes the pool keeps cached. */
#define TPU_HOSTPOOL_CACHE_BYTES ((size_t)512 << 20)

/* Blocks come from tpu_host_block_acquire and go back by tpu_host_block_release
 * (public: torchtpu/tensor.h), aligned for any plugin's zero-copy check. */
#define TPU_HOSTPOOL_ALIGN 256
/* Frees every cached block. */
void tpu_hostpool_trim(void);
/* Bytes of cached free blocks (not counting blocks lent out). */
size_t tpu_hostpool_cached_bytes(void);

#endif
