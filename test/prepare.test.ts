/**
 * `prepare` (scripts/prepare.mjs) rebuilds only when something it reads changed: npm runs it again at the first
 * `npx safetensors` in a checkout, which must not rebuild a current dist/ (issue 20, point 10).
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, unlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
// @ts-expect-error: a plain .mjs build script, no declarations
import { currentConditions, INPUT_FILES, OUTPUTS, STAMP, staleReason } from "../scripts/prepare.mjs";

const root = mkdtempSync(join(tmpdir(), "st-prepare-"));
after(() => rmSync(root, { recursive: true, force: true }));

function write(path: string, text = "x", seconds?: number): void {
  const full = join(root, path);
  mkdirSync(dirname(full), { recursive: true });
  writeFileSync(full, text);
  if (seconds !== undefined) utimesSync(full, seconds, seconds);
}

test("a checkout is rebuilt when it has no build, an input changed, an output is gone or the Node ABI differs", () => {
  const conditions = { abi: "115", platform: "linux", arch: "x64", noNative: false, addon: true };
  const old = Date.now() / 1000 - 3600;
  for (const file of INPUT_FILES as string[]) write(file, "{}", old);
  write("src/format/header.ts", "export {};", old);
  utimesSync(join(root, "src", "format"), old, old);
  utimesSync(join(root, "src"), old, old);
  for (const output of OUTPUTS as string[]) write(output);
  assert.equal(staleReason(root, conditions), "no earlier build");

  write(STAMP, JSON.stringify(conditions), old + 60);
  assert.equal(staleReason(root, conditions), undefined, "a build newer than every input is current");

  assert.match(staleReason(root, { ...conditions, abi: "127" }), /^abi was "115", now "127"$/);
  assert.match(staleReason(root, { ...conditions, noNative: true }), /^noNative was false/);
  assert.match(staleReason(root, { ...conditions, addon: false }), /^addon was true, now false$/);
  write(STAMP, JSON.stringify({ ...conditions, addon: false }), old + 60);
  assert.equal(staleReason(root, { ...conditions, addon: false }), undefined, "no compiler then, none now");
  write(STAMP, JSON.stringify(conditions), old + 60);

  write("src/format/header.ts", "export const changed = 1;");
  assert.equal(staleReason(root, conditions), "src changed");
  write(STAMP, JSON.stringify(conditions), old + 60);
  unlinkSync(join(root, "src", "format", "header.ts"));
  assert.equal(staleReason(root, conditions), "src changed", "a deleted source changes its folder");
  write(STAMP, JSON.stringify(conditions), old + 60);
  unlinkSync(join(root, "dist", "bundle", "cli.js"));
  assert.equal(staleReason(root, conditions), "dist/bundle/cli.js is missing");
});

test("this checkout's conditions are what the stamp records", () => {
  const conditions = currentConditions(root, { SAFETENSORS_NO_NATIVE: "0" });
  assert.equal(conditions.abi, process.versions.modules);
  assert.equal(conditions.noNative, false);
  assert.equal(currentConditions(root, { SAFETENSORS_NO_NATIVE: "1" }).noNative, true);
});
