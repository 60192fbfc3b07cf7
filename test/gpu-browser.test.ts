/**
 * loadToGPU in headless Chromium on SwiftShader, checkpoints served by a private nginx: a sharded checkpoint read
 * back byte for byte, a File, conversions equal to the CPU codecs over every 8- and 16-bit pattern, split and refused
 * tensors, abort. Skips, saying why, without Chromium or nginx.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { type Float8Dtype, float8DecodeTable } from "../src/codecs/float8.js";
import { f16ToF32Bits, f32BitsToF16 } from "../src/codecs/half.js";
import { type Dtype, parseHeaderFromBuffer, serialize, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { type GpuPage, gpuPageMissing, startGpuPage } from "./helpers/gpu-page.js";

const skip = gpuPageMissing;
// A hung page must fail the test, not the whole run.
const timeout = 120_000;
const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

interface Spec {
  name: string;
  dtype: Dtype;
  shape: number[];
  bytes: Uint8Array;
}

function tensor(name: string, dtype: Dtype, shape: number[], seed: number, bytesPerElement: number): Spec {
  const count = shape.reduce((a, b) => a * b, 1);
  return { name, dtype, shape, bytes: fill(count * bytesPerElement, seed) };
}

function write(dir: string, file: string, specs: Spec[]): void {
  const tensors = new Map(specs.map((s) => [s.name, new Tensor(s.dtype, s.shape, s.bytes)]));
  fs.writeFileSync(path.join(dir, file), serialize(tensors, { format: "pt" }));
}

// Three shards: sizes that are not multiples of 4 (U8 of 7, F16 of 5, BOOL of 3), tensors longer than the chunk,
// odd offsets in the file (after the 7- and 3-byte tensors), a zero-length tensor.
const SHARDS: Record<string, Spec[]> = {
  "model-00001-of-00003.safetensors": [
    tensor("embed.weight", "F32", [300, 64], 1, 4),
    tensor("odd.u8", "U8", [7], 2, 1),
    tensor("odd.f16", "F16", [5], 3, 2),
  ],
  "model-00002-of-00003.safetensors": [
    tensor("layers.0.w", "BF16", [256, 200], 4, 2),
    tensor("flags", "BOOL", [3], 5, 1),
    tensor("layers.0.b", "I64", [9], 6, 8),
    tensor("empty", "F32", [0, 4], 7, 4),
  ],
  "model-00003-of-00003.safetensors": [tensor("head.weight", "F16", [123, 77], 8, 2)],
};

let gpu: GpuPage;
const expected = new Map<string, Spec>();
/** Tensor names shard by shard, each shard in offset order (as its header gives them). */
const fileOrder: string[] = [];

before(async () => {
  if (skip) return;
  gpu = await startGpuPage();
  const dir = path.join(gpu.nginx.files, "ckpt");
  fs.mkdirSync(dir);
  const weightMap: Record<string, string> = {};
  let total = 0;
  for (const [file, specs] of Object.entries(SHARDS)) {
    write(dir, file, specs);
    const header = parseHeaderFromBuffer(fs.readFileSync(path.join(dir, file)));
    fileOrder.push(
      ...[...header.tensors.values()].sort((a, b) => a.dataOffsets[0] - b.dataOffsets[0]).map((t) => t.name),
    );
    for (const s of specs) {
      weightMap[s.name] = file;
      expected.set(s.name, s);
      total += s.bytes.length;
    }
  }
  fs.writeFileSync(
    path.join(dir, "model.safetensors.index.json"),
    JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }),
  );
});

after(async () => {
  await gpu?.dispose();
});

interface Digest {
  name: string;
  dtype: string;
  sourceDtype: string;
  shape: number[];
  byteLength: number;
  size?: number;
  sha256?: string;
  zeroPadding?: boolean;
  parts?: { rows: number[]; shape: number[]; size: number; sha256: string; zeroPadding: boolean }[];
}

