/**
 * The `safetensors` command, run in-process through `main()` (and once through the real bin script): inspect, hash
 * and validate agree with the reference's view of every corpus file; get writes the right bytes; exit codes.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { loadNative } from "../src/io/native.js";
import { deserialize, parseHeaderFromBuffer, saveFile, serialize, Tensor } from "../src/node.js";
import { formatInspect, inspectJson } from "../src/view/inspect-format.js";
import { cliProcess } from "./helpers/cli.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles, repoRoot } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

/** A file with `count` empty tensors (a big header, no data), written without going through the writer. */
function manyTensors(count: number): Uint8Array {
  const tensors = new Map<string, Tensor>();
  const empty = new Uint8Array(0);
  for (let i = 0; i < count; i++) tensors.set(`model.layers.${i}.mlp.weight`, new Tensor("BF16", [0, 8], empty));
  return serialize(tensors);
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const example = path.join(repoRoot, "examples", "tiny-llama.safetensors");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-cli-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));

describe("cli over the corpus", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  for (const expected of expectedFiles()) {
    const file = path.join(corpusDir, expected.file);
    test(expected.file, async () => {
      const bytes = fs.readFileSync(file);
      const validate = await cli("validate", file);
      const inspect = await cli("inspect", file, "--json");
      const hash = await cli("hash", file, "--json");
      if (!expected.ok) {
        for (const run of [validate, inspect, hash]) {
          assert.equal(run.code, 1);
          assert.match(run.stderr, /^error\[[A-Za-z]+\]: .+\n$/);
        }
        assert.equal(validate.stdout, "");
        return;
      }
      assert.deepEqual([validate.code, validate.stdout, validate.stderr], [0, "ok\n", ""]);
      assert.equal(inspect.code, 0);
      const report = JSON.parse(inspect.stdout);
      assert.deepEqual(Object.keys(report), ["file_bytes", "header_bytes", "metadata", "parameters", "tensors"]);
      assert.equal(report.file_bytes, bytes.length);
      assert.equal(report.header_bytes, Number(bytes.readBigUInt64LE(0)));
      assert.deepEqual(report.metadata, expected.metadata ?? null);
      const tensors = expected.tensors!;
      assert.deepEqual(
        report.tensors,
        tensors.map(({ name, dtype, shape, data_offsets }) => ({ name, dtype, shape, data_offsets })),
      );
      assert.equal(
        report.parameters,
        tensors.reduce((sum, t) => sum + t.shape.reduce((a, b) => a * b, 1), 0),
      );
      assert.equal(hash.code, 0);
      const digests = JSON.parse(hash.stdout);
      assert.equal(digests.file_sha256, sha256(bytes));
      assert.deepEqual(
        Object.keys(digests.tensors),
        tensors.map((t) => t.name),
      );
      for (const t of tensors) assert.equal(digests.tensors[t.name], t.sha256, t.name);
    });
  }
});

