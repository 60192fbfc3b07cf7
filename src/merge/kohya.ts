/**
 * Kohya / sd-scripts LoRA files (`lora_up`, `lora_down`, `alpha`; LoCon's convolutions) applied to a Stable
 * Diffusion checkpoint, the pure parts: which base tensor each LoRA module names, and the low-rank updates to add,
 * as sd-scripts' `merge_lora.py` merges them: W + ratio · (up @ down) · (alpha / dim) in float32, every LoRA added to
 * the float32 weight in turn and the result rounded once (a 3×3 LoCon's `conv2d(down, up)` is the same product with
 * down's [in, kh, kw] flattened).
 *
 * Module names are the base model's module paths with `.` as `_`, under `lora_unet_`, `lora_te_` (SD 1.x/2.x text
 * encoder), `lora_te1_` and `lora_te2_` (SDXL's). sd-scripts names SD 1.x/2.x U-Net modules by diffusers' layout
 * (`down_blocks.1.attentions.0...`) and SDXL's by the original layout (`input_blocks.4.1...`), and text encoders by
 * transformers' CLIP (`text_model.encoder.layers.N.self_attn.q_proj`). The base is a single-file checkpoint in the
 * original (LDM) layout — `model.diffusion_model.*`, `cond_stage_model.*` or SDXL's `conditioner.embedders.*` — whose
 * U-Net names are mapped to diffusers' by the blocks' arithmetic (three input blocks per level: two resnets and a
 * downsampler; three output blocks per level), and whose OpenCLIP text encoders (SD 2.x, SDXL's second) keep q, k
 * and v in one `in_proj_weight` (the update lands on its rows); or a diffusers component (a U-Net or a text encoder
 * saved alone), whose names are the modules' own. Pure: runs in browsers.
 */
import { SafetensorError } from "../format/errors.js";
import type { LoraTensorPlan, LoraUpdate } from "./lora.js";
import type { CatalogTensor } from "./plan.js";

/** Where a module's update lands: a base tensor, all of its rows or `rows` = [first, count]. */
export interface KohyaTarget {
  readonly tensor: string;
  readonly rows: readonly [number, number] | null;
}

export interface KohyaAdapterInput {
  /** The LoRA file's tensors (names and shapes). */
  readonly tensors: ReadonlyMap<string, CatalogTensor>;
  /** The value of each module's `alpha` tensor (absent: alpha = dim). */
  readonly alphas: ReadonlyMap<string, number>;
  /** sd-scripts' ratio (default 1). */
  readonly weight: number;
}

const KOHYA_PART = /^(.+)\.(lora_down\.weight|lora_up\.weight|alpha)$/;
/** Keys of other LyCORIS algorithms and options, refused by name. */
const REFUSED_PARTS: readonly [RegExp, string][] = [
  [/\.hada_w[12]_[ab]$|\.hada_t[12]$/, "LoHa (hada_*)"],
  [/\.lokr_w[12](_[ab])?$|\.lokr_t2$/, "LoKr (lokr_*)"],
  [/\.lora_mid\.weight$/, "LoCon with Tucker decomposition (lora_mid)"],
  [/\.dora_scale$/, "DoRA (dora_scale)"],
  [/\.diff(_b)?$/, "full weight differences (diff)"],
  [/\.(oft_blocks|oft_diag|alpha_scale)$/, "OFT"],
  [/\.w_norm$|\.b_norm$/, "norm layers"],
];

/** Does a safetensors file's tensor list look like a Kohya / sd-scripts LoRA? */
export function isKohyaLora(names: Iterable<string>): boolean {
  for (const name of names) if (/^lora_(unet|te[12]?)_.+\.lora_(down|up)\.weight$/.test(name)) return true;
  return false;
}

const RESNET: Readonly<Record<string, string>> = {
  "in_layers.0": "norm1",
  "in_layers.2": "conv1",
  "out_layers.0": "norm2",
  "out_layers.3": "conv2",
  "emb_layers.1": "time_emb_proj",
  skip_connection: "conv_shortcut",
};

function resnet(prefix: string, rest: string): string | null {
  for (const [from, to] of Object.entries(RESNET)) {
    if (rest === from || rest.startsWith(`${from}.`)) return `${prefix}${to}${rest.slice(from.length)}`;
  }
  return null;
}

/**
 * An original-layout U-Net module path (under `model.diffusion_model.`) as diffusers names it, or null when it has
 * no diffusers twin. Levels have three input blocks (two resnets, then the downsampler) and three output blocks.
 */
