/**
 * Issue 19's test of the docs: five tasks a new user has, each a script written from README.md and docs/ alone
 * (examples/tasks/), importing `safetensors-ts` as a user's project does. They typecheck against the built package
 * and run against real files: read two tensors of a sharded checkpoint by URL, zero rows in place and prove nothing
 * else changed, convert a directory of .bin shards, diff two checkpoints, apply a packed mask. Each script checks its
 * own result and throws when it is wrong; a doc that changes under them fails here.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";
import { repoRoot } from "./helpers/reference.js";

const tasks = join(repoRoot, "examples", "tasks");
const TSC = join(repoRoot, "node_modules", "typescript", "bin", "tsc");
const built = join(repoRoot, "dist", "lib", "node.js");
const buildSkip = existsSync(built)
  ? undefined
  : "the package is not built (dist/lib/node.js is missing: run npm run build)";
const corpusSkip = buildSkip ?? (corpusAvailable ? undefined : corpusMissingReason);

/** Run one task script as a user would (`npx tsx SCRIPT ARGS`); it must print its "ok:" line last. */
function runTask(script: string, ...args: string[]): string {
  const run = spawnSync(process.execPath, ["--import", "tsx", join(tasks, script), ...args], {
    cwd: repoRoot,
    encoding: "utf8",
    timeout: 120_000,
  });
  assert.equal(run.status, 0, `${script} failed:\n${run.stdout}\n${run.stderr}`);
  const last = run.stdout.trimEnd().split("\n").at(-1) ?? "";
  assert.match(last, /^ok: /, `${script} did not end with its ok line:\n${run.stdout}`);
  return run.stdout;
}

describe("five tasks written from the docs alone", () => {
  const scratch = mkdtempSync(join(tmpdir(), "st-docs-tasks-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  test("the scripts typecheck against the built package, as a user's project", {
    skip: buildSkip ?? (existsSync(TSC) ? undefined : "typescript is not installed (run npm ci)"),
  }, () => {
    mkdirSync(join(scratch, "node_modules"));
    symlinkSync(repoRoot, join(scratch, "node_modules", "safetensors-ts"), "dir");
    const files = readdirSync(tasks).filter((name) => name.endsWith(".ts"));
    assert.equal(files.length, 5, files.join(", "));
    const compilerOptions = {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      lib: ["ES2022", "ESNext.Disposable"],
      strict: true,
      noUncheckedIndexedAccess: true,
      noEmit: true,
      skipLibCheck: true,
      types: ["node"],
      typeRoots: [join(repoRoot, "node_modules", "@types")],
    };
    writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "docs-tasks", type: "module" }));
    writeFileSync(
      join(scratch, "tsconfig.json"),
      JSON.stringify({ compilerOptions, files: files.map((name) => join(tasks, name)) }),
    );
    const result = spawnSync(process.execPath, [TSC, "-p", "tsconfig.json", "--pretty", "false"], {
      cwd: scratch,
      encoding: "utf8",
    });
    assert.equal(result.status, 0, `the task scripts do not typecheck:\n${result.stdout}${result.stderr}`);
  });

  test("read two tensors of a sharded checkpoint by URL", { skip: corpusSkip }, () => {
    const out = runTask("read-sharded-by-url.ts", join(corpusDir, "julia-test-sharded-6"), "float32_35", "float16_357");
    assert.match(out, /F16 \[ 2, 5 \]/);
  });

  test("zero rows in place and prove nothing else changed", { skip: corpusSkip }, () => {
    const model = join(corpusDir, "transformers-gpt2-tiny-capp.safetensors");
    const out = runTask("zero-rows-in-place.ts", model, "transformer.h.0.mlp.c_fc.weight");
    assert.match(out, /level: 'full'/);
  });

  test("convert a directory of .bin shards (checked against torch's tensors)", { skip: buildSkip }, () => {
    const out = runTask("convert-bin-directory.ts", join(repoRoot, "test", "fixtures", "pickle-dirs"));
    assert.match(out, /ok: 21 tensors equal torch's \(1 tied\), in 3 shards/);
  });

  test("diff two checkpoints", { skip: corpusSkip }, () => {
    const out = runTask("diff-checkpoints.ts", join(corpusDir, "julia-test-sharded-6"));
    assert.match(out, /differ: 34 same, 1 only b, 1 changed, 1 only a, 1 metadata key differs/);
  });

  test("apply a packed mask", { skip: corpusSkip }, () => {
    const model = join(corpusDir, "transformers-gpt2-tiny-capp.safetensors");
    const out = runTask("apply-packed-mask.ts", model, "transformer.h.0.attn.c_proj.weight");
    assert.match(out, /packed 820 of 4096 zeroed/);
  });
});
