/*
 * Merge kernels, native: the bytes of src/merge/kernels.ts's linear merge of 16-bit inputs (linearTable16Kernel with
 * productTable and the codecs' encoders), which reproduce mergekit's torch arithmetic, of src/merge/lora.ts's LoRA
 * update (addLowRank) and of the 16-bit codecs. Every float32 step is one
 * IEEE operation rounded to nearest even, in the same order as the JavaScript; nothing may be fused (binding.gyp
 * builds this with -ffp-contract=off). AVX2 + F16C where the CPU has them (chosen at run time), a portable loop
 * elsewhere.
 */
#include "merge_kernels.h"

#include <pthread.h>
#include <math.h>
#include <stdlib.h>
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


static void decode16_portable(const uint8_t *src, int bf16, size_t first, size_t count, float *dst) {
  for (size_t i = first; i < count; i++) {
    uint16_t h = load16(src + 2 * i);
    dst[i] = bf16 ? bf16_to_f32(h) : half_f16_to_f32(h);
  }
}

static void encode16_portable(const float *src, int bf16, size_t first, size_t count, uint8_t *dst) {
  for (size_t i = first; i < count; i++) {
    uint16_t h = bf16 ? f32_to_bf16(src[i]) : half_f32_to_f16(src[i]);
    memcpy(dst + 2 * i, &h, 2);
  }
}

/* Σ_k l[k] · r[k] in a double, k ascending: each product of two floats is exact in a double. */
static inline double dot_rank(const float *l, const float *r, size_t rank) {
  double s = 0;
  for (size_t k = 0; k < rank; k++) s = s + (double)l[k] * (double)r[k];
  return s;
}

/* One row's update from its dot products `dots` (cols doubles); returns Σ v² in a double, in column order. */
static double finish_row(float *w, const double *dots, size_t cols, float scaling, float ratio, int delta_dtype,
                         int want_square) {
  double square = 0;
  for (size_t c = 0; c < cols; c++) {
    float d = (float)dots[c];
    if (ratio != 1.0f) d = ratio * d;
    float delta = d * scaling;
    if (delta_dtype == 1) delta = half_f16_to_f32(half_f32_to_f16(delta));
    else if (delta_dtype == 2) delta = round_bf16(delta);
    float v = w[c] + delta;
    w[c] = v;
    if (want_square) square += (double)v * (double)v;
  }
  return square;
}

static void scale_row(float *w, size_t cols, float magnitude, double square) {
  float norm = (float)sqrt(square);
  float factor = magnitude / norm;
  for (size_t c = 0; c < cols; c++) w[c] = factor * w[c];
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


AVX2 static size_t decode16_avx2(const uint8_t *src, int bf16, size_t count, float *dst) {
  size_t i = 0;
  if (bf16) {
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(src + 2 * i));
  } else {
    for (; i + 8 <= count; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
    }
  }
  return i;
}

AVX2 static size_t encode16_avx2(const float *src, int bf16, size_t count, uint8_t *dst) {
  size_t i = 0;
  if (bf16) {
    for (; i + 8 <= count; i += 8) _mm_storeu_si128((__m128i *)(dst + 2 * i), to_bf16x8(_mm256_loadu_ps(src + i)));
  } else {
    for (; i + 8 <= count; i += 8) {
      _mm_storeu_si128((__m128i *)(dst + 2 * i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  return i;
}

/*
 * The update of a tile of columns [c0, c0 + tc) of one row: w[c] + round(fround(Σ_k l[k] · rt[k][c]) · scaling).
 * rt is the tile of Rᵀ as doubles [rank × tc]; ld the row of L as doubles. fma(l, r, s) rounds l · r + s once, and
 * l · r of two floats is exact in a double: the same double as the portable s + l · r. 32 columns a step over 8
 * accumulators (an FMA's latency is 4 cycles: 8 chains keep both FMA pipes busy), then 4, then one at a time; the
 * float32 steps after the sum are those of finish_row, 8 lanes at a time (no fusing: -ffp-contract=off).
 */
__attribute__((target("avx2,fma,f16c"))) static inline __m256 finish8(__m256d lo, __m256d hi, const float *w,
                                                                       float scaling, float ratio, int delta_dtype) {
  __m256 d = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
  if (ratio != 1.0f) d = _mm256_mul_ps(_mm256_set1_ps(ratio), d);
  __m256 delta = _mm256_mul_ps(d, _mm256_set1_ps(scaling));
  if (delta_dtype == 1) delta = round_f16x8(delta);
  else if (delta_dtype == 2) delta = round_bf16x8(delta);
  return _mm256_add_ps(_mm256_loadu_ps(w), delta);
}

__attribute__((target("avx2,fma,f16c"))) static void tile_avx2(float *w, const double *ld, const double *rt,
                                                                size_t rank, size_t tc, float scaling, float ratio,
                                                                int delta_dtype) {
  size_t c = 0;
  for (; c + 32 <= tc; c += 32) {
    /* Named accumulators: gcc -O2 keeps an array of them on the stack (measured 5.6 ns an element, as slow as the
       untiled kernel). */
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t k = 0; k < rank; k++) {
      const double *r = rt + k * tc + c;
      __m256d lk = _mm256_set1_pd(ld[k]);
      a0 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r), a0);
      a1 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 4), a1);
      a2 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 8), a2);
      a3 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 12), a3);
      a4 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 16), a4);
      a5 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 20), a5);
      a6 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 24), a6);
      a7 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 28), a7);
    }
    _mm256_storeu_ps(w + c, finish8(a0, a1, w + c, scaling, ratio, delta_dtype));
    _mm256_storeu_ps(w + c + 8, finish8(a2, a3, w + c + 8, scaling, ratio, delta_dtype));
    _mm256_storeu_ps(w + c + 16, finish8(a4, a5, w + c + 16, scaling, ratio, delta_dtype));
    _mm256_storeu_ps(w + c + 24, finish8(a6, a7, w + c + 24, scaling, ratio, delta_dtype));
  }
  for (; c + 8 <= tc; c += 8) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    for (size_t k = 0; k < rank; k++) {
      const double *r = rt + k * tc + c;
      __m256d lk = _mm256_set1_pd(ld[k]);
      a0 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r), a0);
      a1 = _mm256_fmadd_pd(lk, _mm256_loadu_pd(r + 4), a1);
    }
    _mm256_storeu_ps(w + c, finish8(a0, a1, w + c, scaling, ratio, delta_dtype));
  }
  if (c < tc) {
    double dots[8];
    for (size_t i = c; i < tc; i++) {
      double s = 0;
      for (size_t k = 0; k < rank; k++) s = s + ld[k] * rt[k * tc + i];
      dots[i - c] = s;
    }
    finish_row(w + c, dots, tc - c, scaling, ratio, delta_dtype, 0);
  }
}

