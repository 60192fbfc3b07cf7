/**
 * The GGUF subsystem's public constants, alone in a module of their own: the package's Node bundle loads the rest
 * of src/gguf on first use (scripts/esbuild-lazy.mjs), and a constant must be there from the start. Pure.
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
