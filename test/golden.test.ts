/**
 * Golden files written by the reference writer (scripts/gen_golden.py, safetensors 0.8.0 `serialize`): our
 * `serialize()` must rebuild each one byte for byte from the recorded inputs, and `deserialize()` must read each one
 * back to those inputs. Multi-key metadata cases ("header-normalized") are compared after putting the reference's
 * metadata object into our sorted-key order: the reference emits metadata keys in hash order (safetensors #584).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import { compareCodePoints } from "../src/format/serialize.js";
import { DTYPES, deserialize, serialize } from "../src/index.js";
import { repoRoot } from "./helpers/reference.js";

const goldenDir = path.join(repoRoot, "test", "fixtures", "golden");

interface GoldenTensor {
  name: string;
  dtype: string;
  shape: number[];
  hex: string;
}

interface GoldenCase {
  file: string;
  compare: "exact" | "header-normalized";
  description: string;
  metadata: [string, string][] | null;
  reference_metadata_order: string[] | null;
  tensors: GoldenTensor[];
  sha256: string;
  size: number;
}

const manifest = JSON.parse(fs.readFileSync(path.join(goldenDir, "manifest.json"), "utf8")) as {
  reference_version: string;
  cases: GoldenCase[];
};

const fromHex = (hex: string) => new Uint8Array(Buffer.from(hex, "hex"));
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function inputs(golden: GoldenCase) {
  const tensors: [string, { dtype: string; shape: number[]; data: Uint8Array }][] = golden.tensors.map((t) => [
    t.name,
    { dtype: t.dtype, shape: t.shape, data: fromHex(t.hex) },
  ]);
  const metadata = golden.metadata === null ? null : new Map(golden.metadata);
  return { tensors, metadata };
}

/** Show where two byte strings first differ, with the header text around it. */
function firstDifference(ours: Uint8Array, theirs: Uint8Array): string {
  let i = 0;
  while (i < ours.length && i < theirs.length && ours[i] === theirs[i]) i++;
  const around = (bytes: Uint8Array) =>
    JSON.stringify(Buffer.from(bytes.subarray(Math.max(0, i - 40), i + 40)).toString("latin1"));
  return `lengths ${ours.length} vs ${theirs.length}, first difference at byte ${i}:\n ours:   ${around(ours)}\n theirs: ${around(theirs)}`;
}

function assertSameBytes(ours: Uint8Array, theirs: Uint8Array, what: string) {
  if (Buffer.compare(Buffer.from(ours), Buffer.from(theirs)) !== 0) {
    assert.fail(`${what}: ${firstDifference(ours, theirs)}`);
  }
}

/**
 * The reference's file with its `__metadata__` object re-emitted with sorted keys. Relies only on the layout both
 * writers share: `{"__metadata__":{…},` first, then the rest; each entry escaped the same way, so lengths agree.
 */
function normalizeReference(reference: Uint8Array, golden: GoldenCase): Uint8Array {
  const metadata = golden.metadata!;
  const entry = ([k, v]: [string, string]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`;
  const refOrder = golden.reference_metadata_order!.map((key) => metadata.find(([k]) => k === key)!);
  const sorted = metadata.slice().sort((a, b) => compareCodePoints(a[0], b[0]));
  const encoder = new TextEncoder();
  const theirs = encoder.encode(`{"__metadata__":{${refOrder.map(entry).join(",")}}`);
  const mine = encoder.encode(`{"__metadata__":{${sorted.map(entry).join(",")}}`);
  assert.equal(theirs.length, mine.length);
  // The reference's metadata segment, as recorded, must be exactly what sits in its file.
  assertSameBytes(reference.subarray(8, 8 + theirs.length), theirs, `${golden.file}: reference metadata segment`);
  const out = reference.slice();
  out.set(mine, 8);
  return out;
}

describe("golden files from the reference writer", () => {
  test("manifest covers what it promises", () => {
    assert.equal(manifest.reference_version, "0.8.0");
    const dtypes = new Set(manifest.cases.flatMap((c) => c.tensors.map((t) => t.dtype)));
    // Every dtype but the two F6 formats, which the reference's Python API cannot write.
    assert.deepEqual([...dtypes].sort(), DTYPES.filter((d) => !d.startsWith("F6_")).sort());
    assert.ok(manifest.cases.some((c) => c.compare === "header-normalized"));
    const names = new Set(manifest.cases.flatMap((c) => c.tensors.map((t) => t.name)));
    for (const name of ["", "__proto__", "constructor", "\u{1F600}", "\uE000", 'quote"inside', "del\x7f", "nul\x00"]) {
      assert.ok(names.has(name), `golden names include ${JSON.stringify(name)}`);
    }
    let total = 0;
    for (const name of fs.readdirSync(goldenDir)) total += fs.statSync(path.join(goldenDir, name)).size;
    assert.ok(total < 300_000, `golden fixtures are ${total} bytes`);
  });

  for (const golden of manifest.cases) {
    describe(`${golden.file} (${golden.compare})`, () => {
      const reference = new Uint8Array(fs.readFileSync(path.join(goldenDir, golden.file)));

      test("fixture is intact", () => {
        assert.equal(reference.length, golden.size);
        assert.equal(sha256(reference), golden.sha256);
      });

      test("serialize() rebuilds it byte for byte", () => {
        const { tensors, metadata } = inputs(golden);
        const ours = serialize(tensors, metadata);
        const expected = golden.compare === "exact" ? reference : normalizeReference(reference, golden);
        assertSameBytes(ours, expected, golden.file);
        // Input order never matters.
        assertSameBytes(serialize(tensors.slice().reverse(), metadata), expected, `${golden.file} (reversed input)`);
      });

      test("deserialize() reads back the recorded tensors and metadata", () => {
        const parsed = deserialize(reference);
        assert.equal(parsed.tensors.size, golden.tensors.length);
        for (const t of golden.tensors) {
          const tensor = parsed.tensors.get(t.name);
          assert.ok(tensor, `tensor ${JSON.stringify(t.name)} present`);
          assert.equal(tensor.dtype, t.dtype);
          assert.deepEqual([...tensor.shape], t.shape);
          assert.equal(Buffer.from(tensor.data).toString("hex"), t.hex, `bytes of ${JSON.stringify(t.name)}`);
        }
        if (golden.metadata === null) {
          assert.equal(parsed.metadata, null);
        } else {
          assert.deepEqual(
            [...(parsed.metadata ?? new Map())].sort((a, b) => compareCodePoints(a[0], b[0])),
            golden.metadata.slice().sort((a, b) => compareCodePoints(a[0], b[0])),
          );
          // We keep the file's order.
          assert.deepEqual([...(parsed.metadata ?? new Map()).keys()], golden.reference_metadata_order);
        }
        // File order is the reference writer's: dtype rank descending, then name by code point.
        const order = [...parsed.tensors.keys()];
        const offsets = order.map((name) => parsed.header.tensors.get(name)!.dataOffsets);
        for (let i = 1; i < offsets.length; i++) assert.ok(offsets[i]![0] >= offsets[i - 1]![1]);
      });
    });
  }
});
