/**
 * A worker thread of the merge pool (`node-pool.ts`): computes element-wise merge chunks and LoRA blocks with the same
 * pure code as the main thread (`computeChunk`, `bakeBlock`) and hands the encoded bytes back (transferred).
 */
import { parentPort } from "node:worker_threads";
import { computeChunk } from "./execute.js";
import { type BakeBlock, bakeBlock } from "./lora.js";
import type { TensorJob } from "./plan.js";

type Request =
  | { id: number; kind: "chunk"; job: TensorJob; raws: Uint8Array[]; count: number }
  | { id: number; kind: "bake"; block: BakeBlock };

parentPort!.on("message", (request: Request) => {
  const id = request.id;
  try {
    const bytes =
      request.kind === "chunk" ? computeChunk(request.job, request.raws, request.count) : bakeBlock(request.block);
    parentPort!.postMessage({ id, bytes }, [bytes.buffer as ArrayBuffer]);
  } catch (error) {
    parentPort!.postMessage({
      id,
      error:
        error instanceof Error ? { message: error.message, code: (error as { code?: string }).code } : String(error),
    });
  }
});
