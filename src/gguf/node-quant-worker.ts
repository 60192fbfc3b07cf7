/**
 * The quantizing worker, with the same pure kernel as the main thread. Two kinds of job:
 * - bytes: a chunk of source bytes in (transferred), its GGUF bytes out (the buffers come back);
 * - file: read the chunk from the checkpoint's descriptor (descriptors are the process's, shared by every thread),
 *   convert, write it at its place in the output file through a descriptor of the worker's own: the main thread
 *   copies nothing, and two workers read and write in parallel.
 * Started by node-pool.ts.
 */
import { parentPort } from "node:worker_threads";
import type { Dtype } from "../format/dtypes.js";
import { readFullyAt, writeAtPath } from "../io/node-chunk-io.js";
import {
  convertDirect,
  decodeSource,
  encodeOutput,
  outputBytes,
  permuteRows,
  preferQ8Kernel,
  sourceBytes,
} from "./kernel.js";
import { nativeQ8Kernel } from "./node-q8-native.js";
import type { TensorType } from "./plan.js";

interface BytesJob {
  kind: "bytes";
  id: number;
  dtype: Dtype;
  type: TensorType;
  src: Uint8Array;
  count: number;
  out: Uint8Array;
}

interface FileJob {
  kind: "file";
  id: number;
  dtype: Dtype;
  type: TensorType;
  count: number;
  inFd: number;
  inAt: number;
  /** The output's path (the atomic write's temporary file, already sized), opened by the worker for its writes. */
  outPath: string;
  outAt: number;
  /** Reorder the chunk's rows first (Q and K, see permuteRows): its row length in bytes and rows per head. */
  permute?: { rowBytes: number; headRows: number };
}

preferQ8Kernel(nativeQ8Kernel());

let values = new Float32Array(0);
let srcBuffer = new Uint8Array(0);
let outBuffer = new Uint8Array(0);
let permuteBuffer = new Uint8Array(0);

function convert(dtype: Dtype, type: TensorType, src: Uint8Array, count: number, out: Uint8Array): void {
  if (convertDirect(dtype, type, src, count, out)) return;
  if (values.length < count) values = new Float32Array(count);
  decodeSource(dtype, src, count, values);
  encodeOutput(type, values, count, out);
}

function fileJob(job: FileJob): number {
  const inBytes = job.count * sourceBytes(job.dtype);
  const outBytes = outputBytes(job.type, job.count);
  if (srcBuffer.length < inBytes) srcBuffer = new Uint8Array(inBytes);
  if (outBuffer.length < outBytes) outBuffer = new Uint8Array(outBytes);
  let src = srcBuffer.subarray(0, inBytes);
  readFullyAt(job.inFd, src, job.inAt);
  if (job.permute !== undefined) {
    if (permuteBuffer.length < inBytes) permuteBuffer = new Uint8Array(inBytes);
    const permuted = permuteBuffer.subarray(0, inBytes);
    permuteRows(src, permuted, inBytes / job.permute.rowBytes, job.permute.rowBytes, job.permute.headRows);
    src = permuted;
  }
  const out = outBuffer.subarray(0, outBytes);
  convert(job.dtype, job.type, src, job.count, out);
  // Direct writes where possible: to-gguf --type q8_0's system time 1.4-2.8 -> 0.2 s (see writeAtPath).
  writeAtPath(job.outPath, out, job.outAt);
  return outBytes;
}

parentPort!.on("message", (job: BytesJob | FileJob) => {
  try {
    if (job.kind === "file") {
      parentPort!.postMessage({ id: job.id, written: fileJob(job) });
      return;
    }
    const out = job.out;
    if (out.length < outputBytes(job.type, job.count)) throw new RangeError("output buffer too small");
    convert(job.dtype, job.type, job.src, job.count, out);
    const transfer = job.src.buffer === out.buffer ? [out.buffer] : [out.buffer, job.src.buffer];
    parentPort!.postMessage({ id: job.id, src: job.src, out }, transfer as ArrayBuffer[]);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException)?.code;
    parentPort!.postMessage({ id: job.id, error: String((error as Error)?.message ?? error), code });
  }
});
