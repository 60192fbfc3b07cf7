/**
 * Issue 23's acceptance, in headless Chromium on SwiftShader against a private nginx: a sharded checkpoint drawn at
 * random for this run (dtypes, shapes, names, shard count; the seed is printed, SAFETENSORS_GPU_SEED=N replays it)
 * is loaded into buffers and read back equal, byte for byte, to the files; a load through the OPFS cache interrupted
 * part way resumes fetching exactly what it did not store; the next load is served from the cache with no tensor
 * bytes over the network (nginx's access log). Skips, saying why, without Chromium or nginx.
 */
import assert from "node:assert/strict";
import { createHash, randomInt } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { DTYPES, type Dtype, dtypeInfo, parseHeaderFromBuffer, saveSharded, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { type GpuPage, gpuPageMissing, startGpuPage } from "./helpers/gpu-page.js";

const skip = gpuPageMissing;
const timeout = 180_000;
const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const seed = Number(process.env.SAFETENSORS_GPU_SEED ?? randomInt(1, 2 ** 31));

/** A small deterministic generator (mulberry32) for the checkpoint's shape. */
function rng(s: number): (n: number) => number {
  let a = s >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) % n) as number;
  };
}

/**
 * 10-24 tensors of any dtype (sub-byte ones in whole bytes), rank 0-3 or large matrices, empty ones and odd byte
 * lengths among them, names with dots and one `__proto__`, at least 6 MiB in all; saved as 2-5 shards the way
 * huggingface_hub shards.
 */
function draw(dir: string): { files: string[]; total: number } {
  const r = rng(seed);
  const tensors = new Map<string, Tensor>();
  const count = 10 + r(15);
  for (let i = 0; i < count; i++) {
    const dtype = DTYPES[r(DTYPES.length)] as Dtype;
    const bits = dtypeInfo(dtype)!.bits;
    const rank = r(4);
    const big = r(4) === 0;
    const shape = big ? [64 + r(700), 1 + r(300)] : Array.from({ length: rank }, () => (r(9) === 0 ? 0 : 1 + r(40)));
    // Sub-byte dtypes pack elements: keep their count a multiple of 8 (whole bytes for 4 and 6 bits).
    if (bits < 8) shape.push(8);
    const elements = shape.reduce((a, b) => a * b, 1);
    const name = i === 3 ? "__proto__" : `model.layers.${i}.${["w", "b", "scale", "norm"][r(4)]}`;
    tensors.set(name, new Tensor(dtype, shape, fill((elements * bits) / 8, seed + i)));
  }
  let total = [...tensors.values()].reduce((a, t) => a + t.data.byteLength, 0);
  // At least 6 MiB, so that a load interrupted at a quarter to three quarters has stored some blocks of 256 KiB and
  // not others (opening the shards alone stores each one's first block).
  if (total < 6 << 20) {
    const rows = Math.ceil(((6 << 20) - total) / 1000);
    tensors.set("lm_head.weight", new Tensor("F16", [rows, 500], fill(rows * 1000, seed - 1)));
    total += rows * 1000;
  }
  const shards = 2 + r(4);
  const { files } = saveSharded(dir, tensors, { maxShardSize: Math.max(1, Math.ceil(total / shards)) });
  return { files: files.filter((f) => f.endsWith(".safetensors")), total };
}

let gpu: GpuPage;
let dir: string;
let shardFiles: string[] = [];
let tensorBytes = 0;
/** Per tensor: the SHA-256 of its bytes as they stand in its shard file. */
const expected = new Map<string, string>();
const names: string[] = [];

before(async () => {
  if (skip) return;
  gpu = await startGpuPage();
  dir = path.join(gpu.nginx.files, `unseen-${seed}`);
  fs.mkdirSync(dir);
  ({ files: shardFiles, total: tensorBytes } = draw(dir));
  for (const file of shardFiles) {
    const bytes = fs.readFileSync(file);
    const header = parseHeaderFromBuffer(bytes);
    const infos = [...header.tensors.values()].sort((a, b) => a.dataOffsets[0] - b.dataOffsets[0]);
    for (const info of infos) {
      const [a, b] = info.dataOffsets;
      expected.set(info.name, sha(bytes.subarray(header.dataStart + a, header.dataStart + b)));
      names.push(info.name);
    }
  }
});

