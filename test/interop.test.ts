/**
 * Interoperability with the reference implementation (Python `safetensors` 0.8.0), when it is installed:
 *
 *  - files we write (`saveFile` and `serialize`: every dtype incl. F6_E2M3/F6_E3M2, metadata, odd names, a 5 MB file,
 *    our rebuilds of the golden cases, and 50 random fast-check cases) are read by the reference in ONE python
 *    process (scripts/reference_check.py); its view — verdict, tensors in offset order, dtype, shape, offsets,
 *    SHA-256 of each tensor's bytes, metadata — must equal ours;
 *  - files the reference writes with `safetensors.torch.save_file` (every torch dtype it maps) are read by us.
 *
 * Without the reference every test here is skipped, loudly, with the command that installs it.
 * The reference orders tensors with equal offsets (zero-size ties) by a randomly seeded hash map, so ties are compared
 * in name order.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { compareCodePoints } from "../src/format/serialize.js";
import { DTYPES, type Dtype, deserialize, dtypeOf, loadFile, openFile, saveFile, serialize } from "../src/node.js";
import { fill } from "./helpers/fill.js";
import {
  type ReferenceReport,
  referenceCheckScript,
  referenceRead,
  repoRoot,
  runReference,
  skipWithoutReference,
} from "./helpers/reference.js";

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

interface Input {
  dtype: Dtype;
  shape: number[];
  data: Uint8Array;
}

type Case = {
  label: string;
  tensors: [string, Input][];
  metadata: Map<string, string> | null;
  /** Written with saveFile (else serialize + writeFileSync). */
  viaSaveFile: boolean;
};

function input(dtype: Dtype, shape: number[], seed = shape.length * 31 + dtype.length): Input {
  const bits = shape.reduce((a, b) => a * b, 1) * dtypeOf(dtype).bits;
  assert.equal(bits % 8, 0, `${dtype} [${shape}]`);
  return { dtype, shape, data: fill(bits / 8, seed) };
}

/** A shape for `dtype` whose element count fills whole bytes. */
function shapeFor(dtype: Dtype, base: number[]): number[] {
  const bits = dtypeOf(dtype).bits;
  const n = base.reduce((a, b) => a * b, 1);
  return (n * bits) % 8 === 0 ? base : [...base, 4];
}

function buildCases(): Case[] {
  const cases: Case[] = [];
  const add = (
    label: string,
    tensors: [string, Input][],
    metadata: Map<string, string> | null = null,
    viaSaveFile = true,
  ) => cases.push({ label, tensors, metadata, viaSaveFile });

  // Every dtype, alone and together.
  for (const dtype of DTYPES) {
    add(
      `dtype_${dtype}`,
      [
        ["matrix", input(dtype, shapeFor(dtype, [3, 4]), 1)],
        ["vector", input(dtype, shapeFor(dtype, [5]), 2)],
        ["scalar_or_pair", input(dtype, dtypeOf(dtype).bits % 8 === 0 ? [] : [4], 3)],
        ["empty", input(dtype, [0, 7])],
      ],
      new Map([["dtype", dtype]]),
      dtype.length % 2 === 0,
    );
  }
  add(
    "every_dtype",
    DTYPES.flatMap((dtype, i) => [
      [`${String.fromCharCode(122 - i)}.${dtype}`, input(dtype, shapeFor(dtype, [2, 3]), i)] as [string, Input],
      [`${String.fromCharCode(97 + i)}.${dtype}.0`, input(dtype, [0])] as [string, Input],
    ]),
    new Map([
      ["format", "pt"],
      ["b", "2"],
      ["a", "1"],
    ]),
  );

  // Odd names.
  const names = [
    "",
    "__proto__",
    "constructor",
    "toString",
    "__metadata",
    'quote"inside',
    "back\\slash",
    "nul\x00",
    "\x01\x1f",
    "del\x7f",
    "\u0080",
    "\u2028",
    "\uE000",
    "\uFFFF",
    "\u{10000}",
    "\u{1F600}",
    "\u{10FFFF}",
    "日本語",
    "a\u0301",
    "layer.10",
    "layer.2",
  ];
  add(
    "odd_names",
    names.map((name, i) => [name, input(i % 3 === 0 ? "F32" : i % 3 === 1 ? "U8" : "F4", [2, 2], i)]),
  );
  add(
    "odd_metadata",
    [["t", input("BF16", [2])]],
    new Map([
      ["", ""],
      ["__proto__", "p"],
      ['k"\\\x00\x1f\x7f', 'v"\\\n\t\u2028'],
      ["\u{1F600}", "\u{10FFFF}"],
      ["\uE000", "pua"],
      ["z", "x".repeat(5000)],
    ]),
  );
  add("metadata_only", [], new Map([["only", "metadata"]]));
  add("empty", []);
  add("zero_size_ties", [
    ["a", input("F32", [0])],
    ["b", input("F32", [0, 3])],
    ["c", input("F32", [1])],
    ["d", input("F32", [2, 0])],
    ["e", input("U8", [0])],
    ["f", input("U8", [0, 1099511627776])],
  ]);
  add("scalars", [
    ["f64", input("F64", [])],
    ["bool", { dtype: "BOOL", shape: [], data: new Uint8Array([1]) }],
    ["bool_odd", { dtype: "BOOL", shape: [3], data: new Uint8Array([0, 2, 255]) }],
    ["c64", input("C64", [])],
  ]);

  // A 5 MB file.
  add(
    "large_5mb",
    [
      ["embed", input("F32", [1024, 1024], 7)],
      ["proj", input("BF16", [512, 1024], 8)],
      ["bias", input("F32", [1024], 9)],
      ["scale", input("F8_E8M0", [1024], 10)],
      ["packed", input("F4", [256, 64], 11)],
    ],
    new Map([["format", "pt"]]),
  );

  // 50 random cases.
  const nameArb = fc.oneof(
    fc.string({ unit: "binary", maxLength: 10 }),
    fc.constantFrom("__proto__", "", "constructor", '"', "\\", "\u{1F600}", "\uE000"),
  );
  const tensorArb = fc
    .record({
      dtype: fc.constantFrom(...DTYPES),
      shape: fc.array(fc.integer({ min: 0, max: 5 }), { maxLength: 4 }),
      seed: fc.integer(),
    })
    .map(({ dtype, shape, seed }) => input(dtype, shapeFor(dtype, shape), seed));
  const caseArb = fc.record({
    tensors: fc
      .uniqueArray(fc.tuple(nameArb, tensorArb), { selector: ([n]) => n, maxLength: 10 })
      .map((entries) => entries.filter(([n]) => n !== "__metadata__")),
    metadata: fc.option(
      fc.uniqueArray(
        fc.tuple(fc.string({ unit: "binary", maxLength: 6 }), fc.string({ unit: "binary", maxLength: 12 })),
        {
          selector: ([k]) => k,
          minLength: 1,
          maxLength: 4,
        },
      ),
      { nil: null },
    ),
    viaSaveFile: fc.boolean(),
  });
  fc.sample(caseArb, { seed: 0x1e7e, numRuns: 50 }).forEach((c, i) => {
    add(`random_${i}`, c.tensors, c.metadata ? new Map(c.metadata) : null, c.viaSaveFile);
  });
  return cases;
}

