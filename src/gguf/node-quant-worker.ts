/**
 * The quantizing worker, with the same pure kernel as the main thread. Two kinds of job:
 * - bytes: a chunk of source bytes in (transferred), its GGUF bytes out (the buffers come back);
 * - file: read the chunk from the checkpoint's descriptor, convert, write it at its place in the output's
 *   descriptor (descriptors are the process's, shared by every thread): the main thread copies nothing, and two
 *   workers read and write in parallel.
 * Started by node-pool.ts.
 */
import * as fs from "node:fs";
import { parentPort } from "node:worker_threads";
import type { Dtype } from "../format/dtypes.js";
import { convertDirect, decodeSource, encodeOutput, outputBytes, preferQ8Kernel, sourceBytes } from "./kernel.js";
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
  outFd: number;
  outAt: number;
}

preferQ8Kernel(nativeQ8Kernel());

let values = new Float32Array(0);
let srcBuffer = new Uint8Array(0);
let outBuffer = new Uint8Array(0);

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
  const src = srcBuffer.subarray(0, inBytes);
  for (let got = 0; got < inBytes; ) {
    const n = fs.readSync(job.inFd, src, got, inBytes - got, job.inAt + got);
    if (n === 0) throw Object.assign(new Error("the checkpoint is shorter than its header says"), { code: "SHORT" });
    got += n;
  }
  const out = outBuffer.subarray(0, outBytes);
  convert(job.dtype, job.type, src, job.count, out);
  // Through the page cache. The copy addon's direct writes (what saveFile uses) toggle O_DIRECT on the descriptor,
  // which the other worker shares: its buffered write of an unaligned chunk then failed with EINVAL (tried).
  for (let done = 0; done < outBytes; ) done += fs.writeSync(job.outFd, out, done, outBytes - done, job.outAt + done);
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
