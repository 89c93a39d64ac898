/* Internal: the disk tier of the compile cache (docs/compile-cache.md).
 *
 * Serialized executables live in files named by a SHA-256 key over everything
 * that decides the compiled program (StableHLO text, compile options, plugin
 * identity, torchtpu version), under a two-character fan-out directory:
 *   <dir>/ab/abcdef…(64 hex digits)
 * Each file is a fixed header then the payload (PJRT_Executable_Serialize's
 * bytes); all integers little-endian:
 *   0  magic "\x89TPUEXEC"    8  u32 format version   12 u32 header size (88)
 *   16 u64 payload length     24 key (32 bytes)       56 SHA-256 of the payload
 *   88 payload
 * Writers write a temporary file in the same directory and rename() it, so a
 * reader sees a whole entry or none; a reader still verifies everything and
 * removes an entry that fails, so a bad file costs one recompile, never a
 * wrong program.
 *
 * The tier never fails an op: problems are counted (disk_cache_errors), warned
 * about once per process at most, and the program is compiled as usual. */
#ifndef TORCHTPU_SRC_DISKCACHE_H_
#define TORCHTPU_SRC_DISKCACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "sha256.h"
#include "torchtpu/status.h"

#define TPU_DISK_FORMAT_VERSION 1u
#define TPU_DISK_HEADER_BYTES 88u
/* 64 hex digits and a NUL. */
#define TPU_DISK_NAME_CHARS (2 * TPU_SHA256_BYTES + 1)

typedef struct tpu_disk_key {
  uint8_t bytes[TPU_SHA256_BYTES];
} tpu_disk_key_t;

/* ---- configuration (environment, read once per process) ---- */

/* True when the tier is on for the loaded plugin: a directory is configured,
 * TORCHTPU_DISK_CACHE is not 0 and the plugin has not failed to load its own
 * serialized executables. */
bool tpu_disk_cache_enabled(void);

/* ---- keys and entries (pure functions, no I/O) ---- */

/* The key of `mlir` compiled with `options` by the loaded plugin. */
void tpu_disk_cache_key(const char* mlir, size_t len, const void* options, size_t options_len,
                        tpu_disk_key_t* out_key);
/* The header (TPU_DISK_HEADER_BYTES) of an entry holding `payload` under `key`. */
void tpu_disk_entry_header(const tpu_disk_key_t* key, const void* payload, size_t len,
                           uint8_t* out_header);
/* Checks a whole entry file against `key`: FAILED_PRECONDITION for a foreign
 * file (other magic, format or key), DATA_LOSS for a damaged one (size or
 * checksum). On success the payload points into `data`. */
tpu_status_t* tpu_disk_entry_parse(const uint8_t* data, size_t size, const tpu_disk_key_t* key,
                                   const uint8_t** out_payload, size_t* out_len);

/* ---- entry files under an explicit directory (tests use these directly) ---- */

/* Writes the entry atomically (temporary file + rename); creates directories. */
tpu_status_t* tpu_disk_entry_write(const char* dir, const tpu_disk_key_t* key, const void* payload,
                                   size_t len);
/* Reads and verifies the entry of `key`: NOT_FOUND when there is none; a file
 * that fails verification is unlinked and its parse error returned. On success
 * *out_data (owned, free()) holds the file and *out_payload points into it. */
tpu_status_t* tpu_disk_entry_read(const char* dir, const tpu_disk_key_t* key, uint8_t** out_data,
                                  size_t* out_size, const uint8_t** out_payload, size_t* out_len);
/* Scans `dir`: removes temporary files older than an hour (writers killed
 * mid-write), then, oldest mtime first, entries until at most `target_bytes`
 * remain. *out_total is what remains. Files not named like ours are ignored. */
tpu_status_t* tpu_disk_cache_evict(const char* dir, int64_t target_bytes, int64_t* out_total);

/* ---- the tier as tpu_executable_compile uses it (never fails the caller) ---- */

/* A loaded executable from the entry of `key`, or NULL (miss, tier off, or a
 * bad entry, which is removed and counted). Counts hits, misses, bytes read. */
PJRT_LoadedExecutable* tpu_disk_cache_load(const PJRT_Api* api, const tpu_disk_key_t* key);
/* Serializes `loaded` and stores it; failures are counted and warned once. */
void tpu_disk_cache_store(const PJRT_Api* api, const tpu_disk_key_t* key,
                          PJRT_LoadedExecutable* loaded);

#endif
