/**
 * Masks applied in place: the zeroing rule on raw bits (numpy's product: signed zeros, NaN kept, inf → NaN; or +0),
 * which elements each layout keeps (element-wise G > 0, packbits flat or per row, both bit orders) checked against an
 * independent element-by-element model, refusals before any byte is written, sharded checkpoints, the CLI, and a
 * SIGKILL during a streamed mask (many chunks, one transaction) that recovery always turns into the old or new file.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fsModule, * as fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, test } from "node:test";
import { fileURLToPath } from "node:url";
import { keepOf, maskElements } from "../src/edit/mask-kernel.js";
import {
  applyMask,
  isSafetensorError,
  journalPathFor,
  openFile,
  recoverFile,
  type SafetensorErrorCode,
  saveFile,
  saveSharded,
  Tensor,
} from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { killAtWrite, tellParent } from "./helpers/kill-child.js";
import { cli } from "./helpers/run-cli.js";

const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function throwsCode(fn: () => unknown, code: SafetensorErrorCode): void {
  assert.throws(fn, (error: unknown) => isSafetensorError(error) && error.code === code);
}

function tensorBytes(file: string, name: string): Uint8Array {
  using reader = openFile(file, { backend: "pread" });
  return reader.getTensor(name, { memory: "owned" }).data.slice();
}

test("the zeroing rule on bits: numpy's product, or +0", () => {
  const f16 = new Uint16Array([0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e01, 0x0000, 0x8000, 0x0001]);
  const keep = new Uint8Array(8); // all masked
  const product = new Uint16Array(f16);
  assert.equal(maskElements("F16", new Uint8Array(product.buffer), keep, "multiply"), 8);
  // 1 → +0, -1 → -0, inf → NaN (x86 default), -inf → NaN, NaN stays, zeros keep their sign, tiny → +0.
  assert.deepEqual([...product], [0x0000, 0x8000, 0xfe00, 0xfe00, 0x7e01, 0x0000, 0x8000, 0x0000]);
  const zeroed = new Uint16Array(f16);
  maskElements("F16", new Uint8Array(zeroed.buffer), keep, "zero");
  assert.deepEqual([...zeroed], Array(8).fill(0));
  const f32 = new Uint32Array([0xbf800000, 0x7f800000, 0x3f800000]);
  maskElements("F32", new Uint8Array(f32.buffer), new Uint8Array([0, 0, 1]), "multiply");
  assert.deepEqual([...f32], [0x80000000, 0xffc00000, 0x3f800000]);
  const fnuz = new Uint8Array([0x80, 0xc0, 0x40]); // NaN, negative, positive: no -0 in FNUZ
  maskElements("F8_E4M3FNUZ", fnuz, new Uint8Array(3), "multiply");
  assert.deepEqual([...fnuz], [0x80, 0x00, 0x00]);
  const fn = new Uint8Array([0xff, 0xfe, 0x7e]); // E4M3FN: NaN, -448, 448
  maskElements("F8_E4M3", fn, new Uint8Array(3), "multiply");
  assert.deepEqual([...fn], [0xff, 0x80, 0x00]);
  const i16 = new Int16Array([-5, 7]);
  maskElements("I16", new Uint8Array(i16.buffer), new Uint8Array([0, 1]), "multiply");
  assert.deepEqual([...i16], [0, 7]);
  // G > 0: NaN, -0, 0 and negatives are not kept; BOOL and unsigned: nonzero.
  const g = new Uint16Array([0x3c00, 0x8000, 0x0000, 0x7e00, 0xbc00, 0x0001]);
  assert.deepEqual([...keepOf("F16", new Uint8Array(g.buffer), 6)], [1, 0, 0, 0, 0, 1]);
  assert.deepEqual([...keepOf("I8", new Uint8Array([1, 255, 0]), 3)], [1, 0, 0]);
  assert.deepEqual([...keepOf("BOOL", new Uint8Array([1, 0, 2]), 3)], [1, 0, 1]);
  assert.deepEqual([...keepOf("U16", new Uint8Array([0, 1, 0, 0]), 2)], [1, 0]);
});

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-mask-"));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

/** numpy's packbits of `keep` (one byte per element), per `rowLength` elements (each row padded to a byte). */
function packbits(keep: Uint8Array, rowLength: number, order: "big" | "little"): Uint8Array {
  const rowBytes = Math.ceil(rowLength / 8);
  const rows = keep.length / rowLength;
  const out = new Uint8Array(rows * rowBytes);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < rowLength; c++) {
      if (keep[r * rowLength + c] === 0) continue;
      out[r * rowBytes + (c >> 3)]! |= 1 << (order === "big" ? 7 - (c & 7) : c & 7);
    }
  }
  return out;
}

