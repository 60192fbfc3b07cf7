/**
 * The addon's merge kernels (native/merge_kernels.c) against the pure ones they replace: the same bytes over every
 * F16 and BF16 code, random codes, weights that overflow, underflow into subnormals or cancel, with and without
 * normalize, one to three inputs, odd counts and unaligned inputs; the 16-bit codecs over every code and float32
 * rounding edges; LoRA updates of odd shapes and ranks, with DoRA, ratios and 16-bit deltas; torch's sort replay over
 * many equal magnitudes, NaN and signed zeros; TIES's subtraction and two-vector combination with special values.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { fromFloat32, toFloat32 } from "../src/codecs/index.js";
import { preferKeepSortedKernel, preferLoraKernels, preferTaskKernels } from "../src/merge/fast-kernels.js";
import { combineKernel, linearTable16Kernel, productTable, subtractBase, sumRounded } from "../src/merge/kernels.js";
import { addLowRank, type LowRankFactors } from "../src/merge/lora.js";
import {
  nativeKeepSortedKernel,
  nativeLinear16FileKernel,
  nativeLinear16Kernel,
  nativeLoraKernels,
  nativeTaskKernels,
} from "../src/merge/node-native.js";
import { roundArray, rounder } from "../src/merge/round.js";
import { keepSortedMagnitudes } from "../src/merge/torch-sort.js";
import { loaderArgs, moduleUrl } from "./helpers/compiled.js";

/** A seeded generator (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The pure path: tables, float32 sum, normalize, the codec's encoder. */
function pureLinear16(
  codes: readonly Uint16Array[],
  weights: readonly number[],
  normalize: boolean,
  dtype: "F16" | "BF16",
): Uint8Array {
  const count = codes[0]!.length;
  const out = new Float32Array(count);
  linearTable16Kernel(
    codes,
    weights.map((w) => productTable(dtype, w)),
    normalize ? sumRounded(weights, rounder(dtype)) : null,
    dtype,
    out,
    count,
  );
  return fromFloat32(dtype, out);
}

function inputs(kind: string, n: number, rand: () => number): Uint16Array[] {
  const all = new Uint16Array(65536);
  for (let c = 0; c < 65536; c++) all[c] = c;
  return Array.from({ length: n }, (_, j) => {
    if (kind === "every") {
      // Each input runs through every code, against shifted and reversed orders of the others.
      const a = new Uint16Array(65536);
      for (let c = 0; c < 65536; c++) a[c] = j === 0 ? c : j === 1 ? 65535 - c : (c * 40503 + 7) & 0xffff;
      return a;
    }
    const a = new Uint16Array(4099);
    for (let i = 0; i < a.length; i++) a[i] = Math.floor(rand() * 65536);
    return a;
  });
}

const isNan = (h: number, dtype: "F16" | "BF16") => (h & 0x7fff) > (dtype === "F16" ? 0x7c00 : 0x7f80);

/** Do two NaNs meet in element i's float32 sum of rounded products? */
function nansMeet(tables: readonly Float32Array[], codes: readonly Uint16Array[], i: number): boolean {
  let sum = tables[0]![codes[0]![i]!]!;
  for (let j = 1; j < codes.length; j++) {
    const p = tables[j]![codes[j]![i]!]!;
    if (Number.isNaN(sum) && Number.isNaN(p)) return true;
    sum = Math.fround(sum + p);
  }
  return false;
}

/**
 * The first element where `got` and `want` differ, or -1. Where two NaNs meet in one sum (NaN inputs, or an
 * infinity minus an infinity), either NaN is a right answer: IEEE 754 does not say which NaN an addition of two
 * returns, and the JavaScript engine's choice follows its register allocation (the x86 add returns its first
 * operand's, and V8 may swap them).
 */
function firstDifference(
  got: Uint8Array,
  want: Uint8Array,
  codes: readonly Uint16Array[],
  weights: readonly number[],
  dtype: "F16" | "BF16",
): number {
  const g = new Uint16Array(got.buffer, got.byteOffset, got.length / 2);
  const w = new Uint16Array(want.buffer, want.byteOffset, want.length / 2);
  const tables = weights.map((x) => productTable(dtype, x));
  for (let i = 0; i < g.length; i++) {
    if (g[i] === w[i]) continue;
    if (isNan(g[i]!, dtype) && isNan(w[i]!, dtype) && nansMeet(tables, codes, i)) continue;
    return i;
  }
  return -1;
}

