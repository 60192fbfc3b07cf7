/**
 * A worker thread of the merge pool (`node-pool.ts`): computes element-wise merge chunks and LoRA blocks with the same
 * pure code as the main thread (`computeChunk`, `bakeBlock`) and hands the encoded bytes back (transferred).
 */
import { parentPort } from "node:worker_threads";
import { readFullyAt, writeAtPath } from "../io/node-chunk-io.js";
import { writeError } from "../io/node-write.js";
import { computeChunk, type SparsifyTask, sparsifyDelta } from "./execute.js";
import { type BakeBlock, BakeScratch, bakeBlock } from "./lora.js";
import { installNativeKernels } from "./node-native.js";
import type { FileTask } from "./node-pool.js";
import type { TensorJob } from "./plan.js";

type Request =
  | { id: number; kind: "chunk"; job: TensorJob; raws: Uint8Array[]; count: number }
  | { id: number; kind: "bake"; block: BakeBlock }
  | { id: number; kind: "sparsify"; task: SparsifyTask }
  | { id: number; kind: "file"; task: FileTask };

/** Read buffers of file tasks, one per input, reused from task to task (a fresh one each time is zeroed first). */
const readBuffers: Uint8Array[] = [];
const bakeScratch = new BakeScratch();

/**
 * A file task: read its ranges, compute, write the result at its place in the output; the bytes written. (A 16-bit
 * linear merge the addon can do goes from file to file without a worker: node-merge.ts's nativeFileChunks.)
 */
function fileTask(task: FileTask): number {
  const c = task.compute;
  const raws = task.reads.map((range, i) => {
    if ((readBuffers[i]?.length ?? 0) < range.length) readBuffers[i] = new Uint8Array(range.length);
    const into = readBuffers[i]!.subarray(0, range.length);
    readFullyAt(range.fd, into, range.position);
    return into;
  });
  const bytes =
    c.kind === "chunk"
      ? computeChunk(c.job, raws, c.count, undefined, (n) => bakeScratch.bytes(n))
      : bakeBlock({ ...c.block, raw: raws[0]! }, bakeScratch);
  try {
    writeAtPath(task.out.path, bytes, task.out.position);
  } catch (error) {
    throw writeError(error, "cannot write the output"); // DiskFull, NotWritable... by their codes
  }
  return bytes.length;
}

installNativeKernels();

parentPort!.on("message", (request: Request) => {
  const id = request.id;
  try {
    if (request.kind === "file") {
      parentPort!.postMessage({ id, written: fileTask(request.task) });
      return;
    }
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
