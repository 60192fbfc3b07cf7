/**
 * Hostile headers, full size, as whole processes beside the reference: each case of bench/hostile-cases.ts is built
 * near the 100 MB header limit, then judged by our built CLI (`node bin/safetensors.js validate --json FILE`) and by the
 * reference (`safe_open(path, "pt")`, bench/hostile_ref.py), each under `/usr/bin/time` for its peak RSS. A case
 * passes when the verdicts agree (ours may be stricter only on duplicate keys), neither side crashes, and our wall
 * time is within 3× and our peak RSS within 2× of the reference's.
 *
 *   npm run build && node --import tsx bench/hostile.ts [--size BYTES] [--only ID,ID] [--runs N] [--json out.json]
 *     [--dir DIR] [--keep-env]
 *
 * Files are written one at a time to a scratch directory (a temp dir unless --dir) and deleted after use. The
 * benchmark harness calls `runHostileBench` and puts `markdown` in bench/RESULTS.md.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { expectedCodes, refClass } from "../scripts/reference-errors.js";
import { referencePython } from "../test/helpers/reference.js";
import { STRIPPED_ENV } from "./harness/child.js";
import { buildHostileFile, FULL_SIZE, HOSTILE_CASES, type HostileCase } from "./hostile-cases.js";
import { REPO_DIR } from "./spec.js";

const TIME = "/usr/bin/time";
/** Each side of a case runs at most this many times (median kept): a full-size reference run takes seconds. */
const MAX_RUNS = 3;

export const TIME_LIMIT = 3;
export const MEMORY_LIMIT = 2;

/** The benchmark harness's contract (bench/README.md, "Hostile headers"), plus `size` and `only`. */
export interface HostileBenchOptions {
  /** The reference's Python (default: the one test/helpers/reference.ts finds); null when it is unavailable. */
  python?: string | null;
  /** Scratch directory for the files (default a fresh temp dir, removed afterwards). */
  outDir?: string;
  /** Per process (default 10 minutes); a side that runs longer counts as a crash. */
  timeoutMs?: number;
  /** Runs per side and case, median kept (default 1, at most 3). */
  runs?: number;
  /** Progress lines (default none). */
  log?: (line: string) => void;
  /** Header size to build each case at (default {@link FULL_SIZE}, just under the 100 MB limit). */
  size?: number;
  /** Case ids to run (default all). */
  only?: readonly string[];
}

export interface HostileSide {
  ok: boolean;
  /** Our error code, or the reference's error text (first 2,000 characters). */
  error: string | null;
  /**
   * Ours, when `error` is NotSafetensors: the header check's own code, which `validate --json` gives as `headerCheck` (it names
   * bytes that cannot start a safetensors header, such as a header that is a JSON array, as not safetensors).
   */
  headerCheck?: string;
  /** A crash: a signal, an unexpected exit status, or no verdict printed. */
  crash: string | null;
  wallMs: number;
  peakRssMiB: number;
}

export interface HostileRow {
  id: string;
  what: string;
  headerBytes: number;
  ours: HostileSide;
  reference: HostileSide;
  /** "same", "stricter" (a deliberate difference), or "DIFFERENT". */
  verdict: "same" | "stricter" | "DIFFERENT";
  timeRatio: number;
  memoryRatio: number;
  pass: boolean;
}

/** A tiny valid file first: both sides' start-up cost (node vs python + torch import), for reading the ratios. */
const BASELINE: HostileCase = {
  id: "baseline",
  what: "one 4-byte tensor (start-up cost of each side)",
  build: () => ({ header: '{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', data: 4 }),
};

