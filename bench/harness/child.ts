/** Spawning workers and whole-process figures. Nothing here throws: every failure becomes a result. */
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { REPO_DIR } from "../spec.js";
import { RESULT_PREFIX, type WorkerResult } from "./protocol.js";

export interface ChildRun {
  /** The worker's `RESULT` line, or a failure. */
  result: WorkerResult;
  stdout: string;
  stderr: string;
  /** Spawn to exit, measured here (whole-process figures). */
  wallMs: number;
}

export function lastLines(text: string, n: number): string {
  return text.trimEnd().split("\n").slice(-n).join("\n");
}

/**
 * Variables removed from every child's environment (both sides), unless `npm run bench -- --keep-env`.
 * NODE_EXTRA_CA_CERTS makes Node 20 parse the whole certificate bundle at start-up, before any script runs
 * (node::crypto::UseExtraCaCerts: 412 M of the 502 M instructions of `node -e 0` with a 220 KB bundle, callgrind);
 * a machine's proxy setting that no figure here uses (nothing goes to the network) and that a default install does
 * not have. The report says whether it was set and what a start-up costs with and without it, measured in the run.
 */
export const STRIPPED_ENV: string[] = ["NODE_EXTRA_CA_CERTS"];

/**
 * Run a child with a timeout. `env`: variables to set (a string) or remove (undefined) on top of ours. `protocol`:
 * whether the child prints a `RESULT {json}` line (workers) or is a plain command that must exit 0.
 */
export function runChild(
  argv: readonly string[],
  timeoutMs: number,
  env: Record<string, string | undefined> = {},
  protocol = true,
): ChildRun {
  const [command, ...args] = argv as [string, ...string[]];
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PYTHONUNBUFFERED: "1" };
  for (const key of STRIPPED_ENV) delete childEnv[key];
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[key];
    else childEnv[key] = value;
  }
  let child: SpawnSyncReturns<string>;
  const start = performance.now();
  try {
    child = spawnSync(command, args, {
      cwd: REPO_DIR,
      encoding: "utf8",
      timeout: timeoutMs,
      killSignal: "SIGKILL",
      maxBuffer: 256 * 1024 * 1024,
      env: childEnv,
    });
  } catch (error) {
    const result = { ok: false, error: `cannot spawn ${command}: ${(error as Error).message}` };
    return { result, stdout: "", stderr: "", wallMs: Number.NaN };
  }
  const wallMs = performance.now() - start;
  const stdout = child.stdout ?? "";
  const stderr = child.stderr ?? "";
  const done = (result: WorkerResult): ChildRun => ({ result, stdout, stderr, wallMs });
  if (child.error && (child.error as NodeJS.ErrnoException).code === "ETIMEDOUT") {
    return done({ ok: false, error: `timed out after ${timeoutMs / 1000} s (killed)` });
  }
  if (child.error) return done({ ok: false, error: `cannot run ${command}: ${child.error.message}` });
  const how = child.signal ? `killed by ${child.signal}` : `exit code ${child.status}`;
  const tail = lastLines(stderr, 3);
  if (!protocol) {
    if (child.status === 0) return done({ ok: true, ms: wallMs });
    return done({ ok: false, error: `${how}${tail ? `: ${tail}` : ""}` });
  }
  const line = stdout
    .split("\n")
    .reverse()
    .find((l) => l.startsWith(RESULT_PREFIX));
  if (!line) return done({ ok: false, error: `no result (${how})${tail ? `: ${tail}` : ""}` });
  try {
    return done(JSON.parse(line.slice(RESULT_PREFIX.length)) as WorkerResult);
  } catch {
    return done({ ok: false, error: `unparsable result line: ${line.slice(0, 200)}` });
  }
}