/*
 * Columns per tile: Rᵀ's tile as doubles (rank 16: 16 KiB) stays in the core's L1 while every row of the block passes
 * over it. Measured on the 2-core VM under load 4-5 (CPU time of a 256 × 4096 block, r = 16): one row at a time over
 * all of Rᵀ (0.5-1.4 MiB of doubles a row, from memory) 4.7 ns an element; tiles of 256, 128, 64 and 32 columns
 * 1.1-2.1 ns, noise larger than their differences. The bench's r = 16 bake: 7.8 -> 3.3 s of user CPU.
 */
#define LOW_RANK_TILE 128

/* The AVX2 + FMA update, tile by tile; 0, or -1 when out of memory. */
__attribute__((target("avx2,fma,f16c"))) static int lora_tiled(float *values, size_t rows, size_t cols,
                                                                const float *left, const float *right, size_t rank,
                                                                float scaling, float ratio, int delta_dtype) {
  double *rt = malloc(rank * LOW_RANK_TILE * sizeof(double));
  double *ld = malloc(rows * rank * sizeof(double) + 1);
  if (rt == NULL || ld == NULL) {
    free(rt);
    free(ld);
    return -1;
  }
  for (size_t i = 0; i < rows * rank; i++) ld[i] = (double)left[i];
  for (size_t c0 = 0; c0 < cols; c0 += LOW_RANK_TILE) {
    size_t tc = cols - c0 < LOW_RANK_TILE ? cols - c0 : LOW_RANK_TILE;
    for (size_t j = 0; j < tc; j++) {
      for (size_t k = 0; k < rank; k++) rt[k * tc + j] = (double)right[(c0 + j) * rank + k];
    }
    for (size_t row = 0; row < rows; row++) {
      tile_avx2(values + row * cols + c0, ld + row * rank, rt, rank, tc, scaling, ratio, delta_dtype);
    }
  }
  free(rt);
  free(ld);
  return 0;
}

static int have_avx2_fma(void) {
  static int fma = -1;
  if (fma < 0) fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return fma;
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
  /* Dividing by 1 changes no value, and rounding a value already rounded to the dtype neither: the same bytes
   * without the division (weights that sum to 1, the usual case). Measured on the 2-vCPU VM, the bench's linear merge
   * at load ~8: the process's CPU 3.5-3.8 -> 2.9-3.2 s. */
  if (normalize && divisor == 1.0f) normalize = 0;
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) {
    done = linear16_avx2(src, weights, n, bf16, normalize, divisor, count, dst);
    simd = 1;
  }
#endif
  linear16_portable(src, weights, n, bf16, normalize, divisor, done, count, dst);
  return simd;
}

int merge_decode16(const uint8_t *src, int bf16, size_t count, float *dst) {
  size_t done = 0;
  int simd = 0;
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) {
    done = decode16_avx2(src, bf16, count, dst);
    simd = 1;
  }
#endif
  decode16_portable(src, bf16, done, count, dst);
  return simd;
}

int merge_encode16(const float *src, int bf16, size_t count, uint8_t *dst) {
  size_t done = 0;
  int simd = 0;
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) {
    done = encode16_avx2(src, bf16, count, dst);
    simd = 1;
  }
#endif
  encode16_portable(src, bf16, done, count, dst);
  return simd;
}

int merge_add_low_rank(float *values, size_t rows, size_t cols, const float *left, const float *right, size_t rank,
                       float scaling, float ratio, int delta_dtype, const float *magnitude) {
#ifdef MERGE_HAVE_AVX2
  if (have_avx2_fma() && have_avx2() && rank > 0 && rows <= SIZE_MAX / sizeof(double) / rank) {
    if (lora_tiled(values, rows, cols, left, right, rank, scaling, ratio, delta_dtype) != 0) return -1;
    if (magnitude != NULL) {
      /* DoRA: Σ v² of each finished row in a double, in column order (finish_row's order), then the scale. */
      for (size_t row = 0; row < rows; row++) {
        float *w = values + row * cols;
        double square = 0;
        for (size_t c = 0; c < cols; c++) square += (double)w[c] * (double)w[c];
        scale_row(w, cols, magnitude[row], square);
      }
    }
    return 1;
  }
#endif
  double *dots = malloc(cols * sizeof(double) + 1);
  if (dots == NULL) return -1;
  for (size_t row = 0; row < rows; row++) {
    const float *l = left + row * rank;
    for (size_t c = 0; c < cols; c++) dots[c] = dot_rank(l, right + c * rank, rank);
    float *w = values + row * cols;
    double square = finish_row(w, dots, cols, scaling, ratio, delta_dtype, magnitude != NULL);
    if (magnitude != NULL) scale_row(w, cols, magnitude[row], square);
  }
  free(dots);
  return 0;
}

