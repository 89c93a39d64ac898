/* Process-wide runtime: one PJRT client per process, metrics, eager mode, RNG.
 * All functions are thread-safe. */
#ifndef TORCHTPU_RUNTIME_H_
#define TORCHTPU_RUNTIME_H_

#include <stdbool.h>
#include <stdint.h>

#include "torchtpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_RANK 16

/* The torchtpu release. Part of every disk compile-cache key, so a release
 * whose lowerings differ never runs an older release's programs: bump it with
 * every release. */
#define TORCHTPU_VERSION "0.2.0"

typedef enum tpu_eager_mode {
  TPU_EAGER_DEBUG = 0,  /* synchronous: every op waits, errors surface on its line */
  TPU_EAGER_STRICT = 1, /* asynchronous op by op (default) */
  TPU_EAGER_FUSED = 2,  /* recorded and run as one program at each sync point (docs/eager-modes.md) */
} tpu_eager_mode_t;

/* Loads the PJRT plugin at `plugin_path` and creates the client. `cpu_devices` is
 * the CPU plugin's device count (ignored by other plugins; <= 0 means 1).
 * Idempotent: a second call with any path returns OK if already initialised. */
tpu_status_t* tpu_runtime_init(const char* plugin_path, int cpu_devices);
bool tpu_runtime_initialized(void);
/* Destroys the client; only for tests and sanitizer runs. */
void tpu_runtime_shutdown(void);

int tpu_runtime_device_count(void);
/* "cpu", "cuda", "tpu" ... and the plugin's version string; borrowed. */
const char* tpu_runtime_platform_name(void);
const char* tpu_runtime_platform_version(void);
/* The plugin is XLA's CPU one: its buffers are host memory and its compiler has
 * weaknesses the runtime works around. */
bool tpu_runtime_platform_is_cpu(void);
const char* tpu_runtime_device_kind(int device);
/* PJRT API version of the loaded plugin. */
void tpu_runtime_api_version(int* out_major, int* out_minor);

/* Leaving fused mode runs what it recorded (errors are reported where its
 * results are read). */
void tpu_runtime_set_eager_mode(tpu_eager_mode_t mode);
tpu_eager_mode_t tpu_runtime_eager_mode(void);

/* Waits until all work issued so far has finished; returns the first async error. */
tpu_status_t* tpu_runtime_synchronize(void);

/* Random generators: a (seed, offset) pair each; every random op consumes
 * offsets. Each device has a default generator (borrowed, lives as long as the
 * process; NULL for an index out of range); tpu_generator_create returns an owned
 * one that tpu_generator_destroy frees (NULL accepted). Thread-safe. */
typedef struct tpu_generator tpu_generator_t;
tpu_status_t* tpu_generator_create(uint64_t seed, tpu_generator_t** out_generator);
void tpu_generator_destroy(tpu_generator_t* generator);
tpu_generator_t* tpu_generator_default(int device);
void tpu_generator_set_seed(tpu_generator_t* generator, uint64_t seed);
uint64_t tpu_generator_seed(tpu_generator_t* generator);
void tpu_generator_get_state(tpu_generator_t* generator, uint64_t* out_seed, uint64_t* out_offset);
void tpu_generator_set_state(tpu_generator_t* generator, uint64_t seed, uint64_t offset);
/* Reserves `n` offsets atomically: the seed and the first reserved offset. */
void tpu_generator_next(tpu_generator_t* generator, uint64_t n, uint64_t* out_seed, uint64_t* out_first);

