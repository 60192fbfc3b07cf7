/**
 * Measuring one figure: every side (our backend rows, the reference, its extra lines) gets one uncounted warm-up run
 * (so the page cache is warm for everyone), then `runs` counted rounds in which each side runs once, in an order
 * rotated every round: the sides are interleaved, so drift in the machine's load hits them alike.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { BACKENDS, type BenchBackend, type Figure, type ProcessContext, Unavailable } from "../figures/types.js";
import { BENCH_DIR, REPO_DIR } from "../spec.js";
import { type ChildRun, runChild } from "./child.js";
import type { Files } from "./files.js";
import { fmtMib, fmtMs } from "./format.js";
import type { Reference } from "./machine.js";
import { NO_NATIVE_ENV, type WorkerRequest } from "./protocol.js";
import { type Sample, type Series, summarize } from "./stats.js";

const WORKER_JS = fileURLToPath(new URL("../worker.js", import.meta.url));
const TIME = "/usr/bin/time";

export interface FigureResult {
  figure: Figure;
  ours: Partial<Record<BenchBackend, Series>>;
  reference: Series;
  /** Keyed by the extra's key. */
  extras: Record<string, Series>;
  /** Whole-process figures with `sameStdout`: whether both sides printed the same bytes (warm-up run). */
  stdout?: { same: boolean; detail: string };
}

export interface MeasureEnv {
  /** The Node binary our side runs on. */
  node: string;
  runs: number;
  timeoutMs: number;
  reference: Reference;
  files: Files;
  progress: (message: string) => void;
}

interface Side {
  label: string;
  /** One run; `peak`: also measure the peak RSS of a whole process (warm-up only). */
  once: (peak: boolean) => ChildRun & { peakMib?: number };
}

function request(figure: Figure, variant: string, env: MeasureEnv): WorkerRequest {
  return { figure: figure.name, variant, path: env.files.checkpoint, pt: env.files.pt, scratch: env.files.scratch };
}

/** A whole process, timed spawn to exit; its peak RSS through /usr/bin/time when asked (and available). */
function processRun(makeArgv: () => string[], env: MeasureEnv, peak: boolean): ChildRun & { peakMib?: number } {
  let argv: string[];
  try {
    argv = makeArgv();
  } catch (error) {
    // A side whose tool is missing here (mergekit, PEFT) says so with Unavailable while making its command.
    if (!(error instanceof Unavailable)) throw error;
    return { result: { ok: false, unavailable: error.message }, stdout: "", stderr: "", wallMs: 0 };
  }
  if (!peak || !fs.existsSync(TIME)) return runChild(argv, env.timeoutMs, {}, false);
  const out = path.join(env.files.scratch, `time-${process.pid}.txt`);
  fs.mkdirSync(env.files.scratch, { recursive: true });
  const run = runChild([TIME, "-f", "%M", "-o", out, ...argv], env.timeoutMs, {}, false);
  const kib = Number(fs.readFileSync(out, "utf8").trim().split("\n").pop());
  fs.rmSync(out, { force: true });
  return { ...run, ...(Number.isFinite(kib) ? { peakMib: kib / 1024 } : {}) };
}

function processContext(env: MeasureEnv): ProcessContext {
  return {
    repo: REPO_DIR,
    bench: BENCH_DIR,
    node: env.node,
    python: env.reference.python,
    path: env.files.checkpoint,
    pt: env.files.pt,
    scratch: env.files.scratch,
  };
}

/** Read `file` through (into the page cache), 8 MiB at a time. */
function readThrough(file: string): void {
  const fd = fs.openSync(file, "r");
  try {
    const buffer = Buffer.allocUnsafe(8 << 20);
    while (fs.readSync(fd, buffer, 0, buffer.length, null) > 0) {}
  } finally {
    fs.closeSync(fd);
  }
}

function sidesOf(figure: Figure, env: MeasureEnv): { sides: Map<string, Side>; skipped: Map<string, Series> } {
  const sides = new Map<string, Side>();
  const skipped = new Map<string, Series>();
  const { reference, files } = env;
  const pctx = processContext(env);
  for (const backend of figure.backends ?? BACKENDS) {
    const label = `ours ${figure.name} ${backend}`;
    const ours = figure.ours;
    if (ours.kind === "process") {
      sides.set(`ours:${backend}`, { label, once: (peak) => processRun(() => ours.argv(pctx), env, peak) });
      continue;
    }
    const noAddon = backend === "pread-no-addon";
    sides.set(`ours:${backend}`, {
      label,
      once: () =>
        runChild(
          [env.node, "--expose-gc", WORKER_JS, JSON.stringify(request(figure, backend, env))],
          env.timeoutMs,
          // The addon rows must not inherit a disabling variable; the no-addon row sets it.
          { [NO_NATIVE_ENV]: noAddon ? "1" : undefined },
        ),
    });
  }
  const refs = [
    { key: "main", side: figure.reference },
    ...(figure.referenceExtras ?? []).map((e) => ({ key: e.key, side: e })),
  ];
  for (const { key, side } of refs) {
    const label = `reference ${figure.name}${side.kind === "python" ? ` (${side.label})` : ""}${key === "main" ? "" : ` [${key}]`}`;
    if (!reference.available) {
      skipped.set(`ref:${key}`, skippedSeries(label, reference.reason ?? "reference unavailable"));
    } else if (side.kind === "python" && side.needsPt && !files.pt) {
      skipped.set(`ref:${key}`, skippedSeries(label, files.ptReason ?? "no .pt twin"));
    } else if (side.kind === "process") {
      sides.set(`ref:${key}`, { label, once: (peak) => processRun(() => side.argv(pctx), env, peak) });
    } else {
      const payload = {
        ...request(figure, key, env),
        code: side.code,
        context: figure.context ?? {},
        repeat: figure.repeat ?? null,
        library_in_window: figure.libraryInWindow ?? false,
      };
      sides.set(`ref:${key}`, {
        label,
        once: () =>
          runChild(
            [reference.python, path.join(BENCH_DIR, "ref_worker.py"), "run", JSON.stringify(payload)],
            env.timeoutMs,
          ),
      });
    }
  }
  return { sides, skipped };
}

