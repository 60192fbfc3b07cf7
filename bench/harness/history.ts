/**
 * The run history: each run that writes a report appends its medians (default backend and reference, per figure) to
 * a small JSON file kept beside RESULTS.md, and the report shows the latest runs side by side. Two `npm run bench`
 * invocations therefore give a table with both.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Machine } from "./machine.js";
import type { FigureResult } from "./measure.js";
import { ratio } from "./stats.js";

export interface HistoryRow {
  ours_ms: number | null;
  ours_rss_mib: number | null;
  reference_ms: number | null;
  reference_rss_mib: number | null;
  ratio: number | null;
}

export interface HistoryRun {
  date: string;
  commit: string;
  machine: string;
  runs: number;
  /** Figure name → the default backend's row. */
  figures: Record<string, HistoryRow>;
}

/** How many runs the file keeps (newest last). */
export const HISTORY_LIMIT = 8;

export function readHistory(file: string): HistoryRun[] {
  try {
    const parsed = JSON.parse(fs.readFileSync(file, "utf8")) as { runs?: HistoryRun[] };
    return Array.isArray(parsed.runs) ? parsed.runs : [];
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw new Error(`cannot read the run history ${file}: ${(error as Error).message}`);
  }
}

export function machineLine(m: Machine): string {
  const fault = m.pageFaultUs === null ? "fault probe failed" : `4 KiB first touch ${m.pageFaultUs.toFixed(1)} µs`;
  return `${m.cpu} ×${m.cores}, ${m.kernel}, ${fault}, THP ${m.thp.enabled}, load average at start ${m.loadStart}`;
}

export function historyRun(date: Date, machine: Machine, runs: number, results: readonly FigureResult[]): HistoryRun {
  const figures: Record<string, HistoryRow> = {};
  for (const r of results) {
    const ours = r.ours.auto;
    const ok = (s: typeof ours) => (s?.status === "ok" ? s : undefined);
    figures[r.figure.name] = {
      ours_ms: ok(ours)?.medianMs ?? null,
      ours_rss_mib: ok(ours)?.rssMedian ?? null,
      reference_ms: ok(r.reference)?.medianMs ?? null,
      reference_rss_mib: ok(r.reference)?.rssMedian ?? null,
      ratio: ratio(r.reference, ours),
    };
  }
  return { date: date.toISOString(), commit: machine.commit, machine: machineLine(machine), runs, figures };
}

export function writeHistory(file: string, runs: readonly HistoryRun[]): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify({ runs: runs.slice(-HISTORY_LIMIT) }, null, 2)}\n`);
}