after(async () => {
  await gpu?.dispose();
});

const fileBytes = () => shardFiles.reduce((a, f) => a + fs.statSync(f).size, 0);

interface Loaded {
  outcome: [string, string][] | string;
  networkBytes: number;
  kept: number;
  complete: boolean[];
}

/** In the page: one load of the index URL (through the cache when asked), read back, digests in file order. */
const LOAD = `async ({ url, cached, abortAt, concurrency }) => {
  const cache = cached ? await st.openWeightCache({ blockBytes: 256 << 10 }) : undefined;
  const controller = new AbortController();
  let outcome;
  try {
    const map = await st.loadToGPU(device, url, { cache, concurrency, chunkBytes: 128 << 10, signal: controller.signal,
      onProgress: (p) => { if (abortAt && p.bytes >= abortAt) controller.abort(); } });
    outcome = (await tensorDigests(map)).map((d) => [d.name, d.sha256]);
    for (const t of map.values()) t.buffer.destroy();
  } catch (e) { outcome = e.name === "AbortError" ? "aborted" : e.code + ": " + e.message; }
  const list = cache ? await cache.list() : [];
  return { outcome, networkBytes: cache ? cache.stats.networkBytes : -1,
    kept: list.reduce((a, e) => a + e.cachedBytes, 0), complete: list.map((e) => e.complete) };
}`;

const load = (cached: boolean, abortAt = 0) =>
  gpu.run<Loaded>(LOAD, {
    url: `${gpu.nginx.url}/fx/unseen-${seed}/model.safetensors.index.json`,
    cached,
    abortAt,
    // One read at a time when interrupting, so that what is in flight at the abort is a small part of the file.
    concurrency: abortAt ? 1 : undefined,
  });

/** Bytes nginx sent for the shard files since the log was cleared, and the Range headers asked. */
async function shardTraffic(): Promise<{ bytes: number; ranges: (string | null)[] }> {
  const log = (await gpu.nginx.log()).filter((e) => e.path.endsWith(".safetensors"));
  return { bytes: log.reduce((a, e) => a + e.bytes, 0), ranges: log.map((e) => e.range) };
}

test("an unseen sharded checkpoint: loaded, read back equal to the files, resumed, then served from the cache", {
  skip,
  timeout,
}, async (t) => {
  t.diagnostic(
    `seed ${seed} (SAFETENSORS_GPU_SEED=${seed} replays it): ${names.length} tensors in ${shardFiles.length} shards, ${fileBytes()} bytes`,
  );
  assert.ok(shardFiles.length >= 2, "a sharded checkpoint");
  const want = names.map((n) => [n, expected.get(n)!]);

  // Straight from nginx: every tensor read back equal to its bytes in the files, in file order.
  await gpu.run(`async () => (await st.openWeightCache()).clear()`);
  const plain = await load(false);
  assert.deepEqual(plain.outcome, want);

  // Through the cache, aborted part way: the blocks finished stay.
  await gpu.nginx.clearLog();
  const interrupted = await load(true, Math.floor(tensorBytes * (0.25 + Math.random() * 0.5)));
  assert.equal(interrupted.outcome, "aborted");
  assert.ok(interrupted.kept > 0 && interrupted.kept < fileBytes(), `kept ${interrupted.kept} of ${fileBytes()}`);

  // A new visit (what was in memory is gone): only what was not stored comes over the network.
  await gpu.reload();
  await gpu.nginx.clearLog();
  const resumed = await load(true);
  assert.deepEqual(resumed.outcome, want);
  const resumedTraffic = await shardTraffic();
  assert.equal(resumedTraffic.bytes, 8 * shardFiles.length + fileBytes() - interrupted.kept, "re-downloaded bytes");
  assert.deepEqual(
    resumed.complete,
    shardFiles.map(() => true),
  );

  // And again: each shard's 8-byte probe of its validators, no tensor bytes.
  await gpu.reload();
  await gpu.nginx.clearLog();
  const cached = await load(true);
  assert.deepEqual(cached.outcome, want);
  const cachedTraffic = await shardTraffic();
  assert.deepEqual(
    cachedTraffic.ranges,
    shardFiles.map(() => "bytes=0-7"),
  );
  assert.equal(cachedTraffic.bytes, 8 * shardFiles.length);
  assert.equal(cached.networkBytes, 8 * shardFiles.length);
});
