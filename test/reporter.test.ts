/**
 * `npm test`'s reporter (test/helpers/reporter.mjs): a line per file, then the failures with their errors and their
 * file's standard error, the skips grouped by reason, and the totals; run here over a small suite of its own.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { repoRoot } from "./helpers/corpus.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-reporter-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));

const files = {
  "a.test.mjs": `import { describe, test } from "node:test";
describe("browser", { skip: "no Chromium: install it" }, () => { test("x", () => {}); });
describe("live", () => {
  test("passes", () => {});
  test("needs python", (t) => { t.skip("reference missing"); });
  test("fails", () => { throw new Error("boom at line 4"); });
});
test("later", { todo: "not yet" }, () => {});
console.error("noise on stderr");
`,
  "b.test.mjs": `import { test } from "node:test";
test("also needs python", { skip: "reference missing" }, () => {});
test("fine", () => {});
`,
  "c.test.mjs": `throw new Error("crash while loading");
`,
};

test("failures, skips by reason and totals come last, after one line per file", () => {
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(tmp, name), text);
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
  delete env.NODE_TEST_CONTEXT;
  const run = spawnSync(
    process.execPath,
    ["--test", `--test-reporter=${path.join(repoRoot, "test/helpers/reporter.mjs")}`, ...Object.keys(files)],
    { cwd: tmp, env, encoding: "utf8", timeout: 60_000 },
  );
  assert.equal(run.status, 1, run.stderr);
  const out = run.stdout;
  const lines = out.split("\n");
  assert.match(lines[0]!, /^FAIL a\.test\.mjs +1 passed, 1 failed, 2 skipped, 1 todo \(/);
  assert.match(lines[1]!, /^ok {3}b\.test\.mjs +1 passed, 1 skipped \(/);
  assert.match(lines[2]!, /^FAIL c\.test\.mjs +0 passed, 1 failed \(/);
  assert.match(out, /\nfailures \(2\):\n✖ live › fails {2}\[a\.test\.mjs\]\n {4}Error: boom at line 4\n/);
  assert.match(out, /✖ .*c\.test\.mjs {2}\[c\.test\.mjs\]\n {4}the file failed outside its tests/);
  assert.match(out, /standard error of a\.test\.mjs:\n {2}\| noise on stderr\n/);
  assert.match(out, /standard error of c\.test\.mjs:\n(.*\n)*? {2}\| Error: crash while loading\n/);
  assert.match(
    out,
    /\nskipped \(3\), by reason:\n- no Chromium: install it\n {4}a\.test\.mjs: browser \(the whole suite\)\n- reference missing\n {4}a\.test\.mjs: live › needs python\n {4}b\.test\.mjs: also needs python\n/,
  );
  assert.match(out, /\ntodo \(1\):\n {4}a\.test\.mjs: later \(not yet\)\n/);
  assert.match(lines.at(-3)!, /^2 passed, 2 failed, 3 skipped, 1 todo; 3 files in [\d.]+ s$/);
  assert.ok(lines.length < 40, out);
});
