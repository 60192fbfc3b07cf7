/**
 * Without the reference, the suites that need it must show up as skipped in node's summary (a skipped `describe`
 * hides its tests: the summary said "skipped 0" and nothing looked missing). Runs each such test file in a
 * subprocess with SAFETENSORS_REF_PYTHON pointing nowhere and reads its TAP summary.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { loaderArgs, modulePath } from "./helpers/compiled.js";
import { repoRoot } from "./helpers/corpus.js";

const testDir = path.join(repoRoot, "test");
const self = path.basename(new URL(import.meta.url).pathname);
const usersOfReference = fs
  .readdirSync(testDir)
  .filter((name) => name.endsWith(".test.ts") && name !== self)
  .filter((name) => /\bskipWithoutReference\(/.test(fs.readFileSync(path.join(testDir, name), "utf8")));

function runWithoutReference(file: string): Promise<string> {
  // Inside `node --test`, NODE_TEST_CONTEXT makes a child report to its parent instead of printing TAP.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...loaderArgs, "--test", "--test-reporter=tap", modulePath(file)], {
      cwd: repoRoot,
      env: { ...env, SAFETENSORS_REF_PYTHON: path.join(repoRoot, "no-such-dir", "python") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk) => {
      out += chunk;
    });
    child.stderr.resume();
    child.on("error", reject);
    child.on("close", () => resolve(out));
  });
}

test("suites that need the reference are reported as skipped when it is absent", async () => {
  assert.ok(usersOfReference.length >= 2, `found only ${usersOfReference.join(", ")}: is the scan broken?`);
  const outputs = await Promise.all(usersOfReference.map((name) => runWithoutReference(path.join(testDir, name))));
  usersOfReference.forEach((name, i) => {
    const out = outputs[i]!;
    const count = (key: string) => Number(new RegExp(`^# ${key} (\\d+)$`, "m").exec(out)?.[1] ?? Number.NaN);
    assert.equal(count("fail"), 0, `${name} fails without the reference:\n${out.slice(-2000)}`);
    assert.ok(count("skipped") > 0, `${name}: node's summary shows no skipped test without the reference`);
    assert.match(out, /# SKIP .*does not exist; reference implementation not found/, name);
  });
});
