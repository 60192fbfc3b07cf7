/** The report: terminal tables, bench/RESULTS.md and the --json file, all from the same results. */
import * as path from "node:path";
import { BACKENDS, type Figure } from "../figures/types.js";
import { REPO_DIR } from "../spec.js";
import type { Check } from "./acceptance.js";
import { fmtMib, fmtMs, fmtRatio, markdownTable, textTable, verdict } from "./format.js";
import type { HistoryRun } from "./history.js";
import { loadAverage, type Machine, type Reference } from "./machine.js";
import type { FigureResult } from "./measure.js";
import type { Options } from "./options.js";
import { ratio, type Series } from "./stats.js";

export interface Hostile {
  status: "ok" | "skipped" | "failed";
  reason?: string;
  rows?: unknown;
  markdown?: string;
}

export interface Run {
  options: Options;
  started: Date;
  elapsedS: number;
  machine: Machine;
  reference: Reference;
  results: FigureResult[];
  checks: Check[];
  history: HistoryRun[];
  hostile: Hostile;
  notes: string[];
}

const cell = (s: Series | undefined, pick: (s: Series) => number | undefined, fmt: (v?: number) => string) =>
  s?.status === "ok" ? fmt(pick(s)) : (s?.status ?? "—");
const range = (s: Series | undefined) => (s?.status === "ok" ? `${fmtMs(s.minMs)}–${fmtMs(s.maxMs)}` : "—");

function mainRows(results: readonly FigureResult[], section: Figure["section"]): string[][] {
  const rows = [
    [
      "figure",
      "backend",
      "ours median ms",
      "ours RSS MiB",
      "ref median ms",
      "ref RSS MiB",
      "ref/ours",
      "verdict",
      "ours min–max",
      "ref min–max",
    ],
  ];
  for (const r of results) {
    if ((r.figure.section ?? "main") !== section) continue;
    for (const backend of BACKENDS) {
      const ours = r.ours[backend];
      if (!ours) continue;
      const x = ratio(r.reference, ours);
      rows.push([
        r.figure.name +
          (backend === "auto" && r.figure.goal
            ? ` (${r.figure.goal.guard ? "guard" : "goal"} ≥ ${r.figure.goal.ratio}×)`
            : ""),
        backend,
        cell(ours, (s) => s.medianMs, fmtMs),
        cell(ours, (s) => s.rssMedian, fmtMib),
        cell(r.reference, (s) => s.medianMs, fmtMs),
        cell(r.reference, (s) => s.rssMedian, fmtMib),
        fmtRatio(x),
        verdict(x),
        range(ours),
        range(r.reference),
      ]);
    }
  }
  return rows;
}

function extraRows(results: readonly FigureResult[]): string[][] {
  const rows = [["reference extra line", "median ms", "RSS MiB", "min–max ms", "vs ours (auto)"]];
  for (const r of results) {
    for (const extra of r.figure.referenceExtras ?? []) {
      const s = r.extras[extra.key]!;
      const x = ratio(s, r.ours.auto);
      rows.push([
        `${r.figure.name}: ${extra.label}`,
        cell(s, (v) => v.medianMs, fmtMs),
        cell(s, (v) => v.rssMedian, fmtMib),
        range(s),
        x === null ? "—" : verdict(x),
      ]);
    }
  }
  return rows;
}

function checkRows(checks: readonly Check[]): string[][] {
  return [
    ["figure", "goal or guard (default backend)", "result", "measured"],
    ...checks.map((c) => [c.figure, c.goal, `**${c.status}**`, c.detail]),
  ];
}

function historyRows(history: readonly HistoryRun[], results: readonly FigureResult[]): string[][] | null {
  const runs = history.slice(-4).reverse();
  if (runs.length === 0) return null;
  const names = [...new Set([...results.map((r) => r.figure.name), ...runs.flatMap((h) => Object.keys(h.figures))])];
  const goal = (n: string) => results.find((r) => r.figure.name === n)?.figure.goal;
  const rows = [
    [
      "figure",
      "goal",
      ...runs.map((h, i) => `${i === 0 ? "this run" : "earlier"} ${h.date.slice(0, 16)}Z (${h.commit.split(" ")[0]})`),
    ],
  ];
  for (const n of names) {
    rows.push([
      n,
      goal(n) ? `${goal(n)!.guard ? "guard " : ""}≥ ${goal(n)!.ratio}×` : "—",
      ...runs.map((h) => {
        const row = h.figures[n];
        if (!row || row.ratio === null) return "—";
        return `${fmtRatio(row.ratio)} (${fmtMs(row.ours_ms)} / ${fmtMs(row.reference_ms)} ms)`;
      }),
    ]);
  }
  return rows;
}

function methodRows(results: readonly FigureResult[]): string[][] {
  const rows = [["figure", "ours (timed)", "reference (timed)"]];
  for (const r of results) rows.push([`\`${r.figure.name}\``, r.figure.method.ours, r.figure.method.reference]);
  return rows;
}

