/**
 * GGUF back to a Hugging Face checkpoint, as transformers' GGUF loading does it: config.json from the GGUF's
 * hyperparameters, tensor names mapped back, Llama's Q/K permutation undone, Gemma's `norm + 1` undone, every
 * tensor dequantized to float32 (then F32, F16 or BF16). Pure: the plan; node-from-gguf.ts streams the bytes.
 */
import { SafetensorError } from "../format/errors.js";
import type { GgufHeader, GgufTensorInfo } from "./reader.js";

type Json = Record<string, unknown>;

const ARCHS: Readonly<Record<string, { architecture: string; modelType: string }>> = {
  llama: { architecture: "LlamaForCausalLM", modelType: "llama" },
  qwen2: { architecture: "Qwen2ForCausalLM", modelType: "qwen2" },
  qwen3: { architecture: "Qwen3ForCausalLM", modelType: "qwen3" },
  gemma2: { architecture: "Gemma2ForCausalLM", modelType: "gemma2" },
  gemma3: { architecture: "Gemma3ForCausalLM", modelType: "gemma3_text" },
};

const LAYER_BACK: Readonly<Record<string, string>> = {
  "attn_norm.weight": "input_layernorm.weight",
  "attn_q.weight": "self_attn.q_proj.weight",
  "attn_q.bias": "self_attn.q_proj.bias",
  "attn_k.weight": "self_attn.k_proj.weight",
  "attn_k.bias": "self_attn.k_proj.bias",
  "attn_v.weight": "self_attn.v_proj.weight",
  "attn_v.bias": "self_attn.v_proj.bias",
  "attn_output.weight": "self_attn.o_proj.weight",
  "attn_output.bias": "self_attn.o_proj.bias",
  "ffn_gate.weight": "mlp.gate_proj.weight",
  "ffn_up.weight": "mlp.up_proj.weight",
  "ffn_down.weight": "mlp.down_proj.weight",
  "attn_q_norm.weight": "self_attn.q_norm.weight",
  "attn_k_norm.weight": "self_attn.k_norm.weight",
};

const GEMMA_BACK: Readonly<Record<string, string>> = {
  "post_attention_norm.weight": "post_attention_layernorm.weight",
  "ffn_norm.weight": "pre_feedforward_layernorm.weight",
  "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
};

export interface UnconvertJob {
  readonly info: GgufTensorInfo;
  /** The checkpoint name. */
  readonly name: string;
  /** torch order. */
  readonly shape: number[];
  /** Undo the Q/K permutation with this head count (0: none). */
  readonly permuteHeads: number;
  /** Gemma: subtract 1. */
  readonly minusOne: boolean;
}

export interface UnconvertPlan {
  readonly config: Json;
  readonly jobs: readonly UnconvertJob[];
  /** GGUF tensors with no checkpoint counterpart (rope_freqs), left out. */
  readonly skipped: readonly string[];
}

function scalar(h: GgufHeader, key: string): unknown {
  const v = h.metadata.get(key);
  if (v === undefined || v.type === "ARRAY") return undefined;
  return typeof v.value === "bigint" ? Number(v.value) : v.value;
}

function refuse(message: string): SafetensorError {
  return new SafetensorError("UnsupportedModel", message);
}