/* Metrics (DESIGN.md §10). Counters only grow; live_* are gauges. */
typedef enum tpu_metric {
  TPU_METRIC_OPS_EXECUTED = 0,
  TPU_METRIC_EXECUTIONS,
  TPU_METRIC_COMPILES,
  TPU_METRIC_COMPILE_NS,
  TPU_METRIC_CACHE_HITS,
  TPU_METRIC_CACHE_MISSES,
  TPU_METRIC_DISK_CACHE_HITS,
  TPU_METRIC_DISK_CACHE_MISSES,
  TPU_METRIC_DISK_CACHE_BYTES_READ,
  TPU_METRIC_DISK_CACHE_BYTES_WRITTEN,
  TPU_METRIC_DISK_CACHE_ERRORS, /* corrupt, foreign or unreadable entries; failed writes */
  TPU_METRIC_GRAPH_COMPILES,
  TPU_METRIC_GRAPH_RUNS,
  TPU_METRIC_H2D_TRANSFERS,
  TPU_METRIC_H2D_BYTES,
  TPU_METRIC_D2H_TRANSFERS,
  TPU_METRIC_D2H_BYTES,
  TPU_METRIC_FALLBACKS,
  TPU_METRIC_LIVE_BUFFERS,
  TPU_METRIC_LIVE_BYTES,
  TPU_METRIC_SYNCS,
  TPU_METRIC_SLOT_SWAPS,
  TPU_METRIC_CHECKED_OPS, /* executions of ops with device-side index checks */
  TPU_METRIC_CHECK_READS, /* downloads of a device's error word at sync points */
  TPU_METRIC_GRAPH_RECOMPILES, /* programs built for a graph that already had one (new input sizes or layouts) */
  TPU_METRIC_GRAPH_FALLBACKS,  /* compiled graphs (or new sizes of one) run as eager ops instead */
  TPU_METRIC_FUSED_OPS,        /* executions recorded by fused eager mode instead of launched */
  TPU_METRIC_FUSED_FLUSHES,    /* recordings run as one program (sync points, size cuts) */
  TPU_METRIC_FUSED_PROGRAMS,   /* fused programs built (written and compiled or loaded from disk) */
  TPU_METRIC_H2D_LENT,         /* uploads whose device buffer is a pooled host block (CPU plugin: >= 1 MiB, or tpu_tensor_upload_block) */
  TPU_METRIC_DONATED_BUFFERS,  /* input buffers a compiled graph reused for its in-place outputs (tpu_graph_alias) */
  TPU_METRIC_QUICK_COMPILES,   /* compiles with the CPU plugin's quick options (small programs, executable.c) */
  TPU_METRIC_FUSED_UNFUSED,    /* recordings run as their ops' own programs: new shapes of a structure that changes shapes (fuse.c) */
  TPU_METRIC_INFLIGHT_QUERIES, /* readiness queries of in-flight work made while submitting (stream.c) */
  TPU_METRIC_DEFERRED_DESTROYS, /* donated handles released before their execution finished (donation.c) */
  TPU_METRIC_TRACE_CACHE_HITS,   /* torch.compile graphs whose AOTAutograd result came from the disk tier (blobs) */
  TPU_METRIC_TRACE_CACHE_MISSES, /* ... and ones looked up but not there */
  TPU_METRIC_PREPARED_PROGRAMS,  /* graph programs compiled on the background thread ahead of their first run (tpu_graph_prepare) */
  TPU_METRIC_PREPARED_HITS,      /* first runs of a graph that found the program prepared for them */
  TPU_METRIC_COUNT
} tpu_metric_t;
const char* tpu_metric_name(tpu_metric_t m);
int64_t tpu_metric_get(tpu_metric_t m);
void tpu_metric_add(tpu_metric_t m, int64_t delta);
void tpu_metrics_reset(void); /* counters only, not gauges */

/* Compile caches (docs/compile-cache.md). */
/* Drops every executable of the in-memory cache; ones in use live on until released. */
void tpu_cache_clear(void);
/* The disk tier's directory (borrowed; "" when the tier is off). */
const char* tpu_disk_cache_dir(void);
/* Removes every entry of that directory (files named like entries only). */
tpu_status_t* tpu_disk_cache_clear(void);
/* Opaque blobs in the disk tier, for what the Python side caches (torch.compile's
 * traced graphs): the entry format, checks, atomic writes, eviction and size cap
 * of executables, under a key that hashes `name` with the torchtpu version.
 * Load: NOT_FOUND on a miss, or when blobs are off; an entry that fails its
 * checks is removed, counted in disk_cache_errors and reported as NOT_FOUND.
 * On success *out_data (owned, free()) holds *out_len payload bytes. Store:
 * never fails the caller (problems are counted and warned once, as for
 * executables); a no-op when blobs are off. Blobs are off with the disk tier and
 * with TORCHTPU_TRACE_CACHE=0. */
bool tpu_disk_blob_enabled(void); /* the tier is on and TORCHTPU_TRACE_CACHE is not 0 */
tpu_status_t* tpu_disk_blob_load(const char* name, size_t name_len, uint8_t** out_data,
                                 size_t* out_len);
void tpu_disk_blob_store(const char* name, size_t name_len, const void* data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
