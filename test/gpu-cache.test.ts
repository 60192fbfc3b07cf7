/**
 * The OPFS cache in headless Chromium, checkpoints served by a private nginx whose access log counts the bytes sent:
 * a reload served from the cache (no tensor bytes over the network), an interrupted load resumed (only the missing
 * blocks fetched), a changed file invalidating its entry, a damaged block caught by its hashes and fetched again,
 * the size budget's LRU eviction, and list/delete/clear. Skips, saying why, without Chromium or nginx.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { serialize, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { type GpuPage, gpuPageMissing, startGpuPage } from "./helpers/gpu-page.js";

const skip = gpuPageMissing;
const timeout = 120_000;
const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const BLOCK = 1 << 20;

let gpu: GpuPage;
let dir: string;
const shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
/** Per tensor name: sha256 of its bytes, as written now. */
const expected = new Map<string, string>();

/** Write shard `i` with content `seed`: a few tensors of 0.6-1.4 MiB (blocks are 1 MiB), odd sizes among them. */
function writeShard(i: number, seed: number): void {
  const tensors = new Map<string, Tensor>();
  const sizes = [1_400_000, 600_001, 1_048_576, 777];
  sizes.forEach((size, k) => {
    const name = `s${i}.t${k}`;
    const bytes = fill(size, seed * 100 + k + 1);
    tensors.set(name, new Tensor("U8", [size], bytes));
    expected.set(name, sha(bytes));
  });
  fs.writeFileSync(path.join(dir, shards[i]!), serialize(tensors));
}

before(async () => {
  if (skip) return;
  gpu = await startGpuPage();
  dir = path.join(gpu.nginx.files, "cached");
  fs.mkdirSync(dir);
  writeShard(0, 1);
  writeShard(1, 2);
  const weightMap: Record<string, string> = {};
  for (const name of expected.keys()) weightMap[name] = shards[Number(name[1])]!;
  fs.writeFileSync(
    path.join(dir, "model.safetensors.index.json"),
    JSON.stringify({ metadata: {}, weight_map: weightMap }),
  );
});

after(async () => {
  await gpu?.dispose();
});

const indexUrl = () => `${gpu.nginx.url}/fx/cached/model.safetensors.index.json`;

/**
 * In the page: load through the cache (blocks of 1 MiB), optionally aborting after `abortAt` bytes; returns the
 * tensors' digests (or the error's name), the cache's stats and its list.
 */
const LOAD = `async ({ url, abortAt, maxBytes, pendingBlocks }) => {
  const cache = await st.openWeightCache({ blockBytes: ${BLOCK}, ...(maxBytes ? { maxBytes } : {}),
    ...(pendingBlocks ? { pendingBlocks } : {}) });
  const controller = new AbortController();
  let outcome;
  try {
    const map = await st.loadToGPU(device, url, { cache, chunkBytes: 256 << 10, signal: controller.signal,
      onProgress: (p) => { if (abortAt && p.bytes >= abortAt) controller.abort(); } });
    outcome = Object.fromEntries((await tensorDigests(map)).map((d) => [d.name, d.sha256]));
    for (const t of map.values()) t.buffer.destroy();
  } catch (e) { outcome = e.name === "AbortError" ? "aborted" : e.code + ": " + e.message; }
  return { outcome, stats: { ...cache.stats }, list: await cache.list() };
}`;

interface Loaded {
  outcome: Record<string, string> | string;
  stats: { networkBytes: number; cacheBytes: number; corruptPieces: number; uncachedBytes: number };
  list: { url: string; etag: string | null; size: number; cachedBytes: number; complete: boolean }[];
}

const load = (options: { abortAt?: number; maxBytes?: number; url?: string; pendingBlocks?: number } = {}) =>
  gpu.run<Loaded>(LOAD, {
    url: options.url ?? indexUrl(),
    abortAt: options.abortAt,
    maxBytes: options.maxBytes,
    pendingBlocks: options.pendingBlocks,
  });

/** Bytes nginx sent for the shard files since the log was cleared, and the Range headers asked. */
async function shardTraffic(): Promise<{ bytes: number; ranges: (string | null)[] }> {
  const log = (await gpu.nginx.log()).filter((e) => e.path.endsWith(".safetensors"));
  return { bytes: log.reduce((a, e) => a + e.bytes, 0), ranges: log.map((e) => e.range) };
}

const clearCache = () => gpu.run(`async () => (await st.openWeightCache()).clear()`);
const fileBytes = () => shards.reduce((a, f) => a + fs.statSync(path.join(dir, f)).size, 0);
const digests = () => Object.fromEntries(expected);

test("a reload is served from the cache: no tensor bytes over the network, the same buffers", {
  skip,
  timeout,
}, async () => {
  await clearCache();
  const first = await load();
  assert.deepEqual(first.outcome, digests());
  assert.equal(first.stats.networkBytes, fileBytes() + 8 * shards.length);
  assert.deepEqual(
    first.list.map((e) => [e.complete, e.cachedBytes]),
    shards.map((f) => [true, fs.statSync(path.join(dir, f)).size]),
  );
  await gpu.reload();
  await gpu.nginx.clearLog();
  const second = await load();
  assert.deepEqual(second.outcome, digests());
  // Each shard: one request for its first 8 bytes (the validators), nothing else.
  const traffic = await shardTraffic();
  assert.deepEqual(
    traffic.ranges,
    shards.map(() => "bytes=0-7"),
  );
  assert.equal(traffic.bytes, 8 * shards.length);
  assert.equal(second.stats.networkBytes, 8 * shards.length);
  assert.ok(second.stats.cacheBytes >= fileBytes() - 2 * 8);
});

