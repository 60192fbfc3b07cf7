/**
 * `npm run bench [-- --runs N] [--json PATH] [--only figure[,figure]] [--no-reference] [--timeout SECONDS]`
 *
 * Our figures side by side with the reference implementation (safetensors + torch from the reference venv), measured
 * in the same run on a synthetic Llama-style fp16 checkpoint. Every measurement runs in a fresh child process
 * (bench/worker.ts for ours, bench/ref_worker.py for the reference) that times just the operation and reads its own
 * RSS before and after; this orchestrator only spawns, collects, and reports (stdout table, bench/RESULTS.md, and
 * optionally a JSON file). One uncounted warm-up run per figure first, so the page cache is warm for everyone.
 */
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";
import {
  BACKEND_RUN,
  BACKENDS,
  BENCH_DIR,
  type BenchBackend,
  CHECKED_BACKENDS,
  CHECKPOINT_NAME,
  DEFAULT_OUT_DIR,
  FIGURES,
  type Figure,
  NO_NATIVE_ENV,
  PT_NAME,
  REPO_DIR,
  RESULT_PREFIX,
  SLICE_REPEAT,
  SLICE_REPEAT_WARMUP,
  type WorkerResult,
} from "./spec.js";

// ---------------------------------------------------------------------------------------------------------------
// Options

interface Options {
  runs: number;
  json: string | null;
  only: Figure[];
  reference: boolean;
  timeoutMs: number;
  argv: string[];
}

