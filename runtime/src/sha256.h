/* Internal: SHA-256 (FIPS 180-4), streaming. Used for the disk compile cache's
 * content-addressed keys and payload checksums, where a 64-bit hash would let
 * a collision serve the wrong program. */
#ifndef TORCHTPU_SRC_SHA256_H_
#define TORCHTPU_SRC_SHA256_H_

#include <stddef.h>
#include <stdint.h>

#define TPU_SHA256_BYTES 32

typedef struct tpu_sha256 {
  uint32_t state[8];
  uint64_t total; /* bytes hashed so far */
  uint8_t block[64];
  size_t used; /* bytes waiting in `block` */
} tpu_sha256_t;

void tpu_sha256_init(tpu_sha256_t* ctx);
void tpu_sha256_update(tpu_sha256_t* ctx, const void* data, size_t len);
/* Writes the digest; `ctx` must be initialised again before reuse. */
void tpu_sha256_final(tpu_sha256_t* ctx, uint8_t out_digest[TPU_SHA256_BYTES]);
/* One-shot convenience. */
void tpu_sha256(const void* data, size_t len, uint8_t out_digest[TPU_SHA256_BYTES]);
/* Lower-case hex of `n` bytes into `out` (2n + 1 chars, NUL-terminated). */
void tpu_hex(const uint8_t* bytes, size_t n, char* out);

#endif
