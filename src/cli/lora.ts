/** `safetensors lora merge`: PEFT LoRA adapters baked into their base model, streamed. */
import { bakeLora } from "../merge/node-lora.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { EXTRACT_DESCRIPTION, EXTRACT_OPTIONS, EXTRACT_USAGE, runExtract } from "./lora-extract.js";
import { runWithProgress } from "./rewrite.js";

const DTYPES = { f32: "F32", f16: "F16", bf16: "BF16" } as const;

export const command = defineCommand({
  usage: `lora merge BASE ADAPTER... OUTDIR [--weights W,...] [--dtype f32|f16|bf16] [--text-encoder te1|te2] [--json]\n${EXTRACT_USAGE}`,
  description: `lora merge: apply PEFT LoRA adapters (a directory with adapter_config.json and adapter_model.safetensors, local or
hf://, https://, s3://) to their base model and write the result as a checkpoint directory, as PEFT's
merge_and_unload() followed by save_pretrained() does: W + (B @ A) * alpha / r in float32 (alpha / sqrt(r) with
use_rslora; r and alpha from rank_pattern / alpha_pattern where a key matches), rounded once to the weight's dtype;
fan_in_fan_out (Conv1D) and embedding adapters; DoRA's magnitude vectors (each row of W + dW scaled to its
magnitude); modules_to_save (the adapter's copy replaces the base's). Several adapters are merged one after the
other, each update times its --weights entry (default 1).

The base is read by ranges and written in blocks of rows: memory is the adapters plus a few blocks whatever the
model's size. OUTDIR gets the shards, their index, the base's config.json, generation_config.json and tokenizer
files, committed at once (killed at any point, OUTDIR holds its old files or the new ones). An adapter of another
PEFT type, or with an option that is not applied here (use_qalora, layer_replication, ...), is refused by name
(error[UnsupportedAdapter]).

Kohya / sd-scripts LoRA files (a .safetensors of lora_down, lora_up and alpha tensors, LoCon's convolutions too)
apply to a Stable Diffusion checkpoint as sd-scripts' merge_lora.py merges them: W + ratio * (up @ down) *
(alpha / dim) in float32, the LoRAs in turn (--weights are the ratios), rounded once to the weight's dtype. The base
is a single-file checkpoint in the original layout (SD 1.x, 2.x, SDXL: U-Net, CLIP and OpenCLIP text encoders) or a
diffusers U-Net or text encoder saved alone (the other components' modules are skipped and counted; --text-encoder
te2 for SDXL's second text encoder). A module that matches no tensor, and LoHa, LoKr, DoRA and the other LyCORIS
kinds, are refused by name.

${EXTRACT_DESCRIPTION}`,
  options: {
    weights: { type: "string", value: "W,...", help: "a weight per adapter, multiplying its update (default 1 each)" },
    dtype: {
      type: "string",
      value: "DTYPE",
      help: "f32, f16 or bf16 for the output's float tensors (default: as stored)",
    },
    "max-shard-size": { type: "string", value: "SIZE", help: 'largest shard, bytes or "5GB" (default 5GB)' },
    "text-encoder": {
      type: "string",
      value: "te1|te2",
      help: "Kohya LoRAs on a diffusers text encoder alone: which of SDXL's it is (default te1)",
    },
    json: { type: "boolean", help: "print a summary (files, tensors updated and replaced, bytes, seconds) as JSON" },
    fsync: { type: "boolean", help: "fsync each file and the directory before reporting success" },
    ...EXTRACT_OPTIONS,
  },
  async run({ values, positionals }, { io }) {
    const [action, ...rest] = positionals;
    const only = (names: readonly string[], other: string) => {
      const given = names.find((name) => (values as Record<string, unknown>)[name] !== undefined);
      if (given !== undefined) throw new UsageError(`--${given} is an option of lora ${other}`);
    };
    if (action === "extract") {
      only(["weights", "text-encoder", "max-shard-size"], "merge");
      return runExtract(io, values, rest);
    }
    if (action !== "merge") throw new UsageError("lora takes an action: merge or extract");
    only(Object.keys(EXTRACT_OPTIONS), "extract");
    if (rest.length < 3) throw new UsageError("lora merge takes BASE, one or more ADAPTER and OUTDIR");
    const base = rest[0]!;
    const outDir = rest.at(-1)!;
    const adapters = rest.slice(1, -1);
    const weights = values.weights === undefined ? adapters.map(() => 1) : values.weights.split(",").map(Number);
    if (weights.length !== adapters.length || weights.some((w) => !Number.isFinite(w))) {
      throw new UsageError(`--weights needs ${adapters.length} number(s), one per adapter`);
    }
    let dtype: "F32" | "F16" | "BF16" | undefined;
    if (values.dtype !== undefined) {
      dtype = DTYPES[values.dtype.toLowerCase() as keyof typeof DTYPES];
      if (dtype === undefined) throw new UsageError("--dtype must be f32, f16 or bf16");
    }
    const textEncoder = values["text-encoder"];
    if (textEncoder !== undefined && textEncoder !== "te1" && textEncoder !== "te2") {
      throw new UsageError("--text-encoder must be te1 or te2");
    }
    return runWithProgress(io, values.json, (onProgress) =>
      bakeLora(
        base,
        adapters.map((location, i) => ({ location, weight: weights[i]! })),
        outDir,
        { dtype, maxShardSize: values["max-shard-size"], fsync: values.fsync, onProgress, textEncoder },
      ),
    );
  },
});
