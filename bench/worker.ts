/**
 * Our worker for `npm run bench`: one measurement of one figure in a fresh process.
 *
 *   node --expose-gc --import tsx bench/worker.ts <figure> <backend> <path>
 *
 * Prints `RESULT {json}` (see `WorkerResult`) as its last stdout line: `ms` is the wall time of just the operation
 * (performance.now), `rss_delta_mib` is process.memoryUsage.rss() after minus before, in MiB. The library is imported
 * before anything is measured. A backend that is not available, or a method that does not exist yet, is reported as
 * `unavailable`, not as an error.
 *
 * `<backend>` is a row of the table (see `BACKEND_RUN`): `pread-no-addon` runs the library's pread backend and must
 * be started with `SAFETENSORS_NO_NATIVE=1`; the worker checks that the addon really stayed unloaded
 * (`loadNative() === null`, recorded as `extra.native_addon`) and fails the run otherwise.
 */
import { loadNative } from "../src/io/native.js";
import { loadFile, openFile } from "../src/node.js";
import {
  BACKEND_RUN,
  BACKENDS,
  type BenchBackend,
  FIGURES,
  type Figure,
  NO_NATIVE_ENV,
  RESULT_PREFIX,
  SLICE_REPEAT,
  SLICE_REPEAT_WARMUP,
  SLICE_SPEC,
  SLICE_TENSOR,
  TENSOR_32MIB,
  TOUCH_STRIDE,
  type WorkerResult,
} from "./spec.js";

type OurFile = ReturnType<typeof openFile>;
type LibraryBackend = (typeof BACKEND_RUN)[BenchBackend]["library"];

/** What slicing is expected to look like (written against the planned API; it may not exist yet). */
interface TensorLikeResult {
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}
interface SliceHandle {
  get(spec: string): TensorLikeResult;
}
type SliceMethod = (name: string) => SliceHandle;

class Unavailable extends Error {}

function emit(result: WorkerResult): void {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
}

const MIB = 1024 * 1024;
const gc = (globalThis as { gc?: () => void }).gc;

/** Run `operation` once, timing it and measuring the RSS it added. */
function measure<T>(operation: () => T): { value: T; ms: number; rss: number } {
  gc?.();
  const before = process.memoryUsage.rss();
  const start = performance.now();
  const value = operation();
  const ms = performance.now() - start;
  const after = process.memoryUsage.rss();
  return { value, ms, rss: (after - before) / MIB };
}

/** Read one byte per 4 KiB page: bytes 0, 4096, 8192, ... of `data`. */
function touchPages(data: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i < data.length; i += TOUCH_STRIDE) sum += data[i]!;
  return sum;
}

/** The raw bits of the first and last element (every tensor of the checkpoint is F16). */
function firstAndLast(data: Uint8Array): number {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  return view.getUint16(0, true) + view.getUint16(data.byteLength - 2, true);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function requireBackend(file: OurFile, backend: LibraryBackend): void {
  if (file.backend !== backend) {
    throw new Unavailable(`openFile(path, {backend: "${backend}"}) gave backend "${file.backend}"`);
  }
}

/** Open outside the measurement, making sure the requested backend is really the one used. */
function openChecked(path: string, backend: LibraryBackend): OurFile {
  let file: OurFile;
  try {
    file = openFile(path, { backend });
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === "BackendUnavailable") throw new Unavailable(`backend "${backend}": ${(error as Error).message}`);
    throw error;
  }
  try {
    requireBackend(file, backend);
  } catch (error) {
    file.close();
    throw error;
  }
  return file;
}

function sliceMethod(file: OurFile): SliceMethod {
  const method = (file as unknown as { getSlice?: unknown }).getSlice;
  if (typeof method !== "function") throw new Unavailable("SafetensorsFile.getSlice is not implemented");
  return (name) => (method as SliceMethod).call(file, name);
}

