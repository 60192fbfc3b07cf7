/**
 * The architectures we convert, as llama.cpp's converter converts them: the GGUF architecture name, the
 * hyperparameters from config.json (`{arch}.*` keys, in the converter's order), the tensor names, the Q/K row
 * permutation (Llama and Mistral), Gemma's `norm + 1`, and which tokenizer each reads. Pure.
 */
import { SafetensorError } from "../format/errors.js";
import { SUPPORTED_ARCHITECTURES, type SupportedArchitecture } from "./constants.js";
import type { KvBuilder } from "./kv.js";

type Json = Record<string, unknown>;

export { SUPPORTED_ARCHITECTURES, type SupportedArchitecture };

export interface ArchSpec {
  readonly hf: SupportedArchitecture;
  /** general.architecture */
  readonly gguf: "llama" | "qwen2" | "qwen3" | "gemma2" | "gemma3";
  /** Llama's converter reorders Q and K rows (HF's rotate-half layout back to Meta's interleaved one). */
  readonly permuteQK: boolean;
  /** Gemma stores RMSNorm weights as w - 1; llama.cpp wants w. */
  readonly normPlusOne: boolean;
}

const SPECS: Readonly<Record<SupportedArchitecture, ArchSpec>> = {
  LlamaForCausalLM: { hf: "LlamaForCausalLM", gguf: "llama", permuteQK: true, normPlusOne: false },
  MistralForCausalLM: { hf: "MistralForCausalLM", gguf: "llama", permuteQK: true, normPlusOne: false },
  Qwen2ForCausalLM: { hf: "Qwen2ForCausalLM", gguf: "qwen2", permuteQK: false, normPlusOne: false },
  Qwen3ForCausalLM: { hf: "Qwen3ForCausalLM", gguf: "qwen3", permuteQK: false, normPlusOne: false },
  Gemma2ForCausalLM: { hf: "Gemma2ForCausalLM", gguf: "gemma2", permuteQK: false, normPlusOne: true },
  Gemma3ForCausalLM: { hf: "Gemma3ForCausalLM", gguf: "gemma3", permuteQK: false, normPlusOne: true },
};

function refuse(message: string): SafetensorError {
  return new SafetensorError("UnsupportedModel", message);
}

/** The architecture config.json names, or a refusal that names it. */
export function archOf(config: Json): ArchSpec {
  const archs = config.architectures;
  const name = Array.isArray(archs) && typeof archs[0] === "string" ? archs[0] : undefined;
  if (name === undefined) throw refuse('config.json names no architecture (an "architectures" list is needed)');
  const spec = (SPECS as Record<string, ArchSpec>)[name];
  if (spec === undefined) {
    throw refuse(`architecture ${name} is not supported (supported: ${SUPPORTED_ARCHITECTURES.join(", ")})`);
  }
  if (config.quantization_config !== undefined) {
    throw refuse("pre-quantized checkpoints (config.json has quantization_config) are not supported");
  }
  return spec;
}

/** config.json with a `text_config` merged into the top level, as the converter reads hyperparameters. */
export function hyperparameters(config: Json): Json {
  const text = config.text_config;
  return text !== null && typeof text === "object" ? { ...config, ...(text as Json) } : { ...config };
}

function find(hp: Json, keys: readonly string[]): unknown {
  for (const k of keys) if (k in hp) return hp[k];
  return undefined;
}

function num(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isFinite(value)) throw refuse(`config.json: ${what} must be a number`);
  return value;
}

export function blockCount(hp: Json): number {
  return num(find(hp, ["n_layers", "num_hidden_layers", "n_layer", "num_layers"]), "num_hidden_layers");
}

