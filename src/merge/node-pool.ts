/**
 * Worker threads for element-wise merge chunks and LoRA blocks. The kernels are pure and each chunk independent, so
 * chunks are computed in parallel while the main thread reads the next ones and writes finished ones.
 */
import * as fs from "node:fs";
import { availableParallelism } from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import { SafetensorError, type SafetensorErrorCode } from "../format/errors.js";
import type { ChunkCompute, SparsifyTask } from "./execute.js";
import type { BakeBlock } from "./lora.js";

/** At most this many worker threads by default (and never more than the CPUs). */
export const DEFAULT_MAX_THREADS = 4;

/** The worker's module: bundled beside this chunk (dist/lib, dist/bundle), or beside this module (built or sources). */
function workerFile(): string {
  for (const candidate of ["./merge-worker.js", "./node-worker.js", "./node-worker.ts"]) {
    const file = fileURLToPath(new URL(candidate, import.meta.url));
    if (fs.existsSync(file)) return file;
  }
  throw new SafetensorError("BackendUnavailable", "the merge worker module (node-worker.js) is missing");
}

interface Pending {
  resolve: (bytes: Uint8Array) => void;
  reject: (error: unknown) => void;
}

export class ChunkPool {
  readonly #workers: Worker[] = [];
  readonly #pending = new Map<number, Pending>();
  readonly #load: number[] = [];
  #nextId = 0;

  private constructor(size: number) {
    const file = workerFile();
    for (let i = 0; i < size; i++) {
      const worker = file.endsWith(".ts")
        ? // From the sources (tests under tsx), the worker registers the TypeScript loader first.
          new Worker(
            `import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${JSON.stringify(pathToFileURL(file).href)}); });`,
            { eval: true },
          )
        : new Worker(file);
      worker.unref();
      worker.on(
        "message",
        (message: { id: number; bytes?: Uint8Array; error?: { message: string; code?: string } }) => {
          const pending = this.#pending.get(message.id);
          if (!pending) return;
          this.#pending.delete(message.id);
          this.#load[i]!--;
          if (message.bytes) pending.resolve(message.bytes);
          else {
            const e = message.error!;
            pending.reject(new SafetensorError((e.code ?? "InvalidTensor") as SafetensorErrorCode, e.message));
          }
        },
      );
      worker.on("error", (error) => {
        for (const pending of this.#pending.values()) pending.reject(error);
        this.#pending.clear();
      });
      this.#workers.push(worker);
      this.#load.push(0);
    }
  }

  /** A pool of `threads` workers (default: the CPUs, at most 4); null when one thread is asked for. */
  static create(threads?: number): ChunkPool | null {
    const size = threads ?? Math.min(availableParallelism(), DEFAULT_MAX_THREADS);
    if (!Number.isSafeInteger(size) || size < 1) {
      throw new SafetensorError("InvalidOption", `threads must be a positive integer, got ${threads}`);
    }
    return size === 1 ? null : new ChunkPool(size);
  }

  get size(): number {
    return this.#workers.length;
  }

  /** Compute a merge chunk on the least busy worker. */
  readonly compute: ChunkCompute = (job, raws, count) =>
    // Reads that own their whole buffer are handed over rather than copied.
    this.#run(
      { kind: "chunk", job, raws, count },
      raws
        .filter((r) => r.byteOffset === 0 && r.byteLength === r.buffer.byteLength)
        .map((r) => r.buffer as ArrayBuffer),
    );

  /** Sparsify a whole-tensor task vector on the least busy worker (its buffer is handed over and back). */
  sparsify = (task: SparsifyTask): Promise<Float32Array> =>
    this.#run({ kind: "sparsify", task }, [task.delta.buffer as ArrayBuffer]).then(
      (bytes) => new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4),
    );

  /** Bake a LoRA block of rows on the least busy worker. */
  bake(block: BakeBlock): Promise<Uint8Array> {
    return this.#run({ kind: "bake", block });
  }

  #run(task: object, transfer: ArrayBuffer[] = []): Promise<Uint8Array> {
    return new Promise<Uint8Array>((resolve, reject) => {
      let target = 0;
      for (let i = 1; i < this.#load.length; i++) if (this.#load[i]! < this.#load[target]!) target = i;
      const id = this.#nextId++;
      this.#pending.set(id, { resolve, reject });
      this.#load[target]!++;
      this.#workers[target]!.postMessage({ id, ...task }, transfer);
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.#workers.map((w) => w.terminate()));
    this.#workers.length = 0;
  }
}
