/*
 * Merge kernels, native: the bytes of src/merge/kernels.ts's linear merge of 16-bit inputs (linearTable16Kernel with
 * productTable and the codecs' encoders), which reproduce mergekit's torch arithmetic. Every float32 step is one
 * IEEE operation rounded to nearest even, in the same order as the JavaScript; nothing may be fused (binding.gyp
 * builds this with -ffp-contract=off). AVX2 + F16C where the CPU has them (chosen at run time), a portable loop
 * elsewhere.
 */
#include "merge_kernels.h"

#include <string.h>

#include "half.h"

typedef union {
  float f;
  uint32_t u;
} bits32;

static inline float bf16_to_f32(uint16_t h) {
  bits32 v;
  v.u = (uint32_t)h << 16;
  return v.f;
}

/* Round to bfloat16 and back; NaN keeps its bits (src/merge/round.ts's roundArray). */
static inline float round_bf16(float f) {
  bits32 v = {f};
  if ((v.u & 0x7fffffff) <= 0x7f800000u) v.u = (v.u + 0x7fff + ((v.u >> 16) & 1)) & 0xffff0000u;
  return v.f;
}

/* float32 to BF16, round to nearest even; every NaN is 0xFFFF (torch's vectorized CPU kernel). */
static inline uint16_t f32_to_bf16(float f) {
  bits32 v = {f};
  if ((v.u & 0x7fffffff) > 0x7f800000u) return 0xffff;
  return (uint16_t)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);
}

static inline uint16_t load16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return h;
}

static void linear16_portable(const uint8_t *const *src, const float *w, size_t n, int bf16, int normalize,
                              float divisor, size_t first, size_t count, uint8_t *dst) {
  for (size_t i = first; i < count; i++) {
    float acc = 0.0f;
    for (size_t j = 0; j < n; j++) {
      uint16_t h = load16(src[j] + 2 * i);
      float p;
      if (bf16) {
        p = round_bf16(bf16_to_f32(h) * w[j]);
      } else {
        p = half_f16_to_f32(half_f32_to_f16(half_f16_to_f32(h) * w[j]));
      }
      acc = j == 0 ? p : acc + p;
    }
    if (normalize) acc = (bf16 ? round_bf16(acc) : half_f16_to_f32(half_f32_to_f16(acc))) / divisor;
    uint16_t out = bf16 ? f32_to_bf16(acc) : half_f32_to_f16(acc);
    memcpy(dst + 2 * i, &out, 2);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MERGE_HAVE_AVX2 1

#define AVX2 __attribute__((target("avx2,f16c")))

AVX2 static inline __m256 round_f16x8(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

AVX2 static inline __m256 round_bf16x8(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                               _mm256_set1_epi32((int)0xffff0000u));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, u, nan));
}

AVX2 static inline __m256 load_bf16x8(const uint8_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

AVX2 static inline __m128i to_bf16x8(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  r = _mm256_or_si256(r, _mm256_and_si256(nan, _mm256_set1_epi32(0xffff)));
  __m256i packed = _mm256_packus_epi32(r, r); /* lanes: 0-3 0-3 | 4-7 4-7 */
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

AVX2 static size_t linear16_avx2(const uint8_t *const *src, const float *w, size_t n, int bf16, int normalize,
                                 float divisor, size_t count, uint8_t *dst) {
  const __m256 d = _mm256_set1_ps(divisor);
  size_t i = 0;
  if (bf16) {
    for (; i + 8 <= count; i += 8) {
      __m256 acc = round_bf16x8(_mm256_mul_ps(load_bf16x8(src[0] + 2 * i), _mm256_set1_ps(w[0])));
      for (size_t j = 1; j < n; j++) {
        acc = _mm256_add_ps(acc, round_bf16x8(_mm256_mul_ps(load_bf16x8(src[j] + 2 * i), _mm256_set1_ps(w[j]))));
      }
      if (normalize) acc = _mm256_div_ps(round_bf16x8(acc), d);
      _mm_storeu_si128((__m128i *)(dst + 2 * i), to_bf16x8(acc));
    }
  } else {
    for (; i + 8 <= count; i += 8) {
      __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src[0] + 2 * i)));
      __m256 acc = round_f16x8(_mm256_mul_ps(x, _mm256_set1_ps(w[0])));
      for (size_t j = 1; j < n; j++) {
        x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src[j] + 2 * i)));
        acc = _mm256_add_ps(acc, round_f16x8(_mm256_mul_ps(x, _mm256_set1_ps(w[j]))));
      }
      if (normalize) acc = _mm256_div_ps(round_f16x8(acc), d);
      _mm_storeu_si128((__m128i *)(dst + 2 * i),
                       _mm256_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  return i;
}

static int have_avx2(void) {
  static int avx2 = -1;
  if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return avx2;
}
#endif

int merge_linear16(const uint8_t *const *src, const float *weights, size_t n, int bf16, int normalize, float divisor,
                   size_t count, uint8_t *dst) {
  size_t done = 0;
  int simd = 0;
  if (n == 0) return 0;
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) {
    done = linear16_avx2(src, weights, n, bf16, normalize, divisor, count, dst);
    simd = 1;
  }
#endif
  linear16_portable(src, weights, n, bf16, normalize, divisor, done, count, dst);
  return simd;
}
