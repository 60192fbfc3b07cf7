/**
 * The API reference (`npm run docs:api`, TypeDoc over the TSDoc comments) builds without a warning: no broken
 * `{@link}`, and no public function or type that refers to a type the package does not export (the reference would
 * show a dead name). Runs TypeDoc's conversion and validation without writing HTML (~8 s of CPU). Skipped, saying
 * why, when TypeDoc is not installed.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { repoRoot } from "./helpers/reference.js";

const TYPEDOC = join(repoRoot, "node_modules", "typedoc", "bin", "typedoc");
const skip = existsSync(TYPEDOC) ? undefined : `TypeDoc is not installed at ${TYPEDOC} (run npm ci)`;
if (skip) console.error(`\n!!! API reference check is SKIPPED: ${skip} !!!\n`);

test("the API reference builds from the TSDoc comments without a warning (npm run docs:api)", { skip }, () => {
  // --skipErrorChecking: TypeDoc's own type check of the program is `tsc -p tsconfig.build.json`'s (npm run build,
  // the same tsconfig) and `npm run typecheck`'s, half of its time here: 17.1 -> 8.3 s user (2026-12-03, load 5-6
  // on 2 cores). The validation (links, types not exported) runs all the same: a {@link} to nothing still fails.
  const args = [TYPEDOC, "--emit", "none", "--logLevel", "Warn", "--skipErrorChecking"];
  const result = spawnSync(process.execPath, args, {
    cwd: repoRoot,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" },
    timeout: 240_000,
  });
  const output = `${result.error ? `${result.error.message}\n` : ""}${result.stdout}${result.stderr}`;
  assert.equal(
    result.status,
    0,
    `TypeDoc (typedoc.json, as npm run docs:api runs it) reported problems. Export a type that a public signature uses, ` +
      `or list it under "intentionallyNotExported" in typedoc.json when users never name it:\n${output}`,
  );
});
