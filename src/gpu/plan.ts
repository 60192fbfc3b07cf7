/**
 * Pure planning for `loadToGPU`: which buffers each tensor gets (one, or several along dim 0 when it is larger than
 * the device allows and the caller allows splitting), which conversion runs on it, and which reads bring its bytes.
 * No WebGPU here: test/gpu-plan.test.ts checks it in Node.
 *
 * WebGPU's alignment rules shape the plan: a buffer's size and every `writeBuffer` offset and size are multiples of
 * 4 bytes. Buffers are the data's length rounded up to 4 (the tail is zeros), and a tensor's bytes are cut into
 * segments at multiples of `segmentBytes` (a multiple of 256) from its part's start, so every write and every
 * conversion output starts 4-aligned whatever the tensor's offset in the file.
 */
import { type Dtype, dtypeOf } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";

/** What `dtype: "f16" | "f32"` does to a tensor: nothing, or one of the shader's conversions. */
export type Conversion = "f16>f32" | "bf16>f32" | "bf16>f16" | "f32>f16" | "f8>f32" | "f8>f16";

export type TargetDtype = "f16" | "f32";

const F8: ReadonlySet<Dtype> = new Set(["F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"]);

/**
 * The conversion that turns `dtype` into `target`, null when the tensor is loaded as stored (already the target, or
 * not a float: integer and boolean tensors keep their dtype). Floats the shader cannot decode are refused.
 */
export function conversionOf(dtype: Dtype, target: TargetDtype | undefined, name: string): Conversion | null {
  if (target === undefined || dtypeOf(dtype).kind !== "float") return null;
  if (dtype === "F32") return target === "f16" ? "f32>f16" : null;
  if (dtype === "F16") return target === "f32" ? "f16>f32" : null;
  if (dtype === "BF16") return target === "f32" ? "bf16>f32" : "bf16>f16";
  if (F8.has(dtype)) return target === "f32" ? "f8>f32" : "f8>f16";
  throw new SafetensorError(
    "UnsupportedDtype",
    `tensor ${quoteName(name)} is ${dtype}: the GPU conversion reads BF16, F16, F32 and the F8 types (leave it out with filter, or load without dtype)`,
    { tensor: name },
  );
}

export interface PlannedPart {
  /** Rows [first, end) of dim 0 this buffer holds (the whole first dimension when the tensor is not split). */
  readonly rows: readonly [number, number];
  readonly shape: readonly number[];
  /** Offset of the part's first source byte within the tensor's bytes, and the source bytes it covers. */
  readonly srcOffset: number;
  readonly srcLength: number;
  /** Data bytes in the buffer (its size is this rounded up to 4, at least 4). */
  readonly byteLength: number;
}

export interface PlannedTensor {
  readonly name: string;
  /** Which of the load's files holds it. */
  readonly file: number;
  readonly info: TensorInfo;
  /** Absolute offset of the tensor's first byte in its file. */
  readonly start: number;
  readonly conversion: Conversion | null;
  /** The dtype in the buffers. */
  readonly dtype: Dtype;
  /** Bytes of the loaded tensor (after conversion). */
  readonly byteLength: number;
  readonly parts: readonly PlannedPart[];
}

/** A tensor's bytes within one read, and where they go. */
export interface Segment {
  readonly tensor: number;
  readonly part: number;
  /** Absolute offset in the file, and length, of the source bytes. */
  readonly start: number;
  readonly length: number;
  /** Byte offset in the part's buffer where the (converted) bytes go: a multiple of 4. */
  readonly outOffset: number;
}

export interface PlannedRead {
  readonly file: number;
  readonly start: number;
  readonly end: number;
  readonly segments: readonly Segment[];
}

export interface LoadPlan {
  readonly tensors: readonly PlannedTensor[];
  readonly reads: readonly PlannedRead[];
  /** Source bytes of the selected tensors (what progress counts). */
  readonly totalBytes: number;
}

export interface PlanInput {
  readonly file: number;
  readonly info: TensorInfo;
  /** Absolute offset of the file's data region. */
  readonly dataStart: number;
}

export interface PlanOptions {
  readonly target?: TargetDtype | undefined;
  /** Largest buffer (bytes, after rounding up to 4). */
  readonly maxBufferSize: number;
  /** Split a tensor larger than `maxBufferSize` along dim 0 instead of refusing it. */
  readonly split: boolean;
  /** Largest read, and the cut between a tensor's segments: a multiple of 256. */
  readonly segmentBytes: number;
  /** Tensors closer than this in a file are read together (when the read stays within `segmentBytes`). */
  readonly maxGap: number;
}

export const pad4 = (n: number): number => Math.max(4, Math.ceil(n / 4) * 4);

