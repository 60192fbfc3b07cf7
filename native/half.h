#ifndef SAFETENSORS_HALF_H
#define SAFETENSORS_HALF_H
/*
 * Scalar F16 <-> float32 with torch's CPU rules (src/codecs/half.ts): decoding is exact (NaN: sign and payload kept,
 * quiet bit set, as vcvtph2ps); encoding rounds to nearest even, overflows to infinity, keeps subnormals, and maps
 * NaN to sign | 0x7E00 | (float32 mantissa >> 13) (as vcvtps2ph). Shared by the GGUF and merge kernels.
 */
#include <stdint.h>

static inline float half_f16_to_f32(uint16_t h) {
  uint32_t mag = (uint32_t)(h & 0x7fff) << 13;
  union {
    uint32_t u;
    float f;
  } v;
  if (mag >= (0x7c00u << 13)) {
    v.u = mag | 0x7f800000u | (mag != (0x7c00u << 13) ? 0x400000u : 0);
  } else {
    v.u = mag;
    v.f *= 0x1p112f; /* normals and subnormals alike, exactly */
  }
  v.u |= (uint32_t)(h & 0x8000) << 16;
  return v.f;
}

static inline uint16_t half_f32_to_f16(float f) {
  union {
    float f;
    uint32_t u;
  } v = {f};
  uint32_t sign = (v.u >> 16) & 0x8000, abs = v.u & 0x7fffffff;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((abs >> 13) & 0x3ff));
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (abs >= 0x38800000u) {
    uint32_t r = abs - 0x38000000u;
    return (uint16_t)(sign | ((r + 0xfff + ((r >> 13) & 1)) >> 13));
  }
  uint32_t e = abs >> 23;
  if (e < 102) return (uint16_t)sign;
  uint32_t m = (abs & 0x7fffff) | 0x800000, shift = 126 - e;
  return (uint16_t)(sign | ((m + ((1u << (shift - 1)) - 1) + ((m >> shift) & 1)) >> shift));
}

#endif