/** The rope parameters as the converter assembles them (rope_parameters or rope_scaling, with rope_theta mirrored). */
export function ropeParameters(hp: Json): Json {
  const base = (hp.rope_parameters ?? hp.rope_scaling) as Json | null | undefined;
  const rope: Json = base ? { ...base } : {};
  const theta = find(hp, [
    "global_rope_theta",
    "rope_global_theta",
    "rope_theta_global",
    "rope_theta",
    "rotary_emb_base",
  ]);
  const localTheta = find(hp, [
    "local_rope_theta",
    "rope_local_theta",
    "rope_theta_local",
    "swa_rope_theta",
    "rope_local_base_freq",
  ]);
  const partial = find(hp, ["partial_rotary_factor", "rope_pct", "rope_percent"]);
  const origMax = find(hp, ["original_max_position_embeddings"]);
  if (!("full_attention" in rope) && !("sliding_attention" in rope)) {
    if (localTheta !== undefined && localTheta !== null) rope.sliding_attention = { rope_theta: localTheta };
    if (!("rope_theta" in rope) && theta !== undefined && theta !== null) rope.rope_theta = theta;
    if (!("rope_type" in rope) && rope.type !== undefined && rope.type !== null) rope.rope_type = rope.type;
    if (!("partial_rotary_factor" in rope) && partial !== undefined && partial !== null)
      rope.partial_rotary_factor = partial;
    if (!("original_max_position_embeddings" in rope) && origMax !== undefined && origMax !== null) {
      rope.original_max_position_embeddings = origMax;
    }
  }
  return rope;
}

const present = (v: unknown) => v !== undefined && v !== null;

