/**
 * The quantizing worker: chunks of source bytes in, GGUF bytes out, with the same pure kernel as the main thread.
 * Started by node-pool.ts.
 */
import { parentPort } from "node:worker_threads";
import type { Dtype } from "../format/dtypes.js";
import { convertDirect, decodeSource, encodeOutput, outputBytes } from "./kernel.js";
import type { TensorType } from "./plan.js";

interface Job {
  id: number;
  dtype: Dtype;
  type: TensorType;
  src: Uint8Array;
  count: number;
  out: Uint8Array;
}

let values = new Float32Array(0);
parentPort!.on("message", (job: Job) => {
  try {
    const out = job.out;
    if (out.length < outputBytes(job.type, job.count)) throw new RangeError("output buffer too small");
    if (!convertDirect(job.dtype, job.type, job.src, job.count, out)) {
      if (values.length < job.count) values = new Float32Array(job.count);
      decodeSource(job.dtype, job.src, job.count, values);
      encodeOutput(job.type, values, job.count, out);
    }
    const transfer = job.src.buffer === out.buffer ? [out.buffer] : [out.buffer, job.src.buffer];
    parentPort!.postMessage({ id: job.id, src: job.src, out }, transfer as ArrayBuffer[]);
  } catch (error) {
    parentPort!.postMessage({ id: job.id, error: String((error as Error)?.stack ?? error) });
  }
});