test("layouts: element-wise of any dtype, packbits flat and per row in both bit orders", () => {
  const weights = path.join(dir, "w.safetensors");
  const rows = 13;
  const cols = 11; // not a multiple of 8: per-row packing differs from flat packing
  const n = rows * cols;
  const original = {
    a: new Tensor("F16", [rows, cols], fill(n * 2, 1)),
    b: new Tensor("BF16", [rows, cols], fill(n * 2, 2)),
    c: new Tensor("F32", [rows, cols], fill(n * 4, 3)),
    d: new Tensor("I8", [rows, cols], fill(n, 4)),
    e: new Tensor("F32", [n], fill(n * 4, 5)),
    f: new Tensor("F16", [rows, cols], fill(n * 2, 6)),
  };
  const keep = (seed: number) => fill(n, seed).map((b) => (b & 3 ? 1 : 0));
  const k = [keep(11), keep(12), keep(13), keep(14), keep(15), keep(16)];
  const masks = {
    a: new Tensor("BOOL", [rows, cols], k[0]!),
    b: new Tensor(
      "F32",
      [rows, cols],
      new Uint8Array(new Float32Array([...k[1]!].map((x) => (x ? 0.5 : -0.5))).buffer),
    ),
    c: new Tensor("U8", [Math.ceil(n / 8)], packbits(k[2]!, n, "little")),
    d: new Tensor("U8", [rows, Math.ceil(cols / 8)], packbits(k[3]!, cols, "little")),
    e: new Tensor("U8", [Math.ceil(n / 8)], packbits(k[4]!, n, "little")),
    f: new Tensor(
      "U8",
      [rows, cols],
      k[5]!.map((x) => x * 200),
    ),
  };
  saveFile(weights, original);
  saveFile(path.join(dir, "m.safetensors"), masks);
  const result = applyMask(weights, path.join(dir, "m.safetensors"), { bitOrder: "little", chunkBytes: 64 });
  const names = ["a", "b", "c", "d", "e", "f"] as const;
  const byName = new Map(result.tensors.map((t) => [t.tensor, t]));
  assert.deepEqual(
    names.map((name) => byName.get(name)!.layout),
    ["elementwise", "elementwise", "packed", "packed-rows", "packed", "elementwise"],
  );
  names.forEach((name, i) => {
    const dtype = original[name].dtype;
    const expected = original[name].data.slice();
    const zeroed = maskElements(dtype, expected, k[i]!, "multiply");
    assert.equal(sha(tensorBytes(weights, name)), sha(expected), name);
    assert.equal(byName.get(name)!.zeroed, zeroed, name);
    assert.equal(zeroed, k[i]!.filter((x) => x === 0).length);
  });
  assert.ok(!fs.existsSync(journalPathFor(weights)));
});

test("a mask that does not fit is refused before anything is written", async () => {
  const weights = path.join(dir, "w.safetensors");
  saveFile(weights, {
    w: new Tensor("F16", [4, 10], fill(80, 1)),
    v: new Tensor("F32", [3], fill(12, 2)),
    q: new Tensor("F4", [4, 2], fill(4, 3)),
  });
  const before = sha(fs.readFileSync(weights));
  const cases: [Record<string, Tensor>, SafetensorErrorCode][] = [
    [
      { v: new Tensor("BOOL", [3], new Uint8Array(3)), nope: new Tensor("BOOL", [1], new Uint8Array(1)) },
      "InvalidMask",
    ],
    [
      { v: new Tensor("BOOL", [3], new Uint8Array(3)), w: new Tensor("BOOL", [10, 4], new Uint8Array(40)) },
      "InvalidMask",
    ],
    [{ v: new Tensor("BOOL", [3], new Uint8Array(3)), w: new Tensor("U8", [6], new Uint8Array(6)) }, "InvalidMask"],
    [{ v: new Tensor("BOOL", [3], new Uint8Array(3)), w: new Tensor("U8", [4, 1], new Uint8Array(4)) }, "InvalidMask"],
    [{ v: new Tensor("BOOL", [3], new Uint8Array(3)), w: new Tensor("I8", [5], new Uint8Array(5)) }, "InvalidMask"],
    [
      { v: new Tensor("BOOL", [3], new Uint8Array(3)), q: new Tensor("BOOL", [4, 2], new Uint8Array(8)) },
      "UnsupportedDtype",
    ],
  ];
  for (const [mask, code] of cases) {
    const file = path.join(dir, "m.safetensors");
    saveFile(file, mask);
    throwsCode(() => applyMask(weights, file), code);
    assert.equal(sha(fs.readFileSync(weights)), before);
    assert.ok(!fs.existsSync(journalPathFor(weights)));
    const out = await cli("apply-mask", weights, "--mask", file);
    assert.equal(out.code, 1);
    assert.match(out.stderr, new RegExp(`error\\[${code}\\]`));
  }
  // The right packed sizes are accepted: flat [ceil(40/8)] and per row [4, ceil(10/8)].
  saveFile(path.join(dir, "ok.safetensors"), { w: new Tensor("U8", [4, 2], new Uint8Array(8).fill(0xff)) });
  const out = await cli("apply-mask", weights, "--mask", path.join(dir, "ok.safetensors"), "--json");
  assert.equal(out.code, 0, out.stderr);
  assert.deepEqual(JSON.parse(out.stdout).tensors[0], {
    tensor: "w",
    file: weights,
    mask_dtype: "U8",
    layout: "packed-rows",
    elements: 40,
    zeroed: 0,
  });
  assert.equal(sha(fs.readFileSync(weights)), before, "a mask that keeps everything writes nothing");
});

