/**
 * Parameter counts as the Hugging Face Hub shows them on a model page, which understands packed quantized layouts
 * (the plain element count of `inspect` does not):
 *
 * - GPTQ / AWQ: `qweight` packs 32/bits weights per I32 element (3 bits: 10 per element, the floor); `qzeros`,
 *   `scales` and `g_idx` are bookkeeping, not parameters.
 * - bitsandbytes 4-bit: `weight` is U8 holding two weights per byte; `absmax`, `quant_map`, `nested_absmax`,
 *   `nested_quant_map` and `quant_state.bitsandbytes__*` are not parameters.
 * - MXFP4 (gpt-oss): `*_blocks` is U8 with two weights per byte; the U8 `*_scales` exponents are not parameters.
 * - compressed-tensors `pack-quantized` (also `nvfp4-`/`mxfp4-pack-quantized`): `weight_packed` in an integer
 *   container of B bits holds B/num_bits weights per element; `weight_shape`, `weight_g_idx` are not parameters.
 * - With any quantization: `weight_scale`, `weight_scale_inv`, `weight_scale_2`, `weight_global_scale`,
 *   `weight_zero_point`, `input_scale`, `input_global_scale`, `input_zero_point`, `zero_point` are not parameters.
 * - Always: F8_E8M0 tensors (block exponents only, never weights) and scalars (shape []) are not counted.
 *
 * The Hub takes the method from the repo's `config.json` (`quantization_config`). Without one (a single file, a file
 * dropped on the page) the layout is inferred from the tensors themselves (`detectQuantization`): the GPTQ/AWQ bit
 * width from the `scales`/`qzeros` widths (or `g_idx` against `qweight`), bitsandbytes from its quant-state tensors,
 * MXFP4 from `_blocks` beside `_scales`, compressed-tensors from `weight_packed` (4 bits unless the config says).
 *
 * Pure code: no `node:` imports, runs in browsers.
 */

/** The parts of a `quantization_config` (config.json) that decide how parameters are counted. */
export interface QuantizationConfig {
  readonly quant_method?: string;
  readonly bits?: number;
  readonly load_in_4bit?: boolean;
  readonly load_in_8bit?: boolean;
  readonly modules_to_not_convert?: readonly string[];
  /** compressed-tensors: the format family and the exclusion list (exact names or `re:` patterns). */
  readonly format?: string;
  readonly config_groups?: Readonly<
    Record<string, { format?: string; targets?: readonly string[]; weights?: { num_bits?: number } }>
  >;
  readonly ignore?: readonly string[];
}

export interface ParamTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
}

export interface Quantization {
  /** `gptq`, `awq`, `bitsandbytes`, `mxfp4`, `compressed-tensors`, `fp8`, or another method named by a config. */
  readonly method: string;
  /** Bits per weight when packed (GPTQ/AWQ, compressed-tensors, 4 for bitsandbytes 4-bit and MXFP4). */
  readonly bits: number | null;
  /** `config`: from a `quantization_config`; `inferred`: from the tensor names, dtypes and shapes. */
  readonly source: "config" | "inferred";
  readonly config: QuantizationConfig;
}

export interface ParameterCount {
  /** Sum of `perTensor`. */
  readonly total: number;
  /** Per dtype of the stored tensor (as the Hub's "Tensor type" list). */
  readonly byDtype: ReadonlyMap<string, number>;
  /** Counted parameters of each tensor: 0 for bookkeeping tensors, elements x packing factor for packed ones. */
  readonly perTensor: ReadonlyMap<string, number>;
  /** Why a tensor counts differently from its element count: `packed xF`, `not a parameter`, `scalar`. */
  readonly notes: ReadonlyMap<string, string>;
  readonly quantization: Quantization | null;
}

const AUXILIARY = new Set([
  "weight_scale",
  "weight_scale_inv",
  "weight_scale_2",
  "weight_global_scale",
  "weight_zero_point",
  "input_scale",
  "input_global_scale",
  "input_zero_point",
  "zero_point",
  "weight_shape",
  "weight_g_idx",
]);
const GPTQ_AUXILIARY = new Set(["qzeros", "g_idx", "scales"]);
const BNB_AUXILIARY = new Set(["absmax", "quant_map", "nested_absmax", "nested_quant_map"]);
const CONTAINER_BITS: Readonly<Record<string, number>> = { U8: 8, I8: 8, U16: 16, I16: 16, U32: 32, I32: 32 };
/** Sub-byte widths a format string can name (`nvfp4-pack-quantized`, `int4`...). */
const FORMAT_BITS: readonly (readonly [string, number])[] = [
  ["nvfp4", 4],
  ["mxfp4", 4],
  ["fp4", 4],
  ["int4", 4],
  ["uint4", 4],
  ["nf4", 4],
  ["int2", 2],
];

const lastSegment = (name: string) => name.slice(name.lastIndexOf(".") + 1);
const moduleOf = (name: string) => {
  const at = name.lastIndexOf(".weight");
  return at === -1 ? name : name.slice(0, at);
};