describe("cli", () => {
  test("inspect prints a table with totals", async () => {
    const run = await cli("inspect", example);
    assert.equal(run.code, 0);
    assert.match(run.stdout, /model\.embed_tokens\.weight\s+F16\s+\[256, 64\]\s+32,768/);
    assert.match(run.stdout, /^total\s+22\s+131,936\s+264,704$/m);
    assert.match(run.stdout, /format: "pt"/);
  });

  test("validate: several files, exit 1 when any is invalid", async () => {
    const bad = path.join(tmp, "bad.safetensors");
    fs.writeFileSync(bad, Buffer.from([1, 2, 3]));
    const run = await cli("validate", example, bad);
    assert.equal(run.code, 1);
    assert.equal(run.stdout, `${example}: ok\n`);
    assert.match(run.stderr, /bad\.safetensors: error\[HeaderTooSmall\]: /);
  });

  test("missing file is an IoError (exit 1)", async () => {
    const run = await cli("inspect", path.join(tmp, "nope.safetensors"));
    assert.equal(run.code, 1);
    assert.match(run.stderr, /^error\[IoError\]: .*ENOENT/);
  });

  test("usage errors exit 2", async () => {
    for (const argv of [[], ["frobnicate"], ["inspect"], ["inspect", example, "--bogus"], ["get", example, "x"]]) {
      const run = await cli(...argv);
      assert.equal(run.code, 2, argv.join(" "));
      assert.match(run.stderr, /usage: safetensors/);
    }
    assert.equal((await cli("--help")).code, 0);
  });

  test("get writes raw bytes, f32 decodes, --slice reads a numpy slice", async () => {
    const values = Float32Array.from({ length: 24 }, (_, i) => i - 7.5);
    const file = path.join(tmp, "get.safetensors");
    saveFile(file, {
      w: Tensor.fromFloat32("BF16", [2, 3, 4], values),
      "odd name": Tensor.fromFloat32("F32", [1], [3]),
    });
    const raw = path.join(tmp, "raw.bin");
    assert.equal((await cli("get", file, "w", "--out", raw)).code, 0);
    const stored = deserialize(fs.readFileSync(file)).tensors.get("w")!;
    assert.deepEqual(new Uint8Array(fs.readFileSync(raw)), stored.data);
    const f32 = path.join(tmp, "w.f32");
    assert.equal((await cli("get", file, "w", "--as", "f32", "--out", f32)).code, 0);
    assert.deepEqual(new Float32Array(new Uint8Array(fs.readFileSync(f32)).buffer), values);
    const sliced = path.join(tmp, "slice.f32");
    assert.equal((await cli("get", file, "w", "--slice", "-1, ::2, 1:3", "--as", "f32", "--out", sliced)).code, 0);
    assert.deepEqual([...new Float32Array(new Uint8Array(fs.readFileSync(sliced)).buffer)], [5.5, 6.5, 13.5, 14.5]);
    const missing = await cli("get", file, "nope", "--out", raw);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^error\[TensorNotFound\]: no tensor named "nope"/);
    const badSlice = await cli("get", file, "w", "--slice", "5", "--out", raw);
    assert.equal(badSlice.code, 1);
    assert.match(badSlice.stderr, /^error\[InvalidSlice\]: index 5 is out of bounds for axis 0 with size 2/);
  });

  test("doctor names the backend", async () => {
    const run = await cli("doctor");
    assert.equal(run.code, 0);
    assert.match(run.stdout, loadNative() ? /default backend \(auto\): mmap/ : /default backend \(auto\): pread/);
  });

  test("output into a pipe closed early (| head -1): quiet, exit 0", async () => {
    const file = path.join(tmp, "many.safetensors");
    fs.writeFileSync(file, manyTensors(5000)); // a ~400 KB table: more than a pipe holds
    const child = cliProcess(["inspect", file]);
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk) => {
      stderr += chunk;
    });
    const firstChunk = await new Promise<string>((resolve) =>
      child.stdout.once("data", (chunk) => resolve(String(chunk))),
    );
    child.stdout.destroy(); // what head does after its first line
    const status = await new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    assert.match(firstChunk, /many\.safetensors: .* 5,000 tensors/);
    assert.equal(stderr, "");
    assert.equal(status, 0);
  });

  test("inspect of 200k tensors (no spread of every row into Math.max)", () => {
    const bytes = manyTensors(200_000);
    const header = parseHeaderFromBuffer(bytes);
    const table = formatInspect("many", header);
    assert.match(table, /^model\.layers\.199999\.mlp\.weight +BF16 +\[0, 8\] +0$/m);
    assert.match(table, /^total +200,000 +0 +0$/m);
    assert.equal(JSON.parse(inspectJson(header)).tensors.length, 200_000);
  });

  test("the bin script runs (npx safetensors)", () => {
    const bin = path.join(repoRoot, "bin", "safetensors.js");
    const out = execFileSync(process.execPath, [bin, "inspect", example, "--json"], { encoding: "utf8" });
    assert.equal(JSON.parse(out).tensors.length, 22);
    const bad = spawnSync(process.execPath, [bin, "validate", path.join(tmp, "missing")], { encoding: "utf8" });
    assert.equal(bad.status, 1);
  });
});