const USAGE = `usage: npm run bench -- [--runs N] [--json PATH] [--only ${FIGURES.join(",")}] [--no-reference] [--timeout SECONDS]`;

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: "string" },
      json: { type: "string" },
      only: { type: "string" },
      "no-reference": { type: "boolean" },
      timeout: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const runs = values.runs === undefined ? 5 : Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${values.runs}`);
  const timeout = values.timeout === undefined ? 600 : Number(values.timeout);
  if (!(timeout > 0)) throw new Error(`--timeout must be a positive number of seconds, got ${values.timeout}`);
  let only: Figure[] = [...FIGURES];
  if (values.only !== undefined) {
    const wanted = values.only
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
    const unknown = wanted.filter((w) => !(FIGURES as readonly string[]).includes(w));
    if (unknown.length > 0 || wanted.length === 0) {
      throw new Error(
        `--only: unknown figure(s) ${unknown.join(", ") || "(none given)"}; figures: ${FIGURES.join(", ")}`,
      );
    }
    only = FIGURES.filter((f) => wanted.includes(f));
  }
  // npm run changes the working directory to the package root; INIT_CWD is where the user typed the command.
  const base = process.env.INIT_CWD ?? process.cwd();
  const json = values.json === undefined ? null : path.resolve(base, values.json);
  return { runs, json, only, reference: !values["no-reference"], timeoutMs: timeout * 1000, argv };
}

// ---------------------------------------------------------------------------------------------------------------
// Child processes

interface ChildOutcome {
  result: WorkerResult;
  stderr: string;
}

function lastLines(text: string, n: number): string {
  return text.trimEnd().split("\n").slice(-n).join("\n");
}

/**
 * Run a child with a timeout; its last `RESULT {json}` stdout line is the outcome. Never throws. `env`: variables to
 * set (a string) or remove (undefined) on top of ours.
 */
function runChild(
  command: string,
  args: string[],
  timeoutMs: number,
  env: Record<string, string | undefined> = {},
): ChildOutcome {
  let child: SpawnSyncReturns<string>;
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PYTHONUNBUFFERED: "1" };
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[key];
    else childEnv[key] = value;
  }
  try {
    child = spawnSync(command, args, {
      cwd: REPO_DIR,
      encoding: "utf8",
      timeout: timeoutMs,
      killSignal: "SIGKILL",
      maxBuffer: 64 * 1024 * 1024,
      env: childEnv,
    });
  } catch (error) {
    return { result: { ok: false, error: `cannot spawn ${command}: ${(error as Error).message}` }, stderr: "" };
  }
  const stderr = child.stderr ?? "";
  if (child.error && (child.error as NodeJS.ErrnoException).code === "ETIMEDOUT") {
    return { result: { ok: false, error: `timed out after ${timeoutMs / 1000} s (killed)` }, stderr };
  }
  if (child.error) return { result: { ok: false, error: `cannot run ${command}: ${child.error.message}` }, stderr };
  const line = (child.stdout ?? "")
    .split("\n")
    .reverse()
    .find((l) => l.startsWith(RESULT_PREFIX));
  if (!line) {
    const how = child.signal ? `killed by ${child.signal}` : `exit code ${child.status}`;
    const tail = lastLines(stderr, 3);
    return { result: { ok: false, error: `no result (${how})${tail ? `: ${tail}` : ""}` }, stderr };
  }
  try {
    return { result: JSON.parse(line.slice(RESULT_PREFIX.length)) as WorkerResult, stderr };
  } catch {
    return { result: { ok: false, error: `unparsable result line: ${line.slice(0, 200)}` }, stderr };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Series: one warm-up, then N counted runs, each in a fresh process

interface Series {
  label: string;
  status: "ok" | "unavailable" | "failed" | "skipped";
  reason?: string;
  runs: number;
  failures: number;
  minMs?: number;
  medianMs?: number;
  maxMs?: number;
  rssMedian?: number;
  extras: Record<string, number | string>;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function skipped(label: string, reason: string): Series {
  return { label, status: "skipped", reason, runs: 0, failures: 0, extras: {} };
}

function runSeries(label: string, runs: number, once: () => ChildOutcome): Series {
  progress(`${label}: warm-up`);
  const warm = once().result;
  if (!warm.ok) {
    if (warm.unavailable) {
      progress(`${label}: unavailable (${warm.unavailable})`);
      return { label, status: "unavailable", reason: warm.unavailable, runs: 0, failures: 0, extras: {} };
    }
    progress(`${label}: FAILED in warm-up: ${warm.error}`);
    return { label, status: "failed", reason: `warm-up: ${warm.error}`, runs: 0, failures: 1, extras: {} };
  }
  const results: WorkerResult[] = [];
  let failures = 0;
  let firstError: string | undefined;
  for (let i = 0; i < runs; i++) {
    const r = once().result;
    if (r.ok && typeof r.ms === "number") {
      results.push(r);
      progress(`${label}: run ${i + 1}/${runs}: ${fmtMs(r.ms)} ms, RSS Δ ${fmtMib(r.rss_delta_mib)} MiB`);
    } else {
      failures++;
      firstError ??= r.error ?? r.unavailable ?? "no result";
      progress(`${label}: run ${i + 1}/${runs} FAILED: ${r.error ?? r.unavailable}`);
    }
  }
  if (results.length === 0) {
    return { label, status: "failed", reason: firstError, runs: 0, failures, extras: {} };
  }
  const ms = results.map((r) => r.ms!);
  const extras: Record<string, number | string> = {};
  for (const key of new Set(results.flatMap((r) => Object.keys(r.extra ?? {})))) {
    const values = results.map((r) => r.extra?.[key]).filter((v) => v !== undefined);
    extras[key] = values.every((v) => typeof v === "number") ? median(values as number[]) : String(values[0]);
  }
  return {
    label,
    status: "ok",
    reason: failures > 0 ? `${failures} of ${runs} runs failed: ${firstError}` : undefined,
    runs: results.length,
    failures,
    minMs: Math.min(...ms),
    medianMs: median(ms),
    maxMs: Math.max(...ms),
    rssMedian: median(results.map((r) => r.rss_delta_mib ?? Number.NaN)),
    extras,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Formatting

function progress(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

function fmtMs(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return "—";
  if (v < 10) return v.toFixed(3);
  if (v < 1000) return v.toFixed(1);
  return v.toFixed(0);
}

function fmtMib(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return "—";
  return v.toFixed(1);
}

function fmtRatio(ref: Series | null, ours: Series): string {
  const r = ratio(ref, ours);
  return r === null ? "—" : `${r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`;
}

function ratio(ref: Series | null, ours: Series): number | null {
  if (ref?.status !== "ok" || ours.status !== "ok") return null;
  return ref.medianMs! / ours.medianMs!;
}

function fmtRange(s: Series | null): string {
  if (s?.status !== "ok") return "—";
  return `${fmtMs(s.minMs)}–${fmtMs(s.maxMs)}`;
}

function fmtStatus(s: Series | null, what: string): string {
  if (!s) return `${what}: not measured`;
  if (s.status === "ok") return "";
  return `${s.status}${s.reason ? ` (${s.reason})` : ""}`;
}

function textTable(rows: string[][], leftColumns = 2): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const line = (r: string[]) =>
    r
      .map((cell, c) => (c < leftColumns ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!)))
      .join("  ")
      .trimEnd();
  return [line(rows[0]!), widths.map((w) => "-".repeat(w)).join("  "), ...rows.slice(1).map(line)].join("\n");
}

/**
 * A markdown table padded the way Biome formats markdown (so RESULTS.md passes `biome check`). `leftColumns`: how many
 * leading columns are text (left-aligned); the rest are numbers (right-aligned).
 */
function markdownTable(rows: string[][], leftColumns = 2): string {
  const cells = rows.map((r) => r.map((cell) => cell.replaceAll("|", "\\|")));
  const width = (text: string) => [...text].length;
  const widths = cells[0]!.map((_, c) => Math.max(3, ...cells.map((r) => width(r[c]!))));
  const pad = (text: string, c: number) => {
    const fill = " ".repeat(widths[c]! - width(text));
    return c < leftColumns ? text + fill : fill + text;
  };
  const line = (r: string[]) => `| ${r.map(pad).join(" | ")} |`;
  const rule = widths.map((w, c) => (c < leftColumns ? "-".repeat(w) : `${"-".repeat(w - 1)}:`));
  return [line(cells[0]!), `| ${rule.join(" | ")} |`, ...cells.slice(1).map(line)].join("\n");
}

// ---------------------------------------------------------------------------------------------------------------
// Environment: machine, reference python, disk space, checkpoint files

interface Reference {
  available: boolean;
  python: string;
  reason?: string;
  versions: Record<string, string>;
}

function detectReference(options: Options): Reference {
  const python = process.env.SAFETENSORS_REF_PYTHON ?? path.join(REPO_DIR, ".venv-ref", "bin", "python");
  if (!options.reference) return { available: false, python, reason: "--no-reference given", versions: {} };
  const source = process.env.SAFETENSORS_REF_PYTHON ? "SAFETENSORS_REF_PYTHON" : "default venv";
  if (!process.env.SAFETENSORS_REF_PYTHON && !fs.existsSync(python)) {
    return {
      available: false,
      python,
      reason: `${python} does not exist (set SAFETENSORS_REF_PYTHON to a python with safetensors 0.8.0 and torch)`,
      versions: {},
    };
  }
  const { result } = runChild(python, [path.join(BENCH_DIR, "ref_worker.py"), "versions"], 180_000);
  if (!result.ok) {
    return {
      available: false,
      python,
      reason: `${python} (${source}) cannot import safetensors and torch: ${result.error}`,
      versions: {},
    };
  }
  const versions = Object.fromEntries(Object.entries(result.extra ?? {}).map(([k, v]) => [k, String(v)]));
  if (versions.safetensors !== "0.8.0") {
    progress(`WARNING: the reference is safetensors ${versions.safetensors}, the issue compares against 0.8.0`);
  }
  return { available: true, python, versions };
}

function readProc(file: string): string {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

function machineInfo(): Record<string, string> {
  const cpuinfo = readProc("/proc/cpuinfo");
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? "unknown";
  const memKib = Number(/^MemTotal:\s*(\d+)/m.exec(readProc("/proc/meminfo"))?.[1] ?? Number.NaN);
  const ram = Number.isFinite(memKib) ? memKib * 1024 : os.totalmem();
  return {
    cpu: model.trim(),
    cores: String(os.availableParallelism?.() ?? os.cpus().length),
    ram: `${(ram / 2 ** 30).toFixed(1)} GiB`,
    kernel: `${os.type()} ${os.release()} (${os.arch()})`,
    node: process.version,
    loadStart: loadAverage(),
  };
}

/** Other work on the machine skews every figure: the load average is recorded with the results. */
function loadAverage(): string {
  return os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(" / ");
}

/** Free bytes for unprivileged users on the file system holding `dir` (df, then statfs). */
function freeBytes(dir: string): number | null {
  const df = spawnSync("df", ["-Pk", dir], { encoding: "utf8", timeout: 30_000 });
  const fields = df.status === 0 ? df.stdout.trim().split("\n").pop()?.trim().split(/\s+/) : undefined;
  const kib = fields ? Number(fields[3]) : Number.NaN;
  if (Number.isFinite(kib)) return kib * 1024;
  try {
    const s = fs.statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return null;
  }
}

const GB = 1e9;

interface Files {
  dir: string;
  own: boolean;
  checkpoint: string;
  pt: string | null;
  ptReason?: string;
  notes: string[];
}

/** null when `file` is the expected checkpoint, else why not; throws when the check itself cannot run. */
function checkCheckpoint(file: string, timeoutMs: number): string | null {
  if (!fs.existsSync(file)) return "missing";
  const child = spawnSync(process.execPath, ["--import", "tsx", path.join(BENCH_DIR, "checkpoint.ts"), "check", file], {
    cwd: REPO_DIR,
    encoding: "utf8",
    timeout: timeoutMs,
    killSignal: "SIGKILL",
  });
  if (child.status === 0) return null;
  if (child.status === 3) return child.stdout.trim() || "not the expected checkpoint";
  throw new Error(`cannot check ${file}: ${child.error?.message ?? lastLines(child.stderr ?? "", 3)}`);
}

function prepareFiles(options: Options, reference: Reference): Files {
  const custom = process.env.SAFETENSORS_BENCH_DIR;
  const dir = path.resolve(custom ?? DEFAULT_OUT_DIR);
  const own = !custom || dir === path.resolve(DEFAULT_OUT_DIR);
  fs.mkdirSync(dir, { recursive: true });
  const checkpoint = path.join(dir, CHECKPOINT_NAME);
  const files: Files = { dir, own, checkpoint, pt: null, notes: [] };

  // Setup steps get at least 2 min (check) / 30 min (build), whatever --timeout says about measurements.
  const problem = checkCheckpoint(checkpoint, Math.max(options.timeoutMs, 120_000));
  if (problem) {
    if (problem !== "missing" && !own) {
      throw new Error(
        `${checkpoint} exists but is not the benchmark checkpoint (${problem}); it is outside bench/out, so the harness ` +
          "will not overwrite it: remove it or point SAFETENSORS_BENCH_DIR elsewhere",
      );
    }
    const free = freeBytes(dir);
    if (free !== null && free < 3 * GB) {
      throw new Error(`only ${(free / GB).toFixed(1)} GB free in ${dir}; the checkpoint needs 2.55 GB`);
    }
    progress(`building ${checkpoint} (${problem}) with our saveFile ...`);
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", path.join(BENCH_DIR, "checkpoint.ts"), "build", checkpoint],
      { cwd: REPO_DIR, encoding: "utf8", timeout: Math.max(options.timeoutMs, 1_800_000), killSignal: "SIGKILL" },
    );
    if (child.status !== 0) {
      throw new Error(`building the checkpoint failed: ${child.error?.message ?? lastLines(child.stderr ?? "", 5)}`);
    }
    progress(child.stdout.trim());
  } else {
    progress(`checkpoint ${checkpoint} is present and checks`);
  }

  if (!options.only.includes("load_all")) return files;
  if (!reference.available) {
    files.ptReason = `reference unavailable: ${reference.reason}`;
    return files;
  }
  const pt = path.join(dir, PT_NAME);
  const ckStat = fs.statSync(checkpoint);
  let ptStat: fs.Stats | null = null;
  try {
    ptStat = fs.statSync(pt);
  } catch {}
  if (ptStat?.isFile() && ptStat.size > ckStat.size * 0.99 && ptStat.mtimeMs >= ckStat.mtimeMs) {
    progress(`torch.load twin ${pt} is present`);
    files.pt = pt;
    return files;
  }
  if (ptStat && !own) {
    files.ptReason = `${pt} exists but looks stale or incomplete, and it is outside bench/out: not overwritten`;
    return files;
  }
  const free = freeBytes(dir);
  if (free === null || free < 8 * GB) {
    files.ptReason = `${free === null ? "unknown" : (free / GB).toFixed(1)} GB free in ${dir}, need ≥ 8 GB to write the .pt twin`;
    return files;
  }
  progress(`building the torch.load twin ${pt} (torch.save of the same tensors) ...`);
  const started = performance.now();
  const { result } = runChild(
    reference.python,
    [path.join(BENCH_DIR, "ref_worker.py"), "make_pt", checkpoint, pt],
    Math.max(options.timeoutMs, 1_800_000),
  );
  if (!result.ok) {
    files.ptReason = `building the .pt twin failed: ${result.error}`;
    return files;
  }
  progress(`built ${pt} in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  files.pt = pt;
  return files;
}

