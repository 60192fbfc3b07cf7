#!/usr/bin/env node
/**
 * `npm test`: every file in test/, through node:test and test/helpers/reporter.mjs, at least three files at a time,
 * the longest first (LONGEST), compiled to plain JavaScript first (scripts/compile-tests.mjs says why).
 * scripts/test-fast.mjs runs its subset through runTests too. Arguments are passed on to node before the files
 * (`npm test -- --test-name-pattern=merge`).
 *
 * Why two files at a time: node:test runs `availableParallelism() - 1` files at once by default, one on a 2-core
 * machine, where much of the suite waits rather than computes (Python, Chromium and npm processes starting, CLI
 * children, SIGKILL trials pausing at each write, servers). One file at a time left a core idle: the serial suite took
 * 573.6 s of wall time for 571 s of CPU (user + system, children included) on 2 cores at load 2.5-4 (2026-12-02,
 * d4ffcce). Wider machines keep node's default.
 *
 * Why three on 2 cores: with two, the compiled suite still kept the cores busy only 134-160% of its wall time (the
 * waits above); with three it took 225.9 and 228.9 s of wall time for 397 and 411 s of CPU, where two took
 * 243.7-300.3 s for 386-403 s (npm test, alone under the lock, 2026-12-03, 2-core VM).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { availableParallelism } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ARTIFACTS, compiledPath, compileTests } from "./compile-tests.mjs";

/** How many test files run at once: node's default, but never fewer than three. */
export const CONCURRENCY = Math.max(3, availableParallelism() - 1);

/**
 * The files that take longest, started first (longest first), the others after them in name order (node --test sorts
 * the files it is given by name: queued() names them in this order). Sorted by name, package.test.ts (~90 s wall
 * alone, npm pack and installs) started two thirds of the way in and ran on alone at the end while the other lane had
 * nothing left. Seconds of wall time each alone (`node --import tsx --test test/NAME.test.ts`, 2026-12-03 at load 3-8
 * on 2 cores; merge.test.ts as this branch left it).
 */
export const LONGEST = [
  "package.test.ts", // 93 s (80 s of CPU); 70 s of CPU with its prebuild cache warm (2026-12-03, 81b027f, load 6-9)
  "merge.test.ts", // 53 s
  "shards-reference.test.ts", // 27 s (17 s of CPU: Python); 10 s and 11.6 s of CPU with one Python (2bb3c1a, load 3)
  "reference-skip.test.ts", // 21 s
  "lora-extract.test.ts", // 19 s
  "api-docs.test.ts", // 18 s
  "lora.test.ts", // 18 s
  "edit-crash.test.ts", // 17 s
  "crash.test.ts", // 16 s
  "syntax-hint.test.ts", // 13 s
  "cli.test.ts", // 12 s
  "merge-native.test.ts", // 10 s
  "pickle-dir.test.ts", // 9 s
];

/** Every test file: LONGEST's first, then the others sorted by name. */
export function testFiles() {
  const names = readdirSync("test").filter((name) => name.endsWith(".test.ts"));
  const longest = LONGEST.filter((name) => names.includes(name));
  const rest = names.filter((name) => !longest.includes(name)).sort();
  return [...longest, ...rest].map((name) => `test/${name}`);
}

/**
 * Links to the compiled `files` whose names sort in the order of `files`: node --test runs the files it is given in
 * name order, not in the order given (Node 20.20: c, b, a ran as a, b, c; 2026-12-03), so LONGEST went unheeded. A
 * link's module is its target's (node resolves the entry point's real path), relative imports included.
 */
function queued(compiled, files) {
  const dir = join(compiled, "queue");
  mkdirSync(dir);
  const width = String(files.length).length;
  return files.map((file, i) => {
    const link = join(dir, `${String(i).padStart(width, "0")}-${basename(compiledPath(compiled, file))}`);
    symlinkSync(compiledPath(compiled, file), link);
    return link;
  });
}

/** Whether process `pid` is alive. */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}

/**
 * A folder for this run's compile (test-artifacts/js-PID): a run of its own for each, so that two runs in one checkout
 * (test:fast while npm test runs) never overwrite each other's modules. Removed after the run; the folders of runs
 * that were killed before removing theirs are removed here.
 */
function compileFolder() {
  mkdirSync(ARTIFACTS, { recursive: true });
  for (const name of readdirSync(ARTIFACTS)) {
    const pid = /^js-(\d+)$/.exec(name)?.[1];
    if (pid !== undefined && !alive(Number(pid))) rmSync(join(ARTIFACTS, name), { recursive: true, force: true });
  }
  return join(ARTIFACTS, `js-${process.pid}`);
}

/**
 * Run `files` (test/NAME.test.ts) with node's test runner and the suite's reporter, compiled afresh; returns the exit
 * status. SAFETENSORS_TEST_JS tells the tests where the compiled modules are, for the children they start
 * (test/helpers/compiled.ts).
 */
export async function runTests(files, args = []) {
  const compiled = compileFolder();
  try {
    await compileTests(compiled);
    const run = spawnSync(
      process.execPath,
      [
        "--enable-source-maps",
        "--test",
        `--test-concurrency=${CONCURRENCY}`,
        "--test-reporter=./test/helpers/reporter.mjs",
        ...args,
        ...queued(compiled, files),
      ],
      { stdio: "inherit", env: { ...process.env, SAFETENSORS_TEST_JS: compiled } },
    );
    return run.status ?? 1;
  } finally {
    rmSync(compiled, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.exitCode = await runTests(testFiles(), process.argv.slice(2));
}