/*
 * torch's unstable sort of magnitudes, replayed (src/merge/torch-sort.ts, libstdc++'s std::sort as torch 2.x wheels
 * run it over (value, index) pairs): only the ranges a boundary cuts are followed down. The steps and the comparator
 * are those of the TypeScript replay, one for one, so the same entries are kept.
 */
#define SORT_THRESHOLD 16

typedef struct {
  /*
   * The entries' words. Plain: each word is a float32 value, moved whole. Packed (every value exact in F16 or BF16):
   * the high half is the magnitude's 16-bit code (NaN made one code above infinity), the only half that moves; the low
   * half is the entry's own code and stays put, so no permutation needs undoing afterwards.
   */
  uint32_t *w;
  int32_t *ix;
  int desc;
  int packed;
  int64_t b0, b1; /* the boundaries; -1 when none */
  int64_t n;      /* entries */
  int simd;       /* packed, and the CPU has AVX2: sort_partition_avx2 */
} pair_sorter;

/* The magnitude order of torch's comparators as an integer: |x|'s bits, every NaN one value above infinity. */
static inline uint32_t sort_key(const pair_sorter *s, uint32_t word) {
  if (s->packed) return word >> 16;
  uint32_t abs = word & 0x7fffffffu;
  return abs > 0x7f800000u ? 0x7fc00000u : abs;
}

static inline int sort_comp(const pair_sorter *s, uint32_t a, uint32_t b) {
  uint32_t x = sort_key(s, a), y = sort_key(s, b);
  return s->desc ? x > y : x < y;
}

static inline void sort_put(pair_sorter *s, int64_t at, uint32_t word) {
  s->w[at] = s->packed ? (s->w[at] & 0xffffu) | (word & 0xffff0000u) : word;
}

static inline void sort_swap(pair_sorter *s, int64_t a, int64_t b) {
  uint32_t tv = s->w[a];
  sort_put(s, a, s->w[b]);
  sort_put(s, b, tv);
  int32_t ti = s->ix[a];
  s->ix[a] = s->ix[b];
  s->ix[b] = ti;
}

static void sort_median_to_first(pair_sorter *s, int64_t result, int64_t a, int64_t b, int64_t c) {
  const uint32_t *v = s->w;
  if (sort_comp(s, v[a], v[b])) {
    if (sort_comp(s, v[b], v[c])) sort_swap(s, result, b);
    else if (sort_comp(s, v[a], v[c])) sort_swap(s, result, c);
    else sort_swap(s, result, a);
  } else if (sort_comp(s, v[a], v[c])) sort_swap(s, result, a);
  else if (sort_comp(s, v[b], v[c])) sort_swap(s, result, c);
  else sort_swap(s, result, b);
}

static int64_t sort_partition(pair_sorter *s, int64_t first, int64_t last, int64_t pivot) {
  const uint32_t *v = s->w;
  for (;;) {
    while (sort_comp(s, v[first], v[pivot])) first++;
    last--;
    while (sort_comp(s, v[pivot], v[last])) last--;
    if (!(first < last)) return first;
    sort_swap(s, first, last);
    first++;
  }
}

#ifdef MERGE_HAVE_AVX2
/*
 * sort_partition's scans over packed words, 8 keys a compare: each stops at the same entry as the scalar scan (the
 * compares past it have no effect), so the partition is the same; what changes is the branch per entry, which
 * mispredicted at every run's end: a 16 Mi-entry F16 task vector 280 -> 152-170 ms of CPU (load ~4). Loads stay inside
 * the array (the scalar scan finishes near its ends).
 */
AVX2 static inline int64_t scan_up_avx2(const pair_sorter *s, int64_t i, uint32_t pivot) {
  const __m256i p = _mm256_set1_epi32((int)(pivot >> 16));
  for (; i + 8 <= s->n; i += 8) {
    __m256i k = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(s->w + i)), 16);
    __m256i go = s->desc ? _mm256_cmpgt_epi32(k, p) : _mm256_cmpgt_epi32(p, k);
    unsigned stop = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(go)) & 0xffu;
    if (stop != 0) return i + __builtin_ctz(stop);
  }
  while (sort_comp(s, s->w[i], pivot)) i++;
  return i;
}

AVX2 static inline int64_t scan_down_avx2(const pair_sorter *s, int64_t i, uint32_t pivot) {
  const __m256i p = _mm256_set1_epi32((int)(pivot >> 16));
  for (; i >= 7; i -= 8) {
    __m256i k = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(s->w + i - 7)), 16);
    __m256i go = s->desc ? _mm256_cmpgt_epi32(p, k) : _mm256_cmpgt_epi32(k, p);
    unsigned stop = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(go)) & 0xffu;
    if (stop != 0) return i - 7 + (31 - __builtin_clz(stop));
  }
  while (sort_comp(s, pivot, s->w[i])) i--;
  return i;
}

AVX2 static int64_t sort_partition_avx2(pair_sorter *s, int64_t first, int64_t last, int64_t pivot) {
  const uint32_t pv = s->w[pivot];
  for (;;) {
    first = scan_up_avx2(s, first, pv);
    last = scan_down_avx2(s, last - 1, pv);
    if (!(first < last)) return first;
    sort_swap(s, first, last);
    first++;
  }
}
#endif

