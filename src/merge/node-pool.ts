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
import type { TensorJob } from "./plan.js";

/** A byte range of a file a worker reads itself: a descriptor of this process, position, length. */
export interface FileRange {
  readonly fd: number;
  readonly position: number;
  readonly length: number;
}

/**
 * A chunk a worker reads, computes and writes itself (the GGUF converter's design, gguf/node-quant-worker.ts): the
 * main thread touches none of its bytes, and the workers read, compute and write in parallel. `compute`: a chunk of
 * an element-wise merge job (`count` elements per input), or a block of a bake (its `raw` is the one read).
 */
export interface FileTask {
  readonly reads: readonly FileRange[];
  readonly compute:
    | { readonly kind: "chunk"; readonly job: TensorJob; readonly count: number }
    | { readonly kind: "bake"; readonly block: BakeBlock };
  /** Where the result goes: the output's temporary file (sized already) and the byte position. */
  readonly out: { readonly path: string; readonly position: number };
}

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
  resolve: (result: Uint8Array | number) => void;
  reject: (error: unknown) => void;
}

/** File tasks run since the process started (tests check that the worker path was taken). */
export const poolCounters = { fileTasks: 0 };

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
        (message: { id: number; bytes?: Uint8Array; written?: number; error?: { message: string; code?: string } }) => {
          const pending = this.#pending.get(message.id);
          if (!pending) return;
          this.#pending.delete(message.id);
          this.#load[i]!--;
          if (message.bytes) pending.resolve(message.bytes);
          else if (message.written !== undefined) pending.resolve(message.written);
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
    const size = threadCount(threads);
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
    this.#run<Uint8Array>({ kind: "sparsify", task }, [task.delta.buffer as ArrayBuffer]).then(
      (bytes) => new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4),
    );

  /** Bake a LoRA block of rows on the least busy worker. */
  bake(block: BakeBlock): Promise<Uint8Array> {
    return this.#run({ kind: "bake", block });
  }

  /** Run a file task on the least busy worker; resolves with the bytes it wrote. */
  file(task: FileTask): Promise<number> {
    poolCounters.fileTasks++;
    return this.#run<number>({ kind: "file", task });
  }

  #run<T = Uint8Array>(task: object, transfer: ArrayBuffer[] = []): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let target = 0;
      for (let i = 1; i < this.#load.length; i++) if (this.#load[i]! < this.#load[target]!) target = i;
      const id = this.#nextId++;
      this.#pending.set(id, { resolve: resolve as (result: Uint8Array | number) => void, reject });
      this.#load[target]!++;
      this.#workers[target]!.postMessage({ id, ...task }, transfer);
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.#workers.map((w) => w.terminate()));
    this.#workers.length = 0;
  }
}

/**
 * Tasks in flight, at most `depth` of them: `add` waits for the oldest when full, `drain` for all. A failure is thrown
 * by the `add` or `drain` that meets it once every other task has settled, so no worker still writes into an output
 * that the failure is about to remove.
 */
/** The threads a merge or bake uses: `threads` (checked) or the CPUs, at most 4. */
export function threadCount(threads?: number): number {
  const size = threads ?? Math.min(availableParallelism(), DEFAULT_MAX_THREADS);
  if (!Number.isSafeInteger(size) || size < 1) {
    throw new SafetensorError("InvalidOption", `threads must be a positive integer, got ${threads}`);
  }
  return size;
}

export class Flight {
  readonly #tasks: Promise<unknown>[] = [];
  constructor(readonly depth: number) {}

  async add(task: Promise<unknown>): Promise<void> {
    task.catch(() => {}); // awaited below or by drain
    this.#tasks.push(task);
    if (this.#tasks.length < this.depth) return;
    try {
      await this.#tasks.shift();
    } catch (error) {
      await Promise.allSettled(this.#tasks.splice(0));
      throw error;
    }
  }

  async drain(): Promise<void> {
    const results = await Promise.allSettled(this.#tasks.splice(0));
    for (const result of results) if (result.status === "rejected") throw result.reason;
  }
}