test("a sharded checkpoint from nginx into buffers, read back equal to the files", { skip, timeout }, async () => {
  await gpu.nginx.clearLog();
  const result = await gpu.run<{ digests: Digest[]; progress: unknown[] }>(
    `async (url) => {
      const progress = [];
      const map = await st.loadToGPU(device, url, { chunkBytes: 65536, onProgress: (p) => progress.push(p) });
      const digests = await tensorDigests(map);
      for (const t of map.values()) t.buffer.destroy();
      return { digests, progress: [progress[0], progress[progress.length - 1]] };
    }`,
    `${gpu.nginx.url}/fx/ckpt/model.safetensors.index.json`,
  );
  // File order: shard by shard, each in offset order.
  assert.deepEqual(
    result.digests.map((d) => d.name),
    fileOrder,
  );
  for (const d of result.digests) {
    const s = expected.get(d.name)!;
    assert.equal(d.sha256, sha(s.bytes), d.name);
    assert.equal(d.dtype, s.dtype);
    assert.deepEqual(d.shape, s.shape);
    assert.equal(d.byteLength, s.bytes.length);
    assert.equal(d.size, Math.max(4, Math.ceil(s.bytes.length / 4) * 4), `${d.name}: size rounded up to 4`);
    assert.equal(d.zeroPadding, true, d.name);
  }
  const total = [...expected.values()].reduce((a, s) => a + s.bytes.length, 0);
  const tensors = expected.size;
  assert.deepEqual(result.progress, [
    { bytes: 0, totalBytes: total, tensors: 1, totalTensors: tensors }, // the empty tensor is complete at once
    { bytes: total, totalBytes: total, tensors, totalTensors: tensors },
  ]);
  // Tensor bytes came by Range requests of at most chunkBytes, none twice.
  const log = (await gpu.nginx.log()).filter((e) => e.path.endsWith(".safetensors"));
  assert.ok(log.every((e) => e.status === 206 && e.bytes <= 1 << 20));
});

test("an hf:// location (a sharded checkpoint on a Hub-like server)", { skip, timeout }, async () => {
  // hf://acme/tiny/FILE resolves to {hfEndpoint}/acme/tiny/resolve/main/FILE.
  const hub = path.join(gpu.nginx.files, "hub", "acme", "tiny", "resolve", "main");
  fs.mkdirSync(hub, { recursive: true });
  for (const file of fs.readdirSync(path.join(gpu.nginx.files, "ckpt"))) {
    fs.copyFileSync(path.join(gpu.nginx.files, "ckpt", file), path.join(hub, file));
  }
  const digests = await gpu.run<Digest[]>(
    `async (endpoint) => tensorDigests(await st.loadToGPU(device, "hf://acme/tiny/model.safetensors.index.json", { hfEndpoint: endpoint }))`,
    `${gpu.nginx.url}/fx/hub`,
  );
  assert.deepEqual(
    digests.map((d) => [d.name, d.sha256]),
    fileOrder.map((name) => [name, sha(expected.get(name)!.bytes)]),
  );
});

test("a File from an <input>, and a filter by names and by predicate", { skip, timeout }, async () => {
  const file = path.join(gpu.nginx.files, "ckpt", "model-00002-of-00003.safetensors");
  await gpu.page.setInputFiles("#file", file);
  const result = await gpu.run<{ byName: Digest[]; byPredicate: string[]; missing: string }>(`async () => {
    const file = document.getElementById("file").files[0];
    const byName = await tensorDigests(await st.loadToGPU(device, file, { filter: ["flags", "layers.0.w"] }));
    const picked = await st.loadToGPU(device, file, { filter: (name, info) => info.dtype === "I64" });
    const missing = await st.loadToGPU(device, file, { filter: ["nope"] }).then(() => "loaded", (e) => e.code);
    return { byName, byPredicate: [...picked.keys()], missing };
  }`);
  assert.deepEqual(
    result.byName.map((d) => [d.name, d.sha256]),
    ["layers.0.w", "flags"].map((n) => [n, sha(expected.get(n)!.bytes)]),
  );
  assert.deepEqual(result.byPredicate, ["layers.0.b"]);
  assert.equal(result.missing, "TensorNotFound");
});

/** Every pattern of a 16-bit type (65536 elements), of each 8-bit type (256), and float32 patterns around F16's. */
function conversionFixture(): Spec[] {
  const all16 = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
  const all8 = Uint8Array.from({ length: 256 }, (_, i) => i);
  // float32 bits: every high half with low halves at the rounding edges (and F16's NaN payload bits).
  const lows = [0, 1, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0xffff];
  const f32 = new Uint32Array(65536 * lows.length);
  for (let h = 0; h < 65536; h++) {
    for (let k = 0; k < lows.length; k++) f32[h * lows.length + k] = ((h << 16) | lows[k]!) >>> 0;
  }
  const specs: Spec[] = [
    { name: "f16", dtype: "F16", shape: [65536], bytes: all16 },
    { name: "bf16", dtype: "BF16", shape: [65536], bytes: all16 },
    { name: "f32", dtype: "F32", shape: [f32.length], bytes: new Uint8Array(f32.buffer) },
    { name: "f16.odd", dtype: "F16", shape: [3], bytes: all16.subarray(2 * 0x7bff, 2 * 0x7bff + 6) },
  ];
  for (const dtype of ["F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"] as const) {
    specs.push({ name: dtype, dtype, shape: [256], bytes: all8 });
  }
  return specs;
}