/** `*` wildcards only (config patterns are untrusted: no RegExp built from them). */
function wildcardMatch(pattern: string, text: string): boolean {
  const parts = pattern.split("*");
  if (parts.length === 1) return pattern === text;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (!text.startsWith(first) || !text.endsWith(last) || first.length + last.length > text.length) return false;
  let at = first.length;
  const end = text.length - last.length;
  for (const part of parts.slice(1, -1)) {
    const found = text.indexOf(part, at);
    if (found === -1 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

/**
 * A compressed-tensors target: an exact module name, or `re:` with the common regex subset (`.*`, `\.`, `^`, `$`;
 * matched from the start like Python's `re.match`); any other regex syntax never matches (class names such as
 * `Linear` cannot be resolved from tensor names either).
 */
function targetMatches(target: string, module: string): boolean {
  if (!target.startsWith("re:")) return target === module;
  let pattern = target.slice(3);
  if (pattern.startsWith("^")) pattern = pattern.slice(1);
  pattern = pattern.endsWith("$") ? pattern.slice(0, -1) : `${pattern}.*`;
  const glob = pattern.replaceAll(".*", "*").replaceAll("\\.", ".");
  return !/[\\+?()[\]{}|^$]/.test(glob) && wildcardMatch(glob, module);
}

function isQuantized(name: string, config: QuantizationConfig): boolean {
  if (config.ignore?.some((target) => targetMatches(target, moduleOf(name)))) return false;
  const keep = config.modules_to_not_convert;
  return !keep?.some((pattern) => (pattern.includes("*") ? wildcardMatch(pattern, name) : name.includes(pattern)));
}

function bitsOfFormat(format: string | undefined): number | undefined {
  const lower = format?.toLowerCase();
  return lower === undefined ? undefined : FORMAT_BITS.find(([word]) => lower.includes(word))?.[1];
}

function packing(dtype: string, bits: number | undefined): number {
  const container = CONTAINER_BITS[dtype];
  return container && bits && bits > 0 && bits < container ? container / bits : 1;
}

/** Bookkeeping tensor: never a parameter. */
function isAuxiliary(name: string, dtype: string, method: string, config: QuantizationConfig): boolean {
  const suffix = lastSegment(name);
  if (AUXILIARY.has(suffix)) return true;
  if (method === "mxfp4") return dtype === "U8" && suffix.endsWith("_scales");
  if (method === "bitsandbytes") return BNB_AUXILIARY.has(suffix) || suffix.startsWith("bitsandbytes__");
  if (method !== "gptq" && method !== "awq") return false;
  return isQuantized(name, config) && GPTQ_AUXILIARY.has(suffix);
}

function multiplier(name: string, dtype: string, method: string, config: QuantizationConfig): number {
  if (!isQuantized(name, config)) return 1;
  switch (method) {
    case "mxfp4":
      return dtype === "U8" && name.includes("_blocks") ? 2 : 1;
    case "gptq":
    case "awq":
      if (lastSegment(name) === "qweight")
        return Math.max(1, Math.floor(32 / (config.bits && config.bits > 0 ? config.bits : 4)));
      if (dtype === "U8" && config.bits === 4) return 2;
      if (dtype === "U8" && config.bits === 2) return 4;
      return 1;
    case "compressed-tensors": {
      if (!CONTAINER_BITS[dtype]) return 1;
      const groups = Object.values(config.config_groups ?? {});
      const module = moduleOf(name);
      const group = groups.find((g) => g.targets?.some((target) => targetMatches(target, module)));
      const format = (group?.format ?? config.format)?.toLowerCase();
      if (!format?.endsWith("pack-quantized")) return 1;
      const bits =
        group?.weights?.num_bits ??
        groups.find((g) => g.weights?.num_bits)?.weights?.num_bits ??
        bitsOfFormat(format) ??
        4;
      return packing(dtype, bits);
    }
    case "bitsandbytes":
      return config.load_in_4bit && dtype === "U8" ? 2 : 1;
    case "fp8":
      return 1;
    default:
      return dtype === "U8" && (config.load_in_4bit || config.bits === 4) ? 2 : 1;
  }
}

/** `quantization_config` of a parsed config.json (also under `text_config`), or null. */
export function quantizationFromConfig(config: unknown): QuantizationConfig | null {
  if (typeof config !== "object" || config === null) return null;
  const record = config as { quantization_config?: unknown; text_config?: { quantization_config?: unknown } };
  const found = record.quantization_config ?? record.text_config?.quantization_config;
  return typeof found === "object" && found !== null && !Array.isArray(found) ? (found as QuantizationConfig) : null;
}

/**
 * The quantization layout the tensors show, as the config that would describe it, or null for a plain checkpoint.
 * Only layouts with their tell-tale companions count: `qweight` with `scales`, a U8 `weight` with bitsandbytes quant
 * state, U8 `_blocks` with `_scales`, `weight_packed`, F8 weights with `weight_scale(_inv)`.
 */
export function detectQuantization(tensors: Iterable<ParamTensor>): QuantizationConfig | null {
  const byName = new Map<string, ParamTensor>();
  for (const tensor of tensors) byName.set(tensor.name, tensor);
  const lastDim = (t: ParamTensor | undefined) => (t && t.shape.length > 0 ? t.shape[t.shape.length - 1]! : 0);
  let gptq = false;
  let gptqBits: number | undefined;
  let awq = false;
  let fp8 = false;
  for (const [name, tensor] of byName) {
    const suffix = lastSegment(name);
    const base = name.slice(0, name.length - suffix.length);
    if (suffix === "qweight" && byName.has(`${base}scales`)) {
      gptq = true;
      const scales = byName.get(`${base}scales`);
      const qzeros = byName.get(`${base}qzeros`);
      const gIdx = byName.get(`${base}g_idx`);
      // scales [groups, out]; qzeros [groups, out*bits/32]; GPTQ qweight [in*bits/32, out], g_idx [in];
      // AWQ qweight [in, out*bits/32] (its last dim equals qzeros', not scales').
      let ratio = 0;
      if (qzeros && lastDim(qzeros) > 0) ratio = lastDim(scales) / lastDim(qzeros);
      else if (gIdx && tensor.shape.length === 2 && tensor.shape[0]! > 0) ratio = gIdx.shape[0]! / tensor.shape[0]!;
      if (ratio >= 1) gptqBits ??= Math.round(32 / ratio);
      if (tensor.shape.length === 2 && lastDim(tensor) !== lastDim(scales)) awq = awq || !gIdx;
    } else if (name.endsWith(".weight.absmax") || suffix.startsWith("bitsandbytes__")) {
      return { quant_method: "bitsandbytes", load_in_4bit: true };
    } else if (tensor.dtype === "U8" && suffix.endsWith("_blocks") && byName.has(`${name.slice(0, -7)}_scales`)) {
      return { quant_method: "mxfp4" };
    } else if (suffix === "weight_packed") {
      return { quant_method: "compressed-tensors", format: "pack-quantized" };
    } else if ((suffix === "weight_scale_inv" || suffix === "weight_scale") && tensor.dtype !== "U8") {
      const weight = byName.get(`${base}weight`);
      if (weight?.dtype.startsWith("F8_")) fp8 = true;
    }
  }
  if (gptq) return { quant_method: awq ? "awq" : "gptq", bits: gptqBits ?? 4 };
  return fp8 ? { quant_method: "fp8" } : null;
}

function bitsOf(method: string, config: QuantizationConfig): number | null {
  if (method === "gptq" || method === "awq") return config.bits && config.bits > 0 ? config.bits : 4;
  if (method === "mxfp4" || (method === "bitsandbytes" && config.load_in_4bit)) return 4;
  if (method === "bitsandbytes" && config.load_in_8bit) return 8;
  if (method === "compressed-tensors") {
    const group = Object.values(config.config_groups ?? {}).find((g) => g.weights?.num_bits);
    return group?.weights?.num_bits ?? bitsOfFormat(config.format) ?? 4;
  }
  return null;
}

export interface CountOptions {
  /** A `quantization_config` (from config.json); `undefined` infers the layout, `null` counts plain elements. */
  readonly quantization?: QuantizationConfig | null;
}

/** Parameter counts of a set of tensors (one file, or every shard's tensors together), as the Hub counts them. */
export function countParameters(tensors: Iterable<ParamTensor>, options: CountOptions = {}): ParameterCount {
  const list = [...tensors];
  const given = options.quantization;
  const config = given === undefined ? detectQuantization(list) : given;
  const method = config?.quant_method?.toLowerCase() ?? "";
  const perTensor = new Map<string, number>();
  const notes = new Map<string, string>();
  const byDtype = new Map<string, number>();
  let total = 0;
  for (const { name, dtype, shape } of list) {
    let count = 0;
    if (dtype === "F8_E8M0") notes.set(name, "not a parameter (block exponents)");
    else if (shape.length === 0) notes.set(name, "scalar");
    else if (config && isAuxiliary(name, dtype, method, config))
      notes.set(name, "not a parameter (quantization state)");
    else {
      const elements = shape.reduce((a, b) => a * b, 1);
      const factor = config ? multiplier(name, dtype, method, config) : 1;
      if (factor !== 1) notes.set(name, `packed x${Number(factor.toFixed(4))}`);
      count = Math.round(elements * factor);
    }
    perTensor.set(name, count);
    byDtype.set(dtype, (byDtype.get(dtype) ?? 0) + count);
    total += count;
  }
  const quantization: Quantization | null = config
    ? {
        method: method || "unknown",
        bits: bitsOf(method, config),
        source: given === undefined ? "inferred" : "config",
        config,
      }
    : null;
  return { total, byDtype, perTensor, notes, quantization };
}
