/* SHA-256 as specified in FIPS 180-4, written for this runtime. Byte-oriented
 * and endian-independent: words are assembled from bytes explicitly. */
#include "sha256.h"

#include <string.h>

/* First 32 bits of the fractional parts of the cube roots of the first 64 primes. */
static const uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* One 64-byte block into the state (FIPS 180-4 §6.2.2). */
static void compress(uint32_t state[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++) {
    w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 |
           (uint32_t)block[4 * t + 2] << 8 | (uint32_t)block[4 * t + 3];
  }
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; t++) {
    uint32_t big1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + big1 + ch + kRound[t] + w[t];
    uint32_t big0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = big0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void tpu_sha256_init(tpu_sha256_t* ctx) {
  /* First 32 bits of the fractional parts of the square roots of the first 8 primes. */
  static const uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(ctx->state, kInit, sizeof kInit);
  ctx->total = 0;
  ctx->used = 0;
}

void tpu_sha256_update(tpu_sha256_t* ctx, const void* data, size_t len) {
  const uint8_t* p = data;
  ctx->total += len;
  while (len > 0) {
    size_t take = 64 - ctx->used < len ? 64 - ctx->used : len;
    memcpy(ctx->block + ctx->used, p, take);
    ctx->used += take;
    p += take;
    len -= take;
    if (ctx->used == 64) {
      compress(ctx->state, ctx->block);
      ctx->used = 0;
    }
  }
}

void tpu_sha256_final(tpu_sha256_t* ctx, uint8_t out_digest[TPU_SHA256_BYTES]) {
  /* Padding: 0x80, zeros up to 56 mod 64, then the bit length big-endian. */
  uint64_t bits = ctx->total * 8;
  static const uint8_t kPad[64] = {0x80};
  size_t pad = ctx->used < 56 ? 56 - ctx->used : 120 - ctx->used;
  tpu_sha256_update(ctx, kPad, pad);
  uint8_t len_be[8];
  for (int i = 0; i < 8; i++) len_be[i] = (uint8_t)(bits >> (56 - 8 * i));
  tpu_sha256_update(ctx, len_be, 8);
  for (int i = 0; i < 8; i++) {
    out_digest[4 * i] = (uint8_t)(ctx->state[i] >> 24);
    out_digest[4 * i + 1] = (uint8_t)(ctx->state[i] >> 16);
    out_digest[4 * i + 2] = (uint8_t)(ctx->state[i] >> 8);
    out_digest[4 * i + 3] = (uint8_t)ctx->state[i];
  }
}

void tpu_sha256(const void* data, size_t len, uint8_t out_digest[TPU_SHA256_BYTES]) {
  tpu_sha256_t ctx;
  tpu_sha256_init(&ctx);
  tpu_sha256_update(&ctx, data, len);
  tpu_sha256_final(&ctx, out_digest);
}

void tpu_hex(const uint8_t* bytes, size_t n, char* out) {
  static const char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}