/*
 * The same partition with the stops found a block at a time, without a branch per entry (BlockQuicksort's scheme):
 * the left scan's stops are the entries that do not compare before the pivot, the right scan's those the pivot does not
 * compare before, and the scalar partition swaps the k-th stop from the left with the k-th from the right, as long as
 * they have not crossed. While the two blocks scanned are disjoint every left stop lies before every right stop, and a
 * swap only moves entries already recorded as stops, so recording each block's stops on its entries as they are and
 * swapping the pairs in order makes the scalar partition's swaps; the last two blocks' worth (where the scans may
 * cross) is left to it from the state it would have reached. Measured on the 2-core VM: the scalar scans stop every
 * couple of entries on a task vector's magnitudes, a mispredicted branch each time (sort_partition_avx2 was 35% of the
 * bench's TIES CPU).
 */
#define SORT_BLOCK 128

static int64_t sort_partition_finish(pair_sorter *s, int64_t first, int64_t last, int64_t pivot) {
#ifdef MERGE_HAVE_AVX2
  if (s->simd) return sort_partition_avx2(s, first, last, pivot);
#endif
  return sort_partition(s, first, last, pivot);
}

#ifdef MERGE_HAVE_AVX2
/* For each 8-bit mask, the positions of its set bits (low bit first, one byte each) and their count; and the same
   for the right scan, whose lanes run down the array: lane l of a block's step j is offset j + 7 - l, taken from l = 7
   down. */
static uint64_t stops_up[256], stops_down[256];
static uint8_t stops_count[256];

static void stops_init(void) {
  for (int m = 0; m < 256; m++) {
    uint64_t up = 0, down = 0;
    int n = 0;
    for (int l = 0; l < 8; l++) {
      if (m & (1 << l)) up |= (uint64_t)l << (8 * n++);
    }
    n = 0;
    for (int l = 7; l >= 0; l--) {
      if (m & (1 << l)) down |= (uint64_t)(7 - l) << (8 * n++);
    }
    stops_up[m] = up;
    stops_down[m] = down;
    stops_count[m] = (uint8_t)n;
  }
}

static pthread_once_t stops_once = PTHREAD_ONCE_INIT;

/* The offsets of a packed block's left stops (entries not before the pivot): w[0..SORT_BLOCK). */
AVX2 static int block_stops_up(const uint32_t *w, uint32_t pk, int desc, uint8_t *off) {
  const __m256i p = _mm256_set1_epi32((int)pk);
  int n = 0;
  for (int i = 0; i < SORT_BLOCK; i += 8) {
    __m256i k = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(w + i)), 16);
    __m256i go = desc ? _mm256_cmpgt_epi32(k, p) : _mm256_cmpgt_epi32(p, k);
    unsigned stop = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(go)) & 0xffu;
    uint64_t o = stops_up[stop] + (uint64_t)i * 0x0101010101010101ull;
    memcpy(off + n, &o, 8);
    n += stops_count[stop];
  }
  return n;
}

/* The offsets (down from `top` - 1) of a packed block's right stops (entries the pivot is not before). */
AVX2 static int block_stops_down(const uint32_t *top, uint32_t pk, int desc, uint8_t *off) {
  const __m256i p = _mm256_set1_epi32((int)pk);
  int n = 0;
  for (int j = 0; j < SORT_BLOCK; j += 8) {
    __m256i k = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(top - 8 - j)), 16);
    __m256i go = desc ? _mm256_cmpgt_epi32(p, k) : _mm256_cmpgt_epi32(k, p);
    unsigned stop = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(go)) & 0xffu;
    uint64_t o = stops_down[stop] + (uint64_t)j * 0x0101010101010101ull;
    memcpy(off + n, &o, 8);
    n += stops_count[stop];
  }
  return n;
}
#endif

static int block_stops_up_scalar(const pair_sorter *s, const uint32_t *w, uint32_t pk, uint8_t *off) {
  int n = 0;
  for (int i = 0; i < SORT_BLOCK; i++) {
    uint32_t k = sort_key(s, w[i]);
    off[n] = (uint8_t)i;
    n += s->desc ? k <= pk : k >= pk;
  }
  return n;
}

static int block_stops_down_scalar(const pair_sorter *s, const uint32_t *top, uint32_t pk, uint8_t *off) {
  int n = 0;
  for (int i = 0; i < SORT_BLOCK; i++) {
    uint32_t k = sort_key(s, top[-1 - i]);
    off[n] = (uint8_t)i;
    n += s->desc ? k >= pk : k <= pk;
  }
  return n;
}

static int64_t sort_partition_block(pair_sorter *s, int64_t first, int64_t last, int64_t pivot) {
  uint32_t *w = s->w;
  const uint32_t pk = sort_key(s, w[pivot]);
  /* 8 bytes of slack: the SIMD steps store 8 offsets at a time. */
  uint8_t offl[SORT_BLOCK + 8], offr[SORT_BLOCK + 8];
  int nl = 0, il = 0, nr = 0, ir = 0;
  int64_t lo = first, hi = last;  /* not scanned yet: [lo, hi) */
  int64_t lbase = lo, rbase = hi; /* left stops at lbase + offl[], right stops at rbase - 1 - offr[] */
#ifdef MERGE_HAVE_AVX2
  if (s->simd) pthread_once(&stops_once, stops_init);
#endif
  while (hi - lo >= 2 * SORT_BLOCK) {
    if (il == nl) {
      il = 0;
      lbase = lo;
#ifdef MERGE_HAVE_AVX2
      nl = s->simd ? block_stops_up(w + lo, pk, s->desc, offl) : block_stops_up_scalar(s, w + lo, pk, offl);
#else
      nl = block_stops_up_scalar(s, w + lo, pk, offl);
#endif
      lo += SORT_BLOCK;
    }
    if (ir == nr) {
      ir = 0;
      rbase = hi;
#ifdef MERGE_HAVE_AVX2
      nr = s->simd ? block_stops_down(w + hi, pk, s->desc, offr) : block_stops_down_scalar(s, w + hi, pk, offr);
#else
      nr = block_stops_down_scalar(s, w + hi, pk, offr);
#endif
      hi -= SORT_BLOCK;
    }
    int m = nl - il < nr - ir ? nl - il : nr - ir;
    for (int t = 0; t < m; t++) sort_swap(s, lbase + offl[il + t], rbase - 1 - offr[ir + t]);
    il += m;
    ir += m;
  }
  /* The scalar partition from where it would be: its left scan at the next left stop not swapped (or the first entry
     not scanned), its right scan just below (it steps down first) the next right stop not swapped. */
  int64_t f = il < nl ? lbase + offl[il] : lo;
  int64_t l = ir < nr ? rbase - offr[ir] : hi;
  return sort_partition_finish(s, f, l, pivot);
}