export function ldmUnetToDiffusers(path: string): string | null {
  const seg = path.split(".");
  const n = Number(seg[1]);
  const k = Number(seg[2]);
  const rest = seg.slice(3).join(".");
  switch (seg[0]) {
    case "input_blocks": {
      if (n === 0) return k === 0 && rest === "" ? "conv_in" : null;
      const level = Math.floor((n - 1) / 3);
      const j = (n - 1) % 3;
      if (j === 2) return k === 0 && rest === "op" ? `down_blocks.${level}.downsamplers.0.conv` : null;
      if (k === 0) return resnet(`down_blocks.${level}.resnets.${j}.`, rest);
      return k === 1 && rest !== "" ? `down_blocks.${level}.attentions.${j}.${rest}` : null;
    }
    case "middle_block": {
      const tail = seg.slice(2).join(".");
      if (n === 0 || n === 2) return resnet(`mid_block.resnets.${n / 2}.`, tail);
      return n === 1 && tail !== "" ? `mid_block.attentions.0.${tail}` : null;
    }
    case "output_blocks": {
      const level = Math.floor(n / 3);
      const j = n % 3;
      if (k === 0) return resnet(`up_blocks.${level}.resnets.${j}.`, rest);
      if ((k === 1 || k === 2) && rest === "conv") return `up_blocks.${level}.upsamplers.0.conv`;
      return k === 1 && rest !== "" ? `up_blocks.${level}.attentions.${j}.${rest}` : null;
    }
    case "time_embed":
      return path === "time_embed.0"
        ? "time_embedding.linear_1"
        : path === "time_embed.2"
          ? "time_embedding.linear_2"
          : null;
    case "label_emb":
      return path === "label_emb.0.0"
        ? "add_embedding.linear_1"
        : path === "label_emb.0.2"
          ? "add_embedding.linear_2"
          : null;
    case "out":
      return path === "out.0" ? "conv_norm_out" : path === "out.2" ? "conv_out" : null;
    default:
      return null;
  }
}

const OPEN_CLIP: readonly [RegExp, string][] = [
  [/^transformer\.resblocks\.(\d+)\.attn\.out_proj$/, "text_model.encoder.layers.$1.self_attn.out_proj"],
  [/^transformer\.resblocks\.(\d+)\.mlp\.c_fc$/, "text_model.encoder.layers.$1.mlp.fc1"],
  [/^transformer\.resblocks\.(\d+)\.mlp\.c_proj$/, "text_model.encoder.layers.$1.mlp.fc2"],
];

const DIFFUSERS_UNET =
  /^(down_blocks|up_blocks|mid_block|conv_in|conv_out|conv_norm_out|time_embedding|add_embedding)\b/;

/**
 * For each LoRA module name a base checkpoint can take, where its update lands. `component` says which LoRA
 * prefixes a diffusers component takes (a U-Net: `lora_unet_`; a text encoder: `lora_te_` and `lora_te1_`, or
 * `lora_te2_` for a second text encoder).
 */
export function kohyaTargets(
  base: ReadonlyMap<string, CatalogTensor>,
  component: "te1" | "te2" = "te1",
): Map<string, KohyaTarget> {
  const out = new Map<string, KohyaTarget>();
  const add = (prefix: string, module: string, tensor: string, rows: [number, number] | null = null) => {
    out.set(`${prefix}${module.replaceAll(".", "_")}`, { tensor, rows });
  };
  const clip = (prefixes: readonly string[], path: string, tensor: string) => {
    const module = path.startsWith("text_model.") ? path : `text_model.${path}`;
    for (const prefix of prefixes) add(prefix, module, tensor);
  };
  const openClip = (prefix: string, path: string, tensor: string) => {
    const fused = /^transformer\.resblocks\.(\d+)\.attn\.in_proj_weight$/.exec(path);
    if (fused) {
      const rows = base.get(tensor)!.shape[0]! / 3;
      ["q_proj", "k_proj", "v_proj"].forEach((proj, i) => {
        add(prefix, `text_model.encoder.layers.${fused[1]}.self_attn.${proj}`, tensor, [i * rows, rows]);
      });
      return;
    }
    for (const [pattern, to] of OPEN_CLIP) {
      if (pattern.test(path)) add(prefix, path.replace(pattern, to), tensor);
    }
  };
  for (const name of base.keys()) {
    if (name.endsWith(".in_proj_weight")) {
      if (name.startsWith("cond_stage_model.model.")) openClip("lora_te_", name.slice(23), name);
      if (name.startsWith("conditioner.embedders.1.model.")) openClip("lora_te2_", name.slice(30), name);
      continue;
    }
    if (!name.endsWith(".weight")) continue;
    const path = name.slice(0, -".weight".length);
    if (path.startsWith("model.diffusion_model.")) {
      const ldm = path.slice(22);
      add("lora_unet_", ldm, name);
      const diffusers = ldmUnetToDiffusers(ldm);
      if (diffusers !== null) add("lora_unet_", diffusers, name);
    } else if (path.startsWith("cond_stage_model.transformer.")) {
      clip(["lora_te_"], path.slice(29), name);
    } else if (path.startsWith("cond_stage_model.model.")) {
      openClip("lora_te_", path.slice(23), name);
    } else if (path.startsWith("conditioner.embedders.0.transformer.")) {
      clip(["lora_te1_"], path.slice(36), name);
    } else if (path.startsWith("conditioner.embedders.1.model.")) {
      openClip("lora_te2_", path.slice(30), name);
    } else if (DIFFUSERS_UNET.test(path)) {
      add("lora_unet_", path, name);
    } else if (path.startsWith("text_model.")) {
      clip(component === "te2" ? ["lora_te2_"] : ["lora_te_", "lora_te1_"], path, name);
    }
  }
  return out;
}

