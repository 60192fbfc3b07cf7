/** The figures' goals, checked on the default backend ("auto" row) against the reference of the same run. */
import { fmtMib, fmtMs, fmtRatio } from "./format.js";
import type { FigureResult } from "./measure.js";
import { ratio } from "./stats.js";

export interface Check {
  figure: string;
  goal: string;
  status: "PASS" | "FAIL" | "N/A";
  detail: string;
}

export function acceptance(results: readonly FigureResult[]): Check[] {
  const checks: Check[] = [];
  for (const r of results) {
    const goal = r.figure.goal;
    if (!goal) continue;
    const vs = goal.against === undefined ? "" : ` (${goal.against}/ours)`;
    const name = `${goal.guard ? "guard: " : ""}ratio${vs} ≥ ${Number(goal.ratio.toFixed(2))}×${goal.rssMaxMib === undefined ? "" : `, RSS growth ≤ ${goal.rssMaxMib} MiB`}`;
    const ours = r.ours.auto;
    const ref = goal.against === undefined ? r.reference : r.extras[goal.against];
    const refName = goal.against ?? "reference";
    const push = (status: Check["status"], detail: string) =>
      checks.push({ figure: r.figure.name, goal: name, status, detail });
    // Ours crashing is a failed check; a side not measurable here (missing API, no reference) is N/A.
    if (ours?.status !== "ok") {
      push(ours?.status === "failed" ? "FAIL" : "N/A", `ours ${ours?.status ?? "not measured"}: ${ours?.reason ?? ""}`);
      continue;
    }
    if (r.stdout && !r.stdout.same) {
      push("FAIL", `outputs differ: ${r.stdout.detail}`);
      continue;
    }
    const rssOk = goal.rssMaxMib === undefined || (ours.rssMedian ?? Number.POSITIVE_INFINITY) <= goal.rssMaxMib;
    const rssText = goal.rssMaxMib === undefined ? "" : `; RSS Δ ${fmtMib(ours.rssMedian)} MiB`;
    const x = ratio(ref, ours);
    if (x === null) {
      push(
        rssOk ? "N/A" : "FAIL",
        `ours ${fmtMs(ours.medianMs)} ms${rssText}; ${refName} ${ref?.status ?? "not measured"}: ${ref?.reason ?? ""}`,
      );
      continue;
    }
    push(
      x >= goal.ratio && rssOk ? "PASS" : "FAIL",
      `ours ${fmtMs(ours.medianMs)} ms vs ${refName} ${fmtMs(ref?.medianMs)} ms = ${fmtRatio(x)}${rssText}`,
    );
  }
  return checks;
}