// ---------------------------------------------------------------------------------------------------------------
// Figures

/** What the reference measures for each figure: the main comparison and extra lines. */
const REFERENCE_VARIANTS: Record<Figure, { main: string; mainLabel: string; extras: [string, string][] }> = {
  open: {
    main: "load_file",
    mainLabel: "safetensors.torch.load_file(path)",
    extras: [["safe_open", 'reference safe_open(path, "pt")']],
  },
  tensor_view_32mib: { main: "main", mainLabel: "f.get_tensor(name)", extras: [] },
  tensor_owned_32mib: { main: "main", mainLabel: "f.get_tensor(name).clone() + touch", extras: [] },
  slice_8_rows: { main: "main", mainLabel: "f.get_slice(name)[0:8]", extras: [] },
  touch_all: { main: "main", mainLabel: "safe_open + get_tensor + first/last", extras: [] },
  load_all: {
    main: "torch_load",
    mainLabel: "torch.load(pt, mmap=False, weights_only=True) + touch",
    extras: [["load_file", "reference safetensors.torch.load_file(path) + touch"]],
  },
};

interface FigureResult {
  figure: Figure;
  ours: Record<BenchBackend, Series>;
  reference: Series | null;
  referenceExtras: Series[];
}

function measureFigure(figure: Figure, options: Options, reference: Reference, files: Files): FigureResult {
  const ours = {} as Record<BenchBackend, Series>;
  for (const backend of BACKENDS) {
    ours[backend] = runSeries(`ours ${figure} ${backend}`, options.runs, () =>
      runChild(
        process.execPath,
        ["--expose-gc", "--import", "tsx", path.join(BENCH_DIR, "worker.ts"), figure, backend, files.checkpoint],
        options.timeoutMs,
        // The addon rows must not inherit a disabling variable; the no-addon row sets it.
        { [NO_NATIVE_ENV]: BACKEND_RUN[backend].noNative ? "1" : undefined },
      ),
    );
  }
  const variants = REFERENCE_VARIANTS[figure];
  const refSeries = (variant: string, label: string): Series => {
    if (!reference.available) return skipped(label, reference.reason ?? "reference unavailable");
    if (variant === "torch_load" && !files.pt) return skipped(label, files.ptReason ?? "no .pt twin");
    return runSeries(label, options.runs, () =>
      runChild(
        reference.python,
        [path.join(BENCH_DIR, "ref_worker.py"), figure, variant, files.checkpoint, files.pt ?? ""],
        options.timeoutMs,
      ),
    );
  };
  const main = refSeries(variants.main, `reference ${figure} (${variants.mainLabel})`);
  const extras = variants.extras.map(([variant, label]) => refSeries(variant, label));
  return { figure, ours, reference: main, referenceExtras: extras };
}