const WEIGHT_SETS: number[][] = [
  [0.6, 0.4, 0.25],
  [1, 1, 1],
  [-0.3, 1.7, 0.1],
  [1e-3, 3e-4, 7e-5], // products underflow into subnormals
  [900, -1200, 3], // products and sums overflow
  [0.5, -0.5, 0.5], // normalize's divisor rounds to 0.5; sums cancel
  [0, 0.7, 0], // zero weights, and a zero divisor when one input
];

test("merge kernels: the addon's 16-bit linear merge gives the pure kernels' bytes", (t) => {
  const native = nativeLinear16Kernel();
  if (native === null) {
    t.skip(
      "the copy addon (build/Release/safetensors_copy.node, with mergeLinear16) is not built: npm install builds it",
    );
    return;
  }
  const rand = random(21);
  let cases = 0;
  for (const dtype of ["F16", "BF16"] as const) {
    const round = rounder(dtype);
    for (const kind of ["every", "random"]) {
      for (let n = 1; n <= 3; n++) {
        const codes = inputs(kind, n, rand);
        for (const set of WEIGHT_SETS) {
          const weights = set.slice(0, n).map(round);
          for (const normalize of [true, false]) {
            const want = pureLinear16(codes, weights, normalize, dtype);
            const count = codes[0]!.length;
            for (const shift of [0, 1]) {
              // Unaligned inputs (shift 1) and the scalar tail (counts that are not a multiple of 8).
              const srcs = codes.map((c) => {
                const buffer = new Uint8Array(count * 2 + shift);
                buffer.set(new Uint8Array(c.buffer, c.byteOffset, count * 2), shift);
                return buffer.subarray(shift);
              });
              const got = new Uint8Array(count * 2);
              native(
                srcs,
                Float32Array.from(weights),
                normalize ? sumRounded(weights, round) : null,
                dtype,
                count,
                got,
              );
              const bad = firstDifference(got, want, codes, weights, dtype);
              if (bad >= 0) {
                const i = bad;
                assert.fail(
                  `${dtype} ${kind} n=${n} weights=${weights} normalize=${normalize} shift=${shift}: element ${i} ` +
                    `(codes ${codes.map((c) => c[i]!.toString(16))}) native ${(got[2 * i]! | (got[2 * i + 1]! << 8)).toString(16)}` +
                    ` pure ${(want[2 * i]! | (want[2 * i + 1]! << 8)).toString(16)}`,
                );
              }
              cases++;
            }
          }
        }
      }
    }
  }
  assert.equal(cases, 2 * 2 * 3 * WEIGHT_SETS.length * 2 * 2);
});

