/** `safetensors to-gguf MODEL OUT.gguf --type T`: a Hugging Face model folder to a GGUF file for llama.cpp. */

import { SafetensorError } from "../format/errors.js";
import { toGguf } from "../gguf/node-convert.js";
import { OUTPUT_TYPES, type OutputType } from "../gguf/plan.js";
import { plural } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { progressCallback } from "./rewrite.js";

export const command = defineCommand({
  usage: "to-gguf MODEL OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1] [--json]",
  description: `Convert a model to GGUF as llama.cpp's convert_hf_to_gguf.py does: the same metadata (general.*, the
architecture's hyperparameters from config.json, the tokenizer with its pre-tokenizer name, special tokens and chat
template), the same tensor names, dimensions, types and bytes. MODEL is a directory (or its
model.safetensors.index.json) with config.json and tokenizer.json or tokenizer.model, or a remote folder: hf://ORG/REPO
[@REV], https://HOST/DIR/, s3://BUCKET/DIR/.
Architectures: LlamaForCausalLM (and rope scaling), MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
Gemma2ForCausalLM, Gemma3ForCausalLM. Anything else, and tokenizers the converter would not recognise, are refused
by name before anything is written (error[UnsupportedModel]).
--type (default f16): norms, biases and 1-D tensors stay F32, every other weight gets the type; a quantized type
whose rows are not whole 32-value blocks falls back to F16 for that tensor (as the converter does). q8_0, q4_0, q4_1,
q5_0 and q5_1 blocks are bit-exact with gguf-py's quantizer.
Tensors are streamed in chunks (memory stays small whatever the model's size), quantized on worker threads, and
written to a temporary file that replaces OUT only when complete. A progress bar is drawn on standard error when it
is a terminal.`,
  options: {
    type: { type: "string", value: "TYPE", help: "f32, f16 (default), bf16, q8_0, q4_0, q4_1, q5_0 or q5_1" },
    name: { type: "string", value: "NAME", help: "general.name instead of the one derived from MODEL" },
    "tokenizer-pre": {
      type: "string",
      value: "NAME",
      help: "llama.cpp pre-tokenizer name for a BPE tokenizer it does not recognise (e.g. llama-bpe)",
    },
    threads: { type: "string", value: "N", help: "quantizing worker threads (default: cores, up to 4; 0: none)" },
    json: { type: "boolean", help: 'print {"file","bytes","tensors","parameters","architecture","type","seconds"}' },
    fsync: { type: "boolean", help: "fsync the file and its directory before reporting success" },
  },
  async run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("to-gguf takes MODEL and OUT.gguf");
    const [model, out] = positionals as [string, string];
    const type = (values.type ?? "f16").toUpperCase() as OutputType;
    if (!OUTPUT_TYPES.includes(type)) {
      throw new UsageError(`--type must be one of ${OUTPUT_TYPES.map((t) => t.toLowerCase()).join(", ")}`);
    }
    let threads: number | undefined;
    if (values.threads !== undefined) {
      threads = Number(values.threads);
      if (!Number.isInteger(threads) || threads < 0 || threads > 64) throw new UsageError("--threads must be 0 to 64");
    }
    const started = performance.now();
    const progress = progressCallback();
    try {
      const result = await toGguf(model, out, {
        type,
        threads,
        name: values.name,
        tokenizerPre: values["tokenizer-pre"],
        fsync: values.fsync,
        onProgress: progress.onProgress,
      });
      progress.finish();
      const seconds = Math.round(performance.now() - started) / 1000;
      if (values.json) io.stdout(`${JSON.stringify({ ...result, type: result.type.toLowerCase(), seconds })}\n`);
      else {
        io.stdout(
          `${model} -> ${out}: ${result.architecture}, ${plural(result.tensors, "tensor")}, ${plural(result.parameters, "parameter")}, ${result.type.toLowerCase()}, ${plural(result.bytes, "byte")}\n`,
        );
      }
      return 0;
    } catch (error) {
      progress.finish();
      if (error instanceof SafetensorError && error.code === "InvalidOption") throw new UsageError(error.message);
      throw error;
    }
  },
});