/** TextModel.set_gguf_parameters: the generic hyperparameters, in the converter's order. */
function textParameters(kv: KvBuilder, arch: string, hp: Json, fileType: number): void {
  const k = (s: string) => `${arch}.${s}`;
  kv.u32(k("block_count"), blockCount(hp));
  const ctx = find(hp, [
    "max_position_embeddings",
    "n_ctx",
    "n_positions",
    "max_length",
    "max_sequence_length",
    "model_max_length",
  ]);
  if (present(ctx)) kv.u32(k("context_length"), num(ctx, "max_position_embeddings"));
  const embd = find(hp, ["hidden_size", "n_embd", "dim"]);
  if (present(embd)) kv.u32(k("embedding_length"), num(embd, "hidden_size"));
  const ff = find(hp, [
    "prefix_dense_intermediate_size",
    "dense_intermediate_size",
    "intermediate_size",
    "n_inner",
    "hidden_dim",
  ]);
  if (present(ff)) kv.u32(k("feed_forward_length"), num(ff, "intermediate_size"));
  const heads = find(hp, ["num_attention_heads", "n_head", "n_heads"]);
  if (present(heads)) kv.u32(k("attention.head_count"), num(heads, "num_attention_heads"));
  const kvHeads = find(hp, ["num_key_value_heads", "n_kv_heads"]);
  if (present(kvHeads)) kv.u32(k("attention.head_count_kv"), num(kvHeads, "num_key_value_heads"));
  if (hp.is_causal === false) kv.bool(k("attention.causal"), false);
  const ropeAll = ropeParameters(hp);
  const rope = (ropeAll.full_attention as Json | undefined) ?? ropeAll;
  const ropeType = rope.rope_type;
  if (present(ropeType)) {
    const factor = rope.factor;
    if (ropeType === "linear" && present(factor)) {
      kv.str(k("rope.scaling.type"), "linear");
      kv.f32(k("rope.scaling.factor"), num(factor, "rope factor"));
    } else if (ropeType === "yarn" && present(factor)) {
      kv.str(k("rope.scaling.type"), "yarn");
      kv.f32(k("rope.scaling.factor"), num(factor, "rope factor"));
      kv.u32(
        k("rope.scaling.original_context_length"),
        num(rope.original_max_position_embeddings, "original_max_position_embeddings"),
      );
      if (present(rope.extrapolation_factor))
        kv.f32(k("rope.scaling.yarn_ext_factor"), num(rope.extrapolation_factor, "extrapolation_factor"));
      const attn = rope.attention_factor ?? rope.attn_factor;
      if (present(attn)) kv.f32(k("rope.scaling.yarn_attn_factor"), num(attn, "attention_factor"));
      if (present(rope.beta_fast)) kv.f32(k("rope.scaling.yarn_beta_fast"), num(rope.beta_fast, "beta_fast"));
      if (present(rope.beta_slow)) kv.f32(k("rope.scaling.yarn_beta_slow"), num(rope.beta_slow, "beta_slow"));
    } else if (ropeType === "su" || ropeType === "longrope") {
      kv.str(k("rope.scaling.type"), "longrope");
    }
    // "llama3" is written as the rope_freqs tensor; "default" and "dynamic" write nothing.
  }
  if (present(rope.rope_theta)) kv.f32(k("rope.freq_base"), num(rope.rope_theta, "rope_theta"));
  const sliding = ropeAll.sliding_attention as Json | undefined;
  if (present(sliding?.rope_theta)) kv.f32(k("rope.freq_base_swa"), num(sliding!.rope_theta, "local rope_theta"));
  const rms = find(hp, ["rms_norm_eps", "norm_eps"]);
  if (present(rms)) kv.f32(k("attention.layer_norm_rms_epsilon"), num(rms, "rms_norm_eps"));
  const ln = find(hp, ["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]);
  if (present(ln)) kv.f32(k("attention.layer_norm_epsilon"), num(ln, "layer_norm_eps"));
  const experts = find(hp, ["num_local_experts", "num_experts", "n_routed_experts"]);
  if (present(experts)) throw refuse("mixture-of-experts models are not supported");
  if (present(hp.head_dim)) {
    kv.u32(k("attention.key_length"), num(hp.head_dim, "head_dim"));
    kv.u32(k("attention.value_length"), num(hp.head_dim, "head_dim"));
  }
  kv.u32("general.file_type", fileType);
}

/** The architecture's hyperparameter keys, as its converter class writes them. */
export function writeParameters(kv: KvBuilder, spec: ArchSpec, hp: Json, fileType: number): void {
  const arch = spec.gguf;
  const k = (s: string) => `${arch}.${s}`;
  switch (spec.gguf) {
    case "llama": {
      textParameters(kv, arch, hp, fileType);
      kv.u32(k("vocab_size"), num(hp.vocab_size, "vocab_size"));
      const heads = num(hp.num_attention_heads, "num_attention_heads");
      const ropeDim = present(hp.head_dim)
        ? num(hp.head_dim, "head_dim")
        : Math.floor(num(hp.hidden_size, "hidden_size") / heads);
      kv.u32(k("rope.dimension_count"), ropeDim);
      return;
    }
    case "qwen2":
    case "qwen3":
      textParameters(kv, arch, hp, fileType);
      return;
    case "gemma2": {
      kv.u32(k("context_length"), num(hp.max_position_embeddings, "max_position_embeddings"));
      kv.u32(k("embedding_length"), num(hp.hidden_size, "hidden_size"));
      kv.u32(k("block_count"), blockCount(hp));
      kv.u32(k("feed_forward_length"), num(hp.intermediate_size, "intermediate_size"));
      kv.u32(k("attention.head_count"), num(hp.num_attention_heads, "num_attention_heads"));
      kv.u32(
        k("attention.head_count_kv"),
        num("num_key_value_heads" in hp ? hp.num_key_value_heads : hp.num_attention_heads, "num_key_value_heads"),
      );
      kv.f32(k("attention.layer_norm_rms_epsilon"), num(hp.rms_norm_eps, "rms_norm_eps"));
      kv.u32(k("attention.key_length"), num(hp.head_dim, "head_dim"));
      kv.u32(k("attention.value_length"), num(hp.head_dim, "head_dim"));
      kv.u32("general.file_type", fileType);
      kv.f32(k("attn_logit_softcapping"), num(hp.attn_logit_softcapping, "attn_logit_softcapping"));
      kv.f32(k("final_logit_softcapping"), num(hp.final_logit_softcapping, "final_logit_softcapping"));
      kv.u32(k("attention.sliding_window"), num(hp.sliding_window, "sliding_window"));
      return;
    }
    case "gemma3": {
      textParameters(kv, arch, hp, fileType);
      kv.u32(k("context_length"), num(hp.max_position_embeddings ?? 131072, "max_position_embeddings"));
      kv.u32(k("attention.head_count"), num(hp.num_attention_heads ?? 8, "num_attention_heads"));
      kv.f32(k("attention.layer_norm_rms_epsilon"), num(hp.rms_norm_eps ?? 1e-6, "rms_norm_eps"));
      kv.u32(k("attention.key_length"), num(hp.head_dim ?? 256, "head_dim"));
      kv.u32(k("attention.value_length"), num(hp.head_dim ?? 256, "head_dim"));
      const rope = ropeParameters(hp);
      const full = (rope.full_attention as Json | undefined) ?? rope;
      kv.f32(k("rope.freq_base"), num(full.rope_theta ?? 1_000_000, "rope_theta"));
      if (present(hp.attn_logit_softcapping)) throw refuse("Gemma3 with attn_logit_softcapping is not supported");
      if (present(hp.final_logit_softcapping) && hp.final_logit_softcapping !== 0) {
        kv.f32(k("final_logit_softcapping"), num(hp.final_logit_softcapping, "final_logit_softcapping"));
      }
      if (hp.sliding_window_pattern !== 1)
        kv.u32(k("attention.sliding_window"), num(hp.sliding_window, "sliding_window"));
      kv.u32(k("attention.head_count_kv"), num(hp.num_key_value_heads ?? 4, "num_key_value_heads"));
      return;
    }
  }
}

const LAYER_NAMES: Readonly<Record<string, string>> = {
  "input_layernorm.weight": "attn_norm.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.q_proj.bias": "attn_q.bias",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.k_proj.bias": "attn_k.bias",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.v_proj.bias": "attn_v.bias",
  "self_attn.o_proj.weight": "attn_output.weight",
  "self_attn.o_proj.bias": "attn_output.bias",
  "mlp.gate_proj.weight": "ffn_gate.weight",
  "mlp.up_proj.weight": "ffn_up.weight",
  "mlp.down_proj.weight": "ffn_down.weight",
  "self_attn.q_norm.weight": "attn_q_norm.weight",
  "self_attn.k_norm.weight": "attn_k_norm.weight",
};

const GEMMA_LAYER_NAMES: Readonly<Record<string, string>> = {
  "post_attention_layernorm.weight": "post_attention_norm.weight",
  "pre_feedforward_layernorm.weight": "ffn_norm.weight",
  "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
};

/**
 * A checkpoint tensor name as the converter sees it: null for tensors it skips (vision towers, rotary caches,
 * Gemma2's lm_head), else the name with `language_model.` / `text_model.` taken out.
 */
export function filterName(spec: ArchSpec, name: string): string | null {
  if (
    /^(mlp|vit\.|vpm\.|siglip2\.|conformer\.|merger\.|resampler\.|sound_encoder\.|sound_projection\.|speech_embeddings\.)/.test(
      name,
    ) ||
    /visual\.|vision\.|audio\.|talker\.|vision_|audio_|token2wav\.|code2wav\.|projector\.|pre_mm_projector_norm|image_newline|view_seperator|patch_embed|patch_embedding|patch_merger\.|patch_merge_mlp\.|model\.connector\./.test(
      name,
    )
  ) {
    return null;
  }
  if (spec.hf === "Gemma2ForCausalLM" && name === "lm_head.weight") return null;
  let n = name.replaceAll("language_model.", "");
  if (spec.gguf === "llama") n = n.replaceAll("text_model.", "");
  if (n.endsWith(".attention.masked_bias") || n.endsWith(".attention.bias") || n.endsWith(".rotary_emb.inv_freq")) {
    return null;
  }
  return n;
}

/** llama.cpp's tensor name for a (filtered) checkpoint name; a name it cannot map is refused by name. */
export function ggufTensorName(spec: ArchSpec, name: string, blocks: number): string {
  if (name === "model.embed_tokens.weight") return "token_embd.weight";
  if (name === "model.norm.weight") return "output_norm.weight";
  if (name === "lm_head.weight") return "output.weight";
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(name);
  if (m !== null) {
    const bid = Number(m[1]);
    const rest = m[2]!;
    const gemma = spec.gguf === "gemma2" || spec.gguf === "gemma3";
    const mapped =
      (gemma ? GEMMA_LAYER_NAMES[rest] : undefined) ??
      (rest === "post_attention_layernorm.weight" ? "ffn_norm.weight" : LAYER_NAMES[rest]);
    if (mapped !== undefined && bid < blocks) {
      if (spec.gguf === "qwen2" && rest.includes("_norm.")) throw refuse(`cannot map tensor ${JSON.stringify(name)}`);
      return `blk.${bid}.${mapped}`;
    }
  }
  throw refuse(`cannot map tensor ${JSON.stringify(name)} for ${spec.hf}`);
}

/** The Q/K permutation's head count for a (filtered) checkpoint name, or 0 when the tensor is not permuted. */
export function permuteHeads(spec: ArchSpec, name: string, hp: Json): number {
  if (!spec.permuteQK) return 0;
  const heads = num(find(hp, ["n_heads", "num_attention_heads"]), "num_attention_heads");
  const kvHeads = num(find(hp, ["n_kv_heads", "num_key_value_heads"]), "num_key_value_heads");
  if (name.endsWith("q_proj.weight") || name.endsWith("q_proj.bias")) return heads;
  if (name.endsWith("k_proj.weight") || name.endsWith("k_proj.bias")) return kvHeads !== heads ? kvHeads : heads;
  return 0;
}

/**
 * Llama 3's rope scaling as llama.cpp stores it: a `rope_freqs.weight` tensor of per-frequency factors, computed
 * in float32 as the converter computes it. Null when the model has no llama3 rope scaling.
 */
export function llama3RopeFactors(spec: ArchSpec, hp: Json): Float32Array | null {
  if (spec.gguf !== "llama") return null;
  const all = ropeParameters(hp);
  const rope = (all.full_attention as Json | undefined) ?? all;
  if (Object.keys(rope).length === 0 || String(rope.rope_type ?? "").toLowerCase() !== "llama3") return null;
  const f = Math.fround;
  const base = num(rope.rope_theta ?? 10000, "rope_theta");
  const dim = present(hp.head_dim)
    ? num(hp.head_dim, "head_dim")
    : Math.floor(num(hp.hidden_size, "hidden_size") / num(hp.num_attention_heads, "num_attention_heads"));
  const factor = num(rope.factor ?? 8, "factor");
  const low = num(rope.low_freq_factor ?? 1, "low_freq_factor");
  const high = num(rope.high_freq_factor ?? 4, "high_freq_factor");
  const old = num(rope.original_max_position_embeddings ?? 8192, "original_max_position_embeddings");
  const lowWavelen = old / low;
  const highWavelen = old / high;
  const out = new Float32Array(Math.ceil(dim / 2));
  for (let i = 0; i < out.length; i++) {
    const freq = f(1 / f(base ** f((2 * i) / dim)));
    // 2π as a float32 first: torch divides the Python float by a float32 tensor in float32 (with 2π in double,
    // 1 of 8 factors of a held-out model was 7 ulps off the converter's).
    const wavelen = f(f(2 * Math.PI) / freq);
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = factor;
    else {
      const smooth = f(f(f(old / wavelen) - low) / (high - low));
      out[i] = f(1 / f(f(f(1 - smooth) / factor) + smooth));
    }
  }
  return out;
}