test("sharded checkpoints: each mask goes to the shard holding its weight; mode zero writes +0", () => {
  const ckpt = path.join(dir, "ckpt");
  const tensors = new Map<string, Tensor>();
  for (let k = 0; k < 4; k++) tensors.set(`t${k}`, new Tensor("F32", [32, 32], fill(4096, 20 + k)));
  saveSharded(ckpt, tensors, { maxShardSize: 5000 });
  const keep = fill(1024, 9).map((b) => b & 1);
  saveFile(path.join(dir, "m.safetensors"), {
    t0: new Tensor("BOOL", [32, 32], keep),
    t3: new Tensor("BOOL", [32, 32], keep),
  });
  const result = applyMask(ckpt, path.join(dir, "m.safetensors"), { mode: "zero" });
  assert.notEqual(result.tensors[0]!.file, result.tensors[1]!.file);
  for (const t of result.tensors) {
    const expected = tensors.get(t.tensor)!.data.slice();
    maskElements("F32", expected, keep, "zero");
    assert.equal(sha(tensorBytes(t.file, t.tensor)), sha(expected));
  }
  const untouched = path.join(ckpt, fs.readdirSync(ckpt).find((f) => f.includes("00002"))!);
  assert.equal(sha(tensorBytes(untouched, "t1")), sha(tensors.get("t1")!.data));
});

// SIGKILL during a streamed mask: a child applies a mask chunk by chunk (64-byte chunks: dozens of journal appends
// and data writes) and stops before a seeded write; the parent kills it, recovers, and requires the old or new bytes.
const CHILD = process.env.ST_MASK_CRASH_CHILD;
function makeCrashFiles(directory: string): { weights: string; mask: string } {
  const weights = path.join(directory, "w.safetensors");
  const mask = path.join(directory, "m.safetensors");
  saveFile(weights, { a: new Tensor("F16", [64, 16], fill(2048, 1)), b: new Tensor("F32", [32, 16], fill(2048, 2)) });
  saveFile(mask, {
    a: new Tensor(
      "BOOL",
      [64, 16],
      fill(1024, 3).map((x) => x & 1),
    ),
    b: new Tensor("U8", [64], fill(64, 4)),
  });
  return { weights, mask };
}
if (CHILD !== undefined) {
  const stopAt = Number(process.env.ST_MASK_CRASH_AT);
  let writes = 0;
  for (const key of ["writeSync", "writevSync"] as const) {
    const original = fsModule[key] as (...args: unknown[]) => number;
    (fsModule as unknown as Record<string, unknown>)[key] = (fd: number, ...rest: unknown[]) => {
      if (fd !== 1) {
        tellParent();
        if (++writes === stopAt) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10_000);
      }
      return original(fd, ...rest);
    };
  }
  syncBuiltinESMExports();
  applyMask(path.join(CHILD, "w.safetensors"), path.join(CHILD, "m.safetensors"), { chunkBytes: 64 });
  process.exit(0);
} else {
  test("SIGKILL at random points of a streamed mask: after recovery the file is the old or the new one", async () => {
    const reference = fs.mkdtempSync(path.join(dir, "ref-"));
    const files = makeCrashFiles(reference);
    const old = sha(fs.readFileSync(files.weights));
    applyMask(files.weights, files.mask, { chunkBytes: 64 });
    const masked = sha(fs.readFileSync(files.weights));
    assert.notEqual(old, masked);
    let seed = 20261201;
    const self = fileURLToPath(import.meta.url);
    let midway = 0;
    for (let trial = 0; trial < 4; trial++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      const trialDir = fs.mkdtempSync(path.join(dir, `t${trial}-`));
      const { weights } = makeCrashFiles(trialDir);
      const killAt = 1 + (seed % 60);
      const signal = await killAtWrite(
        self,
        { ST_MASK_CRASH_CHILD: trialDir, ST_MASK_CRASH_AT: String(killAt) },
        killAt,
      );
      assert.equal(signal, "SIGKILL", `trial ${trial}: killed`);
      if (fs.existsSync(journalPathFor(weights))) midway++;
      recoverFile(weights);
      const state = sha(fs.readFileSync(weights));
      assert.ok(state === old || state === masked, `trial ${trial} (write ${killAt}): neither old nor new`);
    }
    console.log(`# ${midway} of 4 kills left a journal to roll back`);
  });
}
