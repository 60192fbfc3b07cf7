/*
 * Q8_0 from F16 codes, native: the bytes of src/gguf/quants.ts's quantizeQ8_0FromF16 and of the WebAssembly kernel
 * (q8-simd.wat), gguf-py's quantizer. Per block of 32: each code to float32 exactly, amax of the magnitudes,
 * d = amax / 127 and id = 1 / d (0 when d is 0) in float32, d stored as F16 (round to nearest even), each x * id
 * (float32) rounded half away from zero. NaN becomes 0, as in the other kernels. The float32 steps must not be
 * fused (binding.gyp builds this with -ffp-contract=off).
 *
 * AVX2 + F16C where the CPU has them (chosen at run time), a portable loop elsewhere.
 */
#include "gguf_q8.h"
#include "half.h"

#include <math.h>
#include <string.h>

static inline int8_t round_q(float v) {
  float t = truncf(v);
  float r = t + (fabsf(v - t) >= 0.5f ? copysignf(1.0f, v) : 0.0f);
  if (r != r) return 0;
  if (r >= 127.0f) return 127;
  if (r <= -128.0f) return -128;
  return (int8_t)r;
}

static void q8_portable(const uint8_t *src, size_t blocks, uint8_t *dst) {
  float x[32];
  uint16_t codes[32];
  for (size_t b = 0; b < blocks; b++, src += 64, dst += 34) {
    memcpy(codes, src, sizeof codes); /* src may be unaligned */
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
      x[i] = half_f16_to_f32(codes[i]);
      float a = fabsf(x[i]);
      if (a > amax) amax = a;
    }
    float d = amax / 127.0f;
    float id = d == 0.0f ? 0.0f : 1.0f / d;
    uint16_t h = half_f32_to_f16(d);
    dst[0] = (uint8_t)(h & 0xff);
    dst[1] = (uint8_t)(h >> 8);
    for (int i = 0; i < 32; i++) dst[2 + i] = (uint8_t)round_q(x[i] * id);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define Q8_HAVE_AVX2 1

__attribute__((target("avx2,f16c"))) static inline __m256i q8_round8(__m256 x, __m256 ids) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v = _mm256_mul_ps(x, ids);
  __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                            _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f)));
  __m256 r = _mm256_add_ps(t, up);
  r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN to 0 */
  return _mm256_cvttps_epi32(r);
}

__attribute__((target("avx2,f16c"))) static void q8_avx2(const uint8_t *src, size_t blocks, uint8_t *dst) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t b = 0; b < blocks; b++, src += 64, dst += 34) {
    __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 0)));
    __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 16)));
    __m256 x2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 32)));
    __m256 x3 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 48)));
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x0), _mm256_andnot_ps(sign, x1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, x2), _mm256_andnot_ps(sign, x3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float amax = _mm_cvtss_f32(m4);
    float d = amax / 127.0f;
    float id = d == 0.0f ? 0.0f : 1.0f / d;
    uint16_t h = half_f32_to_f16(d);
    dst[0] = (uint8_t)(h & 0xff);
    dst[1] = (uint8_t)(h >> 8);
    __m256 ids = _mm256_set1_ps(id);
    __m256i i01 = _mm256_packs_epi32(q8_round8(x0, ids), q8_round8(x1, ids));
    __m256i i23 = _mm256_packs_epi32(q8_round8(x2, ids), q8_round8(x3, ids));
    __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i01, i23), order);
    _mm256_storeu_si256((__m256i *)(dst + 2), q);
  }
}
#endif

int q8_0_from_f16(const uint8_t *src, size_t blocks, uint8_t *dst) {
#ifdef Q8_HAVE_AVX2
  static int avx2 = -1;
  if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (avx2) {
    q8_avx2(src, blocks, dst);
    return 1;
  }
#endif
  q8_portable(src, blocks, dst);
  return 0;
}