/** Is this base a diffusers component (a U-Net or text encoder saved alone) rather than a whole checkpoint? */
export function isDiffusersComponent(base: ReadonlyMap<string, CatalogTensor>): boolean {
  for (const name of base.keys()) {
    if (/^(model\.diffusion_model|cond_stage_model|conditioner)\./.test(name)) return false;
  }
  return true;
}

function invalid(message: string): never {
  throw new SafetensorError("InvalidAdapter", message);
}

/**
 * Plan a bake of Kohya LoRA files into `base`: every base tensor with its updates. Every module must land on a base
 * tensor, except, when the base is one diffusers component, the modules of the other components (counted in
 * `skipped`).
 */
export function planKohya(
  base: ReadonlyMap<string, CatalogTensor>,
  adapters: readonly KohyaAdapterInput[],
  component: "te1" | "te2" = "te1",
): { plan: LoraTensorPlan[]; skipped: number } {
  const targets = kohyaTargets(base, component);
  const partial = isDiffusersComponent(base);
  // A diffusers component takes the modules of its own prefixes; the other components' are skipped.
  const prefixes = new Set([...targets.keys()].map(prefixOf));
  const updates = new Map<string, LoraUpdate[]>();
  let skipped = 0;
  adapters.forEach((adapter, index) => {
    const modules = new Map<string, Map<string, string>>();
    for (const key of adapter.tensors.keys()) {
      for (const [pattern, what] of REFUSED_PARTS) {
        if (pattern.test(key)) {
          throw new SafetensorError("UnsupportedAdapter", `${key}: ${what} is not supported (LoRA and LoCon only)`);
        }
      }
      const match = KOHYA_PART.exec(key);
      if (!match) invalid(`${key} is not a Kohya LoRA tensor (MODULE.lora_down.weight, .lora_up.weight, .alpha)`);
      const parts = modules.get(match[1]!) ?? new Map<string, string>();
      parts.set(match[2]!, key);
      modules.set(match[1]!, parts);
    }
    for (const [module, parts] of modules) {
      const down = parts.get("lora_down.weight");
      const up = parts.get("lora_up.weight");
      if (down === undefined || up === undefined)
        invalid(`module ${module}: lora_down and lora_up must both be present`);
      const target = targets.get(module);
      if (target === undefined) {
        if (partial && !prefixes.has(prefixOf(module))) {
          skipped++;
          continue;
        }
        invalid(`module ${module} matches no tensor of the base checkpoint`);
      }
      const info = base.get(target.tensor)!;
      const downShape = adapter.tensors.get(down)!.shape;
      const upShape = adapter.tensors.get(up)!.shape;
      const rank = downShape[0] ?? 0;
      const outRows = target.rows === null ? info.shape[0]! : target.rows[1];
      const cols = info.shape.slice(1).reduce((a, b) => a * b, 1);
      const fits =
        info.shape.length >= 2 &&
        rank > 0 &&
        downShape.slice(1).reduce((a, b) => a * b, 1) === cols &&
        upShape[0] === outRows &&
        upShape[1] === rank &&
        upShape.slice(2).every((d) => d === 1) &&
        (downShape.length === 2 || downShape.length === info.shape.length);
      if (!fits) {
        invalid(
          `module ${module}: down [${downShape}] and up [${upShape}] do not fit ${target.tensor} [${info.shape}]`,
        );
      }
      const alpha = adapter.alphas.get(module) ?? rank;
      const list = updates.get(target.tensor) ?? [];
      list.push({
        adapter: index,
        a: down,
        b: up,
        magnitude: null,
        // sd-scripts: scale = alpha / dim in float32, then (ratio · ΔW) · scale.
        scaling: Math.fround(Math.fround(alpha) / rank),
        ratio: adapter.weight,
        layout: "rows",
        embedding: false,
        rank,
        rows: target.rows,
      });
      updates.set(target.tensor, list);
    }
  });
  const plan = [...base].map(([name, info]) => ({
    name,
    dtype: info.dtype,
    shape: info.shape,
    updates: updates.get(name) ?? [],
    replacement: null,
  }));
  return { plan, skipped };
}

/** A module's component prefix: `lora_unet_`, `lora_te_`, `lora_te1_` or `lora_te2_`. */
function prefixOf(module: string): string {
  return /^lora_(unet|te[12]?)_/.exec(module)?.[0] ?? "";
}