const METHOD = `- Our side runs the BUILT package as users do (\`npm run build\`, then \`import("safetensors-ts")\`, which resolves
  to \`dist/lib/node.js\` (the bundle) through the package's exports; never through tsx), in a fresh
  \`node --expose-gc bench/out/js/bench/worker.js\` per run. The reference runs in a fresh
  \`python bench/ref_worker.py\` per run. Each times just the figure's operation (\`performance.now()\` /
  \`time.perf_counter_ns()\`) and reads RSS after minus before (\`process.memoryUsage.rss()\` / VmRSS), after a GC.
  The libraries are imported before the window, except in the import figure, which times exactly the import (work
  done at import counts there). Whole-process figures (\`cli_*\`) are timed by the orchestrator from spawn to exit;
  their RSS column is the peak RSS of the whole process (\`/usr/bin/time -f %M\`, warm-up run).
- Per side: one uncounted warm-up run (warm page cache for everyone), then N counted runs (\`--runs\`), interleaved
  with the other sides of the same figure (round-robin, order rotated every round). min/median/max of the time,
  median of the RSS.
- Rows: \`auto\` is what users get without options (the goals apply to it); \`mmap\` and \`pread\` pass
  \`{backend}\` with the addon loaded; \`pread-no-addon\` runs with \`SAFETENSORS_NO_NATIVE=1\` and fails unless
  no \`.node\` file is mapped in the worker (read from /proc/self/maps). These rows are reported, not held.
- "Touch" = read one byte every 4096 bytes of each tensor's data. Ours: a JS loop over the Uint8Array; reference:
  \`int(t.reshape(-1).view(torch.uint8)[::4096].sum())\`.
- The checkpoint is synthetic Llama-style fp16 (hidden 4096, intermediate 11008, vocab 32000, 5 layers, 48 tensors,
  2.37 GiB), written by our \`saveFile\`; the \`.pt\` twin is \`torch.save\` of the same tensors by the reference.
- The ratio is reference median / ours median (above 1: ours is faster); a figure we lose says so in bold.`;

/**
 * The command line as committed in RESULTS.md: paths inside the repository relative to it, other absolute paths
 * reduced to `<dir>/name` (a machine's own directories do not belong in a committed file).
 */
function shownArgv(argv: readonly string[]): string {
  return argv
    .map((arg) => {
      if (!path.isAbsolute(arg)) return arg;
      const inside = path.relative(REPO_DIR, arg);
      return inside.startsWith("..") ? `<dir>/${path.basename(arg)}` : inside;
    })
    .join(" ");
}

export function markdownReport(run: Run): string {
  const { machine: m, reference, options } = run;
  const md: string[] = ["# Benchmark results", ""];
  md.push(
    `Generated by \`npm run bench${options.argv.length ? ` -- ${shownArgv(options.argv)}` : ""}\` on ${run.started.toISOString()} (took ${run.elapsedS.toFixed(0)} s) at commit ${m.commit}. This file is rewritten by every run; earlier runs' medians come from ${options.history ? `\`${shownArgv([options.history])}\`` : "no history file"}.`,
    "",
    "## Machine",
    "",
    `- CPU: ${m.cpu}, ${m.cores} cores; RAM ${m.ramGib.toFixed(1)} GiB`,
    `- Kernel: ${m.kernel}; transparent hugepages: enabled \`${m.thp.enabled}\`, defrag \`${m.thp.defrag}\``,
    `- Page-fault cost (first touch of a fresh 4 KiB page): ${m.pageFaultUs === null ? "unknown" : `${m.pageFaultUs.toFixed(2)} µs`} (${m.pageFaultProbe})`,
    `- Node ${m.node}; reference: ${reference.available ? `Python ${reference.versions.python}, torch ${reference.versions.torch}, safetensors ${reference.versions.safetensors}` : `skipped (${reference.reason})`}`,
    `- Load average (1/5/15 min) at start: ${m.loadStart}, at end: ${loadAverage()} (the machine may be shared)`,
    `- Node start-up (\`node -e 0\`, median of 7): ${startupLine(m.startup)}`,
    `- Runs per side: ${options.runs} (+1 warm-up), each in a fresh process, sides interleaved`,
    "",
  );
  md.push(
    "## Acceptance (goals on the default backend)",
    "",
    "Goals are what users feel: whole jobs, memory peaks, throughput. A `guard` is a regression check on a",
    "sub-millisecond micro-figure (one open, one slice in a warm process), not a goal: nothing is kept in the code",
    "only to move one.",
    "",
    markdownTable(checkRows(run.checks), 4),
    "",
  );
  const imports = mainRows(run.results, "import");
  if (imports.length > 1) md.push("## Import time (fresh process)", "", markdownTable(imports), "");
  md.push("## Results", "", markdownTable(mainRows(run.results, "main")), "");
  const extras = extraRows(run.results);
  if (extras.length > 1) md.push("### Reference extra lines", "", markdownTable(extras, 1), "");
  const outputs = run.results.filter((r) => r.stdout);
  if (outputs.length > 0) {
    md.push("### Whole-process outputs", "");
    for (const r of outputs)
      md.push(`- \`${r.figure.name}\`: ${r.stdout!.same ? "byte-identical" : "**DIFFERENT**"} (${r.stdout!.detail})`);
    md.push("");
  }
  const hist = historyRows(run.history, run.results);
  if (hist) {
    md.push("## Runs (default backend: ratio, ours / reference median)", "", markdownTable(hist, 2), "");
    for (const h of run.history.slice(-4).reverse()) md.push(`- ${h.date}: ${h.machine}, ${h.runs} runs per side`);
    md.push("");
  }
  md.push("## Hostile headers", "");
  if (run.hostile.status === "ok") md.push(run.hostile.markdown ?? "", "");
  else md.push(`Not included: ${run.hostile.reason}.`, "");
  if (run.notes.length > 0) md.push("## Notes", "", ...run.notes.map((n) => `- ${n}`), "");
  md.push("## How each figure is measured", "", METHOD, "", markdownTable(methodRows(run.results), 3), "");
  return md.join("\n");
}

