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

#endif