/** The CPU codecs' answer: float32 bits of each element, then F16 codes when the target is f16 (and not the source). */
function cpuConvert(spec: Spec, target: "f16" | "f32"): Uint8Array {
  if (spec.dtype === target.toUpperCase()) return spec.bytes; // already the target: loaded as stored
  const count = spec.shape.reduce((a, b) => a * b, 1);
  const bits = new Uint32Array(count);
  const u16 = new Uint16Array(spec.bytes.slice().buffer, 0, spec.bytes.length >> 1);
  const u32 = new Uint32Array(spec.bytes.slice().buffer, 0, spec.bytes.length >> 2);
  for (let i = 0; i < count; i++) {
    if (spec.dtype === "F16") bits[i] = f16ToF32Bits(u16[i]!);
    else if (spec.dtype === "BF16") bits[i] = (u16[i]! << 16) >>> 0;
    else if (spec.dtype === "F32") bits[i] = u32[i]!;
    else bits[i] = float8DecodeTable(spec.dtype as Float8Dtype)[spec.bytes[i]!]!;
  }
  if (target === "f32") return new Uint8Array(bits.buffer);
  return new Uint8Array(Uint16Array.from(bits, (b) => f32BitsToF16(b)).buffer);
}

test("conversions on the device equal the CPU codecs over every 8- and 16-bit pattern", { skip, timeout }, async () => {
  const specs = conversionFixture();
  write(gpu.nginx.files, "patterns.safetensors", specs);
  const result = await gpu.run<Record<string, Digest[]>>(
    `async (url) => {
      const out = {};
      for (const dtype of ["f32", "f16"]) {
        const map = await st.loadToGPU(device, url, { dtype, chunkBytes: 65536 });
        out[dtype] = await tensorDigests(map);
        for (const t of map.values()) t.buffer.destroy();
      }
      return out;
    }`,
    `${gpu.nginx.url}/fx/patterns.safetensors`,
  );
  for (const target of ["f32", "f16"] as const) {
    for (const d of result[target]!) {
      const spec = specs.find((s) => s.name === d.name)!;
      const want = cpuConvert(spec, target);
      assert.equal(d.dtype, target === "f32" ? "F32" : "F16", `${d.name} -> ${target}`);
      assert.equal(d.sourceDtype, spec.dtype);
      assert.equal(d.byteLength, want.length, `${d.name} -> ${target}`);
      assert.equal(d.sha256, sha(want), `${d.name} -> ${target}: not the CPU codecs' bits`);
      assert.equal(d.zeroPadding, true);
    }
  }
});

test("a tensor over maxBufferSize: split along dim 0 when allowed, refused naming the limit otherwise", {
  skip,
  timeout,
}, async () => {
  const w = tensor("w", "F32", [40, 64], 9, 4); // 10240 bytes, rows of 256
  const wide = tensor("wide", "BF16", [2, 3000], 10, 2); // a row of 6000 bytes (12000 as F32)
  write(gpu.nginx.files, "big.safetensors", [w, wide]);
  const result = await gpu.run<{ split: Digest[]; refused: string[]; row: string[]; converted: Digest[] }>(
    `async (url) => {
      const codeAndMessage = (e) => [e.code, e.message];
      const split = await tensorDigests(await st.loadToGPU(device, url, { filter: ["w"], maxBufferSize: 4096, split: true }));
      const refused = await st.loadToGPU(device, url, { filter: ["w"], maxBufferSize: 4096 }).then(() => [], codeAndMessage);
      const row = await st.loadToGPU(device, url, { filter: ["wide"], maxBufferSize: 4096, split: true }).then(() => [], codeAndMessage);
      const converted = await tensorDigests(await st.loadToGPU(device, url, { filter: ["wide"], dtype: "f32", maxBufferSize: 12000, split: true }));
      return { split, refused, row, converted };
    }`,
    `${gpu.nginx.url}/fx/big.safetensors`,
  );
  const parts = result.split[0]!.parts!;
  assert.deepEqual(
    parts.map((p) => [p.rows, p.shape]),
    [
      [
        [0, 16],
        [16, 64],
      ],
      [
        [16, 32],
        [16, 64],
      ],
      [
        [32, 40],
        [8, 64],
      ],
    ],
  );
  parts.forEach((p, i) => {
    assert.equal(p.sha256, sha(w.bytes.subarray(i * 4096, Math.min(10240, (i + 1) * 4096))));
  });
  assert.equal(result.refused[0], "TooLarge");
  assert.match(result.refused[1]!, /maxBufferSize \(4096 bytes\).*split: true/);
  assert.equal(result.row[0], "TooLarge");
  assert.match(result.row[1]!, /cannot be split along dim 0 \(one row is 6000 bytes\)/);
  const converted = result.converted[0]!.parts!;
  const want = cpuConvert(wide, "f32");
  assert.deepEqual(
    converted.map((p) => p.sha256),
    [sha(want.subarray(0, 12000)), sha(want.subarray(12000))],
  );
});

