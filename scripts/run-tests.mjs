#!/usr/bin/env node
/**
 * `npm test`: every file in test/, through node:test and test/helpers/reporter.mjs, at least two files at a time.
 * scripts/test-fast.mjs runs its subset through runTests too. Arguments are passed on to node before the files
 * (`npm test -- --test-name-pattern=merge`).
 *
 * Why two files at a time: node:test runs `availableParallelism() - 1` files at once by default, one on a 2-core
 * machine, where much of the suite waits rather than computes (Python, Chromium and npm processes starting, CLI
 * children, SIGKILL trials pausing at each write, servers). One file at a time left a core idle: the serial suite took
 * 573.6 s of wall time for 571 s of CPU (user + system, children included) on 2 cores at load 2.5-4 (2026-12-02,
 * d4ffcce). Wider machines keep node's default.
 */
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";

/** How many test files run at once: node's default, but never fewer than two. */
export const CONCURRENCY = Math.max(2, availableParallelism() - 1);

/** Every test file, sorted. */
export function testFiles() {
  return readdirSync("test")
    .filter((name) => name.endsWith(".test.ts"))
    .sort()
    .map((name) => `test/${name}`);
}

/** Run `files` with node's test runner and the suite's reporter; returns the exit status. */
export function runTests(files, args = []) {
  const run = spawnSync(
    process.execPath,
    [
      "--import",
      "tsx",
      "--test",
      `--test-concurrency=${CONCURRENCY}`,
      "--test-reporter=./test/helpers/reporter.mjs",
      ...args,
      ...files,
    ],
    { stdio: "inherit" },
  );
  return run.status ?? 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.exitCode = runTests(testFiles(), process.argv.slice(2));
}