// ---------------------------------------------------------------------------------------------------------------
// Acceptance checks (from the issue)

interface Check {
  name: string;
  backend: string;
  status: "PASS" | "FAIL" | "N/A";
  detail: string;
}

function acceptance(results: Map<Figure, FigureResult>, options: Options): Check[] {
  const checks: Check[] = [];
  const ok = (s: Series | null | undefined): s is Series => !!s && s.status === "ok";
  // Ours crashing is a failed check; a backend or method not there yet (or a figure not selected) is N/A.
  const missingStatus = (s: Series | null | undefined): Check["status"] => (s?.status === "failed" ? "FAIL" : "N/A");
  const why = (s: Series | null | undefined, who: string) =>
    !s ? `${who} not measured (figure not selected)` : `${who} ${s.status}${s.reason ? `: ${s.reason}` : ""}`;
  for (const backend of CHECKED_BACKENDS) {
    // 1. open
    {
      const r = results.get("open");
      const ours = r?.ours[backend];
      const ref = r?.reference;
      const name = "open ≥ 5× faster than the reference's load_file, RSS growth ≤ 2 MiB";
      if (!ok(ours)) checks.push({ name, backend, status: missingStatus(ours), detail: why(ours, "ours") });
      else {
        const rssOk = ours.rssMedian! <= 2;
        if (!ok(ref)) {
          checks.push({
            name,
            backend,
            status: rssOk ? "N/A" : "FAIL",
            detail: `RSS Δ ${fmtMib(ours.rssMedian)} MiB; ${why(ref, "reference")}`,
          });
        } else {
          const x = ratio(ref, ours)!;
          checks.push({
            name,
            backend,
            status: x >= 5 && rssOk ? "PASS" : "FAIL",
            detail: `${fmtMs(ours.medianMs)} ms vs ${fmtMs(ref.medianMs)} ms = ${x.toFixed(2)}×; RSS Δ ${fmtMib(ours.rssMedian)} MiB`,
          });
        }
      }
    }
    // 2. owned 32 MiB
    {
      const r = results.get("tensor_owned_32mib");
      const ours = r?.ours[backend];
      const ref = r?.reference;
      const name = "owned 32 MiB tensor ≥ 5× faster than get_tensor().clone()";
      if (!ok(ours)) checks.push({ name, backend, status: missingStatus(ours), detail: why(ours, "ours") });
      else if (!ok(ref)) checks.push({ name, backend, status: "N/A", detail: why(ref, "reference") });
      else {
        const x = ratio(ref, ours)!;
        checks.push({
          name,
          backend,
          status: x >= 5 ? "PASS" : "FAIL",
          detail: `${fmtMs(ours.medianMs)} ms vs ${fmtMs(ref.medianMs)} ms = ${x.toFixed(2)}×`,
        });
      }
    }
    // 3. slice in-process
    {
      const ours = results.get("slice_8_rows")?.ours[backend];
      const name = `8-row slice ≤ 0.5 ms in-process (median of ${SLICE_REPEAT} calls)`;
      const v = ours?.extras.inprocess_median_ms;
      if (!ok(ours) || typeof v !== "number")
        checks.push({ name, backend, status: missingStatus(ours), detail: why(ours, "ours") });
      else checks.push({ name, backend, status: v <= 0.5 ? "PASS" : "FAIL", detail: `${fmtMs(v)} ms` });
    }
    // 4. eager load
    {
      const r = results.get("load_all");
      const ours = r?.ours[backend];
      const ref = r?.reference;
      const name = "eager load ≤ 1 s and ≥ 15× faster than torch.load";
      if (!ok(ours)) checks.push({ name, backend, status: missingStatus(ours), detail: why(ours, "ours") });
      else {
        const fast = ours.medianMs! <= 1000;
        if (!ok(ref)) {
          checks.push({
            name,
            backend,
            status: fast ? "N/A" : "FAIL",
            detail: `${fmtMs(ours.medianMs)} ms; ${why(ref, "torch.load")}`,
          });
        } else {
          const x = ratio(ref, ours)!;
          checks.push({
            name,
            backend,
            status: fast && x >= 15 ? "PASS" : "FAIL",
            detail: `${fmtMs(ours.medianMs)} ms vs torch.load ${fmtMs(ref.medianMs)} ms = ${x.toFixed(2)}×`,
          });
        }
      }
    }
  }
  // 5. pread figures present (with the addon), 6. the same without the addon (informational)
  const notSelected = FIGURES.filter((f) => !options.only.includes(f));
  for (const backend of ["pread", "pread-no-addon"] as const) {
    const missing = FIGURES.filter((f) => results.get(f)?.ours[backend].status !== "ok");
    checks.push({
      name: `${backend} figures present`,
      backend,
      status:
        missing.length === 0
          ? "PASS"
          : notSelected.length > 0 && missing.every((f) => notSelected.includes(f))
            ? "N/A"
            : "FAIL",
      detail:
        missing.length === 0
          ? `all ${FIGURES.length} figures measured`
          : `missing: ${missing.map((f) => `${f} (${results.get(f)?.ours[backend].status ?? "not selected"})`).join(", ")}`,
    });
  }
  return checks;
}