test("with one block held while it is written, reads wait for it and every block is still fetched once", {
  skip,
  timeout,
}, async () => {
  await clearCache();
  await gpu.reload();
  await gpu.nginx.clearLog();
  const first = await load({ pendingBlocks: 1 });
  assert.deepEqual(first.outcome, digests());
  assert.equal((await shardTraffic()).bytes, fileBytes() + 8 * shards.length);
  assert.ok(first.list.every((e) => e.complete));
  await gpu.reload();
  const second = await load({ pendingBlocks: 1 });
  assert.deepEqual(second.outcome, digests());
  assert.equal(second.stats.networkBytes, 8 * shards.length);
});

test("an interrupted load resumes: the next one fetches only the blocks the first did not finish", {
  skip,
  timeout,
}, async () => {
  await clearCache();
  await gpu.reload();
  const first = await load({ abortAt: 1_500_000 });
  assert.equal(first.outcome, "aborted");
  const kept = first.list.reduce((a, e) => a + e.cachedBytes, 0);
  assert.ok(kept > 0 && kept < fileBytes(), `kept ${kept} of ${fileBytes()}`);
  await gpu.reload();
  await gpu.nginx.clearLog();
  const second = await load();
  assert.deepEqual(second.outcome, digests());
  const traffic = await shardTraffic();
  // The 8-byte probes, then exactly what was not stored.
  assert.equal(traffic.bytes, 8 * shards.length + fileBytes() - kept);
  assert.ok(second.list.every((e) => e.complete));
});

test("a damaged block is caught by its stored hashes and fetched again", { skip, timeout }, async () => {
  await clearCache();
  await load();
  // Flip one byte in the middle of a stored block of the first shard.
  await gpu.run(`async () => {
    const root = await (await navigator.storage.getDirectory()).getDirectoryHandle("safetensors-ts-cache");
    for await (const [, entry] of root.entries()) {
      for await (const [name, file] of entry.entries()) {
        if (name !== "b1") continue;
        const writable = await file.createWritable({ keepExistingData: true });
        const old = new Uint8Array(await (await file.getFile()).slice(300000, 300001).arrayBuffer());
        await writable.write({ type: "write", position: 300000, data: new Uint8Array([old[0] ^ 0xff]) });
        await writable.close();
        return;
      }
    }
  }`);
  await gpu.reload();
  await gpu.nginx.clearLog();
  const again = await load();
  assert.deepEqual(again.outcome, digests());
  assert.ok(again.stats.corruptPieces >= 1); // as many as reads that met it before it was dropped
  assert.equal((await shardTraffic()).bytes, 8 * shards.length + BLOCK);
});

test("a changed file drops its entry: the new bytes are loaded and cached", { skip, timeout }, async () => {
  await clearCache();
  const before = (await load()).list.find((e) => e.url.endsWith(shards[1]!))!;
  writeShard(1, 3);
  // nginx's ETag is the file's mtime and size: make sure the mtime moves.
  const later = new Date(Date.now() + 5000);
  fs.utimesSync(path.join(dir, shards[1]!), later, later);
  await gpu.reload();
  await gpu.nginx.clearLog();
  const changed = await load();
  assert.deepEqual(changed.outcome, digests());
  assert.equal((await shardTraffic()).bytes, 8 * shards.length + fs.statSync(path.join(dir, shards[1]!)).size);
  const entry = changed.list.find((e) => e.url.endsWith(shards[1]!))!;
  assert.equal(entry.complete, true);
  assert.notEqual(entry.etag, before.etag);
});

test("the size budget evicts the least recently used entry; list, delete and clear", { skip, timeout }, async () => {
  await clearCache();
  const [a, b] = shards.map((f) => `${gpu.nginx.url}/fx/cached/${f}`);
  const budget = Math.ceil(fileBytes() * 0.75);
  await load({ url: a, maxBytes: budget });
  const second = await load({ url: b, maxBytes: budget });
  assert.deepEqual(
    second.list.map((e) => e.url),
    [b],
  );
  const result = await gpu.run<{ deleted: boolean[]; after: number; cleared: number; persisted: string }>(
    `async ({ a, b }) => {
      const cache = await st.openWeightCache();
      const deleted = [await cache.delete(b), await cache.delete(b)];
      const after = (await cache.list()).length;
      await st.loadToGPU(device, a, { cache });
      await cache.clear();
      return { deleted, after, cleared: (await st.openWeightCache().then((c) => c.list())).length,
        persisted: typeof (await cache.persist()) };
    }`,
    { a, b },
  );
  assert.deepEqual(result, { deleted: [true, false], after: 0, cleared: 0, persisted: "boolean" });
});
