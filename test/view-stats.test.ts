/**
 * src/view/stats.ts: statistics and histograms against numpy (golden fixtures from scripts/gen_view_stats.py, and
 * live against the reference venv's numpy on random and adversarial data), sampling, sub-byte dtypes, heat maps.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fromFloat32, toFloat32 } from "../src/codecs/index.js";
import type { Dtype } from "../src/format/dtypes.js";
import { heatmap, planHeatmap, planSample, tensorStats } from "../src/view/stats.js";
import { repoRoot } from "./helpers/corpus.js";
import { referenceMissingReason, referencePython } from "./helpers/reference.js";

interface GoldenCase {
  name: string;
  dtype: Dtype;
  shape: number[];
  data: string;
  bins: number;
  expected: {
    edges: number[];
    counts: number[];
    min: number | null;
    max: number | null;
    mean: number | null;
    std: number | null;
    nan: number;
    inf: number;
    zeros: number;
  };
}

const golden = JSON.parse(fs.readFileSync(path.join(repoRoot, "test/fixtures/view/stats.json"), "utf8")) as {
  cases: GoldenCase[];
};

function close(actual: number | null, expected: number | null, what: string): void {
  if (expected === null) {
    assert.equal(actual, null, what);
    return;
  }
  assert.ok(actual !== null, what);
  const tolerance = 1e-12 * Math.max(1, Math.abs(expected));
  assert.ok(Math.abs(actual - expected) <= tolerance, `${what}: ${actual} vs numpy ${expected}`);
}

test("histograms and statistics equal numpy's on the golden cases", () => {
  assert.ok(golden.cases.length >= 20);
  for (const c of golden.cases) {
    const data = new Uint8Array(Buffer.from(c.data, "base64"));
    const result = tensorStats({ dtype: c.dtype, shape: c.shape, data }, { bins: c.bins });
    assert.equal(result.sampled, false);
    assert.deepEqual(result.histogram.edges, c.expected.edges, `${c.name}: edges`);
    assert.deepEqual(result.histogram.counts, c.expected.counts, `${c.name}: counts`);
    assert.equal(result.histogram.bins, c.bins, c.name);
    // `===`: numpy may report -0 where we report 0 (which zero a reduction keeps is not specified).
    assert.ok(result.stats.min === c.expected.min, `${c.name}: min ${result.stats.min} vs ${c.expected.min}`);
    assert.ok(result.stats.max === c.expected.max, `${c.name}: max ${result.stats.max} vs ${c.expected.max}`);
    close(result.stats.mean, c.expected.mean, `${c.name}: mean`);
    close(result.stats.std, c.expected.std, `${c.name}: std`);
    assert.equal(result.stats.nan, c.expected.nan, `${c.name}: nan`);
    assert.equal(result.stats.inf, c.expected.inf, `${c.name}: inf`);
    assert.equal(result.stats.zeros, c.expected.zeros, `${c.name}: zeros`);
  }
});

function f64Bytes(values: readonly number[]): Uint8Array {
  return new Uint8Array(new Float64Array(values).buffer);
}

test("histograms equal numpy's live on random and adversarial data", (t) => {
  const ref = referencePython();
  if (!ref) return t.skip(referenceMissingReason());
  // numpy makes the data (seeded): random normal and uniform arrays of many scales and offsets, values exactly on
  // numpy's own edges of their range, ranges a few ulps wide where the index formula needs its edge correction.
  const script = `
import json, sys, numpy as np
rng = np.random.default_rng(7)
cases = []
for k in range(40):
  n = int(rng.integers(1, 400))
  scale = 10.0 ** int(rng.integers(-6, 6))
  offset = float(rng.uniform(0, 1e3)) if rng.random() < 0.3 else 0.0
  values = offset + (rng.normal(0, 1, n) if k % 2 else rng.uniform(-0.5, 0.5, n)) * scale
  bins = int(rng.integers(1, 200))
  edges = np.linspace(values.min(), values.max(), bins + 1)
  values = np.concatenate([values, rng.choice(edges, 20)])
  cases.append({"values": [float(v) for v in values], "bins": bins})
for bins in [1, 2, 3, 5, 7]:
  cases.append({"values": [1 + i * 2.0 ** -52 for i in range(9)], "bins": bins})
  cases.append({"values": [-3 + i * 2.0 ** -51 for i in range(9)], "bins": bins})
cases.append({"values": [0.1, 0.2, 0.30000000000000004, 0.3], "bins": 3})
cases.append({"values": [-0.0, 0.0, 5e-324], "bins": 2})
out = []
for c in cases:
  bins, refused = c["bins"], False
  while True:
      try:
          counts, edges = np.histogram(np.array(c["values"], dtype=np.float64), bins=bins)
          break
      except ValueError:  # "Too many bins for data range": halve, as the view does
          refused, bins = True, max(1, bins // 2)
  out.append({"values": c["values"], "asked": c["bins"], "refused": refused, "bins": bins, "edges": [float(e) for e in edges], "counts": [int(x) for x in counts]})
json.dump(out, sys.stdout)
`;
  const run = spawnSync(ref.python, ["-c", script], { encoding: "utf8", maxBuffer: 64 << 20 });
  assert.equal(run.status, 0, run.stderr);
  const expected = JSON.parse(run.stdout) as {
    values: number[];
    asked: number;
    refused: boolean;
    bins: number;
    edges: number[];
    counts: number[];
  }[];
  let refused = 0;
  expected.forEach(({ values, asked: bins }, i) => {
    const result = tensorStats({ dtype: "F64", shape: [values.length], data: f64Bytes(values) }, { bins });
    // Where numpy refuses the bin count ("Too many bins"), both halve it until numpy accepts.
    if (expected[i]!.refused) refused++;
    assert.equal(result.histogram.bins, expected[i]!.bins, `case ${i}: bins (asked ${bins})`);
    assert.deepEqual(result.histogram.edges, expected[i]!.edges, `case ${i}: edges`);
    assert.deepEqual(result.histogram.counts, expected[i]!.counts, `case ${i}: counts`);
  });
  assert.ok(refused > 0 && refused < expected.length, `${refused} cases refused by numpy`);
});

test("numpy's 'too many bins' ranges get fewer bins, said so", () => {
  const values = [1, 1 + 2 ** -52, 1 + 2 * 2 ** -52];
  const result = tensorStats({ dtype: "F64", shape: [3], data: f64Bytes(values) }, { bins: 64 });
  assert.ok(result.histogram.bins < 64);
  assert.equal(result.histogram.counts.length, result.histogram.bins);
  assert.equal(
    result.histogram.counts.reduce((a, b) => a + b, 0),
    3,
  );
  for (let i = 1; i < result.histogram.edges.length; i++) {
    assert.ok(result.histogram.edges[i - 1]! < result.histogram.edges[i]!);
  }
});

test("tensors above maxSamples are sampled in evenly spaced blocks, deterministically", () => {
  const n = 1_000_000;
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = Math.sin(i) * 3;
  const data = new Uint8Array(values.buffer);
  const result = tensorStats({ dtype: "F32", shape: [1000, 1000], data }, { maxSamples: 200_000, bins: 16 });
  assert.ok(result.sampled);
  assert.equal(result.sampled.of, n);
  assert.equal(result.sampled.elements, result.stats.count);
  assert.ok(result.sampled.elements <= 200_000);
  const plan = planSample(n, 200_000);
  assert.equal(plan.runs[0]!.start, 0);
  assert.equal(plan.runs.at(-1)!.start + plan.runs.at(-1)!.count, n);
  // The sampled statistics are the statistics of exactly the planned elements.
  const picked = plan.runs.flatMap(({ start, count }) => [...values.subarray(start, start + count)]);
  const direct = tensorStats(
    { dtype: "F32", shape: [picked.length], data: new Uint8Array(new Float32Array(picked).buffer) },
    { bins: 16 },
  );
  assert.deepEqual(result.histogram, direct.histogram);
  assert.deepEqual(result.stats, direct.stats);
  assert.deepEqual(tensorStats({ dtype: "F32", shape: [n], data }, { maxSamples: 200_000, bins: 16 }), result);
  assert.equal(tensorStats({ dtype: "F32", shape: [n], data }, { maxSamples: n }).sampled, false);
});

test("sub-byte dtypes (F4, F6) decode runs that start inside a byte", () => {
  for (const dtype of ["F4", "F6_E2M3", "F6_E3M2"] as const) {
    const n = 300_001;
    const floats = Float32Array.from({ length: n }, (_, i) => ((i * 37) % 13) - 6);
    const bytes = fromFloat32(dtype, floats);
    const decoded = toFloat32(dtype, bytes, { count: n });
    const asF64 = new Uint8Array(new Float64Array(decoded).buffer);
    const whole = tensorStats({ dtype, shape: [n], data: bytes }, { bins: 9 });
    assert.deepEqual(whole, tensorStats({ dtype: "F64", shape: [n], data: asF64 }, { bins: 9 }), dtype);
    // Sampled with a block size that puts run starts at odd elements.
    const sampled = tensorStats({ dtype, shape: [n], data: bytes }, { bins: 9, maxSamples: 200_000 });
    const plan = planSample(n, 200_000);
    assert.ok(
      plan.runs.some((r) => r.start % 8 !== 0),
      "a run starts inside a byte group",
    );
    const picked = plan.runs.flatMap(({ start, count }) => [...decoded.subarray(start, start + count)]);
    const direct = tensorStats(
      { dtype: "F64", shape: [picked.length], data: new Uint8Array(new Float64Array(picked).buffer) },
      { bins: 9 },
    );
    assert.deepEqual(sampled.histogram, direct.histogram, dtype);
    assert.deepEqual(sampled.stats, direct.stats, dtype);
  }
});

test("I64 extremes are exact beyond 2^53; C64 counts real and imaginary parts", () => {
  const big = new BigInt64Array([9007199254740993n, -9223372036854775808n, 5n]);
  const result = tensorStats({ dtype: "I64", shape: [3], data: new Uint8Array(big.buffer) });
  assert.equal(result.stats.exact_min, "-9223372036854775808");
  assert.equal(result.stats.exact_max, "9007199254740993");
  assert.equal(result.stats.max, 9007199254740992);
  const complex = new Float32Array([1, -1, 2, Number.NaN]);
  const c = tensorStats({ dtype: "C64", shape: [2], data: new Uint8Array(complex.buffer) }, { bins: 3 });
  assert.equal(c.values, "complex parts");
  assert.equal(c.stats.count, 4);
  assert.equal(c.stats.nan, 1);
  assert.deepEqual(c.histogram.counts, [1, 0, 2]);
});

test("bins and sizes outside their limits are InvalidOption", () => {
  const data = f64Bytes([1, 2]);
  for (const bins of [0, -1, 1.5, 10_001]) {
    assert.throws(() => tensorStats({ dtype: "F64", shape: [2], data }, { bins }), { code: "InvalidOption" });
  }
  assert.throws(() => heatmap({ dtype: "F64", shape: [1, 2], data }, { size: 0 }), { code: "InvalidOption" });
});

test("heat map: block means of |x| over finite values, rows sampled within bands", () => {
  // 5 x 6 tensor, size 2: 3 rows and 3 columns per cell; the last cells hold fewer.
  const values = Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? -i : i));
  values[0] = Number.NaN;
  const map = heatmap({ dtype: "F64", shape: [5, 6], data: f64Bytes(values) }, { size: 2 })!;
  assert.equal(map.rows, 2);
  assert.equal(map.cols, 2);
  assert.equal(map.row_step, 3);
  assert.equal(map.col_step, 3);
  const cell = (r0: number, r1: number, c0: number, c1: number) => {
    const xs: number[] = [];
    for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) xs.push(Math.abs(values[r * 6 + c]!));
    const finite = xs.filter(Number.isFinite);
    return finite.reduce((a, b) => a + b, 0) / finite.length;
  };
  assert.deepEqual(map.values, [cell(0, 3, 0, 3), cell(0, 3, 3, 6), cell(3, 5, 0, 3), cell(3, 5, 3, 6)]);
  assert.equal(map.sampled, false);
  assert.equal(heatmap({ dtype: "F64", shape: [30], data: f64Bytes(values) }), null);
  const plan = planHeatmap([1000, 100], { size: 10, maxSamples: 2000 })!;
  assert.equal(plan.readRows.length, 20);
  assert.ok(plan.sampled);
  for (let band = 0; band < 10; band++) {
    assert.equal(plan.readRows.filter((r) => Math.floor(r / 100) === band).length, 2);
  }
});
