/**
 * `npm run bench [-- --runs N] [--json PATH] [--only NAME,...] ...` (see harness/options.ts or `--help`).
 *
 * Orchestration only: builds nothing itself (the npm script runs `npm run build` and compiles bench/ first), finds or
 * makes the checkpoint, measures every figure of the registry (bench/figures/) on both sides in fresh processes, in
 * the same run and interleaved, checks the goals, and writes the terminal tables, bench/RESULTS.md, the run history
 * and optionally a JSON file. How to add a figure: bench/README.md.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { FIGURES } from "./figures/index.js";
import { acceptance } from "./harness/acceptance.js";
import { STRIPPED_ENV } from "./harness/child.js";
import { prepareFiles } from "./harness/files.js";
import { fmtMib, fmtMs, markdownTable, textTable } from "./harness/format.js";
import { historyRun, readHistory, writeHistory } from "./harness/history.js";
import { runHostile } from "./harness/hostile.js";
import { detectReference, machineInfo } from "./harness/machine.js";
import { type FigureResult, measureFigure } from "./harness/measure.js";
import { parseOptions, USAGE } from "./harness/options.js";
import { jsonReport, markdownReport, type Run, textReport } from "./harness/report.js";
import { PACKAGE_NAME, REPO_DIR } from "./spec.js";

function progress(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/** The package must be built (dist/) and this harness compiled: the npm script does both. */
function checkBuilt(): string | null {
  const entry = fileURLToPath(import.meta.resolve(PACKAGE_NAME));
  if (!fs.existsSync(entry))
    return `${path.relative(REPO_DIR, entry)} is missing: run \`npm run build\` (or \`npm run bench\`)`;
  if (!fs.existsSync(fileURLToPath(new URL("./worker.js", import.meta.url)))) {
    return "the compiled harness is missing: run `npm run bench`, which compiles bench/ with tsc (never through tsx)";
  }
  return null;
}

/** The addon is built by `npm install`, not by `npm run build`: say so when it is older than its sources. */
function staleAddonNote(): string | null {
  const newest = (dir: string) => {
    try {
      return Math.max(...fs.readdirSync(dir).map((f) => fs.statSync(path.join(dir, f)).mtimeMs));
    } catch {
      return Number.NaN;
    }
  };
  const built = newest(path.join(REPO_DIR, "build", "Release"));
  const sources = newest(path.join(REPO_DIR, "native"));
  if (!(sources > built)) return null;
  return "the native addon in build/Release is older than native/ sources: rebuild it (`node scripts/build-native.mjs` or `npm ci`) before trusting the figures";
}

/** Builds prebuilds/ for every Node ABI when it is not there; true when it made it (to remove it afterwards). */
function ensurePrebuilds(): boolean {
  if (fs.existsSync(path.join(REPO_DIR, "prebuilds"))) return false;
  progress("building prebuilds/ for the other Node versions (scripts/prebuild.mjs)");
  const r = spawnSync(process.execPath, [path.join(REPO_DIR, "scripts", "prebuild.mjs")], { encoding: "utf8" });
  if (r.status !== 0) progress(`prebuild failed, other Nodes run without the fast path: ${r.stdout}${r.stderr}`);
  return true;
}

/**
 * Per figure and Node: our auto row and the no-addon row beside the reference and, where the figure has one, the
 * plain-read limit (`cat`, the anchor of the no-addon row: within 1.5x of it is the no-addon goal), with the verdicts.
 */
function perNodeRows(perNode: readonly { version: string; results: FigureResult[] }[]): string[][] {
  const rows = [
    [
      "figure",
      "node",
      "ours (auto)",
      "RSS MiB",
      "reference",
      "ref / ours",
      "goal (auto)",
      "no addon",
      "cat (plain reads)",
      "no addon / cat",
    ],
  ];
  for (const { version, results } of perNode) {
    const checks = acceptance(results);
    for (const r of results) {
      const auto = r.ours.auto;
      const bare = r.ours["pread-no-addon"];
      const cat = r.extras.cat;
      const ref = r.reference;
      const ms = (s: typeof auto) => (s?.status === "ok" ? `${fmtMs(s.medianMs)} ms` : "—");
      const x = auto?.medianMs && ref.medianMs ? ref.medianMs / auto.medianMs : null;
      const overCat = bare?.medianMs && cat?.medianMs ? bare.medianMs / cat.medianMs : null;
      const check = checks.find((c) => c.figure === r.figure.name);
      rows.push([
        r.figure.name,
        version,
        ms(auto),
        fmtMib(auto?.rssMedian),
        ms(ref),
        x === null ? "—" : `${x.toFixed(2)}×`,
        check ? `${check.status === "FAIL" ? "**FAIL**" : check.status} ${check.goal}` : "—",
        ms(bare),
        ms(cat),
        overCat === null ? "—" : `${overCat.toFixed(2)}×${overCat > 1.5 ? " **(> 1.5×)**" : ""}`,
      ]);
    }
  }
  return rows;
}