// ---------------------------------------------------------------------------------------------------------------
// Report

const TABLE_HEAD = [
  "figure",
  "backend",
  "ours median ms",
  "ours RSS Δ MiB",
  "reference median ms",
  "reference RSS Δ MiB",
  "ratio ref/ours",
  "ours min–max ms",
  "ref min–max ms",
];

function tableRows(results: FigureResult[]): string[][] {
  const rows = [TABLE_HEAD];
  for (const r of results) {
    for (const backend of BACKENDS) {
      const ours = r.ours[backend];
      const ref = r.reference;
      const oursMs = ours.status === "ok" ? fmtMs(ours.medianMs) : ours.status;
      const refMs = ref?.status === "ok" ? fmtMs(ref.medianMs) : (ref?.status ?? "—");
      rows.push([
        r.figure,
        backend,
        oursMs,
        ours.status === "ok" ? fmtMib(ours.rssMedian) : "—",
        refMs,
        ref?.status === "ok" ? fmtMib(ref.rssMedian) : "—",
        fmtRatio(ref, ours),
        fmtRange(ours),
        fmtRange(ref),
      ]);
    }
  }
  return rows;
}

function extraRows(results: FigureResult[]): string[][] {
  const rows = [["extra line", "median ms", "RSS Δ MiB", "min–max ms"]];
  for (const r of results) {
    for (const s of r.referenceExtras) {
      rows.push([s.label, s.status === "ok" ? fmtMs(s.medianMs) : s.status, fmtMib(s.rssMedian), fmtRange(s)]);
    }
    if (r.figure === "slice_8_rows") {
      const series: [string, Series | null][] = [
        ...BACKENDS.map((b) => [`ours ${b}`, r.ours[b]] as [string, Series]),
        ["reference", r.reference],
      ];
      for (const [who, s] of series) {
        const v = s?.extras.inprocess_median_ms;
        rows.push([
          `slice_8_rows in-process, ${who} (median of ${SLICE_REPEAT} calls, median over runs)`,
          typeof v === "number" ? fmtMs(v) : (s?.status ?? "—"),
          "—",
          "—",
        ]);
      }
    }
  }
  return rows;
}

