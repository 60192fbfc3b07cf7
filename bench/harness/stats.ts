/** Summaries of repeated measurements. */

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** One measured side of a figure: a backend row of ours, the reference, or a reference extra. */
export interface Series {
  label: string;
  status: "ok" | "unavailable" | "failed" | "skipped";
  reason?: string;
  runs: number;
  failures: number;
  minMs?: number;
  medianMs?: number;
  maxMs?: number;
  rssMedian?: number;
  /** Every counted run's time, in run order. */
  samplesMs?: number[];
  extras: Record<string, number | string>;
}

export interface Sample {
  ms: number;
  rss: number | null;
  extra?: Record<string, number | string>;
}

export function summarize(label: string, samples: readonly Sample[], failures: number, firstError?: string): Series {
  if (samples.length === 0) return { label, status: "failed", reason: firstError, runs: 0, failures, extras: {} };
  const ms = samples.map((s) => s.ms);
  const rss = samples.map((s) => s.rss).filter((v): v is number => v !== null);
  const extras: Record<string, number | string> = {};
  for (const key of new Set(samples.flatMap((s) => Object.keys(s.extra ?? {})))) {
    const values = samples.map((s) => s.extra?.[key]).filter((v) => v !== undefined);
    extras[key] = values.every((v) => typeof v === "number") ? median(values as number[]) : String(values[0]);
  }
  return {
    label,
    status: "ok",
    reason: failures > 0 ? `${failures} of ${samples.length + failures} runs failed: ${firstError}` : undefined,
    runs: samples.length,
    failures,
    minMs: Math.min(...ms),
    medianMs: median(ms),
    maxMs: Math.max(...ms),
    ...(rss.length > 0 ? { rssMedian: median(rss) } : {}),
    samplesMs: ms,
    extras,
  };
}

/** Reference median / ours median (above 1: ours is faster), or null unless both sides were measured. */
export function ratio(reference: Series | null | undefined, ours: Series | null | undefined): number | null {
  if (reference?.status !== "ok" || ours?.status !== "ok") return null;
  return reference.medianMs! / ours.medianMs!;
}