export function textReport(run: Run): string {
  const imports = mainRows(run.results, "import");
  const out = [...(imports.length > 1 ? [textTable(imports), ""] : []), textTable(mainRows(run.results, "main"))];
  const extras = extraRows(run.results);
  if (extras.length > 1) out.push("", textTable(extras, 1));
  out.push("", "Acceptance (default backend):");
  for (const c of run.checks) out.push(`  ${c.status.padEnd(4)}  ${c.figure}: ${c.goal}: ${c.detail}`);
  if (run.hostile.status !== "ok") out.push("", `Hostile headers: not included (${run.hostile.reason})`);
  if (run.notes.length > 0) out.push("", "Notes:", ...run.notes.map((n) => `  - ${n}`));
  return out.join("\n");
}

interface JsonSide {
  label: string;
  rss?: string;
  status: Series["status"];
  median_ms: number | null;
  min_ms: number | null;
  max_ms: number | null;
  rss_delta_mib: number | null;
  runs: number;
  samples_ms?: number[];
  reason?: string;
  extras?: Record<string, number | string>;
}

function jsonSide(s: Series, wholeProcess = false): JsonSide {
  const ok = s.status === "ok";
  return {
    label: s.label,
    ...(wholeProcess ? { rss: "peak RSS of the whole process (warm-up run), MiB" } : {}),
    status: s.status,
    median_ms: ok ? s.medianMs! : null,
    min_ms: ok ? s.minMs! : null,
    max_ms: ok ? s.maxMs! : null,
    rss_delta_mib: ok ? (s.rssMedian ?? null) : null,
    runs: s.runs,
    ...(s.samplesMs ? { samples_ms: s.samplesMs } : {}),
    ...(s.reason ? { reason: s.reason } : {}),
    ...(Object.keys(s.extras).length ? { extras: s.extras } : {}),
  };
}

export function jsonReport(run: Run): unknown {
  const figures = run.results.map((r) => ({
    figure: r.figure.name,
    section: r.figure.section ?? "main",
    process: r.figure.ours.kind === "process",
    goal: r.figure.goal ?? null,
    ours: Object.fromEntries(
      Object.entries(r.ours).map(([b, s]) => [b, jsonSide(s, r.figure.ours.kind === "process")]),
    ),
    reference: jsonSide(r.reference, r.figure.reference.kind === "process"),
    reference_extras: Object.fromEntries(Object.entries(r.extras).map(([k, s]) => [k, jsonSide(s)])),
    ratio: ratio(r.reference, r.ours.auto),
    ratios: Object.fromEntries(Object.entries(r.ours).map(([b, s]) => [b, ratio(r.reference, s)])),
    ...(r.stdout ? { stdout_identical: r.stdout.same, stdout_detail: r.stdout.detail } : {}),
  }));
  const imp = run.results.find((r) => r.figure.name === "import");
  return {
    schema: "safetensors-ts-bench/2",
    started: run.started.toISOString(),
    elapsed_s: run.elapsedS,
    argv: run.options.argv,
    runs: run.options.runs,
    machine: run.machine,
    reference: run.reference,
    import_ms: imp
      ? {
          ours: imp.ours.auto?.medianMs ?? null,
          reference: imp.reference.status === "ok" ? imp.reference.medianMs! : null,
        }
      : null,
    figures,
    acceptance: run.checks,
    hostile: run.hostile.status === "ok" ? { status: "ok", rows: run.hostile.rows } : run.hostile,
    notes: run.notes,
  };
}

function startupLine(startup: Machine["startup"]): string {
  const ms = (v: number | null) => (v === null ? "failed" : `${v.toFixed(1)} ms`);
  if (startup.stripped.length === 0) return `${ms(startup.withoutMs)} (children ran with the environment as given)`;
  const names = startup.stripped.map((k) => `\`${k}\``).join(", ");
  return `${ms(startup.withMs)} with ${names} as this machine sets it, ${ms(startup.withoutMs)} without; every child (both sides) ran without it (\`--keep-env\` keeps it)`;
}
