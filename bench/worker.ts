/**
 * Our worker for `npm run bench`: one measurement of one figure in a fresh process, against the BUILT package as
 * users run it (imported by its name, which resolves to dist/ through the package's exports; never through tsx).
 *
 *   node --expose-gc bench/out/js/bench/worker.js '{"figure":..,"variant":<backend row>,"path":..,"pt":..,"scratch":..}'
 *
 * Prints `RESULT {json}` (see harness/protocol.ts) as its last stdout line: `ms` is the wall time of just the
 * figure's `run` (performance.now; the median of the calls for repeated figures), `rss_delta_mib` is
 * process.memoryUsage.rss() after minus before, in MiB. The library is imported before the window, except by the
 * import-time figure. The addon's presence is read from /proc/self/maps (any mapped `.node` file), independent of
 * the library's own report: the `pread-no-addon` row fails unless it is absent, the `mmap` row unless it is loaded.
 */
import * as fs from "node:fs";
import { figureNamed } from "./figures/index.js";
import { BACKENDS, type BenchBackend, type Lib, type OursContext, Unavailable } from "./figures/types.js";
import { NO_NATIVE_ENV, RESULT_PREFIX, type WorkerRequest, type WorkerResult } from "./harness/protocol.js";
import { median } from "./harness/stats.js";
import { PACKAGE_NAME } from "./spec.js";

const MIB = 1024 * 1024;
const gc = (globalThis as { gc?: () => void }).gc;

function emit(result: WorkerResult): void {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
}

/** Whether a native addon (any `.node` shared object) is mapped into this process. */
function addonMapped(): boolean {
  try {
    return /\.node$/m.test(fs.readFileSync("/proc/self/maps", "utf8"));
  } catch {
    return false;
  }
}

const isThenable = (v: unknown): v is PromiseLike<unknown> =>
  typeof (v as { then?: unknown } | null)?.then === "function";

async function run(request: WorkerRequest): Promise<WorkerResult> {
  const figure = figureNamed(request.figure);
  if (!figure) throw new Error(`unknown figure ${request.figure}`);
  if (figure.ours.kind !== "in-process") throw new Error(`${figure.name} is a whole-process figure`);
  const row = request.variant as BenchBackend;
  if (!(BACKENDS as readonly string[]).includes(row)) throw new Error(`unknown backend row ${row}`);
  const noAddon = row === "pread-no-addon";
  if (noAddon !== (process.env[NO_NATIVE_ENV] === "1")) {
    throw new Error(`backend row "${row}" needs ${NO_NATIVE_ENV} ${noAddon ? "=1" : "unset"} in the environment`);
  }
  const side = figure.ours;
  const ctx: OursContext = {
    lib: (figure.libraryInWindow ? undefined : await import(PACKAGE_NAME)) as Lib,
    path: request.path,
    pt: request.pt,
    scratch: request.scratch,
    backend: row,
    open: row === "auto" ? {} : { backend: row === "mmap" ? "mmap" : "pread" },
    extra: {},
  };
  const state = side.setup?.(ctx);
  let value: unknown;
  let ms: number;
  gc?.();
  const before = process.memoryUsage.rss();
  if (figure.repeat) {
    for (let i = 0; i < figure.repeat.warmup; i++) side.run(ctx, state);
    const times: number[] = [];
    for (let i = 0; i < figure.repeat.calls; i++) {
      const start = performance.now();
      value = side.run(ctx, state);
      times.push(performance.now() - start);
    }
    ms = median(times);
  } else {
    const start = performance.now();
    value = side.run(ctx, state);
    if (isThenable(value)) value = await value;
    ms = performance.now() - start;
  }
  const after = process.memoryUsage.rss();
  if (figure.libraryInWindow) ctx.lib = value as Lib;
  side.finish?.(ctx, state, value);
  const mapped = addonMapped();
  ctx.extra.native_addon = mapped ? "loaded" : "absent";
  if (noAddon && mapped) throw new Error(`the native addon was loaded although ${NO_NATIVE_ENV}=1 was set`);
  if (row === "mmap" && !mapped) throw new Unavailable("the native addon is not loaded");
  return { ok: true, ms, rss_delta_mib: (after - before) / MIB, extra: ctx.extra };
}

async function main(): Promise<number> {
  let request: WorkerRequest;
  try {
    request = JSON.parse(process.argv[2] ?? "") as WorkerRequest;
  } catch {
    emit({ ok: false, error: "usage: worker.js '<json request>' (see harness/protocol.ts)" });
    return 2;
  }
  try {
    emit(await run(request));
    return 0;
  } catch (error) {
    if (error instanceof Unavailable) {
      emit({ ok: false, unavailable: error.message });
      return 0;
    }
    console.error(error);
    emit({ ok: false, error: `${(error as Error)?.name ?? "Error"}: ${(error as Error)?.message ?? String(error)}` });
    return 1;
  }
}

const code = await main();
if (code === 0 && process.platform === "linux") {
  // The result is out (a write to a pipe is synchronous here): end at once instead of through Node's exit, which can
  // deadlock on Node 20 (nodejs/node#54918: the main thread in NodePlatform::DrainTasks waits for a background compile
  // job parked in CollectionBarrier::AwaitCollectionBackground, waiting for a GC only the main thread can run).
  // Seen 2026-12-02: slice_8_rows_inprocess's pread worker printed its RESULT line, then hung until the 600 s timeout
  // lost the row; 1 in ~80 runs of it alone (gdb showed that cycle).
  process.kill(process.pid, "SIGKILL");
}
process.exitCode = code;