const OUT_BYTES: Record<Conversion, [number, number]> = {
  // [source bytes per element, output bytes per element]
  "f16>f32": [2, 4],
  "bf16>f32": [2, 4],
  "bf16>f16": [2, 2],
  "f32>f16": [4, 2],
  "f8>f32": [1, 4],
  "f8>f16": [1, 2],
};

/** Output bytes for `srcBytes` source bytes of a tensor under `conversion`. */
export function outBytes(conversion: Conversion | null, srcBytes: number): number {
  if (conversion === null) return srcBytes;
  const [src, out] = OUT_BYTES[conversion];
  return (srcBytes / src) * out;
}

function gib(n: number): string {
  return n >= 1 << 20 ? `${(n / 2 ** 20).toFixed(1)} MiB, ${n} bytes` : `${n} bytes`;
}

function planParts(name: string, info: TensorInfo, conversion: Conversion | null, options: PlanOptions): PlannedPart[] {
  const loaded = outBytes(conversion, info.byteLength);
  const rows = info.shape[0] ?? 1;
  const whole: PlannedPart = {
    rows: [0, rows],
    shape: info.shape,
    srcOffset: 0,
    srcLength: info.byteLength,
    byteLength: loaded,
  };
  const limit = options.maxBufferSize;
  if (pad4(loaded) <= limit) return [whole];
  const over = `tensor ${quoteName(name)} needs ${gib(loaded)} in one buffer, over the device's maxBufferSize (${gib(limit)})`;
  if (!options.split) {
    throw new SafetensorError("TooLarge", `${over}: pass split: true to load it as several buffers along dim 0`, {
      tensor: name,
    });
  }
  const rowSrc = info.shape.length === 0 || rows === 0 ? info.byteLength : info.byteLength / rows;
  const rowOut = outBytes(conversion, rowSrc);
  if (info.shape.length === 0 || !Number.isInteger(rowSrc) || rowOut > limit - (limit % 4)) {
    throw new SafetensorError(
      "TooLarge",
      `${over}, and it cannot be split along dim 0 (one row is ${gib(rowOut)}${Number.isInteger(rowSrc) ? "" : ", not a whole number of bytes"})`,
      { tensor: name },
    );
  }
  const perPart = Math.floor((limit - (limit % 4)) / rowOut);
  const parts: PlannedPart[] = [];
  for (let first = 0; first < rows; first += perPart) {
    const end = Math.min(rows, first + perPart);
    parts.push({
      rows: [first, end],
      shape: [end - first, ...info.shape.slice(1)],
      srcOffset: first * rowSrc,
      srcLength: (end - first) * rowSrc,
      byteLength: (end - first) * rowOut,
    });
  }
  return parts;
}

/** Plan buffers, conversions and reads for `inputs` (in the order given, which is the result's order). */
export function planLoad(inputs: readonly PlanInput[], options: PlanOptions): LoadPlan {
  const step = options.segmentBytes;
  if (!(Number.isSafeInteger(step) && step >= 256 && step % 256 === 0)) {
    throw new SafetensorError("InvalidOption", `segmentBytes must be a positive multiple of 256, got ${step}`);
  }
  const tensors: PlannedTensor[] = [];
  const segments: { file: number; segment: Segment }[] = [];
  let totalBytes = 0;
  for (const { file, info, dataStart } of inputs) {
    const conversion = conversionOf(info.dtype, options.target, info.name);
    const parts = planParts(info.name, info, conversion, options);
    const start = dataStart + info.dataOffsets[0];
    const index = tensors.length;
    tensors.push({
      name: info.name,
      file,
      info,
      start,
      conversion,
      dtype: conversion === null ? info.dtype : conversion.endsWith("f32") ? "F32" : "F16",
      byteLength: outBytes(conversion, info.byteLength),
      parts,
    });
    totalBytes += info.byteLength;
    parts.forEach((part, p) => {
      for (let at = 0; at < part.srcLength; at += step) {
        segments.push({
          file,
          segment: {
            tensor: index,
            part: p,
            start: start + part.srcOffset + at,
            length: Math.min(step, part.srcLength - at),
            outOffset: outBytes(conversion, at),
          },
        });
      }
    });
  }
  // Segments in file order; neighbours closer than maxGap share a read that stays within segmentBytes.
  segments.sort((a, b) => a.file - b.file || a.segment.start - b.segment.start);
  const reads: { file: number; start: number; end: number; segments: Segment[] }[] = [];
  for (const { file, segment } of segments) {
    const last = reads[reads.length - 1];
    const end = segment.start + segment.length;
    if (
      last !== undefined &&
      last.file === file &&
      segment.start >= last.end &&
      segment.start - last.end <= options.maxGap &&
      end - last.start <= step
    ) {
      last.end = end;
      last.segments.push(segment);
    } else reads.push({ file, start: segment.start, end, segments: [segment] });
  }
  return { tensors, reads, totalBytes };
}