static void sort_insertion(pair_sorter *s, int64_t first, int64_t last) {
  uint32_t *v = s->w;
  int32_t *ix = s->ix;
  for (int64_t i = first + 1; i < last; i++) {
    uint32_t val = v[i];
    int32_t id = ix[i];
    int64_t j = i;
    while (j > first && sort_comp(s, val, v[j - 1])) {
      sort_put(s, j, v[j - 1]);
      ix[j] = ix[j - 1];
      j--;
    }
    sort_put(s, j, val);
    ix[j] = id;
  }
}

static void sort_push_heap(pair_sorter *s, int64_t first, int64_t hole, int64_t top, uint32_t val, int32_t id) {
  uint32_t *v = s->w;
  int32_t *ix = s->ix;
  int64_t parent = (hole - 1) / 2;
  while (hole > top && sort_comp(s, v[first + parent], val)) {
    sort_put(s, first + hole, v[first + parent]);
    ix[first + hole] = ix[first + parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  sort_put(s, first + hole, val);
  ix[first + hole] = id;
}

static void sort_adjust_heap(pair_sorter *s, int64_t first, int64_t hole, int64_t len, uint32_t val, int32_t id) {
  uint32_t *v = s->w;
  int32_t *ix = s->ix;
  int64_t top = hole, child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (sort_comp(s, v[first + child], v[first + child - 1])) child--;
    sort_put(s, first + hole, v[first + child]);
    ix[first + hole] = ix[first + child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    sort_put(s, first + hole, v[first + child - 1]);
    ix[first + hole] = ix[first + child - 1];
    hole = child - 1;
  }
  sort_push_heap(s, first, hole, top, val, id);
}

static void sort_heap(pair_sorter *s, int64_t first, int64_t last) {
  uint32_t *v = s->w;
  int32_t *ix = s->ix;
  int64_t len = last - first;
  if (len >= 2) {
    for (int64_t parent = (len - 2) / 2;; parent--) {
      sort_adjust_heap(s, first, parent, len, v[first + parent], ix[first + parent]);
      if (parent == 0) break;
    }
  }
  for (int64_t end = last; end - first > 1;) {
    end--;
    uint32_t val = v[end];
    int32_t id = ix[end];
    sort_put(s, end, v[first]);
    ix[end] = ix[first];
    sort_adjust_heap(s, first, 0, end - first, val, id);
  }
}

static inline int sort_cuts(const pair_sorter *s, int64_t first, int64_t last) {
  return (s->b0 >= 0 && first < s->b0 && s->b0 < last) || (s->b1 >= 0 && first < s->b1 && s->b1 < last);
}

static void sort_intro(pair_sorter *s, int64_t first, int64_t last, int64_t depth) {
  while (last - first > SORT_THRESHOLD) {
    if (!sort_cuts(s, first, last)) return;
    if (depth == 0) {
      sort_heap(s, first, last);
      return;
    }
    depth--;
    int64_t mid = first + (last - first) / 2;
    sort_median_to_first(s, first, first + 1, mid, last - 1);
    int64_t cut = sort_partition_block(s, first + 1, last, first);
    sort_intro(s, cut, last, depth);
    last = cut;
  }
  if (sort_cuts(s, first, last)) sort_insertion(s, first, last);
}

#ifdef MERGE_HAVE_AVX2
/*
 * The F16 steps of merge_keep_sorted 8 entries at a time with F16C. Measured on the 2-core VM (the bench's TIES, perf
 * at load 5): merge_keep_sorted's own loops took 23% of the run's 146 s of CPU, nearly as much as the sort (25%),
 * with software F16 conversions an entry in the exactness test, the packing and the unpacking; with these, a 16 Mi-entry
 * F16 task vector (density 0.5) took 280 ms of CPU instead of 507-542 (load ~4). Whole blocks of 8 from
 * the start, the rest with half.h's conversions: each entry meets the same conversion in every step (F16C and half.h
 * differ only in NaN payloads, so an entry is packed only where its own conversion round-trips it).
 */
AVX2 static int64_t f16_exact_avx2(const uint32_t *w, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(w + i));
    __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i back = _mm256_castps_si256(_mm256_cvtph_ps(h));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(x, back)) != -1) return -1;
  }
  return i;
}

/* Each word becomes its F16 magnitude key (NaN one code above infinity) << 16 | its own code. */
AVX2 static int64_t f16_pack_avx2(uint32_t *w, int64_t n) {
  const __m256i mask = _mm256_set1_epi32(0x7fff), inf = _mm256_set1_epi32(0x7c00), nan = _mm256_set1_epi32(0x7e00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps((const float *)(w + i));
    __m256i code = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i key = _mm256_and_si256(code, mask);
    key = _mm256_blendv_epi8(key, nan, _mm256_cmpgt_epi32(key, inf));
    _mm256_storeu_si256((__m256i *)(w + i), _mm256_or_si256(_mm256_slli_epi32(key, 16), code));
  }
  return i;
}