function notes(results: FigureResult[], reference: Reference, files: Files): string[] {
  const out: string[] = [];
  if (!reference.available) out.push(`Reference figures skipped: ${reference.reason}`);
  if (files.ptReason && results.some((r) => r.figure === "load_all")) {
    out.push(`torch.load figure skipped: ${files.ptReason}`);
  }
  for (const r of results) {
    for (const backend of BACKENDS) {
      const s = r.ours[backend];
      if (s.status !== "ok" || s.reason) out.push(`ours ${r.figure} ${backend}: ${fmtStatus(s, "ours") || s.reason}`);
    }
    for (const s of [r.reference, ...r.referenceExtras]) {
      if (s && s.status !== "skipped" && (s.status !== "ok" || s.reason)) {
        out.push(`${s.label}: ${fmtStatus(s, "reference") || s.reason}`);
      }
    }
  }
  return out;
}

const METHOD_ROWS: string[][] = [
  ["figure", "ours (timed)", "reference (timed)"],
  [
    "`open`",
    "`openFile(path, {backend})`: header read + validation",
    '`safetensors.torch.load_file(path)` (extra line: `safe_open(path, "pt")`)',
  ],
  [
    "`tensor_view_32mib`",
    '`getTensor("model.layers.0.self_attn.q_proj.weight")` on an open file, default memory (a view on mmap; pread always copies)',
    "`f.get_tensor(name)` on an open `safe_open`",
  ],
  ["`tensor_owned_32mib`", '`getTensor(name, {memory: "owned"})` + touch', "`f.get_tensor(name).clone()` + touch"],
  [
    "`slice_8_rows`",
    `\`getSlice("model.embed_tokens.weight").get("0:8")\` (64 KiB), first call of the process; extra line: median of ${SLICE_REPEAT} calls after ${SLICE_REPEAT_WARMUP} warm-up calls, same process`,
    "`f.get_slice(name)[0:8]`, same two measurements",
  ],
  [
    "`touch_all`",
    "`openFile` + for every tensor (file order) `getTensor(name)` (view where possible) + read its first and last element",
    "`safe_open` + `get_tensor` (file order) + `flat[0].item()`, `flat[-1].item()`",
  ],
  [
    "`load_all`",
    "`loadFile(path, {backend})` + touch every tensor",
    "`torch.load(pt, mmap=False, weights_only=True)` + touch (extra line: `safetensors.torch.load_file` + touch)",
  ],
];