/** Golden cases rebuilt by us (the multi-key metadata ones can only be compared through a reader). */
function goldenCases(): Case[] {
  const manifest = JSON.parse(
    fs.readFileSync(path.join(repoRoot, "test", "fixtures", "golden", "manifest.json"), "utf8"),
  ) as {
    cases: {
      file: string;
      metadata: [string, string][] | null;
      tensors: { name: string; dtype: Dtype; shape: number[]; hex: string }[];
    }[];
  };
  return manifest.cases.map((c) => ({
    label: `golden_${c.file.replace(/\.safetensors$/, "")}`,
    tensors: c.tensors.map((t) => [
      t.name,
      { dtype: t.dtype, shape: t.shape, data: new Uint8Array(Buffer.from(t.hex, "hex")) },
    ]),
    metadata: c.metadata ? new Map(c.metadata) : null,
    viaSaveFile: false,
  }));
}

interface View {
  ok: boolean;
  metadata: [string, string][] | null;
  tensors: { name: string; dtype: string; shape: number[]; data_offsets: [number, number]; sha256: string }[];
}

/** Sort by (begin, end, name): the reference's order, with ties made deterministic. */
function canonical(view: View): View {
  const tensors = view.tensors
    .slice()
    .sort(
      (a, b) =>
        a.data_offsets[0] - b.data_offsets[0] ||
        a.data_offsets[1] - b.data_offsets[1] ||
        compareCodePoints(a.name, b.name),
    );
  const metadata = view.metadata ? view.metadata.slice().sort((a, b) => compareCodePoints(a[0], b[0])) : null;
  return { ok: view.ok, tensors, metadata };
}

function ourView(bytes: Uint8Array): View {
  const parsed = deserialize(bytes);
  return {
    ok: true,
    metadata: parsed.metadata ? [...parsed.metadata] : null,
    tensors: [...parsed.tensors].map(([name, tensor]) => ({
      name,
      dtype: tensor.dtype,
      shape: [...tensor.shape],
      data_offsets: [...parsed.header.tensors.get(name)!.dataOffsets] as [number, number],
      sha256: sha256(tensor.data),
    })),
  };
}

function referenceView(report: ReferenceReport): View {
  return {
    ok: report.ok,
    metadata: report.metadata_items ?? null,
    tensors: (report.tensors ?? []).map((t) => ({ ...t })),
  };
}

/** Tie groups (equal offsets) must hold the same names; outside ties the order must be identical. */
function assertSameOrderUpToTies(ours: View, theirs: View, label: string) {
  const key = (t: View["tensors"][number]) => `${t.data_offsets[0]}:${t.data_offsets[1]}`;
  assert.deepEqual(ours.tensors.map(key), theirs.tensors.map(key), `${label}: offset sequence`);
}

