/**
 * loadToGPU's pure planning (src/gpu/plan.ts), in Node: buffer sizes and WebGPU's 4-byte rules, splits along dim 0,
 * conversions, reads within chunkBytes. The device side runs in test/gpu-browser.test.ts; the structural WebGPU
 * types are checked against @webgpu/types here (at compile time: `npm run typecheck`).
 */
/// <reference types="@webgpu/types" />
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { TensorInfo } from "../src/format/header.js";
import { conversionOf, type PlanInput, planLoad } from "../src/gpu/plan.js";
import type { GpuBufferLike, GpuDeviceLike } from "../src/gpu/webgpu.js";
import { type Dtype, dtypeOf } from "../src/node.js";
import { hasCode } from "./helpers/errors.js";

// A real GPUDevice is what loadToGPU takes, and its buffers are what it returns.
type Fits<T extends GpuDeviceLike<GPUBuffer>> = T;
type DeviceFits = Fits<GPUDevice>;
const bufferFits: GpuBufferLike = null as unknown as GPUBuffer;
void bufferFits;
void (null as unknown as DeviceFits);

function tensors(list: [string, Dtype, number[]][]): PlanInput[] {
  let at = 0;
  return list.map(([name, dtype, shape]) => {
    const byteLength = Math.ceil((shape.reduce((a, b) => a * b, 1) * dtypeOf(dtype).bits) / 8);
    const info = { name, dtype, shape, dataOffsets: [at, at + byteLength], byteLength } as unknown as TensorInfo;
    at += byteLength;
    return { file: 0, info, dataStart: 101 };
  });
}

const base = { maxBufferSize: 1 << 30, split: false, segmentBytes: 1024, maxGap: 64 };

test("buffers are rounded up to 4, segments start 4-aligned in their buffer, reads stay within a chunk", () => {
  const plan = planLoad(
    tensors([
      ["a", "U8", [7]],
      ["b", "F16", [5]],
      ["c", "F32", [1000]],
      ["d", "BOOL", [3]],
    ]),
    base,
  );
  assert.deepEqual(
    plan.tensors.map((t) => [t.name, t.start, t.byteLength]),
    [
      ["a", 101, 7],
      ["b", 108, 10],
      ["c", 118, 4000],
      ["d", 4118, 3],
    ],
  );
  assert.equal(plan.totalBytes, 4020);
  for (const read of plan.reads) {
    assert.ok(read.end - read.start <= 1024);
    for (const s of read.segments) {
      assert.equal(s.outOffset % 4, 0);
      assert.ok(s.start >= read.start && s.start + s.length <= read.end);
    }
  }
  // a, b and c's first KiB share a read; c's rest in KiB reads; d joins the last.
  assert.deepEqual(
    plan.reads.map((r) => r.segments.map((s) => `${plan.tensors[s.tensor]!.name}@${s.outOffset}`)),
    [["a@0", "b@0"], ["c@0"], ["c@1024"], ["c@2048"], ["c@3072", "d@0"]],
  );
});

test("split along dim 0 at whole rows within maxBufferSize, refused without split or when a row is too large", () => {
  const input = tensors([["w", "F32", [40, 64]]]);
  const plan = planLoad(input, { ...base, maxBufferSize: 4096, split: true });
  assert.deepEqual(
    plan.tensors[0]!.parts.map((p) => [p.rows, p.srcOffset, p.byteLength]),
    [
      [[0, 16], 0, 4096],
      [[16, 32], 4096, 4096],
      [[32, 40], 8192, 2048],
    ],
  );
  assert.throws(() => planLoad(input, { ...base, maxBufferSize: 4096 }), hasCode("TooLarge"));
  assert.throws(
    () => planLoad(tensors([["r", "F32", [2, 2000]]]), { ...base, maxBufferSize: 4096, split: true }),
    /cannot be split along dim 0 \(one row is 8000 bytes\)/,
  );
  // The limit applies to the loaded bytes: 8000 bytes of F32 fit in 4096 as F16.
  const converted = planLoad(tensors([["s", "F32", [2000]]]), { ...base, maxBufferSize: 4096, target: "f16" });
  assert.deepEqual(
    converted.tensors[0]!.parts.map((p) => p.byteLength),
    [4000],
  );
});

test("conversions: floats to the target, other dtypes as stored, undecodable floats refused", () => {
  assert.equal(conversionOf("BF16", "f32", "x"), "bf16>f32");
  assert.equal(conversionOf("F8_E5M2", "f16", "x"), "f8>f16");
  assert.equal(conversionOf("F16", "f16", "x"), null);
  assert.equal(conversionOf("I64", "f16", "x"), null);
  assert.equal(conversionOf("BF16", undefined, "x"), null);
  assert.throws(() => conversionOf("F64", "f32", "x"), hasCode("UnsupportedDtype"));
  const plan = planLoad(tensors([["h", "BF16", [1001]]]), { ...base, target: "f32" });
  assert.equal(plan.tensors[0]!.byteLength, 4004);
  assert.deepEqual(
    plan.reads.map((r) => r.segments.map((s) => [s.length, s.outOffset])),
    [[[1024, 0]], [[978, 2048]]],
  );
});

test("every source byte of every tensor is in exactly one segment, and every buffer byte is written", () => {
  const dtypes: Dtype[] = ["U8", "F16", "BF16", "F32", "F8_E4M3", "I64", "BOOL"];
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.constantFrom(...dtypes), fc.integer({ min: 0, max: 9 }), fc.integer({ min: 1, max: 300 })), {
        minLength: 1,
        maxLength: 8,
      }),
      fc.constantFrom(undefined, "f16", "f32"),
      fc.boolean(),
      (specs, target, small) => {
        const input = tensors(specs.map(([dtype, rows, cols], i) => [`t${i}`, dtype, [rows, cols]]));
        const maxBufferSize = small ? 2400 : 1 << 30;
        const plan = planLoad(input, {
          ...base,
          segmentBytes: 512,
          target: target as never,
          maxBufferSize,
          split: true,
        });
        plan.tensors.forEach((t, i) => {
          const covered = new Uint8Array(t.info.byteLength);
          const written = t.parts.map((p) => new Uint8Array(p.byteLength));
          for (const read of plan.reads) {
            for (const s of read.segments) {
              if (s.tensor !== i) continue;
              const part = t.parts[s.part]!;
              for (let k = 0; k < s.length; k++) covered[s.start - t.start + k]! += 1;
              const ratio = t.byteLength / Math.max(1, t.info.byteLength);
              const out = Math.round(s.length * ratio);
              assert.equal(s.outOffset % 4, 0);
              for (let k = 0; k < out; k++) written[s.part]![s.outOffset + k]! += 1;
              assert.ok(
                s.start - t.start >= part.srcOffset && s.start - t.start + s.length <= part.srcOffset + part.srcLength,
              );
            }
          }
          assert.ok(
            covered.every((c) => c === 1),
            `${t.name}: source bytes covered once`,
          );
          assert.ok(
            written.every((w) => w.every((c) => c === 1)),
            `${t.name}: buffer bytes written once`,
          );
          assert.ok(t.parts.every((p) => Math.max(4, Math.ceil(p.byteLength / 4) * 4) <= maxBufferSize));
        });
      },
    ),
    { numRuns: 200 },
  );
});