/* Each word's own F16 code back to its float where its key (from that code) lies strictly between `lo` and `hi` or its
   bit in `kept` is set, else 0. */
AVX2 static int64_t f16_unpack_avx2(uint32_t *w, const uint8_t *kept, int64_t n, uint32_t lo, uint32_t hi) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128), low = _mm256_set1_epi32(0xffff);
  const __m256i mask = _mm256_set1_epi32(0x7fff), inf = _mm256_set1_epi32(0x7c00), nan = _mm256_set1_epi32(0x7e00);
  const __m256i lower = _mm256_set1_epi32((int)lo), upper = _mm256_set1_epi32((int)hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i code = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(w + i)), low);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(code, code), 0x08);
    __m256 value = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
    __m256i key = _mm256_and_si256(code, mask);
    key = _mm256_blendv_epi8(key, nan, _mm256_cmpgt_epi32(key, inf));
    __m256i between = _mm256_and_si256(_mm256_cmpgt_epi32(key, lower), _mm256_cmpgt_epi32(upper, key));
    __m256i keep = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(kept[i >> 3]), bit), bit);
    keep = _mm256_or_si256(keep, between);
    _mm256_storeu_ps((float *)(w + i), _mm256_and_ps(value, _mm256_castsi256_ps(keep)));
  }
  return i;
}

/* The smallest and largest key of packed words w[0..n) (into *lo and *hi, which hold the starting values). */
AVX2 static int64_t key_range_avx2(const uint32_t *w, int64_t n, uint32_t *lo, uint32_t *hi) {
  __m256i mn = _mm256_set1_epi32((int)*lo), mx = _mm256_set1_epi32((int)*hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i k = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(w + i)), 16);
    mn = _mm256_min_epu32(mn, k);
    mx = _mm256_max_epu32(mx, k);
  }
  uint32_t a[8], b[8];
  _mm256_storeu_si256((__m256i *)a, mn);
  _mm256_storeu_si256((__m256i *)b, mx);
  for (int l = 0; l < 8; l++) {
    if (a[l] < *lo) *lo = a[l];
    if (b[l] > *hi) *hi = b[l];
  }
  return i;
}

/* Marks in `kept` the index (ix) of each packed word of w[0..n) whose key is `lo` or `hi`. */
AVX2 static int64_t mark_ties_avx2(const uint32_t *w, const int32_t *ix, int64_t n, uint32_t lo, uint32_t hi,
                                   uint8_t *kept) {
  const __m256i lower = _mm256_set1_epi32((int)lo), upper = _mm256_set1_epi32((int)hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i k = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(w + i)), 16);
    __m256i tie = _mm256_or_si256(_mm256_cmpeq_epi32(k, lower), _mm256_cmpeq_epi32(k, upper));
    unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(tie));
    while (m != 0) {
      int32_t at = ix[i + __builtin_ctz(m)];
      kept[at >> 3] |= (uint8_t)(1u << (at & 7));
      m &= m - 1;
    }
  }
  return i;
}
#endif

/* Whole blocks of 8 done by the F16C steps, or 0 (none: no F16C); -1 when one of them is not exact in F16. */
static int64_t f16_exact_simd(const uint32_t *w, int64_t n) {
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) return f16_exact_avx2(w, n);
#endif
  (void)w;
  (void)n;
  return 0;
}

/* 0 when some value of `w` is not exact in F16, else 1; then 2 for BF16. */
static int packable(const uint32_t *w, int64_t n) {
  int64_t from = f16_exact_simd(w, n);
  int f16 = from >= 0, bf16 = 1;
  for (int64_t i = from < 0 ? 0 : from; i < n && f16; i++) {
    union {
      uint32_t u;
      float f;
    } x = {w[i]}, back;
    back.f = half_f16_to_f32(half_f32_to_f16(x.f));
    f16 = back.u == w[i];
  }
  if (f16) return 1;
  for (int64_t i = 0; i < n && bf16; i++) bf16 = (w[i] & 0xffffu) == 0;
  return bf16 ? 2 : 0;
}

/*
 * The replay's working memory (the indices, 4 bytes an entry, then the kept bitmap), kept by a thread that asks for it
 * from one call to the next while it is at most SCRATCH_KEEP bytes (larger, it is freed at once: the bound of memory
 * held between calls), and freed when the thread ends. Fresh memory is zeroed page by page at its first touch: over
 * the bench's TIES (2 x 1.27 G entries replayed) that was 10 GiB of page faults in the workers, measured with perf on
 * the 2-core VM at 10-15% of the run's CPU.
 */
#define SCRATCH_KEEP ((size_t)256 << 20)

typedef struct {
  void *p;
  size_t size;
} scratch_slot;

static pthread_key_t scratch_key;
static int scratch_key_made;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_release(void *slot) {
  free(((scratch_slot *)slot)->p);
  free(slot);
}

static void scratch_key_init(void) {
  scratch_key_made = pthread_key_create(&scratch_key, scratch_release) == 0;
}

static scratch_slot *scratch_slot_of_thread(void) {
  pthread_once(&scratch_once, scratch_key_init);
  if (!scratch_key_made) return NULL;
  scratch_slot *slot = pthread_getspecific(scratch_key);
  if (slot == NULL && (slot = calloc(1, sizeof *slot)) != NULL && pthread_setspecific(scratch_key, slot) != 0) {
    free(slot);
    slot = NULL;
  }
  return slot;
}

