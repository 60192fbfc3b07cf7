/**
 * A worker thread of the merge pool (`node-pool.ts`): computes element-wise merge chunks and LoRA blocks with the same
 * pure code as the main thread (`computeChunk`, `bakeBlock`) and hands the encoded bytes back (transferred).
 */
import { parentPort } from "node:worker_threads";
import { computeChunk, type SparsifyTask, sparsifyDelta } from "./execute.js";
import { preferKeepSortedKernel, preferLinear16Kernel, preferLoraKernels, preferTaskKernels } from "./fast-kernels.js";
import { type BakeBlock, bakeBlock } from "./lora.js";
import { nativeKeepSortedKernel, nativeLinear16Kernel, nativeLoraKernels, nativeTaskKernels } from "./node-native.js";
import type { TensorJob } from "./plan.js";

type Request =
  | { id: number; kind: "chunk"; job: TensorJob; raws: Uint8Array[]; count: number }
  | { id: number; kind: "bake"; block: BakeBlock }
  | { id: number; kind: "sparsify"; task: SparsifyTask };

preferLinear16Kernel(nativeLinear16Kernel());
preferLoraKernels(nativeLoraKernels());
preferKeepSortedKernel(nativeKeepSortedKernel());
preferTaskKernels(nativeTaskKernels());

parentPort!.on("message", (request: Request) => {
  const id = request.id;
  try {
    let bytes: Uint8Array;
    if (request.kind === "chunk") bytes = computeChunk(request.job, request.raws, request.count);
    else if (request.kind === "bake") bytes = bakeBlock(request.block);
    else {
      const delta = sparsifyDelta(request.task);
      bytes = new Uint8Array(delta.buffer, delta.byteOffset, delta.byteLength);
    }
    parentPort!.postMessage({ id, bytes }, [bytes.buffer as ArrayBuffer]);
  } catch (error) {
    parentPort!.postMessage({
      id,
      error:
        error instanceof Error ? { message: error.message, code: (error as { code?: string }).code } : String(error),
    });
  }
});
