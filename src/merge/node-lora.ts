/**
 * `bakeLora` (Node): PEFT LoRA adapters applied to their base model, streamed into a new checkpoint. Adapters are
 * small and read whole; the base is read by ranges, row blocks of each updated weight at a time (DoRA's norms are per
 * row), so memory stays at the adapters plus a few blocks whatever the model's size. Tensors no adapter touches are
 * copied as they are.
 */
import { fromFloat32, toFloat32 } from "../codecs/index.js";
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { throwIfAborted } from "../io/async-source.js";
import { type NodeOpenOptions, openAsync } from "../read/node-async.js";
import { elementBytes, elementCount } from "./execute.js";
import { preferLoraKernels } from "./fast-kernels.js";
import { isKohyaLora, planKohya } from "./kohya.js";
import {
  type AdapterInput,
  type BakeBlock,
  bakeBlock,
  biasFactors,
  factorRows,
  type LoraTensorPlan,
  lowRankFactors,
  parseAdapterConfig,
  planLora,
} from "./lora.js";
import { nativeLoraKernels } from "./node-native.js";
import { type OutputTensorSpec, outputBytes, sideFilesOf, TOKENIZER_FILES, writeCheckpoint } from "./node-output.js";
import { ChunkPool, Flight } from "./node-pool.js";
import { fileIn, type ModelSource, openModel, readSideFileAt } from "./node-source.js";

export interface AdapterSpec {
  /**
   * A PEFT adapter: a directory (local or remote) with adapter_config.json and adapter_model.safetensors; or a
   * Kohya / sd-scripts LoRA: a `.safetensors` file of `lora_up` / `lora_down` / `alpha` tensors.
   */
  location: string;
  /** Multiplies the adapter's update (default 1; sd-scripts' ratio for a Kohya LoRA). */
  weight?: number;
}

export interface BakeProgress {
  tensorsDone: number;
  tensorsTotal: number;
  bytesWritten: number;
  bytesTotal: number;
}

export interface BakeLoraOptions extends NodeOpenOptions {
  /** The output's float dtype (default: each tensor's own, as `save_pretrained` of a model loaded as stored). */
  dtype?: "F32" | "F16" | "BF16";
  maxShardSize?: number | string;
  fsync?: boolean;
  /** Elements per block of rows (default 1 Mi). */
  chunkElements?: number;
  /** Threads baking blocks (default: the CPUs, at most 4; 1 bakes in the calling thread). */
  threads?: number;
  onProgress?: (progress: BakeProgress) => void;
  /**
   * Kohya LoRAs on a diffusers text encoder saved alone: which of SDXL's text encoders it is (`te2` takes the
   * `lora_te2_` modules; default `te1`: `lora_te_` and `lora_te1_`).
   */
  textEncoder?: "te1" | "te2";
}

export interface BakeSummary {
  /** "peft" or "kohya". */
  format: "peft" | "kohya";
  files: string[];
  tensors: number;
  /** Base tensors changed by an update, and replaced by an adapter's copy. */
  updated: number;
  replaced: number;
  /** Kohya modules of another component than the base (a diffusers U-Net or text encoder saved alone): not applied. */
  skipped: number;
  bytesRead: number;
  bytesWritten: number;
}

interface OpenAdapter {
  input: AdapterInput;
  tensors: Map<string, Float32Array>;
  /** A Kohya LoRA's alpha values by module (null for a PEFT adapter). */
  kohyaAlphas: Map<string, number> | null;
}