export async function runHostileBench(
  options: HostileBenchOptions = {},
): Promise<{ rows: HostileRow[]; markdown: string }> {
  const size = options.size ?? FULL_SIZE;
  const log = options.log ?? (() => {});
  const python = options.python === undefined ? referencePython()?.python : options.python;
  if (!python) {
    return { rows: [], markdown: "Hostile headers: not measured (the reference implementation is unavailable)." };
  }
  if (!fs.existsSync(TIME)) throw new Error(`hostile bench: ${TIME} is required (apt-get install -y time)`);
  const cli = path.join(REPO_DIR, "bin", "safetensors.js");
  if (!fs.existsSync(path.join(REPO_DIR, "dist", "cli", "main.js"))) {
    throw new Error("hostile bench: run `npm run build` first (it measures the built CLI)");
  }
  const runs = Math.max(1, Math.min(options.runs ?? 1, MAX_RUNS));
  const timeoutMs = options.timeoutMs ?? 600_000;
  const cases = [BASELINE, ...HOSTILE_CASES.filter((c) => !options.only || options.only.includes(c.id))];
  const dir = options.outDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "st-hostile-"));
  fs.mkdirSync(dir, { recursive: true });
  const rows: HostileRow[] = [];
  try {
    for (const hostile of cases) {
      const file = path.join(dir, `${hostile.id}.safetensors`);
      const bytes = buildHostileFile(hostile, size);
      const headerBytes = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
      fs.writeFileSync(file, bytes);
      try {
        const ours = measure([process.execPath, cli, "validate", "--json", file], oursVerdict, runs, timeoutMs);
        const refScript = path.join(REPO_DIR, "bench", "hostile_ref.py");
        const reference = measure([python, refScript, file], referenceVerdict, runs, timeoutMs);
        const row = judge(hostile, headerBytes, ours, reference);
        rows.push(row);
        log(formatRow(row));
      } finally {
        fs.rmSync(file, { force: true });
      }
    }
  } finally {
    if (!options.outDir) fs.rmSync(dir, { recursive: true, force: true });
  }
  return { rows, markdown: markdownTable(rows, size, runs) };
}

type Verdict = Pick<HostileSide, "ok" | "error" | "crash" | "headerCheck">;
type Judge = (status: number | null, stdout: string, stderr: string) => Verdict;

/**
 * Run one whole process `runs` times under /usr/bin/time: wall time measured here, peak RSS from time's %M (KiB).
 * The medians, and the first run's verdict.
 */
function measure(argv: string[], verdict: Judge, runs: number, timeoutMs: number): HostileSide {
  const stats = path.join(os.tmpdir(), `st-hostile-time-${process.pid}`);
  const walls: number[] = [];
  const rss: number[] = [];
  let first: Verdict | undefined;
  for (let run = 0; run < runs; run++) {
    const start = process.hrtime.bigint();
    const result = spawnSync(TIME, ["-f", "%M", "-o", stats, ...argv], {
      encoding: "utf8",
      maxBuffer: 1 << 30,
      timeout: timeoutMs,
      env: childEnv(),
    });
    walls.push(Number(process.hrtime.bigint() - start) / 1e6);
    const kib = fs.existsSync(stats) ? Number(fs.readFileSync(stats, "utf8").trim().split("\n").pop()) : Number.NaN;
    rss.push(kib / 1024);
    fs.rmSync(stats, { force: true });
    const stderr = result.signal ? `killed by ${result.signal}` : result.stderr;
    first ??= verdict(result.status, result.stdout, stderr);
  }
  return { ...first!, wallMs: median(walls), peakRssMiB: median(rss) };
}

/**
 * Both sides run without the variables the benchmark harness strips (STRIPPED_ENV, emptied by `--keep-env`):
 * NODE_EXTRA_CA_CERTS alone made every `node` start-up ~40 ms slower here (the bundle is parsed before any script),
 * more than the reference's whole run on the headers it fails at their start.
 */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONIOENCODING: "utf-8" };
  for (const key of STRIPPED_ENV) delete env[key];
  return env;
}

