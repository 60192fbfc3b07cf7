/**
 * Ecosystem digests of `hash`: AutoV2, kohya's sshs_model_hash / sshs_legacy_hash (checked against the values a kohya
 * training run recorded in a real file's own metadata), ModelSpec's hash; all from the same single pass.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import { openFile } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

describe("hash: ecosystem digests", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  const kohya = path.join(corpusDir, "kohya-lycoris-lokr-smart-falcon.safetensors");

  test("sshs_model_hash and sshs_legacy_hash equal what kohya's trainer recorded in the file", async () => {
    using file = openFile(kohya);
    const recorded = file.metadata()!;
    const run = await cli("hash", "--json", kohya);
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
      const got = JSON.parse((await cli("hash", "--json", file)).stdout);
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