const METHOD = `- Every run is a fresh process (\`node --expose-gc --import tsx bench/worker.ts <figure> <backend> <path>\` for ours,
  \`<ref python> bench/ref_worker.py <figure> <variant> <path> <pt>\` for the reference). Imports happen before
  anything is measured. Inside the process: wall time of just the operation (\`performance.now()\` /
  \`time.perf_counter_ns()\`) and RSS after minus before (\`process.memoryUsage.rss()\` / \`VmRSS\` of
  \`/proc/self/status\`, MiB), after a GC (\`gc()\` / \`gc.collect()\`).
- Per figure, backend and reference variant: one uncounted warm-up run (so the page cache holds the files for
  everyone: these are warm-cache figures), then N counted runs (\`--runs\`, default 5); min/median/max of the
  time, median of the RSS deltas. A backend that is missing is recorded as unavailable, not as a failure.
- The \`mmap\` and \`pread\` rows run with the optional native addon loaded; the \`pread-no-addon\` row runs our worker
  with \`SAFETENSORS_NO_NATIVE=1\` and \`{backend: "pread"}\` (plain Node fs reads into plain memory), and a run fails
  unless \`loadNative()\` really returned null in it.
- "Touch" = read one byte every 4096 bytes (bytes 0, 4096, 8192, ... of each tensor's data), so memory that is
  mapped or faulted lazily is really paid for. Ours: a JS loop over the Uint8Array; reference:
  \`int(t.reshape(-1).view(torch.uint8)[::4096].sum())\`.
- The checkpoint is synthetic Llama-style fp16 (hidden 4096, intermediate 11008, vocab 32000, 5 layers, 48 tensors,
  2.37 GiB), written by our \`saveFile\`; the \`.pt\` twin is \`torch.save\` of the same tensors by the reference.

${markdownTable(METHOD_ROWS, 3)}

The ratio column is reference median / ours median (above 1: ours is faster). The reference has no backend
choice in these calls (it maps the file), so the same reference figure appears on every backend row.`;

function report(
  options: Options,
  reference: Reference,
  files: Files,
  results: FigureResult[],
  checks: Check[],
  machine: Record<string, string>,
  started: Date,
  elapsedS: number,
): string {
  const md: string[] = [];
  md.push("# Benchmark results", "");
  md.push(
    `Generated by \`npm run bench${options.argv.length ? ` -- ${options.argv.join(" ")}` : ""}\` on ${started.toISOString()} (took ${elapsedS.toFixed(0)} s). This file is rewritten by every run.`,
    "",
  );
  md.push("## Machine", "");
  md.push(`- CPU: ${machine.cpu}, ${machine.cores} cores`);
  md.push(`- RAM: ${machine.ram}`);
  md.push(`- Kernel: ${machine.kernel}`);
  md.push(`- Node: ${machine.node}`);
  if (reference.available) {
    md.push(
      `- Reference: Python ${reference.versions.python}, torch ${reference.versions.torch}, safetensors ${reference.versions.safetensors} (\`${reference.python}\`)`,
    );
  } else md.push(`- Reference: skipped (${reference.reason})`);
  md.push(`- Load average (1/5/15 min) at start: ${machine.loadStart}, at end: ${loadAverage()}`);
  md.push(`- Runs per figure: ${options.runs} (+1 warm-up), each in a fresh process`, "");
  md.push("## Results", "", markdownTable(tableRows(results)), "");
  const extras = extraRows(results);
  if (extras.length > 1) md.push("### Extra lines", "", markdownTable(extras, 1), "");
  md.push("## Acceptance checks (from the issue)", "");
  md.push(
    markdownTable(
      [
        ["check", "backend", "result", "detail"],
        ...checks.map((c) => [c.name, c.backend, `**${c.status}**`, c.detail]),
      ],
      4,
    ),
    "",
  );
  const n = notes(results, reference, files);
  if (n.length > 0) md.push("## Notes", "", ...n.map((x) => `- ${x}`), "");
  md.push("## How each figure is measured", "", METHOD, "");
  return md.join("\n");
}