function median(values: number[]): number {
  const sorted = values.slice().sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/**
 * `validate --json`: {"ok":true} and status 0, or {"ok":false,"error":{"code"[,"headerCheck"]}} and status 1;
 * anything else is a crash.
 */
function oursVerdict(status: number | null, stdout: string, stderr: string): Verdict {
  let parsed: { ok?: boolean; error?: { code?: string; headerCheck?: string } } | undefined;
  try {
    parsed = JSON.parse(stdout.trim());
  } catch {
    parsed = undefined;
  }
  if (status === 0 && parsed?.ok === true) return { ok: true, error: null, crash: null };
  const code = parsed?.error?.code;
  const headerCheck = code === "NotSafetensors" ? parsed?.error?.headerCheck : undefined;
  if (status === 1 && code) return { ok: false, error: code, crash: null, ...(headerCheck ? { headerCheck } : {}) };
  return { ok: false, error: null, crash: `status ${status}: ${stderr.slice(0, 300)}` };
}

function referenceVerdict(status: number | null, stdout: string, stderr: string): Verdict {
  const line = stdout.trim().split("\n").pop();
  if (status !== 0 || !line) return { ok: false, error: null, crash: `status ${status}: ${stderr.slice(-300)}` };
  const { ok, error } = JSON.parse(line) as { ok: boolean; error: string | null };
  return { ok, error, crash: null };
}

function judge(hostile: HostileCase, headerBytes: number, ours: HostileSide, reference: HostileSide): HostileRow {
  let verdict: HostileRow["verdict"] = "DIFFERENT";
  if (!ours.crash && !reference.crash) {
    if (ours.ok && reference.ok) verdict = "same";
    else if (
      !ours.ok &&
      !reference.ok &&
      expectedCodes(refClass(reference.error))?.includes(ours.headerCheck ?? ours.error!)
    )
      verdict = "same";
    else if (hostile.stricter && reference.ok && ours.error === hostile.stricter) verdict = "stricter";
  }
  const timeRatio = ours.wallMs / reference.wallMs;
  const memoryRatio = ours.peakRssMiB / reference.peakRssMiB;
  const pass = verdict !== "DIFFERENT" && timeRatio <= TIME_LIMIT && memoryRatio <= MEMORY_LIMIT;
  return { id: hostile.id, what: hostile.what, headerBytes, ours, reference, verdict, timeRatio, memoryRatio, pass };
}

function sideVerdict(side: HostileSide, reference: boolean): string {
  if (side.crash) return `CRASH (${side.crash.split("\n")[0]!.slice(0, 60)})`;
  if (side.ok) return "ok";
  if (reference) return refClass(side.error).replace(/`_`/g, "…").slice(0, 48);
  return side.headerCheck ? `${side.error} (${side.headerCheck})` : side.error!;
}

function formatRow(row: HostileRow): string {
  const side = (s: HostileSide) => `${s.wallMs.toFixed(0)} ms / ${s.peakRssMiB.toFixed(0)} MiB`;
  return `${row.id}: ours ${sideVerdict(row.ours, false)} ${side(row.ours)}; reference ${sideVerdict(row.reference, true)} ${side(row.reference)}; ${row.timeRatio.toFixed(2)}x time, ${row.memoryRatio.toFixed(2)}x memory: ${row.pass ? "PASS" : "FAIL"}`;
}

function markdownTable(rows: HostileRow[], size: number, runs: number): string {
  const lines = [
    `Hostile headers built at ~${(size / 1e6).toFixed(0)} MB, each judged as a whole process (median of ${runs} ` +
      `run${runs === 1 ? "" : "s"}): ours \`node bin/safetensors.js validate --json FILE\`, the reference ` +
      `\`safe_open(FILE, "pt")\` (python start-up included; it imports torch only for files it accepts, so the ` +
      "`baseline` row shows that cost and failing files are compared without it). Pass: same verdict (ours stricter " +
      "only on duplicate keys), " +
      `no crash, wall time ≤ ${TIME_LIMIT}× and peak RSS ≤ ${MEMORY_LIMIT}× the reference's. Our NotSafetensors ` +
      "(the CLI naming bytes that cannot start a safetensors header) is judged by the header check's code it gives." +
      (STRIPPED_ENV.length > 0 ? ` Both sides run without ${STRIPPED_ENV.join(", ")}.` : ""),
    "",
    "| case | header MB | our verdict | reference verdict | ours ms / MiB | reference ms / MiB | time × | memory × | |",
    "|---|---:|---|---|---:|---:|---:|---:|---|",
  ];
  for (const row of rows) {
    const side = (s: HostileSide) => `${s.wallMs.toFixed(0)} / ${s.peakRssMiB.toFixed(0)}`;
    const result = row.pass ? (row.verdict === "stricter" ? "PASS (stricter)" : "PASS") : "**FAIL**";
    lines.push(
      `| ${row.id} | ${(row.headerBytes / 1e6).toFixed(1)} | ${sideVerdict(row.ours, false)} | ${sideVerdict(row.reference, true)} | ` +
        `${side(row.ours)} | ${side(row.reference)} | ${row.timeRatio.toFixed(2)} | ${row.memoryRatio.toFixed(2)} | ${result} |`,
    );
  }
  const failed = rows.filter((r) => !r.pass).length;
  lines.push("", `${rows.length - failed} of ${rows.length} pass.`);
  return lines.join("\n");
}

function option(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const size = option("size");
  const only = option("only");
  const dir = option("dir");
  const runs = option("runs");
  if (process.argv.includes("--keep-env")) STRIPPED_ENV.length = 0;
  const { rows, markdown } = await runHostileBench({
    ...(size ? { size: Number(size) } : {}),
    ...(only ? { only: only.split(",") } : {}),
    ...(dir ? { outDir: dir } : {}),
    ...(runs ? { runs: Number(runs) } : {}),
    log: (line) => console.error(line),
  });
  console.log(markdown);
  const json = option("json");
  if (json) fs.writeFileSync(json, `${JSON.stringify({ size: size ?? FULL_SIZE, rows }, null, 2)}\n`);
  process.exitCode = rows.every((r) => r.pass) ? 0 : 1;
}
