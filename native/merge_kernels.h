#ifndef SAFETENSORS_MERGE_KERNELS_H
#define SAFETENSORS_MERGE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/*
 * A linear merge of `n` inputs of `count` 16-bit codes each (F16, or BF16 when `bf16`; little-endian, any
 * alignment) into `dst`: Σ round(w_j · x_j) in float32, then, when `normalize`, rounded and divided by `divisor`;
 * the result rounded to the dtype. Each product is rounded to the dtype as torch rounds an operation on a 16-bit
 * tensor. Returns 1 when the AVX2 kernel ran, 0 for the portable one.
 */
int merge_linear16(const uint8_t *const *src, const float *weights, size_t n, int bf16, int normalize, float divisor,
                   size_t count, uint8_t *dst);

/* `count` F16 (or BF16 when `bf16`) codes at `src` (any alignment) to float32, exactly (src/codecs/half.ts). */
int merge_decode16(const uint8_t *src, int bf16, size_t count, float *dst);

/* `count` float32 values to F16 (or BF16) codes at `dst` (any alignment), as src/codecs/half.ts encodes them. */
int merge_encode16(const float *src, int bf16, size_t count, uint8_t *dst);

/*
 * A LoRA update added to `rows` rows of W in place (src/merge/lora.ts's addLowRank): W + round(fround(L @ Rᵀ) ·
 * scaling), L [rows × rank], R [cols × rank] (rank innermost), each dot product summed in a double in k order;
 * `ratio` (1: none) multiplies fround(L @ Rᵀ) first; `delta_dtype` (0 float32, 1 F16, 2 BF16) is the rounding of
 * the update; with `magnitude` (DoRA) each row is then scaled by magnitude / ‖row‖. Returns 1 when the AVX2 + FMA
 * kernel ran, 0 for the portable one, -1 when out of memory.
 */
int merge_add_low_rank(float *values, size_t rows, size_t cols, const float *left, const float *right, size_t rank,
                       float scaling, float ratio, int delta_dtype, const float *magnitude);

/*
 * Keep, in place, the entries of `v` whose position after torch's unstable sort of their magnitudes (descending or
 * not) is in [from, to), zero the others (src/merge/torch-sort.ts's replay). Returns 0, or -1 when out of memory.
 */
int merge_keep_sorted(float *v, size_t count, int descending, int64_t from, int64_t to, int keep_scratch);

/* x - base in float32, rounded to F16 (BF16 when `bf16`), in place (subtractBase). Returns 1 when AVX2 ran. */
int merge_subtract16(float *x, const float *base, int bf16, size_t count);

/*
 * combineKernel's two task vectors with TIES's sign election: a and b weighted by w[0] and w[1] (rounded), the
 * majority's sum, divided (when `normalize`) by w[2] (a alone), w[3] (b alone) or w[4] (both), times `lambda`, added
 * to `base`; every step rounded to the dtype. Returns 1 when AVX2 ran.
 */
int merge_consensus2(const float *base, const float *a, const float *b, const float *w, int bf16, int normalize,
                     float lambda, size_t count, float *out);

#endif