function run(figure: Figure, row: BenchBackend, path: string): WorkerResult {
  const { library: backend, noNative } = BACKEND_RUN[row];
  // Checked before anything is measured, without loading the addon (the open figure is measured cold).
  if (noNative && process.env[NO_NATIVE_ENV] !== "1") {
    throw new Error(`backend row "${row}" needs ${NO_NATIVE_ENV}=1 in the environment`);
  }
  const extra: Record<string, number | string> = {};
  let m: { ms: number; rss: number };
  switch (figure) {
    case "open": {
      // Measured cold (no probe before it): the first open of the process is what a user pays.
      let file: OurFile;
      try {
        const r = measure(() => openFile(path, { backend }));
        file = r.value;
        m = r;
      } catch (error) {
        if ((error as { code?: string }).code === "BackendUnavailable") {
          throw new Unavailable(`backend "${backend}": ${(error as Error).message}`);
        }
        throw error;
      }
      try {
        requireBackend(file, backend);
        extra.tensors = file.offsetKeys().length;
      } finally {
        file.close();
      }
      break;
    }
    case "tensor_view_32mib": {
      const file = openChecked(path, backend);
      const r = measure(() => file.getTensor(TENSOR_32MIB));
      extra.bytes = r.value.data.byteLength;
      m = r;
      file.close();
      break;
    }
    case "tensor_owned_32mib": {
      const file = openChecked(path, backend);
      const r = measure(() => {
        const tensor = file.getTensor(TENSOR_32MIB, { memory: "owned" });
        return { tensor, sum: touchPages(tensor.data) };
      });
      extra.bytes = r.value.tensor.data.byteLength;
      m = r;
      file.close();
      break;
    }
    case "slice_8_rows": {
      const file = openChecked(path, backend);
      const getSlice = sliceMethod(file);
      const r = measure(() => getSlice(SLICE_TENSOR).get(SLICE_SPEC));
      extra.bytes = r.value.data.byteLength;
      extra.shape = r.value.shape.join("x");
      m = r;
      for (let i = 0; i < SLICE_REPEAT_WARMUP; i++) getSlice(SLICE_TENSOR).get(SLICE_SPEC);
      const times: number[] = [];
      for (let i = 0; i < SLICE_REPEAT; i++) {
        const start = performance.now();
        getSlice(SLICE_TENSOR).get(SLICE_SPEC);
        times.push(performance.now() - start);
      }
      extra.inprocess_median_ms = median(times);
      file.close();
      break;
    }
    case "touch_all": {
      openChecked(path, backend).close();
      // Timed: open + every tensor (default memory: a view where the backend can) + its first and last element.
      const r = measure(() => {
        const file = openFile(path, { backend });
        let sum = 0;
        for (const name of file.offsetKeys()) sum += firstAndLast(file.getTensor(name).data);
        return { file, sum };
      });
      m = r;
      r.value.file.close();
      break;
    }
    case "load_all": {
      openChecked(path, backend).close();
      const r = measure(() => {
        const tensors = loadFile(path, { backend });
        let sum = 0;
        for (const tensor of tensors.values()) sum += touchPages(tensor.data);
        return { tensors, sum };
      });
      extra.tensors = r.value.tensors.size;
      m = r;
      break;
    }
  }
  // loadNative() is cached: after the run it tells whether the library used the addon during it.
  const addonAbsent = loadNative() === null;
  extra.native_addon = addonAbsent ? "absent" : "loaded";
  if (noNative && !addonAbsent) {
    throw new Error(`backend row "${row}": the native addon was loaded although ${NO_NATIVE_ENV}=1 was set`);
  }
  return { ok: true, ms: m.ms, rss_delta_mib: m.rss, extra };
}

function main(): number {
  const [figure, backend, path] = process.argv.slice(2);
  if (
    !path ||
    !(FIGURES as readonly string[]).includes(figure ?? "") ||
    !(BACKENDS as readonly string[]).includes(backend ?? "")
  ) {
    emit({ ok: false, error: `usage: worker.ts <${FIGURES.join("|")}> <${BACKENDS.join("|")}> <path>` });
    return 2;
  }
  try {
    emit(run(figure as Figure, backend as BenchBackend, path));
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

process.exitCode = main();
