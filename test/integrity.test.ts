/**
 * Ecosystem digests of `hash`: AutoV2, kohya's sshs_model_hash / sshs_legacy_hash (checked against the values a kohya
 * training run recorded in a real file's own metadata), ModelSpec's hash; all from the same single pass.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { openFile, saveFile, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

describe("hash: ecosystem digests", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  const kohya = path.join(corpusDir, "kohya-lycoris-lokr-smart-falcon.safetensors");

  test("sshs_model_hash and sshs_legacy_hash equal what kohya's trainer recorded in the file", async () => {
    using file = openFile(kohya);
    const recorded = file.metadata()!;
    const run = await cli("hash", "--json", "--ecosystem", kohya);
    assert.equal(run.code, 0, run.stderr);
    const got = JSON.parse(run.stdout);
    assert.equal(got.sshs_model_hash, recorded.get("sshs_model_hash"));
    assert.equal(got.sshs_legacy_hash, recorded.get("sshs_legacy_hash"));
    assert.equal(got.modelspec_hash_sha256, `0x${recorded.get("sshs_model_hash")}`);
  });

  test("definitions: AutoV2 = file SHA-256[:10]; data = bytes after 8 + N; AutoV1 = SHA-256 of 64 KiB at 1 MiB", async () => {
    for (const name of ["kohya-lycoris-lokr-smart-falcon.safetensors", "r-hello.safetensors"]) {
      const file = path.join(corpusDir, name);
      const bytes = fs.readFileSync(file);
      const n = Number(bytes.readBigUInt64LE(0));
      const got = JSON.parse((await cli("hash", "--json", "--ecosystem", file)).stdout);
      assert.equal(got.autov2, sha256(bytes).slice(0, 10));
      assert.equal(got.data_sha256, sha256(bytes.subarray(8 + n)));
      assert.equal(got.autov1, sha256(bytes.subarray(0x100000, 0x110000)).slice(0, 8));
      const text = (await cli("hash", "--ecosystem", file)).stdout.split("\n");
      assert.equal(text[0], `${sha256(bytes)}  ${file}`);
      assert.ok(text.includes(`# autov2 ${got.autov2}`));
      assert.ok(text.includes(`# sshs_model_hash ${got.sshs_model_hash}`));
    }
  });
});

describe("diff", () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-diff-"));
  process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
  const at = (name: string) => path.join(tmp, name);
  const rows = new Float32Array(6 * 4).map((_, i) => i / 4);
  const changed = rows.slice();
  changed[5] = 100; // row 1
  changed[9] = -2.5; // row 2
  changed[22] = Number.NaN; // row 5
  saveFile(
    at("a.safetensors"),
    {
      w: Tensor.fromFloat32("F32", [6, 4], rows),
      h: Tensor.fromFloat32("BF16", [2, 2], [1, 2, 3, 4]),
      gone: Tensor.fromFloat32("F32", [1], [1]),
      retyped: Tensor.fromFloat32("F32", [2], [1, 2]),
      reshaped: Tensor.fromFloat32("F32", [2, 3], [1, 2, 3, 4, 5, 6]),
    },
    { kept: "1", changed: "a", dropped: "x" },
  );
  saveFile(
    at("b.safetensors"),
    {
      w: Tensor.fromFloat32("F32", [6, 4], changed),
      h: Tensor.fromFloat32("BF16", [2, 2], [1, 2, 3, 4.5]),
      added: Tensor.fromFloat32("F32", [1], [1]),
      retyped: Tensor.fromFloat32("F16", [2], [1, 2]),
      reshaped: Tensor.fromFloat32("F32", [3, 2], [1, 2, 3, 4, 5, 6]),
    },
    { kept: "1", changed: "b", new: "y" },
  );

  test("per tensor: changed (elements, max |a-b|, NaN, rows), only in A/B, dtype and shape changed; metadata", async () => {
    const run = await cli("diff", at("a.safetensors"), at("b.safetensors"), "--json");
    assert.equal(run.code, 1, run.stderr);
    const got = JSON.parse(run.stdout);
    const byName = new Map(got.tensors.map((t: { name: string }) => [t.name, t]));
    assert.deepEqual(byName.get("w"), {
      name: "w",
      status: "changed",
      a: { dtype: "F32", shape: [6, 4] },
      b: { dtype: "F32", shape: [6, 4] },
      elements: 3,
      total: 24,
      max_abs_diff: 100 - 1.25,
      nan_elements: 1,
      changed_rows: 3,
      row_ranges: 2,
      rows: [
        [1, 3],
        [5, 6],
      ],
    });
    assert.equal((byName.get("h") as { max_abs_diff: number }).max_abs_diff, 0.5);
    assert.equal((byName.get("gone") as { status: string }).status, "only_a");
    assert.equal((byName.get("added") as { status: string }).status, "only_b");
    assert.deepEqual(
      [byName.get("retyped"), byName.get("reshaped")].map((t) => [
        (t as { status: string }).status,
        (t as { same_bytes: boolean }).same_bytes,
      ]),
      [
        ["dtype_changed", false],
        ["shape_changed", true],
      ],
    );
    assert.deepEqual(got.metadata, [
      { key: "changed", a: "a", b: "b" },
      { key: "dropped", a: "x" },
      { key: "new", b: "y" },
    ]);
    const text = await cli("diff", at("a.safetensors"), at("b.safetensors"));
    assert.match(
      text.stdout,
      /^changed {2}"w" {2}F32 \[6, 4\]: 3 of 24 elements differ, max \|a-b\| 98\.75, 1 with NaN; rows 1:3, 5$/m,
    );
  });

  test("exit status as diff(1): 0 same (a file and a copy, a sharded checkpoint and itself), 2 on error", async () => {
    fs.copyFileSync(at("a.safetensors"), at("copy.safetensors"));
    const same = await cli("diff", at("a.safetensors"), at("copy.safetensors"));
    assert.deepEqual([same.code, same.stdout], [0, "same: 5 same\n"]);
    if (corpusAvailable) {
      const dir = path.join(corpusDir, "julia-test-sharded-6");
      assert.equal((await cli("diff", dir, dir)).code, 0);
    }
    const missing = await cli("diff", at("a.safetensors"), at("none.safetensors"));
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^error\[IoError\]/);
    assert.equal((await cli("diff", at("a.safetensors"))).code, 2);
  });
});
