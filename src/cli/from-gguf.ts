/** `safetensors from-gguf IN.gguf OUTDIR`: a GGUF file back to a safetensors checkpoint with config.json. */

import { FROM_GGUF_DTYPES, type FromGgufDtype, fromGguf } from "../gguf/node-from-gguf.js";
import { plural } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { progressCallback } from "./rewrite.js";

export const command = defineCommand({
  usage: "from-gguf IN.gguf OUTDIR [--dtype f32|f16|bf16] [--json]",
  description: `Write OUTDIR/model.safetensors and OUTDIR/config.json from a GGUF file (a path or an http(s)://, hf:// or
s3:// URL), as transformers' GGUF loading does: every tensor dequantized to float32 (F32, F16, BF16, Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1; then stored as --dtype, default f32), llama.cpp's names mapped back to the checkpoint's, Llama's
Q/K row permutation undone, Gemma's norm + 1 undone, and config.json made from the GGUF's hyperparameters and
special token ids. Architectures: llama (Llama, Mistral), qwen2, qwen3, gemma2, gemma3. Tensors are streamed in
chunks; the files are written atomically.`,
  options: {
    dtype: { type: "string", value: "DTYPE", help: "f32 (default), f16 or bf16" },
    json: { type: "boolean", help: 'print {"files","tensors","skipped","seconds"}' },
    fsync: { type: "boolean", help: "fsync the files and their directory before reporting success" },
  },
  async run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("from-gguf takes IN.gguf and OUTDIR");
    const [input, outDir] = positionals as [string, string];
    const dtype = (values.dtype ?? "f32").toUpperCase() as FromGgufDtype;
    if (!FROM_GGUF_DTYPES.includes(dtype)) throw new UsageError("--dtype must be f32, f16 or bf16");
    const started = performance.now();
    const progress = progressCallback();
    try {
      const result = await fromGguf(input, outDir, {
        dtype,
        fsync: values.fsync,
        onProgress: progress.onProgress,
      });
      progress.finish();
      const seconds = Math.round(performance.now() - started) / 1000;
      if (values.json) {
        io.stdout(
          `${JSON.stringify({ files: result.files, tensors: result.tensors, skipped: result.skipped, seconds })}\n`,
        );
      } else {
        io.stdout(`${input} -> ${result.files.join(", ")}: ${plural(result.tensors, "tensor")}\n`);
        if (result.skipped.length > 0)
          io.stdout(`  left out (no checkpoint counterpart): ${result.skipped.join(", ")}\n`);
      }
      return 0;
    } finally {
      progress.finish();
    }
  },
});
