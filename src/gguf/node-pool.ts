/**
 * Worker threads that quantize chunks while the main thread reads and writes. The worker is node-quant-worker
 * (compiled next to this file, or bundled beside the CLI as gguf-worker.js); under tsx (tests) it runs with tsx's
 * loader. When no worker can be started the conversion runs on the main thread.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { Dtype } from "../format/dtypes.js";
import type { OutputType, TensorType } from "./plan.js";
import { isQuantType } from "./quants.js";

/** Most workers started by default. */
export const DEFAULT_MAX_THREADS = 4;

/** How to start the worker: the compiled or bundled file, or the TypeScript source through tsx's API (tests). */
function workerSpec(): { target: URL | string; eval: boolean } | null {
  for (const name of ["./gguf-worker.js", "./node-quant-worker.js"]) {
    const url = new URL(name, import.meta.url);
    if (url.protocol === "file:" && fs.existsSync(fileURLToPath(url))) return { target: url, eval: false };
  }
  const source = new URL("./node-quant-worker.ts", import.meta.url);
  if (source.protocol !== "file:" || !fs.existsSync(fileURLToPath(source))) return null;
  let api: string;
  try {
    api = import.meta.resolve("tsx/esm/api");
  } catch {
    return null;
  }
  // Node 20's workers do not inherit --import hooks: register tsx in the worker, then load the source.
  const target = `import(${JSON.stringify(api)}).then((m) => m.register()).then(() => import(${JSON.stringify(source.href)}));`;
  return { target, eval: true };
}

interface Pending {
  resolve: (result: { src?: Uint8Array; out?: Uint8Array; written?: number }) => void;
  reject: (error: Error) => void;
}

/** A worker's failure, with the errno code of a failed read or write (ENOSPC...) when there is one. */
export class WorkerError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

export class QuantPool {
  private next = 0;
  private turn = 0;
  private readonly pending = new Map<number, Pending>();

  private constructor(private readonly workers: Worker[]) {
    for (const w of workers) {
      w.on(
        "message",
        (m: { id: number; src?: Uint8Array; out?: Uint8Array; written?: number; error?: string; code?: string }) => {
          const p = this.pending.get(m.id);
          if (p === undefined) return;
          this.pending.delete(m.id);
          if (m.error === undefined) p.resolve(m);
          else p.reject(new WorkerError(m.error, m.code));
        },
      );
      w.on("error", (error) => {
        for (const p of this.pending.values()) p.reject(error);
        this.pending.clear();
      });
    }
  }

  get size(): number {
    return this.workers.length;
  }

  /**
   * A pool for conversions to `type`, or null when workers would not help (float outputs are cheap) or none can
   * be started. `threads` 0 means none.
   */
  static create(type: OutputType, threads?: number): QuantPool | null {
    const n = threads ?? Math.min(DEFAULT_MAX_THREADS, os.availableParallelism?.() ?? os.cpus().length);
    if (n <= 0 || !isQuantType(type)) return null;
    const spec = workerSpec();
    if (spec === null) return null;
    const workers: Worker[] = [];
    try {
      for (let i = 0; i < n; i++) workers.push(new Worker(spec.target, { eval: spec.eval }));
    } catch {
      for (const w of workers) void w.terminate();
      return null;
    }
    return new QuantPool(workers);
  }

  /**
   * Convert `count` values of `src` into `out` on a worker. Both buffers are transferred (they must not be views
   * into shared buffers) and handed back in the result.
   */
  run(
    dtype: Dtype,
    type: TensorType,
    src: Uint8Array,
    count: number,
    out: Uint8Array,
  ): Promise<{ src: Uint8Array; out: Uint8Array }> {
    const transfer = src.buffer === out.buffer ? [src.buffer] : [src.buffer, out.buffer];
    return this.post({ kind: "bytes", dtype, type, src, count, out }, transfer as ArrayBuffer[]) as Promise<{
      src: Uint8Array;
      out: Uint8Array;
    }>;
  }

  /**
   * Read `count` values at `inAt` of `inFd`, convert them, write them at `outAt` of the file at `outPath` (which
   * must already be at least that long), all on a worker; with `permute`, the chunk's rows are reordered first (Q
   * and K). Resolves with the bytes written.
   */
  async runFile(
    dtype: Dtype,
    type: TensorType,
    count: number,
    inFd: number,
    inAt: number,
    outPath: string,
    outAt: number,
    permute?: { rowBytes: number; headRows: number },
  ): Promise<number> {
    const r = await this.post({ kind: "file", dtype, type, count, inFd, inAt, outPath, outAt, permute }, []);
    return r.written!;
  }

  private post(
    message: Record<string, unknown>,
    transfer: ArrayBuffer[],
  ): Promise<{ src?: Uint8Array; out?: Uint8Array; written?: number }> {
    const id = this.next++;
    const worker = this.workers[this.turn++ % this.workers.length]!;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ ...message, id }, transfer);
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}