interface JsonSide {
  median_ms: number | null;
  rss_delta_mib: number | null;
  min_ms?: number;
  max_ms?: number;
  runs?: number;
  status?: string;
  reason?: string;
  variant?: string;
}

function jsonSide(s: Series, variant?: string): JsonSide {
  return {
    median_ms: s.status === "ok" ? s.medianMs! : null,
    rss_delta_mib: s.status === "ok" ? s.rssMedian! : null,
    ...(s.status === "ok" ? { min_ms: s.minMs!, max_ms: s.maxMs!, runs: s.runs } : {}),
    status: s.status,
    ...(s.reason ? { reason: s.reason } : {}),
    ...(variant ? { variant } : {}),
  };
}

function jsonRows(results: FigureResult[]): unknown[] {
  const rows: unknown[] = [];
  for (const r of results) {
    for (const backend of BACKENDS) {
      const ours = r.ours[backend];
      const ref = r.reference;
      const extras: Record<string, unknown> = {};
      if (typeof ours.extras.native_addon === "string") extras.ours_native_addon = ours.extras.native_addon;
      if (typeof ours.extras.inprocess_median_ms === "number") {
        extras.ours_inprocess_median_ms = ours.extras.inprocess_median_ms;
      }
      if (typeof ref?.extras.inprocess_median_ms === "number") {
        extras.reference_inprocess_median_ms = ref.extras.inprocess_median_ms;
      }
      for (const [i, s] of r.referenceExtras.entries()) {
        extras[`reference_${REFERENCE_VARIANTS[r.figure].extras[i]![0]}`] = jsonSide(s, s.label);
      }
      rows.push({
        figure: r.figure,
        backend,
        ours: jsonSide(ours),
        reference: ref && ref.status === "ok" ? jsonSide(ref, REFERENCE_VARIANTS[r.figure].mainLabel) : null,
        ...(ref && ref.status !== "ok" ? { reference_status: `${ref.status}: ${ref.reason ?? ""}` } : {}),
        ...(Object.keys(extras).length ? { extras } : {}),
      });
    }
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------------------------

function main(): number {
  let options: Options;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  const started = new Date();
  const t0 = performance.now();
  const machine = machineInfo();
  const reference = detectReference(options);
  if (reference.available) {
    progress(
      `reference: ${reference.python} (python ${reference.versions.python}, torch ${reference.versions.torch}, safetensors ${reference.versions.safetensors})`,
    );
  } else {
    console.log(`Reference figures are skipped: ${reference.reason}`);
  }
  let files: Files;
  try {
    files = prepareFiles(options, reference);
  } catch (error) {
    console.error(`bench: ${(error as Error).message}`);
    return 1;
  }
  if (files.ptReason && options.only.includes("load_all")) console.log(`torch.load figure skipped: ${files.ptReason}`);

  const results = new Map<Figure, FigureResult>();
  for (const figure of options.only) {
    try {
      results.set(figure, measureFigure(figure, options, reference, files));
    } catch (error) {
      // runChild never throws; this is a harness bug, reported without stopping the other figures.
      progress(`${figure}: harness error: ${(error as Error).stack ?? error}`);
      const failed = (label: string): Series => ({
        label,
        status: "failed",
        reason: `harness error: ${(error as Error).message}`,
        runs: 0,
        failures: 1,
        extras: {},
      });
      results.set(figure, {
        figure,
        ours: Object.fromEntries(BACKENDS.map((b) => [b, failed(`ours ${figure} ${b}`)])) as Record<
          BenchBackend,
          Series
        >,
        reference: failed(`reference ${figure}`),
        referenceExtras: [],
      });
    }
  }
  const list = [...results.values()];
  const checks = acceptance(results, options);
  const elapsedS = (performance.now() - t0) / 1000;

  console.log("");
  console.log(textTable(tableRows(list)));
  const extras = extraRows(list);
  if (extras.length > 1) console.log(`\n${textTable(extras, 1)}`);
  console.log("\nAcceptance checks:");
  for (const c of checks) console.log(`  ${c.status.padEnd(4)}  [${c.backend}] ${c.name}: ${c.detail}`);
  const n = notes(list, reference, files);
  if (n.length > 0) console.log(`\nNotes:\n${n.map((x) => `  - ${x}`).join("\n")}`);

  const resultsPath = path.join(BENCH_DIR, "RESULTS.md");
  fs.writeFileSync(resultsPath, report(options, reference, files, list, checks, machine, started, elapsedS));
  console.log(`\nWrote ${path.relative(process.cwd(), resultsPath) || resultsPath}`);
  if (options.json) {
    fs.mkdirSync(path.dirname(options.json), { recursive: true });
    fs.writeFileSync(options.json, `${JSON.stringify(jsonRows(list), null, 2)}\n`);
    console.log(`Wrote ${options.json}`);
  }
  return 0;
}

process.exitCode = main();