/* `bytes` of memory: the thread's kept scratch when `keep` and it is large enough, else fresh (the kept one freed). */
static void *scratch_take(size_t bytes, int keep) {
  scratch_slot *slot = keep ? scratch_slot_of_thread() : NULL;
  if (slot != NULL && slot->p != NULL) {
    void *p = slot->p;
    if (slot->size >= bytes) {
      slot->p = NULL;
      slot->size = 0;
      return p;
    }
    free(p);
    slot->p = NULL;
    slot->size = 0;
  }
  return malloc(bytes);
}

static void scratch_give(void *p, size_t bytes, int keep) {
  scratch_slot *slot = keep && bytes <= SCRATCH_KEEP ? scratch_slot_of_thread() : NULL;
  if (slot == NULL || slot->p != NULL) {
    free(p);
    return;
  }
  slot->p = p;
  slot->size = bytes;
}

int merge_keep_sorted(float *v, size_t count, int descending, int64_t from, int64_t to, int keep_scratch) {
  int64_t n = (int64_t)count;
  if (from >= to) {
    memset(v, 0, count * sizeof(float));
    return 0;
  }
  uint32_t *w = (uint32_t *)v;
  int packing = packable(w, n);
  size_t ix_bytes = count * sizeof(int32_t), kept_bytes = (count + 7) / 8 + 1;
  size_t scratch_bytes = ix_bytes + kept_bytes;
  uint8_t *scratch = scratch_take(scratch_bytes, keep_scratch);
  if (scratch == NULL) return -1;
  int32_t *ix = (int32_t *)scratch;
  uint8_t *kept = scratch + ix_bytes;
  if (packing != 0) memset(kept, 0, kept_bytes);
  for (int64_t i = 0; i < n; i++) ix[i] = (int32_t)i;
  if (packing == 1) {
    int64_t i = 0;
#ifdef MERGE_HAVE_AVX2
    if (have_avx2()) i = f16_pack_avx2(w, n);
#endif
    for (; i < n; i++) {
      union {
        uint32_t u;
        float f;
      } x = {w[i]};
      uint32_t code = half_f32_to_f16(x.f), key = code & 0x7fff;
      w[i] = ((key > 0x7c00 ? 0x7e00u : key) << 16) | code;
    }
  } else if (packing == 2) {
    for (int64_t i = 0; i < n; i++) {
      uint32_t code = w[i] >> 16, key = code & 0x7fff;
      w[i] = ((key > 0x7f80 ? 0x7fc0u : key) << 16) | code;
    }
  }
  pair_sorter s = {w, ix, descending, packing != 0, from > 0 && from < n ? from : -1, to > 0 && to < n ? to : -1, n, 0};
#ifdef MERGE_HAVE_AVX2
  s.simd = packing != 0 && have_avx2();
#endif
  if (n > 1) {
    int64_t depth = 0;
    for (int64_t m = n; m > 1; m >>= 1) depth++; /* floor(log2(n)) */
    sort_intro(&s, 0, n, 2 * depth);
  }
  if (packing != 0) {
    /* Which entries are kept, from their keys where that decides it: the kept positions [a, b) hold keys from lo to
       hi, so every entry whose key lies strictly between is kept wherever the sort put it, and every entry whose key
       lies outside is dropped. Only entries whose key is lo or hi may lie on either side of a boundary: those are
       marked by index (a bitmap: n / 8 bytes). Then each word becomes its own value or zero in one pass. Marking
       every kept position's index instead (a random write per kept entry) took 8% of the bench's TIES CPU. */
    int64_t a = from < 0 ? 0 : from, b = to < n ? to : n;
    uint32_t lo = 0xffff, hi = 0;
    int64_t p = a;
#ifdef MERGE_HAVE_AVX2
    if (have_avx2() && b > a) p = a + key_range_avx2(w + a, b - a, &lo, &hi);
#endif
    for (; p < b; p++) {
      uint32_t k = w[p] >> 16;
      if (k < lo) lo = k;
      if (k > hi) hi = k;
    }
    p = a;
#ifdef MERGE_HAVE_AVX2
    if (have_avx2() && b > a) p = a + mark_ties_avx2(w + a, ix + a, b - a, lo, hi, kept);
#endif
    for (; p < b; p++) {
      uint32_t k = w[p] >> 16;
      if (k == lo || k == hi) kept[ix[p] >> 3] |= (uint8_t)(1u << (ix[p] & 7));
    }
    const uint32_t nan_key = packing == 1 ? 0x7e00u : 0x7fc0u, inf_key = packing == 1 ? 0x7c00u : 0x7f80u;
    int64_t i = 0;
#ifdef MERGE_HAVE_AVX2
    if (packing == 1 && have_avx2()) i = f16_unpack_avx2(w, kept, n, lo, hi);
#endif
    for (; i < n; i++) {
      uint16_t code = (uint16_t)(w[i] & 0xffff);
      uint32_t key = code & 0x7fffu;
      if (key > inf_key) key = nan_key;
      int keep = (lo < key && key < hi) || ((kept[i >> 3] >> (i & 7)) & 1);
      v[i] = keep ? (packing == 1 ? half_f16_to_f32(code) : bf16_to_f32(code)) : 0.0f;
    }
    scratch_give(scratch, scratch_bytes, keep_scratch);
    return 0;
  }
  for (int64_t i = 0; i < (from < 0 ? 0 : from) && i < n; i++) v[i] = 0;
  for (int64_t i = to < 0 ? 0 : to; i < n; i++) v[i] = 0;
  /* Scatter v[p] to index ix[p] along each cycle of the permutation; a visited position's index is stored as ~index. */
  for (int64_t start = 0; start < n; start++) {
    int32_t dest = ix[start];
    if (dest < 0) continue;
    float carried = v[start];
    ix[start] = ~dest;
    while (dest != start) {
      int32_t next = ix[dest];
      float displaced = v[dest];
      ix[dest] = ~next;
      v[dest] = carried;
      carried = displaced;
      dest = next;
    }
    v[start] = carried;
  }
  scratch_give(scratch, scratch_bytes, keep_scratch);
  return 0;
}

