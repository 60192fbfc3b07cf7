import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import fc from "fast-check";
import { type Dtype, dtypeOf } from "../src/format/dtypes.js";
import { SafetensorError } from "../src/format/errors.js";
import {
  type ByteRange,
  type Dim,
  ELLIPSIS,
  fetchRanges,
  formatSliceSpec,
  gather,
  gatherPieces,
  normalizeIndex,
  parseSliceSpec,
  planSlice,
  type SliceIndex,
  type SlicePlan,
  slice,
} from "../src/slice/index.js";

/** The fixtures' data: byte i of every tensor is (i * 37 + 11) % 251. */
function pattern(length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = (i * 37 + 11) % 251;
  return bytes;
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("hex");
}

function throwsSlice(fn: () => unknown, code = "InvalidSlice", message?: string | RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof SafetensorError, `expected a SafetensorError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    if (typeof message === "string") assert.equal(error.message, message);
    else if (message !== undefined) assert.match(error.message, message);
    return true;
  });
}

function shapeStrings(shape: readonly Dim[]): string[] {
  return shape.map(String);
}

/** Brute force: the byte offset of every output element, in output order (byte-sized dtypes only). */
function elementOffsets(plan: SlicePlan): number[] {
  const size = dtypeOf(plan.dtype).bits / 8;
  const strides: number[] = [];
  let stride = 1;
  for (let d = plan.axes.length - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= Number(plan.axes[d]!.size);
  }
  const out: number[] = [];
  const walk = (d: number, at: number): void => {
    if (d === plan.axes.length) {
      out.push(at * size);
      return;
    }
    const axis = plan.axes[d]!;
    for (let i = 0; i < Number(axis.count); i++)
      walk(d + 1, at + (Number(axis.start) + i * Number(axis.step)) * strides[d]!);
  };
  walk(0, 0);
  return out;
}

function referenceRuns(plan: SlicePlan): ByteRange[] {
  const size = dtypeOf(plan.dtype).bits / 8;
  const runs: { start: number; end: number }[] = [];
  for (const start of elementOffsets(plan)) {
    const last = runs[runs.length - 1];
    if (last !== undefined && last.end === start) last.end += size;
    else runs.push({ start, end: start + size });
  }
  return runs;
}

function referenceGather(plan: SlicePlan, data: Uint8Array): Uint8Array {
  const size = dtypeOf(plan.dtype).bits / 8;
  const offsets = elementOffsets(plan);
  const out = new Uint8Array(offsets.length * size);
  offsets.forEach((at, i) => {
    out.set(data.subarray(at, at + size), i * size);
  });
  return out;
}

interface FixtureCase {
  dtype: Dtype;
  shape: (number | string)[];
  spec: string;
  out?: (number | string)[];
  hex?: string;
  sha256?: string;
  error?: string;
  message?: string;
}

describe("numpy fixtures (scripts/gen_slice_fixtures.py)", () => {
  const fixture = JSON.parse(readFileSync(new URL("./fixtures/slices/cases.json", import.meta.url), "utf8")) as {
    count: number;
    cases: FixtureCase[];
  };
  const data = pattern(1 << 16);

  test(`${fixture.count} cases match numpy`, () => {
    assert.equal(fixture.cases.length, fixture.count);
    assert.ok(fixture.count >= 3000);
    const failures: string[] = [];
    let errors = 0;
    for (const c of fixture.cases) {
      const shape = c.shape.map((d) => (typeof d === "string" ? BigInt(d) : d));
      const label = `${c.dtype}${JSON.stringify(c.shape)}[${JSON.stringify(c.spec)}]`;
      try {
        if (c.error !== undefined) {
          errors++;
          try {
            planSlice(c.dtype, shape, parseSliceSpec(c.spec));
            failures.push(`${label}: numpy raises ${c.error} (${c.message}), we did not`);
          } catch (error) {
            if (!(error instanceof SafetensorError) || error.code !== "InvalidSlice") {
              failures.push(`${label}: expected InvalidSlice, got ${String(error)}`);
            } else if (!c.message!.startsWith("only integers") && error.message !== c.message) {
              failures.push(`${label}: message ${JSON.stringify(error.message)}, numpy ${JSON.stringify(c.message)}`);
            }
          }
          continue;
        }
        const plan = planSlice(c.dtype, shape, parseSliceSpec(c.spec));
        if (JSON.stringify(shapeStrings(plan.shape)) !== JSON.stringify(c.out!.map(String))) {
          failures.push(`${label}: shape ${shapeStrings(plan.shape)}, numpy ${c.out}`);
          continue;
        }
        const bytes = gather(plan, data.subarray(0, plan.tensorByteLength));
        if (
          c.hex !== undefined ? hex(bytes) !== c.hex : createHash("sha256").update(bytes).digest("hex") !== c.sha256
        ) {
          failures.push(`${label}: bytes differ`);
        }
        if (plan.byteLength !== bytes.length) failures.push(`${label}: byteLength ${plan.byteLength}`);
      } catch (error) {
        failures.push(`${label}: threw ${String(error)}`);
      }
    }
    assert.ok(errors > 500);
    assert.deepEqual(failures.slice(0, 20), []);
  });
});

describe("parseSliceSpec", () => {
  test("items", () => {
    assert.deepEqual(parseSliceSpec(""), []);
    assert.deepEqual(parseSliceSpec("  \t"), []);
    assert.deepEqual(parseSliceSpec("3"), [3]);
    assert.deepEqual(parseSliceSpec("-1, +2"), [-1, 2]);
    assert.deepEqual(parseSliceSpec("..."), [ELLIPSIS]);
    assert.deepEqual(parseSliceSpec(":"), [{ start: null, stop: null, step: null }]);
    assert.deepEqual(parseSliceSpec("::2"), [{ start: null, stop: null, step: 2 }]);
    assert.deepEqual(parseSliceSpec("-3:"), [{ start: -3, stop: null, step: null }]);
    assert.deepEqual(parseSliceSpec("::-1"), [{ start: null, stop: null, step: -1 }]);
    assert.deepEqual(parseSliceSpec(" 5 : 1 : -2 , ... ,0"), [{ start: 5, stop: 1, step: -2 }, ELLIPSIS, 0]);
    assert.deepEqual(parseSliceSpec("1:2:"), [{ start: 1, stop: 2, step: null }]);
    assert.deepEqual(parseSliceSpec("99999999999999999999:-9007199254740992"), [
      { start: 99999999999999999999n, stop: -9007199254740992n, step: null },
    ]);
    assert.deepEqual(parseSliceSpec("9007199254740991"), [9007199254740991]);
  });

  test("errors quote the item", () => {
    throwsSlice(() => parseSliceSpec("1:2:3:4"), "InvalidSlice", /"1:2:3:4"/);
    throwsSlice(() => parseSliceSpec("0, a"), "InvalidSlice", /"a"/);
    throwsSlice(() => parseSliceSpec("1.5"), "InvalidSlice", /"1\.5"/);
    throwsSlice(() => parseSliceSpec("1,,2"), "InvalidSlice", /empty item/);
    throwsSlice(() => parseSliceSpec("1,"), "InvalidSlice", /empty item/);
    throwsSlice(() => parseSliceSpec("None"), "InvalidSlice", /not supported/);
    throwsSlice(() => parseSliceSpec(":, np.newaxis"), "InvalidSlice", /not supported/);
    throwsSlice(() => parseSliceSpec("1:x"), "InvalidSlice", /"1:x".*"x"/);
    throwsSlice(() => parseSliceSpec(".."), "InvalidSlice", /"\.\."/);
    throwsSlice(() => parseSliceSpec("- 1"), "InvalidSlice");
  });

  test("formatSliceSpec round-trips", () => {
    for (const spec of ["", "1", "-1,...,::2", "1:2,:,5:1:-2", "99999999999999999999:"]) {
      assert.equal(formatSliceSpec(parseSliceSpec(spec)), spec);
    }
  });
});

describe("normalizeIndex", () => {
  test("numpy semantics and messages", () => {
    const n = normalizeIndex([4, 5, 6], [-1, ELLIPSIS, slice(null, null, -2)]);
    assert.deepEqual(n.shape, [5, 3]);
    assert.deepEqual(
      n.axes.map((a) => [a.start, a.step, a.count, a.keep]),
      [
        [3, 1, 1, false],
        [0, 1, 5, true],
        [5, -2, 3, true],
      ],
    );
    throwsSlice(() => normalizeIndex([4], [5]), "InvalidSlice", "index 5 is out of bounds for axis 0 with size 4");
    throwsSlice(
      () => normalizeIndex([4, 2], [0, -3]),
      "InvalidSlice",
      "index -3 is out of bounds for axis 1 with size 2",
    );
    throwsSlice(
      () => normalizeIndex([4], [0, 0]),
      "InvalidSlice",
      "too many indices for array: array is 1-dimensional, but 2 were indexed",
    );
    throwsSlice(() => normalizeIndex([4], [ELLIPSIS, ELLIPSIS]), "InvalidSlice", /single ellipsis/);
    throwsSlice(() => normalizeIndex([4], [slice(0, 1, 0)]), "InvalidSlice", "slice step cannot be zero");
    assert.deepEqual(normalizeIndex([], []).shape, []);
    assert.deepEqual(normalizeIndex([], [ELLIPSIS]).shape, []);
  });

  test("refuses what is not a basic index", () => {
    const bad: unknown[] = [null, undefined, 1.5, Number.NaN, Number.POSITIVE_INFINITY, "1", [0], true, { begin: 1 }];
    for (const item of bad) throwsSlice(() => normalizeIndex([4], [item as SliceIndex]));
    throwsSlice(() => normalizeIndex([4], [{ start: 0.5 }]), "InvalidSlice", /start must be an integer/);
    throwsSlice(() => normalizeIndex([4], [null as unknown as SliceIndex]), "InvalidSlice", /None/);
    throwsSlice(() => normalizeIndex([-1], []), "InvalidTensor");
  });

  test("huge values clamp like CPython, bigint and number alike", () => {
    for (const [start, stop, step] of [
      [10n ** 30n, -(10n ** 30n), -(10n ** 30n)],
      [1e300, -1e300, -1e300],
      [-(2n ** 70n), 2n ** 70n, 3],
    ] as const) {
      const a = normalizeIndex([7], [slice(start, stop, step)]).axes[0]!;
      const b = normalizeIndex([7n], [slice(BigInt(start), BigInt(stop), BigInt(step))]).axes[0]!;
      assert.deepEqual([a.start, a.count], [b.start, b.count]);
    }
    assert.deepEqual(normalizeIndex([7], [slice(10n ** 30n, null, -(10n ** 30n))]).shape, [1]);
    assert.deepEqual(normalizeIndex([7], [slice(-(2n ** 70n), 2n ** 70n, 3)]).shape, [3]);
  });

  test("dims beyond 2^53 stay exact", () => {
    const big = 2n ** 62n + 1n;
    const n = normalizeIndex([0, big], [ELLIPSIS, slice(1, null, 2)]);
    assert.deepEqual(n.shape, [0, 2n ** 61n]);
    assert.equal(n.empty, true);
    assert.deepEqual(normalizeIndex([0, big], [slice(null), -1]).axes[1]!.start, 2n ** 62n);
    throwsSlice(
      () => normalizeIndex([0, big], [slice(null), big]),
      "InvalidSlice",
      `index ${big} is out of bounds for axis 1 with size ${big}`,
    );
  });
});

describe("planSlice", () => {
  test("row slices are one run", () => {
    const plan = planSlice("F16", [32, 16], parseSliceSpec("0:8"));
    assert.deepEqual(plan.shape, [8, 16]);
    assert.equal(plan.chunkCount, 1);
    assert.equal(plan.runCount, 1);
    assert.equal(plan.isContiguous, true);
    assert.deepEqual([...plan.runs()], [{ start: 0, end: 256 }]);
    assert.deepEqual(plan.span(), { start: 0, end: 256 });
    // Full trailing dims fold into the run, integer-indexed dims too.
    const p2 = planSlice("F32", [4, 3, 5], parseSliceSpec("1:3, :, :"));
    assert.deepEqual([...p2.runs()], [{ start: 60, end: 180 }]);
    const p3 = planSlice("F32", [4, 1, 5], parseSliceSpec(":, 0"));
    assert.deepEqual([...p3.runs()], [{ start: 0, end: 80 }]);
    const p4 = planSlice("F32", [4, 3, 5], parseSliceSpec("2, 1"));
    assert.deepEqual([...p4.runs()], [{ start: 140, end: 160 }]);
  });

  test("column slices are one run per row", () => {
    const plan = planSlice("F16", [4, 16], parseSliceSpec(":, 0:4"));
    assert.deepEqual(plan.shape, [4, 4]);
    assert.equal(plan.chunkLength, 8);
    assert.deepEqual(plan.loops, [{ count: 4, stride: 32 }]);
    assert.deepEqual(
      [...plan.runs()].map((r) => r.start),
      [0, 32, 64, 96],
    );
    assert.deepEqual(plan.span(), { start: 0, end: 104 });
  });

  test("negative steps reverse element order", () => {
    const plan = planSlice("U16", [5], parseSliceSpec("::-1"));
    assert.deepEqual(plan.loops, [{ count: 5, stride: -2 }]);
    assert.equal(plan.offset, 8);
    const data = pattern(10);
    assert.deepEqual(
      [...gather(plan, data)],
      [
        ...data.subarray(8),
        ...data.subarray(6, 8),
        ...data.subarray(4, 6),
        ...data.subarray(2, 4),
        ...data.subarray(0, 2),
      ],
    );
    const rows = planSlice("U8", [3, 4], parseSliceSpec("::-1"));
    assert.deepEqual(
      [...rows.runs()],
      [
        { start: 8, end: 12 },
        { start: 4, end: 8 },
        { start: 0, end: 4 },
      ],
    );
  });

  test("chunks that touch across a loop carry merge into one run", () => {
    // [2, 3] `[:, ::2]` selects elements 0, 2, 3, 5: runs [0,1) [2,4) [5,6).
    const plan = planSlice("U8", [2, 3], parseSliceSpec(":, ::2"));
    assert.equal(plan.chunkCount, 4);
    assert.equal(plan.runCount, 3);
    assert.deepEqual(
      [...plan.runs()],
      [
        { start: 0, end: 1 },
        { start: 2, end: 4 },
        { start: 5, end: 6 },
      ],
    );
    const deep = planSlice("U8", [2, 2, 3], parseSliceSpec(":, :, ::2"));
    assert.equal(deep.chunkCount, 8);
    assert.equal(deep.runCount, 5);
    assert.equal([...deep.runs()].length, 5);
  });

  test("zero-size results", () => {
    for (const [shape, spec] of [
      [[4, 8], "1:1"],
      [[4, 8], ":, 5:2"],
      [[0, 8], ""],
      [[3, 0, 2], "..., 1"],
    ] as const) {
      const plan = planSlice("F32", shape, parseSliceSpec(spec));
      assert.equal(plan.byteLength, 0);
      assert.equal(plan.chunkCount, 0);
      assert.equal(plan.runCount, 0);
      assert.deepEqual([...plan.runs()], []);
      assert.deepEqual(fetchRanges(plan), []);
      assert.equal(gather(plan, new Uint8Array(0)).length, 0);
    }
    const huge = planSlice("F64", [0, 2n ** 62n], parseSliceSpec(":, ::3"));
    assert.deepEqual(huge.shape, [0, 1537228672809129302n]);
    assert.equal(huge.tensorByteLength, 0);
  });

  test("too large and bad input", () => {
    throwsSlice(() => planSlice("U8", [2 ** 30, 2 ** 30, 2 ** 30], parseSliceSpec("0")), "TooLarge");
    throwsSlice(() => planSlice("F64", [2 ** 51], []), "TooLarge");
    throwsSlice(() => planSlice("U8", [2n ** 60n], parseSliceSpec("0:0")), "TooLarge");
    throwsSlice(() => planSlice("F17" as Dtype, [2], []), "UnknownDtype");
    throwsSlice(() => planSlice("U8", [1.5], []), "InvalidTensor");
  });

  test("0-D tensors", () => {
    const plan = planSlice("F64", [], []);
    assert.deepEqual(plan.shape, []);
    assert.deepEqual([...plan.runs()], [{ start: 0, end: 8 }]);
    assert.equal(planSlice("F64", [], parseSliceSpec("...")).byteLength, 8);
    throwsSlice(() => planSlice("F64", [], parseSliceSpec("0")), "InvalidSlice", /0-dimensional, but 1/);
  });
});

describe("sub-byte dtypes", () => {
  // F4 [4, 8]: a row is 8 × 4 bits = 4 bytes; F6 [4, 8]: a row is 48 bits = 6 bytes.
  const runsOf = (dtype: Dtype, shape: number[], spec: string): number[][] =>
    [...planSlice(dtype, shape, parseSliceSpec(spec)).runs()].map((r) => [r.start, r.end]);

  test("F4 slices on byte boundaries", () => {
    assert.deepEqual(runsOf("F4", [4, 8], "1"), [[4, 8]]);
    assert.deepEqual(runsOf("F4", [4, 8], "1:3"), [[4, 12]]);
    assert.deepEqual(runsOf("F4", [4, 8], "::-1"), [
      [12, 16],
      [8, 12],
      [4, 8],
      [0, 4],
    ]);
    assert.deepEqual(runsOf("F4", [4, 8], ":, 0:2"), [
      [0, 1],
      [4, 5],
      [8, 9],
      [12, 13],
    ]);
    assert.deepEqual(runsOf("F4", [4, 8], "::2, 2:6"), [
      [1, 3],
      [9, 11],
    ]);
    assert.deepEqual(runsOf("F4", [4, 8], "3, -2:"), [[15, 16]]);
    assert.deepEqual(runsOf("F4", [4, 8], ":, 1:1"), []);
    const plan = planSlice("F4", [4, 8], parseSliceSpec(":, 0:2"));
    assert.deepEqual(plan.shape, [4, 2]);
    assert.equal(plan.byteLength, 4);
    const data = pattern(16);
    assert.deepEqual([...gather(plan, data)], [data[0], data[4], data[8], data[12]]);
  });

  test("F4 misaligned", () => {
    for (const spec of [":, 1:2", ":, ::2", ":, 1", ":, 0:3", "0, ::-1", ":, 1:3"]) {
      throwsSlice(() => planSlice("F4", [4, 8], parseSliceSpec(spec)), "MisalignedSlice", /byte boundar/);
    }
    // A 1-element-wide tensor: rows are half bytes.
    throwsSlice(() => planSlice("F4", [4, 1], parseSliceSpec("1")), "MisalignedSlice");
    assert.deepEqual(runsOf("F4", [4, 1], "2:4"), [[1, 2]]);
    // The tensor itself must be whole bytes.
    throwsSlice(() => planSlice("F4", [3, 3], []), "MisalignedSlice", /whole number of bytes/);
  });

  test("F6 slices on byte boundaries", () => {
    for (const dtype of ["F6_E2M3", "F6_E3M2"] as const) {
      assert.deepEqual(runsOf(dtype, [4, 8], "1"), [[6, 12]]);
      assert.deepEqual(runsOf(dtype, [4, 8], ":, 0:4"), [
        [0, 3],
        [6, 9],
        [12, 15],
        [18, 21],
      ]);
      assert.deepEqual(runsOf(dtype, [4, 8], "-1, 4:"), [[21, 24]]);
      assert.deepEqual(runsOf(dtype, [4, 2], "2:4"), [[3, 6]]);
      assert.deepEqual(runsOf(dtype, [8], "4:"), [[3, 6]]);
    }
  });

  test("F6 misaligned", () => {
    for (const [shape, spec] of [
      [[4, 8], ":, 2:6"],
      [[4, 8], ":, 0:2"],
      [[4, 8], ":, ::4"],
      [[4, 2], "0"],
      [[4, 2], "::2"],
      [[4, 2], "1:3"],
      [[8], "::-1"],
      [[8], "1:5"],
    ] as const) {
      throwsSlice(() => planSlice("F6_E2M3", [...shape], parseSliceSpec(spec)), "MisalignedSlice");
    }
    throwsSlice(() => planSlice("F6_E3M2", [3], []), "MisalignedSlice");
  });
});

describe("gather", () => {
  test("contiguous plans return a view unless `out` is given", () => {
    const data = pattern(32 * 16 * 2);
    const plan = planSlice("F16", [32, 16], parseSliceSpec("2:4"));
    const view = gather(plan, data);
    assert.equal(view.buffer, data.buffer);
    assert.equal(view.byteOffset, 64);
    assert.equal(view.length, 64);
    const out = new Uint8Array(100);
    const copy = gather(plan, data, 0, out);
    assert.equal(copy.buffer, out.buffer);
    assert.deepEqual(copy, data.subarray(64, 128));
    // From a buffer holding only the span.
    assert.deepEqual(gather(plan, data.subarray(64, 128), 64), data.subarray(64, 128));
  });

  test("errors", () => {
    const plan = planSlice("F16", [8, 8], parseSliceSpec(":, 1:3"));
    throwsSlice(() => gather(plan, new Uint8Array(64)), "IoError", /\[0, 64\).*\[2, 118\)/);
    throwsSlice(() => gather(plan, new Uint8Array(128), 0, new Uint8Array(31)), "TooLarge");
    throwsSlice(
      () =>
        gatherPieces(plan, [
          { offset: 0, bytes: new Uint8Array(40) },
          { offset: 64, bytes: new Uint8Array(64) },
        ]),
      "IoError",
    );
  });

  test("word-wise copies at every alignment", () => {
    const data = pattern(4096 + 8);
    for (const dtype of ["U8", "F16", "F32", "F64"] as const) {
      for (const spec of [":, ::2", "::-1, 1::3", "..., ::-1", "1:, 2:5", ":, :, 0"]) {
        const plan = planSlice(dtype, [8, 8, 4], parseSliceSpec(spec));
        for (const shift of [0, 1, 2, 3, 4]) {
          const src = data.subarray(shift, shift + plan.tensorByteLength);
          const expected = referenceGather(plan, src);
          assert.deepEqual(gather(plan, src), expected);
          const out = new Uint8Array(plan.byteLength + 5);
          assert.deepEqual(gather(plan, src, 0, out.subarray(shift)), expected);
        }
      }
    }
  });
});

describe("properties", () => {
  const BYTE_DTYPES = ["U8", "F16", "BF16", "F32", "I64", "C64"] as const;
  const item = (dim: number): fc.Arbitrary<SliceIndex> => {
    const bound = fc.oneof(fc.constant(null), fc.integer({ min: -dim - 3, max: dim + 3 }));
    const step = fc.oneof(
      fc.constant(null),
      fc.integer({ min: -4, max: 4 }).filter((s) => s !== 0),
      fc.constantFrom(dim, -dim - 1).filter((s) => s !== 0),
    );
    const sliceItem = fc.record({ start: bound, stop: bound, step });
    return dim > 0 ? fc.oneof(sliceItem, sliceItem, fc.integer({ min: -dim, max: dim - 1 })) : sliceItem;
  };
  const sample = fc
    .tuple(
      fc.constantFrom(...BYTE_DTYPES),
      fc.array(fc.oneof(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 0, max: 6 })), { maxLength: 4 }),
    )
    .chain(([dtype, shape]) =>
      fc.tuple(
        fc.constant(dtype),
        fc.constant(shape),
        fc.tuple(...shape.map(item)).chain((items) =>
          fc
            .tuple(fc.integer({ min: 0, max: items.length }), fc.integer({ min: 0, max: items.length }), fc.boolean())
            .map(([keep, at, ellipsis]): SliceIndex[] => {
              if (!ellipsis) return items.slice(0, keep);
              // `head` items for the first axes, `...`, then items for the last `keep - head` axes.
              const head = Math.min(at, keep);
              return [...items.slice(0, head), ELLIPSIS, ...items.slice(shape.length - (keep - head))];
            }),
        ),
      ),
    );

  test("runs stay in bounds, are maximal, and match a brute-force walk", () => {
    fc.assert(
      fc.property(sample, ([dtype, shape, index]) => {
        const plan = planSlice(dtype, shape, index);
        const runs = [...plan.runs()];
        assert.deepEqual(runs, referenceRuns(plan));
        assert.equal(runs.length, plan.runCount);
        let total = 0;
        for (let i = 0; i < runs.length; i++) {
          const run = runs[i]!;
          assert.ok(run.start >= 0 && run.start < run.end && run.end <= plan.tensorByteLength);
          assert.ok(run.start >= plan.spanStart && run.end <= plan.spanEnd);
          if (i > 0) assert.notEqual(runs[i - 1]!.end, run.start);
          total += run.end - run.start;
        }
        assert.equal(total, plan.byteLength);
        const callback: number[][] = [];
        plan.forEachRun((start, end) => callback.push([start, end]));
        assert.deepEqual(
          callback,
          runs.map((r) => [r.start, r.end]),
        );
        if (runs.length > 0) {
          assert.equal(Math.min(...runs.map((r) => r.start)), plan.spanStart);
          assert.equal(Math.max(...runs.map((r) => r.end)), plan.spanEnd);
        }
      }),
      { numRuns: 1500 },
    );
  });

  test("fetchRanges covers every run; gathering from them equals gathering from the tensor", () => {
    fc.assert(
      fc.property(
        sample,
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 1, max: 6 }),
        ([dtype, shape, index], maxGap, maxRanges) => {
          const plan = planSlice(dtype, shape, index);
          const ranges = fetchRanges(plan, { maxGap, maxRanges });
          assert.ok(ranges.length <= maxRanges);
          for (let i = 0; i < ranges.length; i++) {
            const r = ranges[i]!;
            assert.ok(r.start >= 0 && r.start < r.end && r.end <= plan.tensorByteLength);
            if (i > 0) assert.ok(r.start - ranges[i - 1]!.end > maxGap, "ranges are sorted and gaps exceed maxGap");
          }
          for (const run of plan.runs()) {
            assert.ok(
              ranges.some((r) => r.start <= run.start && run.end <= r.end),
              "every run is inside one range",
            );
          }
          const data = pattern(plan.tensorByteLength);
          const expected = referenceGather(plan, data);
          assert.deepEqual(gather(plan, data), expected);
          const pieces = ranges.map((r) => ({ offset: r.start, bytes: data.slice(r.start, r.end) }));
          assert.deepEqual(gatherPieces(plan, pieces.reverse()), expected);
          // A span-sized buffer with only the ranges filled (garbage elsewhere).
          if (ranges.length > 0) {
            const span = plan.span();
            const buffer = new Uint8Array(span.end - span.start).fill(0xee);
            for (const r of ranges) buffer.set(data.subarray(r.start, r.end), r.start - span.start);
            assert.deepEqual(gather(plan, buffer, span.start), expected);
          }
          // Unlimited ranges with maxGap 0: exactly the sorted union of the runs.
          const exact = fetchRanges(plan, { maxGap: 0, maxRanges: Number.POSITIVE_INFINITY });
          const union = [...plan.runs()].sort((a, b) => a.start - b.start);
          const merged: ByteRange[] = [];
          for (const r of union) {
            const last = merged[merged.length - 1];
            if (last !== undefined && last.end === r.start)
              merged[merged.length - 1] = { start: last.start, end: r.end };
            else merged.push(r);
          }
          assert.deepEqual(exact, merged);
        },
      ),
      { numRuns: 1500 },
    );
  });

  test("huge run counts: fetchRanges stays bounded", () => {
    const plan = planSlice("F16", [4096, 11008], parseSliceSpec("::3, ::2"));
    assert.equal(plan.chunkCount, 1366 * 5504);
    const ranges = fetchRanges(plan, { maxGap: 0 });
    assert.equal(ranges.length, 1366);
    assert.deepEqual(fetchRanges(plan, { maxGap: 0, maxRanges: 1000 }), [plan.span()]);
    assert.equal(fetchRanges(plan).length, 1366);
    const halves = planSlice("F16", [4096, 11008], parseSliceSpec(":, ::2"));
    assert.deepEqual(fetchRanges(halves), [halves.span()]);
    const rows = planSlice("F16", [32000, 4096], parseSliceSpec("::2"));
    assert.equal(fetchRanges(rows).length, 16000);
    assert.equal(fetchRanges(rows, { maxRanges: 10 }).length, 1);
  });
});