export function planUnconvert(h: GgufHeader): UnconvertPlan {
  const arch = scalar(h, "general.architecture");
  const target = typeof arch === "string" ? ARCHS[arch] : undefined;
  if (target === undefined) {
    throw refuse(`GGUF architecture ${JSON.stringify(arch)} is not supported (${Object.keys(ARCHS).join(", ")})`);
  }
  const a = arch as string;
  const k = (s: string) => scalar(h, `${a}.${s}`);
  const config: Json = { architectures: [target.architecture], model_type: target.modelType };
  const put = (field: string, value: unknown) => {
    if (value !== undefined) config[field] = value;
  };
  put("max_position_embeddings", k("context_length"));
  put("num_hidden_layers", k("block_count"));
  put("intermediate_size", k("feed_forward_length"));
  put("hidden_size", k("embedding_length"));
  put("rope_theta", k("rope.freq_base"));
  put("num_attention_heads", k("attention.head_count"));
  put("num_key_value_heads", k("attention.head_count_kv"));
  put("rms_norm_eps", k("attention.layer_norm_rms_epsilon"));
  put("head_dim", a === "llama" ? k("rope.dimension_count") : k("attention.key_length"));
  put("sliding_window", k("attention.sliding_window"));
  put("attn_logit_softcapping", k("attn_logit_softcapping"));
  put("final_logit_softcapping", k("final_logit_softcapping"));
  const tokens = h.metadata.get("tokenizer.ggml.tokens");
  const vocab = k("vocab_size") ?? (tokens?.type === "ARRAY" ? tokens.value.items.length : undefined);
  put("vocab_size", vocab);
  put("bos_token_id", scalar(h, "tokenizer.ggml.bos_token_id"));
  put("eos_token_id", scalar(h, "tokenizer.ggml.eos_token_id"));
  put("pad_token_id", scalar(h, "tokenizer.ggml.padding_token_id"));
  const scaling = k("rope.scaling.type");
  if (scaling === "linear" || scaling === "yarn") {
    const rope: Json = { rope_type: scaling, factor: k("rope.scaling.factor") };
    if (scaling === "yarn") rope.original_max_position_embeddings = k("rope.scaling.original_context_length");
    config.rope_scaling = rope;
  }
  const names = new Set(h.tensors.map((t) => t.name));
  config.tie_word_embeddings = !names.has("output.weight");
  const heads = Number(k("attention.head_count") ?? 0);
  const kvHeads = Number(k("attention.head_count_kv") ?? heads);
  const gemma = a === "gemma2" || a === "gemma3";
  const jobs: UnconvertJob[] = [];
  const skipped: string[] = [];
  for (const info of h.tensors) {
    const shape = [...info.dims].reverse();
    let name: string | undefined;
    if (info.name === "token_embd.weight") name = "model.embed_tokens.weight";
    else if (info.name === "output_norm.weight") name = "model.norm.weight";
    else if (info.name === "output.weight") name = "lm_head.weight";
    else {
      const m = /^blk\.(\d+)\.(.+)$/.exec(info.name);
      if (m !== null) {
        const back =
          (gemma ? GEMMA_BACK[m[2]!] : undefined) ??
          (m[2] === "ffn_norm.weight" ? "post_attention_layernorm.weight" : LAYER_BACK[m[2]!]);
        if (back !== undefined) name = `model.layers.${m[1]}.${back}`;
      }
    }
    if (name === undefined) {
      if (info.name === "rope_freqs.weight") {
        skipped.push(info.name);
        continue;
      }
      throw refuse(`GGUF tensor ${JSON.stringify(info.name)} has no ${target.architecture} counterpart`);
    }
    let permuteHeads = 0;
    if (a === "llama" && heads > 0) {
      if (/\.attn_q\./.test(info.name)) permuteHeads = heads;
      else if (/\.attn_k\./.test(info.name)) permuteHeads = kvHeads !== heads ? kvHeads : heads;
    }
    jobs.push({ info, name, shape, permuteHeads, minusOne: gemma && info.name.endsWith("norm.weight") });
  }
  return { config, jobs, skipped };
}

/**
 * Undo the converter's row permutation: per head of `d` rows, checkpoint row `k * d/2 + j` is GGUF row `2j + k`
 * (transformers' reverse_permute_weights).
 */
export function unpermuteRows(
  src: Uint8Array,
  out: Uint8Array,
  rows: number,
  rowBytes: number,
  headRows: number,
): void {
  const half = headRows / 2;
  for (let h = 0; h < rows; h += headRows) {
    for (let j = 0; j < half; j++) {
      for (let k = 0; k < 2; k++) {
        const from = (h + 2 * j + k) * rowBytes;
        const to = (h + k * half + j) * rowBytes;
        out.set(src.subarray(from, from + rowBytes), to);
      }
    }
  }
}