/*
 * Task arithmetic on float32 arrays of 16-bit values (src/merge/kernels.ts): subtractBase (x - base, rounded) and
 * combineKernel's fused path for two task vectors with TIES's sign election. Each operation is one IEEE float32
 * operation rounded to the dtype, in the TypeScript's order.
 */
static inline float round16(float x, int bf16) {
  return bf16 ? round_bf16(x) : half_f16_to_f32(half_f32_to_f16(x));
}

static void subtract16_portable(float *x, const float *base, int bf16, size_t first, size_t count) {
  for (size_t i = first; i < count; i++) x[i] = round16(x[i] - base[i], bf16);
}

/* w: the two rounded weights, then the rounded divisors of "only a", "only b" and "both". */
static void consensus2_portable(const float *base, const float *a, const float *b, const float *w, int bf16,
                                int normalize, float lambda, size_t first, size_t count, float *out) {
  for (size_t i = first; i < count; i++) {
    float x = round16(a[i] * w[0], bf16), y = round16(b[i] * w[1], bf16);
    float sum = x + y;
    int majority = sum >= 0 ? 1 : -1;
    int keep_x = (x > 0 ? 1 : x < 0 ? -1 : 0) == majority, keep_y = (y > 0 ? 1 : y < 0 ? -1 : 0) == majority;
    float v = round16(keep_x ? (keep_y ? sum : x) : keep_y ? y : 0.0f, bf16);
    if (normalize) {
      float divisor = keep_x ? (keep_y ? w[4] : w[2]) : keep_y ? w[3] : 1.0f;
      v = round16(v / (divisor == 0 ? 1.0f : divisor), bf16);
    }
    if (lambda != 1.0f) v = round16(v * lambda, bf16);
    out[i] = round16(base[i] + v, bf16);
  }
}

#ifdef MERGE_HAVE_AVX2
AVX2 static inline __m256 round16x8(__m256 x, int bf16) { return bf16 ? round_bf16x8(x) : round_f16x8(x); }

AVX2 static size_t subtract16_avx2(float *x, const float *base, int bf16, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(x + i, round16x8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(base + i)), bf16));
  }
  return i;
}

AVX2 static size_t consensus2_avx2(const float *base, const float *a, const float *b, const float *w, int bf16,
                                   int normalize, float lambda, size_t count, float *out) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), lam = _mm256_set1_ps(lambda);
  const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]);
  const __m256 da = _mm256_set1_ps(w[2]), db = _mm256_set1_ps(w[3]), dab = _mm256_set1_ps(w[4]);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 x = round16x8(_mm256_mul_ps(_mm256_loadu_ps(a + i), w0), bf16);
    __m256 y = round16x8(_mm256_mul_ps(_mm256_loadu_ps(b + i), w1), bf16);
    __m256 sum = _mm256_add_ps(x, y);
    __m256 positive = _mm256_cmp_ps(sum, zero, _CMP_GE_OQ);
    __m256 keep_x = _mm256_blendv_ps(_mm256_cmp_ps(x, zero, _CMP_LT_OQ), _mm256_cmp_ps(x, zero, _CMP_GT_OQ), positive);
    __m256 keep_y = _mm256_blendv_ps(_mm256_cmp_ps(y, zero, _CMP_LT_OQ), _mm256_cmp_ps(y, zero, _CMP_GT_OQ), positive);
    __m256 both = _mm256_and_ps(keep_x, keep_y);
    __m256 v = _mm256_and_ps(keep_y, y);
    v = _mm256_blendv_ps(v, x, keep_x);
    v = round16x8(_mm256_blendv_ps(v, sum, both), bf16);
    if (normalize) {
      __m256 d = _mm256_blendv_ps(one, db, keep_y);
      d = _mm256_blendv_ps(d, da, keep_x);
      d = _mm256_blendv_ps(d, dab, both);
      d = _mm256_blendv_ps(d, one, _mm256_cmp_ps(d, zero, _CMP_EQ_OQ));
      v = round16x8(_mm256_div_ps(v, d), bf16);
    }
    if (lambda != 1.0f) v = round16x8(_mm256_mul_ps(v, lam), bf16);
    _mm256_storeu_ps(out + i, round16x8(_mm256_add_ps(_mm256_loadu_ps(base + i), v), bf16));
  }
  return i;
}
#endif

int merge_subtract16(float *x, const float *base, int bf16, size_t count) {
  size_t done = 0;
  int simd = 0;
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) {
    done = subtract16_avx2(x, base, bf16, count);
    simd = 1;
  }
#endif
  subtract16_portable(x, base, bf16, done, count);
  return simd;
}

int merge_consensus2(const float *base, const float *a, const float *b, const float *w, int bf16, int normalize,
                     float lambda, size_t count, float *out) {
  size_t done = 0;
  int simd = 0;
#ifdef MERGE_HAVE_AVX2
  if (have_avx2()) {
    done = consensus2_avx2(base, a, b, w, bf16, normalize, lambda, count, out);
    simd = 1;
  }
#endif
  consensus2_portable(base, a, b, w, bf16, normalize, lambda, done, count, out);
  return simd;
}
