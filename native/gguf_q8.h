#ifndef SAFETENSORS_GGUF_Q8_H
#define SAFETENSORS_GGUF_Q8_H

#include <stddef.h>
#include <stdint.h>

/*
 * `blocks` blocks of 32 little-endian F16 codes at `src` (64 bytes each, any alignment) to 34-byte Q8_0 blocks at
 * `dst`. Returns 1 when the AVX2 kernel ran, 0 for the portable one.
 */
int q8_0_from_f16(const uint8_t *src, size_t blocks, uint8_t *dst);

#endif
