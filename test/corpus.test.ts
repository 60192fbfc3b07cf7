/**
 * Every real file in the shared corpus: our verdict, tensor table (offset order), per-tensor SHA-256 and metadata
 * must equal what the reference implementation reported (EXPECTED.jsonl). Read through both the in-memory parser
 * and the lazy file reader.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import { compareCodePoints } from "../src/format/serialize.js";
import { loadNative } from "../src/io/native.js";
import { deserialize, isSafetensorError, loadFile, openFile } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason, type ExpectedFile, expectedFiles } from "./helpers/corpus.js";

/** Both read backends when the native addon is built; pread alone otherwise. */
const backends = loadNative() ? (["pread", "mmap"] as const) : (["pread"] as const);

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** The reference's error text → the code we must give (ours is finer, and stricter on duplicate keys). */
function expectedCode(expected: ExpectedFile): string[] {
  const text = expected.error ?? "";
  if (text.includes("invalid header length")) return ["InvalidHeaderLength"];
  if (expected.file.includes("duplicate-keys")) return ["DuplicateKey"];
  if (text.includes("invalid offset")) return ["InvalidOffset"];
  return [];
}

describe("real-file corpus", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  test("corpus has its files", () => {
    assert.ok(expectedFiles().length >= 31, `expected at least 31 entries in ${corpusDir}/EXPECTED.jsonl`);
  });

  for (const expected of expectedFiles()) {
    const file = path.join(corpusDir, expected.file);
    test(expected.file, () => {
      const bytes = new Uint8Array(fs.readFileSync(file));
      if (!expected.ok) {
        const codes = expectedCode(expected);
        for (const attempt of [
          () => deserialize(bytes),
          () => openFile(file, { backend: "pread" }).close(),
          () => loadFile(file),
        ]) {
          assert.throws(attempt, (error: unknown) => {
            assert.ok(isSafetensorError(error), `not a SafetensorError: ${error}`);
            if (codes.length > 0) assert.ok(codes.includes(error.code), `code ${error.code}, expected ${codes}`);
            return true;
          });
        }
        return;
      }
      const parsed = deserialize(bytes);
      const table = [...parsed.tensors].map(([name, tensor]) => ({
        name,
        dtype: tensor.dtype,
        shape: [...tensor.shape],
        data_offsets: [...parsed.header.tensors.get(name)!.dataOffsets],
        sha256: sha256(tensor.data),
      }));
      assert.deepStrictEqual(table, expected.tensors);
      const metadata = parsed.metadata ? Object.fromEntries(parsed.metadata) : null;
      assert.deepStrictEqual(metadata, expected.metadata ?? null);

      // loadFile's views (its one-call path where the addon takes the header): the same tensors.
      const loaded = [...loadFile(file)].map(([name, tensor]) => ({
        name,
        dtype: tensor.dtype,
        shape: [...tensor.shape],
        sha256: sha256(tensor.data),
      }));
      assert.deepStrictEqual(
        loaded,
        expected.tensors!.map(({ name, dtype, shape, sha256 }) => ({ name, dtype, shape, sha256 })),
      );

      for (const backend of backends) {
        using lazy = openFile(file, { backend });
        assert.equal(lazy.backend, backend);
        assert.deepStrictEqual(
          lazy.offsetKeys(),
          expected.tensors!.map((t) => t.name),
        );
        assert.deepStrictEqual(lazy.keys(), expected.tensors!.map((t) => t.name).sort(compareCodePoints));
        for (const t of expected.tensors!) {
          assert.equal(sha256(lazy.getTensor(t.name).data), t.sha256, `${backend} ${t.name}`);
          assert.equal(
            sha256(lazy.getTensor(t.name, { memory: "owned" }).data),
            t.sha256,
            `${backend} owned ${t.name}`,
          );
        }
      }
    });
  }
});
