/**
 * The GGUF subsystem's public constants, alone in a module of their own: the package's Node bundle loads the rest
 * of src/gguf on first use (scripts/esbuild-lazy.mjs), and a constant must be there from the start. Pure.
 *
 * The tables and limits the entries export (GGML_TYPES, VALUE_TYPES, QUANT_TYPES, DEFAULT_GGUF_LIMITS) moved here
 * from types.ts, quants.ts and reader.ts (which re-export them), so that those three leave the eager bundle: the
 * core's chunk 150.9 -> 137.1 KB; callgrind, whole process, `--predictable`, 2026-12-03, `await import()` of
 * dist/lib/index.js 138.4 -> 134.8 M instructions on Node 20, 125.0 -> 121.2 M on Node 24, of dist/lib/node.js
 * 166.6 -> 160.6 M and 144.1 -> 140.5 M (`node -e 0` 91.1 and 93.9 M).
 */

/** The checkpoint architectures `toGguf` converts (config.json's `architectures[0]`). */
export const SUPPORTED_ARCHITECTURES = [
  "LlamaForCausalLM",
  "MistralForCausalLM",
  "Qwen2ForCausalLM",
  "Qwen3ForCausalLM",
  "Gemma2ForCausalLM",
  "Gemma3ForCausalLM",
] as const;
export type SupportedArchitecture = (typeof SUPPORTED_ARCHITECTURES)[number];

/** The tensor types `toGguf` writes. */
export const OUTPUT_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"] as const;
export type OutputType = (typeof OUTPUT_TYPES)[number];

/** The dtypes `fromGguf` writes. */
export const FROM_GGUF_DTYPES = ["F32", "F16", "BF16"] as const;
export type FromGgufDtype = (typeof FROM_GGUF_DTYPES)[number];

/** The ggml tensor types we convert to and from. */
export const GGML_TYPES = {
  F32: { id: 0, blockSize: 1, typeSize: 4 },
  F16: { id: 1, blockSize: 1, typeSize: 2 },
  Q4_0: { id: 2, blockSize: 32, typeSize: 18 },
  Q4_1: { id: 3, blockSize: 32, typeSize: 20 },
  Q5_0: { id: 6, blockSize: 32, typeSize: 22 },
  Q5_1: { id: 7, blockSize: 32, typeSize: 24 },
  Q8_0: { id: 8, blockSize: 32, typeSize: 34 },
  I8: { id: 24, blockSize: 1, typeSize: 1 },
  I16: { id: 25, blockSize: 1, typeSize: 2 },
  I32: { id: 26, blockSize: 1, typeSize: 4 },
  I64: { id: 27, blockSize: 1, typeSize: 8 },
  F64: { id: 28, blockSize: 1, typeSize: 8 },
  BF16: { id: 30, blockSize: 1, typeSize: 2 },
} as const;

export type GgmlTypeName = keyof typeof GGML_TYPES;

/** Metadata value types (gguf_type). */
export const VALUE_TYPES = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;

export type ValueTypeName = keyof typeof VALUE_TYPES;
export type ScalarTypeName = Exclude<ValueTypeName, "ARRAY">;

/** The quantized types the block kernels (quants.ts) handle. */
export const QUANT_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"] as const;
export type QuantTypeName = (typeof QUANT_TYPES)[number];

/** Limits on what a header may hold. Every one is checked before the memory it implies is allocated. */
export interface GgufLimits {
  /** Most metadata key/values (default 65 536). */
  maxKeyValues?: number;
  /** Most tensors (default 1 048 576). */
  maxTensors?: number;
  /** Longest string, key or value, in bytes (default 64 MiB). */
  maxStringBytes?: number;
  /** Longest metadata array (default 64 Mi items: vocabularies hold up to ~260 k). */
  maxArrayLength?: number;
  /** Deepest nesting of arrays in arrays (default 2). */
  maxArrayDepth?: number;
  /** Largest header, metadata and tensor infos together, in bytes (default 1 GiB). */
  maxHeaderBytes?: number;
}

export const DEFAULT_GGUF_LIMITS: Required<GgufLimits> = {
  maxKeyValues: 65_536,
  maxTensors: 1_048_576,
  maxStringBytes: 64 << 20,
  maxArrayLength: 64 << 20,
  maxArrayDepth: 2,
  maxHeaderBytes: 1 << 30,
};
