/**
 * A worker thread of the merge pool (`node-pool.ts`): computes element-wise chunks with the same pure code as the
 * main thread (`computeChunk`) and hands the encoded bytes back (transferred, not copied).
 */
import { parentPort } from "node:worker_threads";
import { computeChunk } from "./execute.js";
import type { TensorJob } from "./plan.js";

interface ChunkRequest {
  id: number;
  job: TensorJob;
  raws: Uint8Array[];
  count: number;
}

parentPort!.on("message", ({ id, job, raws, count }: ChunkRequest) => {
  try {
    const bytes = computeChunk(job, raws, count);
    parentPort!.postMessage({ id, bytes }, [bytes.buffer as ArrayBuffer]);
  } catch (error) {
    parentPort!.postMessage({
      id,
      error:
        error instanceof Error ? { message: error.message, code: (error as { code?: string }).code } : String(error),
    });
  }
});
