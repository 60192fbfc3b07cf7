/** The machine and the reference installation a run measured on. */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { BENCH_DIR, REPO_DIR } from "../spec.js";
import { runChild, STRIPPED_ENV } from "./child.js";

export interface Machine {
  cpu: string;
  cores: number;
  ramGib: number;
  kernel: string;
  node: string;
  /** /sys/kernel/mm/transparent_hugepage/{enabled,defrag}: the selected value of each. */
  thp: { enabled: string; defrag: string };
  /** First touch of a fresh 4 KiB page (anonymous memory, hugepages refused), µs; null when the probe failed. */
  pageFaultUs: number | null;
  pageFaultProbe: string;
  commit: string;
  loadStart: string;
  /** Variables set here that the children run without (STRIPPED_ENV), and `node -e 0` medians with and without. */
  startup: { stripped: string[]; withMs: number | null; withoutMs: number | null };
}

function readText(file: string): string {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/** The bracketed choice of a sysfs "always [madvise] never" file. */
function selected(file: string): string {
  return /\[([^\]]+)\]/.exec(readText(file))?.[1] ?? "unknown";
}

/** Other work on the machine skews every figure: the load average is recorded with the results. */
export function loadAverage(): string {
  return os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(" / ");
}

function gitCommit(): string {
  const git = (...args: string[]) => spawnSync("git", args, { cwd: REPO_DIR, encoding: "utf8", timeout: 30_000 });
  const head = git("rev-parse", "--short", "HEAD");
  if (head.status !== 0) return "unknown";
  const dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "native", "bin", "bench");
  return `${head.stdout.trim()}${dirty.stdout.trim() ? " (with uncommitted changes)" : ""}`;
}

/**
 * Page-fault cost: the reference's Python can refuse hugepages with madvise (mmap.MADV_NOHUGEPAGE), so it probes
 * 4 KiB pages for certain; without it, a Node fallback touches a fresh 256 MiB ArrayBuffer (hugepages possible when
 * THP is "always", which the report then says).
 */
function probePageFaults(python: string | null, timeoutMs: number): { us: number | null; how: string } {
  if (python) {
    const { result } = runChild([python, path.join(BENCH_DIR, "ref_worker.py"), "page_fault_probe"], timeoutMs);
    const us = result.extra?.first_touch_us;
    if (result.ok && typeof us === "number") return { us, how: "Python mmap, MADV_NOHUGEPAGE, 65,536 pages" };
  }
  const code = `const n=256<<20,a=new Uint8Array(n);let t=performance.now();for(let i=0;i<n;i+=4096)a[i]=1;const f=performance.now()-t;t=performance.now();for(let i=0;i<n;i+=4096)a[i]=2;const s=performance.now()-t;console.log(((f-s)*1000)/(n/4096))`;
  const child = spawnSync(process.execPath, ["-e", code], { encoding: "utf8", timeout: timeoutMs });
  const us = Number(child.stdout?.trim());
  return Number.isFinite(us) && child.status === 0
    ? { us, how: "Node ArrayBuffer, 65,536 pages (hugepages not refused)" }
    : { us: null, how: `probe failed: ${child.stderr?.trim().slice(0, 200) ?? "no output"}` };
}

/** Median wall time of `node -e 0` (7 fresh processes) with the environment as given and as the children get it. */
function probeStartup(timeoutMs: number): Machine["startup"] {
  const stripped = STRIPPED_ENV.filter((key) => process.env[key] !== undefined);
  const median = (env: NodeJS.ProcessEnv): number | null => {
    const times: number[] = [];
    for (let i = 0; i < 7; i++) {
      const start = performance.now();
      const child = spawnSync(process.execPath, ["-e", "0"], { env, timeout: timeoutMs });
      if (child.status !== 0) return null;
      times.push(performance.now() - start);
    }
    return times.sort((a, b) => a - b)[3]!;
  };
  const without = { ...process.env };
  for (const key of STRIPPED_ENV) delete without[key];
  return { stripped, withMs: stripped.length > 0 ? median(process.env) : null, withoutMs: median(without) };
}

export function machineInfo(python: string | null, timeoutMs: number): Machine {
  const cpuinfo = readText("/proc/cpuinfo");
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? "unknown";
  const memKib = Number(/^MemTotal:\s*(\d+)/m.exec(readText("/proc/meminfo"))?.[1] ?? Number.NaN);
  const probe = probePageFaults(python, timeoutMs);
  return {
    cpu: model.trim(),
    cores: os.availableParallelism?.() ?? os.cpus().length,
    ramGib: (Number.isFinite(memKib) ? memKib * 1024 : os.totalmem()) / 2 ** 30,
    kernel: `${os.type()} ${os.release()} (${os.arch()})`,
    node: process.version,
    thp: {
      enabled: selected("/sys/kernel/mm/transparent_hugepage/enabled"),
      defrag: selected("/sys/kernel/mm/transparent_hugepage/defrag"),
    },
    pageFaultUs: probe.us,
    pageFaultProbe: probe.how,
    commit: gitCommit(),
    loadStart: loadAverage(),
    startup: probeStartup(timeoutMs),
  };
}

export interface Reference {
  available: boolean;
  python: string;
  reason?: string;
  versions: Record<string, string>;
}

/** The reference's Python: SAFETENSORS_REF_PYTHON, else .venv-ref/bin/python; must import safetensors and torch. */
export function detectReference(wanted: boolean): Reference {
  const python = process.env.SAFETENSORS_REF_PYTHON ?? path.join(REPO_DIR, ".venv-ref", "bin", "python");
  if (!wanted) return { available: false, python, reason: "--no-reference given", versions: {} };
  if (!process.env.SAFETENSORS_REF_PYTHON && !fs.existsSync(python)) {
    const reason = `${python} does not exist (set SAFETENSORS_REF_PYTHON to a python with safetensors 0.8.0 and torch)`;
    return { available: false, python, reason, versions: {} };
  }
  const { result } = runChild([python, path.join(BENCH_DIR, "ref_worker.py"), "versions"], 180_000);
  if (!result.ok) {
    return {
      available: false,
      python,
      reason: `${python} cannot import safetensors and torch: ${result.error}`,
      versions: {},
    };
  }
  const versions = Object.fromEntries(Object.entries(result.extra ?? {}).map(([k, v]) => [k, String(v)]));
  return { available: true, python, versions };
}