async function main(): Promise<number> {
  let options: ReturnType<typeof parseOptions>;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  if (options === "help") {
    console.log(USAGE);
    return 0;
  }
  const notBuilt = checkBuilt();
  if (notBuilt) {
    console.error(`bench: ${notBuilt}`);
    return 1;
  }
  const started = new Date();
  const t0 = performance.now();
  const reference = detectReference(options.reference);
  if (reference.available) {
    progress(
      `reference: ${reference.python} (${Object.entries(reference.versions)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")})`,
    );
  } else progress(`reference figures are skipped: ${reference.reason}`);
  const notes: string[] = [];
  const stale = staleAddonNote();
  if (stale) {
    notes.push(stale);
    progress(`WARNING: ${stale}`);
  }
  if (reference.available && reference.versions.safetensors !== "0.8.0") {
    notes.push(`the reference is safetensors ${reference.versions.safetensors}; the goals compare against 0.8.0`);
  }
  const python = reference.available ? reference.python : null;
  if (options.keepEnv) STRIPPED_ENV.length = 0;
  const machine = machineInfo(python, options.timeoutMs);
  progress(
    `machine: ${machine.cpu}, THP ${machine.thp.enabled}, 4 KiB first touch ${machine.pageFaultUs?.toFixed(2) ?? "?"} µs`,
  );
  const selected = FIGURES.filter((f) => options.only.includes(f.name));
  const wantPt = selected.some((f) =>
    [f.reference, ...(f.referenceExtras ?? [])].some((s) => s.kind === "python" && s.needsPt),
  );
  let files: ReturnType<typeof prepareFiles>;
  try {
    files = prepareFiles(options.outDir, options.timeoutMs, python, wantPt, progress);
  } catch (error) {
    console.error(`bench: ${(error as Error).message}`);
    return 1;
  }
  if (files.ptReason) notes.push(`torch.load line skipped: ${files.ptReason}`);

  // Other Node versions load the addon from prebuilds/ (build/Release holds this Node's ABI only): made here when
  // missing, and removed afterwards.
  const madePrebuilds = options.nodes.length > 1 || options.nodes[0] !== process.execPath ? ensurePrebuilds() : false;
  const perNode: { node: string; version: string; results: FigureResult[] }[] = [];
  try {
    for (const node of options.nodes) {
      const version = spawnSync(node, ["-p", "process.version"], { encoding: "utf8" }).stdout.trim() || "?";
      if (options.nodes.length > 1) progress(`our side on Node ${version} (${node})`);
      const results: FigureResult[] = [];
      for (const figure of selected) {
        fs.rmSync(files.scratch, { recursive: true, force: true });
        fs.mkdirSync(files.scratch, { recursive: true });
        const env = { node, runs: options.runs, timeoutMs: options.timeoutMs, reference, files, progress };
        results.push(measureFigure(figure, env));
      }
      perNode.push({ node, version, results });
    }
  } finally {
    fs.rmSync(files.scratch, { recursive: true, force: true });
    if (madePrebuilds) fs.rmSync(path.join(REPO_DIR, "prebuilds"), { recursive: true, force: true });
  }
  const results = perNode[0]!.results;
  for (const r of results) {
    for (const s of [...Object.values(r.ours), r.reference, ...Object.values(r.extras)]) {
      if (s.status !== "ok" || s.reason) notes.push(`${s.label}: ${s.status}${s.reason ? ` (${s.reason})` : ""}`);
    }
  }
  const hostileDir = path.join(files.dir, `hostile-${process.pid}`);
  const hostile = options.hostile
    ? await runHostile({
        python,
        outDir: hostileDir,
        timeoutMs: options.timeoutMs,
        runs: options.runs,
        log: progress,
      }).finally(() => fs.rmSync(hostileDir, { recursive: true, force: true }))
    : { status: "skipped" as const, reason: "not selected (--only)" };

  const history = options.history ? readHistory(options.history) : [];
  const run: Run = {
    options,
    started,
    elapsedS: (performance.now() - t0) / 1000,
    machine,
    reference,
    results,
    checks: acceptance(results),
    history: [...history, historyRun(started, machine, options.runs, results)],
    hostile,
    notes,
  };
  console.log(`\n${textReport(run)}`);
  const nodeRows = perNode.length > 1 || perNode[0]!.node !== process.execPath ? perNodeRows(perNode) : null;
  if (nodeRows) console.log(`\n${textTable(nodeRows, 2)}`);
  if (options.results) {
    const perNodeSection = nodeRows
      ? `\n## Per Node\n\nOur side on each Node (\`--node\`), the reference's figures beside it measured again with each Node's runs.\n\n${markdownTable(nodeRows, 2)}\n`
      : "";
    fs.writeFileSync(options.results, markdownReport(run) + perNodeSection);
    console.log(`\nWrote ${options.results}`);
    if (options.history) writeHistory(options.history, run.history);
  } else console.log("\nPartial run (--only): RESULTS.md not rewritten (pass --results PATH to write a report)");
  if (options.json) {
    fs.mkdirSync(path.dirname(options.json), { recursive: true });
    const perNodeJson = perNode.map(({ node, version, results }) => ({
      node,
      version,
      figures: (jsonReport({ ...run, results, checks: acceptance(results) }) as { figures: unknown }).figures,
      checks: acceptance(results),
    }));
    const json = { ...(jsonReport(run) as object), perNode: perNodeJson };
    fs.writeFileSync(options.json, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`Wrote ${options.json}`);
  }
  return 0;
}

process.exitCode = await main();