/** A Kohya LoRA file: its tensors as float32 (small: the factors), alphas by module. */
async function openKohya(spec: AdapterSpec, options: NodeOpenOptions): Promise<OpenAdapter | null> {
  if (!/\.safetensors$/i.test(spec.location)) return null;
  const file = await openAsync(spec.location, options);
  try {
    if (!isKohyaLora(file.keys())) return null;
    const loaded = await file.getTensors(undefined, { signal: options.signal });
    const tensors = new Map<string, Float32Array>();
    const catalog = new Map<string, { dtype: Dtype; shape: readonly number[] }>();
    const alphas = new Map<string, number>();
    for (const [name, tensor] of loaded) {
      catalog.set(name, { dtype: tensor.dtype, shape: tensor.shape });
      const values = toFloat32(tensor.dtype, tensor.data, { count: tensor.numel }).slice();
      if (name.endsWith(".alpha")) {
        if (values.length !== 1) {
          throw new SafetensorError("InvalidAdapter", `${name} must hold one number, not [${tensor.shape}]`);
        }
        alphas.set(name.slice(0, -".alpha".length), values[0]!);
      }
      tensors.set(name, values);
    }
    const config = { r: 1, alpha: 1, rslora: false, fanInFanOut: false, dora: false, loraBias: false };
    const input = { config: { ...config, rankPattern: new Map(), alphaPattern: new Map() }, tensors: catalog };
    return { input: { ...input, weight: spec.weight ?? 1 }, tensors, kohyaAlphas: alphas };
  } finally {
    await file.close();
  }
}

async function openAdapter(spec: AdapterSpec, options: NodeOpenOptions): Promise<OpenAdapter> {
  const kohya = await openKohya(spec, options);
  if (kohya !== null) return kohya;
  const file = await openAsync(fileIn(spec.location, "adapter_model.safetensors"), options).catch((error: unknown) => {
    throw new SafetensorError(
      "InvalidAdapter",
      `${spec.location}: cannot open adapter_model.safetensors (${(error as Error).message})`,
      {
        cause: error,
      },
    );
  });
  try {
    const configFile = await readSideFileAt(spec.location, "adapter_config.json", options);
    if (configFile === null) throw new SafetensorError("InvalidAdapter", `${spec.location} has no adapter_config.json`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(new TextDecoder().decode(configFile));
    } catch (error) {
      throw new SafetensorError("InvalidAdapter", `adapter_config.json is not JSON: ${(error as Error).message}`);
    }
    const config = parseAdapterConfig(parsed);
    const loaded = await file.getTensors(undefined, { signal: options.signal });
    const tensors = new Map<string, Float32Array>();
    const catalog = new Map<string, { dtype: Dtype; shape: readonly number[] }>();
    for (const [name, tensor] of loaded) {
      catalog.set(name, { dtype: tensor.dtype, shape: tensor.shape });
      tensors.set(name, toFloat32(tensor.dtype, tensor.data, { count: tensor.numel }).slice());
    }
    return { input: { config, tensors: catalog, weight: spec.weight ?? 1 }, tensors, kohyaAlphas: null };
  } finally {
    await file.close();
  }
}

/** Apply PEFT LoRA adapters to `base`, writing the baked model into the checkpoint directory `outDir`. */
export async function bakeLora(
  base: string,
  adapters: readonly (string | AdapterSpec)[],
  outDir: string,
  options: BakeLoraOptions = {},
): Promise<BakeSummary> {
  if (adapters.length === 0) throw new SafetensorError("InvalidOption", "no adapter to bake");
  const specs = adapters.map((a) => (typeof a === "string" ? { location: a } : a));
  const opened = [];
  for (const spec of specs) opened.push(await openAdapter(spec, options));
  const kohya = opened.filter((a) => a.kohyaAlphas !== null).length;
  if (kohya !== 0 && kohya !== opened.length) {
    throw new SafetensorError("UnsupportedAdapter", "PEFT adapters and Kohya LoRA files cannot be baked together");
  }
  const model = await openModel(base, options);
  try {
    if (kohya > 0) {
      const { plan, skipped } = planKohya(
        model.catalog.tensors,
        opened.map((a) => ({ tensors: a.input.tensors, alphas: a.kohyaAlphas!, weight: a.input.weight })),
        options.textEncoder,
      );
      return await writeBake(model, plan, opened, outDir, options, { format: "kohya", skipped });
    }
    const plan = planLora(
      model.catalog.tensors,
      opened.map((a) => a.input),
    );
    return await writeBake(model, plan, opened, outDir, options, { format: "peft", skipped: 0 });
  } finally {
    await model.close();
  }
}

