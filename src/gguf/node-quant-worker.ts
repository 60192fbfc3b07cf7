/**
 * The quantizing worker: chunks of source bytes in, GGUF bytes out, with the same pure kernel as the main thread.
 * Started by node-pool.ts.
 */
import { parentPort } from "node:worker_threads";
import type { Dtype } from "../format/dtypes.js";
import { decodeSource, encodeOutput, outputBytes } from "./kernel.js";
import type { TensorType } from "./plan.js";

interface Job {
  id: number;
  dtype: Dtype;
  type: TensorType;
  src: Uint8Array;
  count: number;
}

let values = new Float32Array(0);
parentPort!.on("message", (job: Job) => {
  try {
    if (values.length < job.count) values = new Float32Array(job.count);
    decodeSource(job.dtype, job.src, job.count, values);
    const out = new Uint8Array(outputBytes(job.type, job.count));
    encodeOutput(job.type, values, job.count, out);
    parentPort!.postMessage({ id: job.id, out }, [out.buffer]);
  } catch (error) {
    parentPort!.postMessage({ id: job.id, error: String((error as Error)?.stack ?? error) });
  }
});