// Skipped test by test (not the whole suite), so that node's summary counts them as skipped.
const skip = skipWithoutReference();

describe("interop with the reference implementation", () => {
  let dir = "";
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-interop-"));
  });
  after(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test("the reference reads every file we write exactly as we do (one python process)", { skip }, () => {
    const cases = [...buildCases(), ...goldenCases()];
    assert.ok(cases.filter((c) => c.label.startsWith("random_")).length === 50);
    const files = cases.map((c, i) => {
      const file = path.join(dir, `${String(i).padStart(3, "0")}_${c.label}.safetensors`);
      if (c.viaSaveFile) saveFile(file, c.tensors, c.metadata);
      else fs.writeFileSync(file, serialize(c.tensors, c.metadata));
      return file;
    });
    const started = performance.now();
    const reports = referenceRead(files);
    const referenceMs = performance.now() - started;
    assert.equal(reports.length, files.length);
    const failures: string[] = [];
    cases.forEach((c, i) => {
      const bytes = new Uint8Array(fs.readFileSync(files[i]!));
      const report = reports[i]!;
      if (!report.ok) {
        failures.push(`${c.label}: the reference refuses our file: ${report.error}`);
        return;
      }
      const ours = ourView(bytes);
      const theirs = referenceView(report);
      try {
        assertSameOrderUpToTies(ours, theirs, c.label);
        assert.deepEqual(canonical(ours), canonical(theirs), c.label);
        // And both equal the input.
        const expected = new Map(
          c.tensors.map(([name, t]) => [name, { dtype: t.dtype, shape: t.shape, sha256: sha256(t.data) }]),
        );
        assert.equal(theirs.tensors.length, expected.size, `${c.label}: tensor count`);
        for (const t of theirs.tensors) {
          assert.deepEqual(
            { dtype: t.dtype, shape: t.shape, sha256: t.sha256 },
            expected.get(t.name),
            `${c.label}: ${JSON.stringify(t.name)}`,
          );
        }
        assert.deepEqual(theirs.metadata ? new Map(theirs.metadata) : null, c.metadata, `${c.label}: metadata`);
      } catch (error) {
        failures.push(String((error as Error).message));
      }
    });
    assert.deepEqual(failures, []);
    // Keep an eye on the batching: one process for everything.
    assert.ok(referenceMs < 30_000, `reference took ${referenceMs} ms`);
  });

  test("we read what the reference writes with torch.save_file, for every torch dtype", { skip }, () => {
    const torchDir = path.join(dir, "torch");
    const written = runReference<
      {
        file: string;
        metadata: Record<string, string>;
        tensors: { name: string; dtype: string; shape: number[]; sha256: string; byte_length: number }[];
      }[]
    >(referenceCheckScript, ["write-torch"], { dir: torchDir });
    const dtypesSeen = new Set(written.flatMap((w) => w.tensors.map((t) => t.dtype)));
    // Every dtype torch can hold: all but the two F6 formats.
    assert.deepEqual([...dtypesSeen].sort(), DTYPES.filter((d) => !d.startsWith("F6_")).sort());
    const reports = referenceRead(written.map((w) => w.file));
    written.forEach((w, i) => {
      const bytes = new Uint8Array(fs.readFileSync(w.file));
      const ours = ourView(bytes);
      const label = path.basename(w.file);
      // What torch said it wrote.
      const byName = new Map(ours.tensors.map((t) => [t.name, t]));
      assert.equal(ours.tensors.length, w.tensors.length, label);
      for (const t of w.tensors) {
        const mine = byName.get(t.name);
        assert.ok(mine, `${label}: ${t.name}`);
        assert.deepEqual(
          {
            dtype: mine.dtype,
            shape: mine.shape,
            sha256: mine.sha256,
            bytes: mine.data_offsets[1] - mine.data_offsets[0],
          },
          { dtype: t.dtype, shape: t.shape, sha256: t.sha256, bytes: t.byte_length },
          `${label}: ${t.name}`,
        );
      }
      assert.deepEqual(new Map(ours.metadata), new Map(Object.entries(w.metadata)), `${label}: metadata`);
      // What the reference reads back (offsets included).
      assert.deepEqual(canonical(ours), canonical(referenceView(reports[i]!)), label);
      // Our file readers agree with the in-memory parser.
      const loaded = loadFile(w.file);
      assert.deepEqual(
        [...loaded].map(([name, t]) => [name, t.dtype, [...t.shape], sha256(t.data)]),
        ours.tensors.map((t) => [t.name, t.dtype, t.shape, t.sha256]),
        `${label}: loadFile`,
      );
      const handle = openFile(w.file, { backend: "pread" });
      try {
        assert.deepEqual(handle.keys(), ours.tensors.map((t) => t.name).sort(compareCodePoints));
      } finally {
        handle.close();
      }
    });
  });
});