async function writeBake(
  model: ModelSource,
  plan: readonly LoraTensorPlan[],
  adapters: readonly OpenAdapter[],
  outDir: string,
  options: BakeLoraOptions,
  kind: { format: "peft" | "kohya"; skipped: number },
): Promise<BakeSummary> {
  const isFloat = (dtype: Dtype) => dtype === "F32" || dtype === "F16" || dtype === "BF16";
  const outDtype = (t: LoraTensorPlan): Dtype =>
    options.dtype !== undefined && isFloat(t.dtype) ? options.dtype : t.dtype;
  for (const t of plan) {
    if ((t.updates.length > 0 || t.replacement !== null) && !isFloat(t.dtype)) {
      throw new SafetensorError(
        "UnsupportedDtype",
        `${t.name} is ${t.dtype}: LoRA bakes take F32, F16 and BF16 weights`,
      );
    }
  }
  const outputs: OutputTensorSpec[] = plan.map((t) => ({ name: t.name, dtype: outDtype(t), shape: t.shape }));
  // An output embedding saved with the adapter for a model with tied ones: its own now (PEFT's merged config says so).
  const untie = plan.some((t) => t.untied) ? { tie_word_embeddings: false } : {};
  const sideFiles = await sideFilesOf(
    model,
    options.dtype ?? null,
    {},
    ["generation_config.json", ...TOKENIZER_FILES],
    untie,
  );
  const byName = new Map(plan.map((t) => [t.name, t]));
  const progress: BakeProgress = {
    tensorsDone: 0,
    tensorsTotal: plan.length,
    bytesWritten: 0,
    bytesTotal: outputBytes(outputs),
  };
  let bytesRead = 0;
  const chunkElements = options.chunkElements ?? 1 << 20;
  // A local base: worker threads read, bake and write their own blocks (file tasks, node-pool.ts), and tensors no
  // update changes are copied file to file. Measured on the 2-core VM (the bench's r = 16 bake, other helpers' builds
  // running, load 3-4, the same runs back to back): in the main thread with buffered writes 7.0-8.6 s wall (3.3-4.3 s
  // user + 2.7-6.3 s system CPU); two workers with direct writes 4.4-4.8 s (3.6 user + 1.7 system), same bytes, peak
  // RSS 180-190 MiB. Per worker, a 1 Mi-element block: read 0.6 ms, bake 3.5 ms, direct write 4-5 ms (the disk: `dd
  // oflag=direct` of 2 MiB blocks wrote 0.8-1.3 GB/s). Blocks of 4 Mi elements: slower, and 280 MiB. A remote base:
  // blocks are read here; with the addon's kernels baked here too (a block took about as long as copying it to a
  // worker), else on workers.
  const fast = nativeLoraKernels();
  preferLoraKernels(fast);
  const local = plan.length > 0 && model.locate(plan[0]!.name) !== null;
  const pool = local || fast === null ? ChunkPool.create(options.threads) : null;
  const depth = pool === null ? 1 : pool.size + 1;
  const files = await writeCheckpoint(outDir, outputs, sideFiles, options, async (tensor, write, target) => {
    const t = byName.get(tensor.name)!;
    const count = elementCount(t.shape);
    const inBytes = elementBytes(t.dtype);
    const advance = (written: number) => {
      progress.bytesWritten += written;
      options.onProgress?.(progress);
    };
    const emit = (bytes: Uint8Array, offset: number) => {
      write(bytes, offset);
      advance(bytes.length);
    };
    const located = pool === null ? null : model.locate(t.name);
    const replacement = t.replacement === null ? null : adapters[t.replacement[0]]!.tensors.get(t.replacement[1])!;
    if (replacement !== null && t.updates.length === 0) {
      emit(encode(replacement, tensor.dtype), 0);
    } else if (t.updates.length === 0 && tensor.dtype === t.dtype && located !== null) {
      target.copyFrom(located.fd, located.position, count * inBytes, 0);
      bytesRead += count * inBytes;
      advance(count * inBytes);
    } else if (t.updates.length === 0 && tensor.dtype === t.dtype) {
      const piece = chunkElements * 4;
      for (let at = 0; at < count * inBytes; at += piece) {
        throwIfAborted(options.signal);
        const bytes = await model.read(t.name, at, Math.min(piece, count * inBytes - at), options.signal);
        bytesRead += bytes.length;
        emit(bytes, at);
      }
    } else {
      const cols = t.shape.length >= 2 ? elementCount(t.shape.slice(1)) : count;
      const rows = count / cols;
      const factors = t.updates.map((u) => {
        const a = adapters[u.adapter]!.tensors;
        const magnitude = u.magnitude === null ? null : a.get(u.magnitude)!;
        // PEFT rounds an embedding's update to the weight's dtype before adding it (measured: bit-equal that way).
        const deltaDtype = u.embedding ? (t.dtype as "F32" | "F16" | "BF16") : "F32";
        const f = u.bias
          ? biasFactors(u, a.get(u.b)!)
          : lowRankFactors(u, a.get(u.a)!, a.get(u.b)!, magnitude, deltaDtype);
        // Workers get views of the factors in shared memory: a block's task would otherwise carry copies of L and R
        // whole (up to 1.4 MiB a block on the bench's down_proj).
        return pool === null
          ? f
          : { ...f, left: shared(f.left), right: shared(f.right), magnitude: f.magnitude && shared(f.magnitude) };
      });
      const blockRows = Math.max(1, Math.floor(chunkElements / cols));
      const outBytes = elementBytes(tensor.dtype);
      const inflight: Promise<void>[] = [];
      const files = replacement === null ? located : null;
      const flight = new Flight(2 * (pool?.size ?? 1));
      const readBlock = (first: number): Promise<Uint8Array | null> => {
        if (replacement !== null || files !== null || first >= rows) return Promise.resolve(null);
        const n = Math.min(blockRows, rows - first);
        const read = model.read(t.name, first * cols * inBytes, n * cols * inBytes, options.signal);
        read.catch(() => {}); // awaited below; a read still ahead when an earlier block fails is dropped
        return read;
      };
      // The next block's read is under way while this one is baked and written.
      let ahead = readBlock(0);
      for (let first = 0; first < rows; first += blockRows) {
        throwIfAborted(options.signal);
        const n = Math.min(blockRows, rows - first);
        const raw = await ahead;
        ahead = readBlock(first + blockRows);
        bytesRead += raw?.length ?? 0;
        const block: BakeBlock = {
          raw,
          // The adapter's copy of the weight, loaded into the model's dtype, is what the updates apply to.
          start: replacement?.subarray(first * cols, (first + n) * cols) ?? null,
          dtype: t.dtype as "F32" | "F16" | "BF16",
          outDtype: tensor.dtype as "F32" | "F16" | "BF16",
          rows: n,
          cols,
          factors: factors.map((f) => factorRows(f, first, n)).filter((f) => f !== null),
          // sd-scripts adds every LoRA to a float32 weight and rounds once.
          roundBetween: kind.format === "peft",
        };
        const at = first * cols * outBytes;
        if (files !== null) {
          const task = pool!.file({
            reads: [{ fd: files.fd, position: files.position + first * cols * inBytes, length: n * cols * inBytes }],
            compute: { kind: "bake", block },
            out: target.claim(at, n * cols * outBytes),
          });
          bytesRead += n * cols * inBytes;
          await flight.add(task.then(advance));
          continue;
        }
        inflight.push((pool ? pool.bake(block) : Promise.resolve(bakeBlock(block))).then((bytes) => emit(bytes, at)));
        if (inflight.length >= depth) await inflight.shift();
      }
      await Promise.all(inflight);
      await flight.drain();
    }
    progress.tensorsDone++;
    options.onProgress?.(progress);
  }).finally(() => pool?.close());
  return {
    format: kind.format,
    files,
    tensors: plan.length,
    updated: plan.filter((t) => t.updates.length > 0).length,
    replaced: plan.filter((t) => t.replacement !== null).length,
    skipped: kind.skipped,
    bytesRead,
    bytesWritten: progress.bytesWritten,
  };
}

/** A copy of `values` in shared memory (posted to a worker, it is shared rather than copied). */
function shared(values: Float32Array): Float32Array {
  const copy = new Float32Array(new SharedArrayBuffer(values.byteLength));
  copy.set(values);
  return copy;
}

function encode(values: Float32Array, dtype: Dtype): Uint8Array {
  if (dtype === "F32") return new Uint8Array(values.buffer, values.byteOffset, values.byteLength).slice();
  return fromFloat32(dtype as "F16" | "BF16", values);
}