test("merge kernels: the addon's 16-bit linear merge from file to file writes the in-memory kernel's bytes, and only them", async (t) => {
  const file = nativeLinear16FileKernel();
  const memory = nativeLinear16Kernel();
  if (file === null || memory === null) {
    t.skip(
      "the copy addon (build/Release/safetensors_copy.node, with mergeLinear16FileAsync) is not built: npm install builds it",
    );
    return;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "merge-file-"));
  const rand = random(2121);
  try {
    // Several 4 MiB pieces, odd input positions, an output that starts and ends inside pages, and tiny ranges (no
    // whole page: only the page cache's path).
    const cases = [
      { dtype: "F16" as const, weights: [0.6, 0.4], normalize: true, count: (5 << 20) + 37, at: [13, 4096], out: 4094 },
      {
        dtype: "BF16" as const,
        weights: [0.3, 1.7, -0.2],
        normalize: true,
        count: 3 << 20,
        at: [0, 7, 1001],
        out: 8192,
      },
      { dtype: "F16" as const, weights: [0.5, 0.25], normalize: false, count: 2047, at: [2, 3], out: 4000 },
      { dtype: "F16" as const, weights: [1], normalize: true, count: 5, at: [1], out: 10 },
    ];
    for (const c of cases) {
      const round = rounder(c.dtype);
      const weights = Float32Array.from(c.weights.map(round));
      const divisor = c.normalize ? sumRounded([...weights], round) : null;
      const codes = c.at.map(() => {
        const a = new Uint8Array(c.count * 2);
        for (let i = 0; i < a.length; i++) a[i] = Math.floor(rand() * 256);
        return a;
      });
      const fds = codes.map((bytes, k) => {
        const name = path.join(dir, `in${k}`);
        const padded = new Uint8Array(c.at[k]! + bytes.length);
        padded.set(bytes, c.at[k]!);
        fs.writeFileSync(name, padded);
        return fs.openSync(name, "r");
      });
      try {
        const want = new Uint8Array(c.count * 2);
        memory(codes, weights, divisor, c.dtype, c.count, want);
        const outPath = path.join(dir, "out");
        const outLength = c.out + want.length + 5000;
        fs.writeFileSync(outPath, new Uint8Array(outLength).fill(0xab));
        for (const threads of [1, 3]) {
          const inputs = fds.map((fd, k) => ({ fd, position: c.at[k]! }));
          const wrote = await file(
            inputs,
            weights,
            divisor,
            c.dtype,
            c.count,
            { path: outPath, position: c.out },
            threads,
          );
          if (!wrote) {
            t.skip(`no direct I/O in ${os.tmpdir()}`);
            return;
          }
          const got = fs.readFileSync(outPath);
          assert.equal(got.length, outLength);
          assert.ok(
            got.subarray(0, c.out).every((b) => b === 0xab),
            "bytes before the range are untouched",
          );
          assert.ok(
            got.subarray(c.out + want.length).every((b) => b === 0xab),
            "bytes after the range are untouched",
          );
          assert.ok(
            Buffer.from(want).equals(got.subarray(c.out, c.out + want.length)),
            `${c.dtype} ${c.count} ${threads}`,
          );
        }
        // An input shorter than its range: ENODATA, never a short or made-up output.
        await assert.rejects(
          file(
            fds.map((fd, k) => ({ fd, position: c.at[k]! + 2 })),
            weights,
            divisor,
            c.dtype,
            c.count,
            { path: outPath, position: c.out },
            2,
          ),
          (error: NodeJS.ErrnoException) => error.code === "ENODATA",
        );
      } finally {
        for (const fd of fds) fs.closeSync(fd);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("merge kernels: two file merges at once on libuv's pool, into two halves of one output, write the kernel's bytes", async (t) => {
  const file = nativeLinear16FileKernel();
  const memory = nativeLinear16Kernel();
  if (file === null || memory === null) {
    t.skip("the copy addon (with mergeLinear16FileAsync) is not built: npm install builds it");
    return;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "merge-file-async-"));
  const rand = random(77);
  try {
    const count = (3 << 20) + 11;
    const names = [0, 1].map((k) => {
      const bytes = new Uint8Array(count * 2 + 6);
      for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(rand() * 256);
      const name = path.join(dir, `in${k}`);
      fs.writeFileSync(name, bytes);
      return name;
    });
    const fds = names.map((name) => fs.openSync(name, "r"));
    try {
      const weights = Float32Array.from([0.7, 0.3].map(rounder("BF16")));
      const codes = names.map((name) => new Uint8Array(fs.readFileSync(name).subarray(6, 6 + count * 2)));
      const want = new Uint8Array(count * 2);
      memory(codes, weights, 1, "BF16", count, want);
      const outPath = path.join(dir, "out");
      fs.writeFileSync(outPath, new Uint8Array(count * 2 + 4098));
      // Two calls at once into two halves of the output, as the merge runs them.
      const half = Math.floor(count / 2);
      const inputs = (first: number) => fds.map((fd) => ({ fd, position: 6 + first * 2 }));
      const done = await Promise.all([
        file(inputs(0), weights, 1, "BF16", half, { path: outPath, position: 4098 }, 2),
        file(inputs(half), weights, 1, "BF16", count - half, { path: outPath, position: 4098 + half * 2 }, 2),
      ]);
      if (!done.every(Boolean)) {
        t.skip(`no direct I/O in ${os.tmpdir()}`);
        return;
      }
      assert.ok(Buffer.from(want).equals(fs.readFileSync(outPath).subarray(4098)));
    } finally {
      for (const fd of fds) fs.closeSync(fd);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("merge kernels: an input truncated during a file merge is ENODATA, never a SIGBUS that ends the process", (t) => {
  if (nativeLinear16FileKernel() === null) {
    t.skip("the copy addon (with mergeLinear16FileAsync) is not built: npm install builds it");
    return;
  }
  // The addon maps its inputs (native/merge_file.c); reading a mapped page that a truncation took away raises SIGBUS,
  // whose default action ends the process. A child runs merges of 24 MiB and truncates an input 0-6 ms after each
  // starts (the merge takes 10-40 ms): during the merge, or before it maps that input (then its size check refuses).
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "merge-truncated-"));
  try {
    const script = `
      import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
      import * as path from "node:path";
      import { nativeLinear16FileKernel } from ${JSON.stringify(moduleUrl(path.resolve("src/merge/node-native.ts")))};
      const merge = nativeLinear16FileKernel();
      const dir = ${JSON.stringify(dir)};
      const count = 12 << 20;
      const outcomes = {};
      for (let trial = 0; trial < 12; trial++) {
        const names = [0, 1].map((k) => path.join(dir, "in" + k));
        for (const name of names) fs.writeFileSync(name, new Uint8Array(count * 2).fill(0x3c));
        const out = path.join(dir, "out");
        fs.writeFileSync(out, new Uint8Array(0));
        fs.truncateSync(out, count * 2);
        const fds = names.map((name) => fs.openSync(name, "r+"));
        const weights = Float32Array.of(0.5, 0.5);
        const running = merge(fds.map((fd) => ({ fd, position: 0 })), weights, null, "F16", count, { path: out, position: 0 }, 1);
        await new Promise((resolve) => setTimeout(resolve, trial % 7));
        fs.ftruncateSync(fds[trial % 2], 4096 * (trial + 1));
        const outcome = await running.then((done) => (done ? "merged" : "not here"), (error) => error.code);
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        for (const fd of fds) fs.closeSync(fd);
      }
      console.log(JSON.stringify(outcomes));`;
    const child = spawnSync(process.execPath, [...loaderArgs, "--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 120_000,
    });
    assert.equal(child.signal, null, `the child ended by ${child.signal}: ${child.stderr}`);
    assert.equal(child.status, 0, child.stderr);
    const outcomes = JSON.parse(child.stdout.trim().split("\n").at(-1)!) as Record<string, number>;
    if (outcomes["not here"] !== undefined) {
      t.skip(`no direct I/O in ${os.tmpdir()}`);
      return;
    }
    // A truncation that came after the merge's last read leaves it merged (from the bytes it read); any other is
    // ENODATA. Most trials truncate during the merge.
    assert.deepEqual(
      Object.keys(outcomes).filter((k) => k !== "merged" && k !== "ENODATA"),
      [],
      JSON.stringify(outcomes),
    );
    assert.ok((outcomes.ENODATA ?? 0) >= 6, JSON.stringify(outcomes));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("merge kernels: the addon refuses mismatched arguments", (t) => {
  const native = nativeLinear16Kernel();
  if (native === null) {
    t.skip("the copy addon is not built");
    return;
  }
  const a = new Uint8Array(16);
  assert.throws(() => native([a], Float32Array.of(1), null, "F16", 9, new Uint8Array(18)), /shorter/);
  assert.throws(() => native([a], Float32Array.of(1), null, "F16", 8, new Uint8Array(14)), /shorter/);
  assert.throws(() => native([a, a], Float32Array.of(1), null, "F16", 8, new Uint8Array(16)), /one weight each/);
});

test("merge kernels: the addon's 16-bit codecs give the pure codecs' bytes", (t) => {
  const native = nativeLoraKernels();
  if (native === null) {
    t.skip("the copy addon (build/Release/safetensors_copy.node, with halfToFloat32) is not built");
    return;
  }
  const codes = new Uint16Array(65536 + 5);
  for (let c = 0; c < codes.length; c++) codes[c] = c & 0xffff;
  // float32 bit patterns: every exponent with random mantissas and signs, around every rounding edge.
  const rand = random(5);
  const bits = new Uint32Array(1 << 18);
  for (let i = 0; i < bits.length; i++) {
    const exponent = i & 0xff;
    bits[i] = ((rand() < 0.5 ? 0x80000000 : 0) | (exponent << 23) | Math.floor(rand() * 0x800000)) >>> 0;
    if (i % 7 === 0) bits[i] = (bits[i]! & 0xffffe000) | (i % 14 === 0 ? 0x1000 : 0x0fff); // F16 ties and near-ties
    if (i % 11 === 0) bits[i] = (bits[i]! & 0xffff0000) | 0x8000; // BF16 ties
  }
  const values = new Float32Array(bits.buffer);
  for (const dtype of ["F16", "BF16"] as const) {
    for (const shift of [0, 1]) {
      const src = new Uint8Array(codes.length * 2 + shift).subarray(shift);
      src.set(new Uint8Array(codes.buffer));
      const got = new Float32Array(codes.length);
      native.decode16(src, dtype, codes.length, got);
      const want = toFloat32(dtype, src, { count: codes.length });
      assert.deepEqual(new Uint32Array(got.buffer), new Uint32Array(want.buffer), `${dtype} decode, shift ${shift}`);
    }
    for (const n of [values.length, values.length - 3]) {
      const v = values.subarray(0, n);
      assert.deepEqual(native.encode16(v, dtype), fromFloat32(dtype, v), `${dtype} encode of ${n}`);
    }
  }
});

test("merge kernels: the addon's LoRA update gives addLowRank's bytes", (t) => {
  const native = nativeLoraKernels();
  if (native === null) {
    t.skip("the copy addon (build/Release/safetensors_copy.node, with loraAddLowRank) is not built");
    return;
  }
  const rand = random(16);
  const normal = () => (rand() + rand() + rand() - 1.5) * 0.05;
  let cases = 0;
  // Column counts around the 16-wide SIMD step, ranks around 4-term steps, DoRA, ratios and 16-bit deltas.
  for (const [rows, cols, rank] of [
    [7, 37, 16],
    [5, 64, 1],
    [3, 19, 3],
    [4, 16, 8],
    [2, 130, 5],
    // Past one tile of columns (256), with tails of every SIMD step.
    [3, 600, 16],
    [2, 289, 7],
  ] as const) {
    for (const deltaDtype of ["F32", "F16", "BF16"] as const) {
      for (const dora of [false, true]) {
        for (const ratio of [1, 0.7]) {
          const start = Float32Array.from({ length: rows * cols }, () => normal() * 20);
          const left = Float32Array.from({ length: rows * rank }, normal);
          const right = Float32Array.from({ length: cols * rank }, normal);
          const magnitude = dora ? Float32Array.from({ length: rows }, () => 0.5 + rand()) : null;
          const factors: LowRankFactors = {
            left,
            right,
            rank,
            scaling: 2 / Math.sqrt(rank),
            magnitude,
            deltaDtype,
            ratio,
            rows: null,
          };
          const want = start.slice();
          preferLoraKernels(null);
          addLowRank(want, rows, cols, factors);
          const got = start.slice();
          native.addLowRank(got, rows, cols, left, right, rank, factors.scaling, ratio, deltaDtype, magnitude);
          assert.deepEqual(
            new Uint32Array(got.buffer),
            new Uint32Array(want.buffer),
            `${rows}x${cols} r=${rank} ${deltaDtype} dora=${dora} ratio=${ratio}`,
          );
          cases++;
        }
      }
    }
  }
  assert.equal(cases, 7 * 3 * 2 * 2);
});

test("merge kernels: the addon's replay of torch's sort keeps the entries the TypeScript replay keeps", (t) => {
  const native = nativeKeepSortedKernel();
  if (native === null) {
    t.skip("the copy addon (build/Release/safetensors_copy.node, with keepSortedMagnitudes) is not built");
    return;
  }
  const rand = random(2);
  let cases = 0;
  // F16-rounded task vectors hold many equal magnitudes (the replay's reason to exist); NaN and ±0 among them; sizes
  // from the insertion-sort threshold to depths where the introsort's heapsort runs (few distinct values).
  // Values exact in F16 (the kernel moves 16-bit magnitude codes only), in BF16 only, and in neither (it moves the
  // float32 values and undoes the permutation).
  for (const kind of ["F16", "BF16", "F32"] as const) {
    for (const n of [1, 2, 15, 17, 100, 1000, 65536, 300001]) {
      for (const distinct of [3, 50, 4096]) {
        const base = Float32Array.from({ length: n }, () => {
          const x = Math.floor(rand() * distinct) - distinct / 2;
          return rand() < 0.001 ? Number.NaN : x === 0 && rand() < 0.5 ? -0 : kind === "F32" ? x / 3 : x / 64;
        });
        if (kind === "BF16") {
          const bits = new Uint32Array(base.buffer);
          for (let i = 0; i < n; i++) bits[i] = bits[i]! & 0xffff0000;
          base[0] = 2 ** 40; // not an F16 value
        }
        // One value not exact in F16 past the last whole block of 8 (the kernel tests blocks of 8 with F16C, the rest
        // one by one): the float32 path.
        if (kind === "F16" && distinct === 50 && n % 8 !== 0) base[n - 1] = 1 / 3;
        for (const descending of [true, false]) {
          for (const [from, to] of [
            [0, Math.trunc(n / 2)],
            [Math.trunc(n / 10), n - Math.trunc(n / 7)],
            [0, n],
            [3, 2],
            [-1, Math.trunc(n / 3)],
          ] as const) {
            const want = base.slice();
            preferKeepSortedKernel(null);
            keepSortedMagnitudes(want, descending, from, to);
            const got = base.slice();
            native(got, descending, from, to);
            assert.deepEqual(
              new Uint32Array(got.buffer),
              new Uint32Array(want.buffer),
              `${kind} n=${n} distinct=${distinct} descending=${descending} [${from}, ${to})`,
            );
            cases++;
          }
        }
      }
    }
  }
  assert.equal(cases, 3 * 8 * 3 * 2 * 5);
});

test("merge kernels: the addon's task arithmetic gives subtractBase's and combineKernel's bytes", (t) => {
  const native = nativeTaskKernels();
  if (native === null) {
    t.skip("the copy addon (build/Release/safetensors_copy.node, with consensus2) is not built");
    return;
  }
  const rand = random(3);
  const n = 40003;
  const special = [0, -0, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 65504, 6e-8, -3e-5];
  let cases = 0;
  for (const dtype of ["F16", "BF16"] as const) {
    const round = rounder(dtype);
    const values = () => {
      const v = Float32Array.from({ length: n }, () =>
        rand() < 0.02 ? special[Math.floor(rand() * special.length)]! : (rand() - 0.5) * (rand() < 0.5 ? 4 : 1e-3),
      );
      roundArray(v, n, dtype);
      return v;
    };
    for (const [w0, w1] of [
      [0.5, 0.5],
      [0.7, -0.2],
      [1, 0],
      [3e-3, 1e4],
    ]) {
      for (const normalize of [true, false]) {
        for (const lambda of [1, 0.8]) {
          const base = values();
          const xs = [values(), values()];
          const weights = [round(w0!), round(w1!)];
          const options = { consensus: true, normalize, lambda };
          const run = (fast: boolean) => {
            preferTaskKernels(fast ? native : null);
            const deltas = xs.map((x) => x.slice());
            subtractBase(deltas, base, dtype, n);
            const subtracted = deltas.map((d) => d.slice());
            const out = new Float32Array(n);
            combineKernel(base, deltas, weights, options, dtype, out, n, new Float32Array(n));
            preferTaskKernels(null);
            return [...subtracted, out];
          };
          const want = run(false);
          const got = run(true);
          // The deltas: subtractBase's bytes. The combination: where two NaNs meet, either is right (see above).
          for (let k = 0; k < 3; k++) {
            const g = new Uint32Array(got[k]!.buffer);
            const w = new Uint32Array(want[k]!.buffer);
            for (let i = 0; i < n; i++) {
              if (g[i] === w[i] || (Number.isNaN(got[k]![i]) && Number.isNaN(want[k]![i]))) continue;
              assert.fail(`${dtype} w=${weights} normalize=${normalize} lambda=${lambda} array ${k} entry ${i}`);
            }
          }
          cases++;
        }
      }
    }
  }
  assert.equal(cases, 2 * 4 * 2 * 2);
});
