/**
 * The hostile-header table, measured by bench/hostile.ts (its own module; see bench/README.md for the contract):
 * included when that module exists, reported as not included (with why) otherwise.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { BENCH_DIR } from "../spec.js";
import type { Hostile } from "./report.js";

/** What bench/hostile.ts receives. */
export interface HostileOptions {
  /** The reference's Python, or null when the reference is unavailable. */
  python: string | null;
  /** A scratch directory it may fill (removed by the harness afterwards). */
  outDir: string;
  timeoutMs: number;
  runs: number;
  log: (message: string) => void;
}

type HostileModule = {
  runHostileBench?: (options: HostileOptions) => Promise<{ rows: unknown; markdown: string }>;
};

export async function runHostile(options: HostileOptions): Promise<Hostile> {
  // The source decides (a compiled hostile.js may be left over from another checkout state); its compiled twin runs.
  if (!fs.existsSync(path.join(BENCH_DIR, "hostile.ts"))) {
    return { status: "skipped", reason: "bench/hostile.ts is not in this checkout" };
  }
  const url = new URL("../hostile.js", import.meta.url);
  try {
    const mod = (await import(url.href)) as HostileModule;
    if (typeof mod.runHostileBench !== "function") {
      return { status: "failed", reason: "bench/hostile.ts does not export runHostileBench" };
    }
    const { rows, markdown } = await mod.runHostileBench(options);
    return { status: "ok", rows, markdown };
  } catch (error) {
    return { status: "failed", reason: `bench/hostile.ts failed: ${(error as Error)?.stack ?? error}` };
  }
}