function skippedSeries(label: string, reason: string): Series {
  return { label, status: "skipped", reason, runs: 0, failures: 0, extras: {} };
}

export function measureFigure(figure: Figure, env: MeasureEnv): FigureResult {
  const { progress } = env;
  const { sides, skipped } = sidesOf(figure, env);
  const done = new Map<string, Series>(skipped);
  const samples = new Map<string, Sample[]>();
  const failures = new Map<string, { count: number; first?: string }>();
  const warmStdout = new Map<string, string>();
  const peaks = new Map<string, number>();
  const isProcess = (key: string) =>
    key.startsWith("ours:") ? figure.ours.kind === "process" : figure.reference.kind === "process";

  const prepare = () => {
    if (figure.freshOutputs) {
      fs.rmSync(env.files.scratch, { recursive: true, force: true });
      fs.mkdirSync(env.files.scratch, { recursive: true });
      spawnSync("sync", { stdio: "ignore" });
    }
    for (const file of figure.warmFiles?.(processContext(env)) ?? []) readThrough(file);
  };
  for (const [key, side] of sides) {
    progress(`${side.label}: warm-up`);
    prepare();
    const run = side.once(isProcess(key));
    if (!run.result.ok) {
      const status = run.result.unavailable ? "unavailable" : "failed";
      const reason = run.result.unavailable ?? `warm-up: ${run.result.error}`;
      progress(`${side.label}: ${status} (${reason})`);
      done.set(key, { label: side.label, status, reason, runs: 0, failures: status === "failed" ? 1 : 0, extras: {} });
      continue;
    }
    warmStdout.set(key, run.stdout);
    if (run.peakMib !== undefined) peaks.set(key, run.peakMib);
    samples.set(key, []);
    failures.set(key, { count: 0 });
  }
  const live = [...sides.keys()].filter((k) => samples.has(k));
  for (let round = 0; round < env.runs; round++) {
    const order = live.map((_, i) => live[(i + round) % live.length]!);
    for (const key of order) {
      const side = sides.get(key)!;
      prepare();
      const run = side.once(false);
      const r = run.result;
      if (r.ok && typeof r.ms === "number") {
        const sample: Sample = { ms: r.ms, rss: r.rss_delta_mib ?? peaks.get(key) ?? null, extra: r.extra };
        samples.get(key)!.push(sample);
        progress(`${side.label}: run ${round + 1}/${env.runs}: ${fmtMs(r.ms)} ms, RSS ${fmtMib(sample.rss)} MiB`);
      } else {
        const f = failures.get(key)!;
        f.count++;
        f.first ??= r.error ?? r.unavailable ?? "no result";
        progress(`${side.label}: run ${round + 1}/${env.runs} FAILED: ${r.error ?? r.unavailable}`);
      }
    }
  }
  for (const key of live) {
    const f = failures.get(key)!;
    done.set(key, summarize(sides.get(key)!.label, samples.get(key)!, f.count, f.first));
  }
  const ours: FigureResult["ours"] = {};
  for (const backend of figure.backends ?? BACKENDS) ours[backend] = done.get(`ours:${backend}`);
  const extras: Record<string, Series> = {};
  for (const e of figure.referenceExtras ?? []) extras[e.key] = done.get(`ref:${e.key}`)!;
  const result: FigureResult = { figure, ours, reference: done.get("ref:main")!, extras };
  if (figure.sameStdout) {
    const a = warmStdout.get("ours:auto");
    const b = warmStdout.get("ref:main");
    if (a !== undefined && b !== undefined) {
      const same = a === b;
      let detail = `${a.length} bytes, identical`;
      if (!same) {
        let i = 0;
        while (i < a.length && a[i] === b[i]) i++;
        detail = `differ at byte ${i}: ours ${JSON.stringify(a.slice(i, i + 60))}, reference ${JSON.stringify(b.slice(i, i + 60))}`;
      }
      result.stdout = { same, detail };
      progress(`${figure.name}: outputs ${same ? "identical" : "DIFFER"} (${detail})`);
    }
  }
  return result;
}