test("abort mid-load: rejects with the signal's reason, stops reading, leaves no buffer behind", {
  skip,
  timeout,
}, async () => {
  const big = tensor("big", "U8", [8 << 20], 11, 1);
  write(gpu.nginx.files, "abort.safetensors", [big]);
  await gpu.nginx.clearLog();
  const result = await gpu.run<{ name: string; bytesAtAbort: number; created: number; destroyed: number }>(
    `async (url) => {
      const controller = new AbortController();
      let bytesAtAbort = -1, created = 0, destroyed = 0;
      // Count buffers made and destroyed through a device that forwards to the real one.
      const tracked = new Proxy(device, { get(target, key) {
        if (key === "createBuffer") return (d) => { const b = target.createBuffer(d); created++;
          const destroy = b.destroy.bind(b); b.destroy = () => { destroyed++; destroy(); }; return b; };
        const v = target[key]; return typeof v === "function" ? v.bind(target) : v;
      } });
      const name = await st.loadToGPU(tracked, url, { chunkBytes: 65536, concurrency: 1, signal: controller.signal,
        onProgress: (p) => { if (p.bytes >= 256 << 10 && bytesAtAbort < 0) { bytesAtAbort = p.bytes; controller.abort(); } },
      }).then(() => "loaded", (e) => e.name);
      return { name, bytesAtAbort, created, destroyed };
    }`,
    `${gpu.nginx.url}/fx/abort.safetensors`,
  );
  assert.equal(result.name, "AbortError");
  assert.ok(result.bytesAtAbort > 0);
  assert.ok(result.created >= 1);
  assert.equal(result.destroyed, result.created);
  const fetched = (await gpu.nginx.log())
    .filter((e) => e.path === "/fx/abort.safetensors")
    .reduce((a, e) => a + e.bytes, 0);
  assert.ok(fetched < 2 << 20, `read ${fetched} bytes of an 8 MiB file after aborting at 256 KiB`);
});

test("a tensor over the device's own maxBufferSize is refused, naming the limit, before any of its bytes is read", {
  skip,
  timeout,
}, async () => {
  const limit = await gpu.run<number>(`async () => device.limits.maxBufferSize`);
  // A file whose one tensor is 4 KiB over the limit; sparse on disk, so the test costs no memory or disk.
  const rows = Math.floor(limit / 4096) + 1;
  let json = JSON.stringify({ huge: { dtype: "F32", shape: [rows, 1024], data_offsets: [0, rows * 4096] } });
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const file = path.join(gpu.nginx.files, "huge.safetensors");
  const prefix = new Uint8Array(8 + json.length);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(json.length), true);
  prefix.set(new TextEncoder().encode(json), 8);
  fs.writeFileSync(file, prefix);
  fs.truncateSync(file, prefix.length + rows * 4096);
  await gpu.nginx.clearLog();
  const [code, message] = await gpu.run<string[]>(
    `async (url) => st.loadToGPU(device, url).then(() => ["loaded"], (e) => [e.code, e.message])`,
    `${gpu.nginx.url}/fx/huge.safetensors`,
  );
  fs.rmSync(file);
  assert.equal(code, "TooLarge");
  assert.match(message!, /"huge" needs .* in one buffer, over the device's maxBufferSize \(.+\): pass split: true/);
  assert.ok(message!.includes(`maxBufferSize (${(limit / 2 ** 20).toFixed(1)} MiB, ${limit} bytes)`), message);
  const sent = (await gpu.nginx.log())
    .filter((e) => e.path === "/fx/huge.safetensors")
    .reduce((a, e) => a + e.bytes, 0);
  // The open's first read (header and what follows, up to 1 MiB) and nothing more.
  assert.ok(sent <= 1 << 20, `${sent} bytes sent for a refused tensor`);
});
