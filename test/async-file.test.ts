/**
 * The async reader over memory, Blob and FileHandle sources: same view as the sync reader on every corpus file, the
 * first read at its exact boundary, slices, errors, abort, and the decorators (coalescing, cache, concurrency).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import fc from "fast-check";
import {
  AsyncSafetensorsFile,
  BlobSource,
  type ByteSource,
  loadFileAsync,
  MemoryByteSource,
  open,
  openFile,
  type ReadOptions,
  serialize,
  Tensor,
  withCache,
  withCoalescing,
  withConcurrencyLimit,
} from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { hasCode as code } from "./helpers/errors.js";
import { fill } from "./helpers/fill.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-async-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Records every read a source serves, and how many were in flight at once. */
class Recording implements ByteSource {
  readonly reads: [number, number][] = [];
  inFlight = 0;
  maxInFlight = 0;
  constructor(
    private readonly inner: ByteSource,
    readonly remote = false,
    private readonly delayMs = 0,
  ) {}
  get byteLength() {
    return this.inner.byteLength;
  }
  get kind() {
    return this.inner.kind;
  }
  async read(offset: number, length: number, options?: ReadOptions): Promise<Uint8Array> {
    this.reads.push([offset, length]);
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
      return await this.inner.read(offset, length, options);
    } finally {
      this.inFlight--;
    }
  }
  close() {
    return this.inner.close();
  }
}

/** A file whose header (JSON + space padding) is exactly `n` bytes, with one U8 tensor of `dataLength` bytes. */
function fileWithHeaderLength(n: number, dataLength = 16): Uint8Array {
  const json = `{"t":{"dtype":"U8","shape":[${dataLength}],"data_offsets":[0,${dataLength}]}}`;
  assert.ok(json.length <= n);
  const bytes = new Uint8Array(8 + n + dataLength);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(n), true);
  bytes.set(new TextEncoder().encode(json.padEnd(n, " ")), 8);
  bytes.set(fill(dataLength, n), 8 + n);
  return bytes;
}

describe("first read", () => {
  for (const [label, headerEnd, reads] of [
    ["header ends before N", 255, 1],
    ["header ends exactly at N", 256, 1],
    ["header ends at N + 1", 257, 2],
    ["header ends at N + 8", 264, 2],
  ] as const) {
    test(`${label}: ${reads} read(s)`, async () => {
      const bytes = fileWithHeaderLength(headerEnd - 8);
      const source = new Recording(new MemoryByteSource(bytes));
      const file = await AsyncSafetensorsFile.open(source, { firstReadBytes: 256 });
      assert.equal(source.reads.length, reads);
      assert.deepEqual(source.reads[0], [0, 256]);
      // The second read is exactly the rest of the header, nothing more.
      if (reads === 2) assert.deepEqual(source.reads[1], [256, headerEnd - 256]);
      assert.deepEqual((await file.getTensor("t")).data, bytes.subarray(headerEnd));
      await file.close();
    });
  }

  test("defaults: 64 KiB for local sources, 1 MiB for remote ones; a file shorter than N is read once", async () => {
    const bytes = fileWithHeaderLength(64 * 1024 - 8, 2 << 20);
    const local = new Recording(new MemoryByteSource(bytes));
    await (await AsyncSafetensorsFile.open(local)).close();
    assert.deepEqual(local.reads, [[0, 64 * 1024]]);
    const remote = new Recording(new MemoryByteSource(bytes), true);
    await (await AsyncSafetensorsFile.open(remote)).close();
    assert.deepEqual(remote.reads, [[0, 1 << 20]]);
    const small = new Recording(new MemoryByteSource(fileWithHeaderLength(100)));
    await (await AsyncSafetensorsFile.open(small)).close();
    assert.deepEqual(small.reads, [[0, 8 + 100 + 16]]);
  });

  test("tensors inside the first read need no further read, and are the caller's own copies", async () => {
    const bytes = fileWithHeaderLength(200);
    const source = new Recording(new MemoryByteSource(bytes));
    const file = await AsyncSafetensorsFile.open(source);
    const t = await file.getTensor("t");
    assert.equal(source.reads.length, 1);
    t.data.fill(0);
    assert.deepEqual((await file.getTensor("t")).data, bytes.subarray(208));
  });

  test("firstReadBytes below 8 is refused", async () => {
    await assert.rejects(open(new Uint8Array(100), { firstReadBytes: 7 }), code("InvalidOption"));
  });
});

describe("header errors match the sync reader", () => {
  const cases: [string, Uint8Array][] = [
    ["empty", new Uint8Array(0)],
    ["7 bytes", new Uint8Array(7)],
    ["length past the end", fileWithHeaderLength(64).subarray(0, 40)],
    ["trailing bytes", new Uint8Array([...fileWithHeaderLength(64), 0])],
  ];
  for (const [label, bytes] of cases) {
    test(label, async () => {
      let expected = "";
      try {
        openFile(writeTemp(bytes)).close();
      } catch (error) {
        expected = (error as { code: string }).code;
      }
      assert.notEqual(expected, "");
      await assert.rejects(open(bytes), code(expected));
      await assert.rejects(open(new Blob([bytes as Uint8Array<ArrayBuffer>])), code(expected));
    });
  }
});

let tempCount = 0;
function writeTemp(bytes: Uint8Array): string {
  const file = path.join(tmp, `t${tempCount++}.safetensors`);
  fs.writeFileSync(file, bytes);
  return file;
}

describe("corpus: async sources see what the sync reader sees", {
  skip: corpusAvailable ? false : corpusMissingReason,
}, () => {
  for (const expected of expectedFiles()) {
    test(expected.file, async () => {
      const file = path.join(corpusDir, expected.file);
      const bytes = fs.readFileSync(file);
      let sync: ReturnType<typeof openFile> | null = null;
      let syncError = "";
      try {
        sync = openFile(file, { backend: "pread" });
      } catch (error) {
        syncError = (error as { code: string }).code;
      }
      for (const make of [
        () => open(file),
        () => open(new Blob([bytes as Uint8Array<ArrayBuffer>])),
        () => open(new MemoryByteSource(bytes), { firstReadBytes: 64 }),
      ]) {
        if (!sync) {
          await assert.rejects(make(), code(syncError));
          continue;
        }
        const async = await make();
        assert.deepEqual(async.keys(), sync.keys());
        assert.deepEqual(async.offsetKeys(), sync.offsetKeys());
        assert.deepEqual(async.metadata(), sync.metadata());
        const all = await async.getTensors();
        for (const name of sync.offsetKeys()) {
          const want: Uint8Array = sync.getTensor(name).data;
          assert.deepEqual((await async.getTensor(name)).data, want, name);
          assert.deepEqual(all.get(name)!.data, want, name);
        }
        await async.close();
      }
      sync?.close();
    });
  }
});

describe("slices", () => {
  const values = Float32Array.from({ length: 6 * 7 * 5 }, (_, i) => i * 0.5 - 3);
  const bytes = serialize(new Map([["x", Tensor.fromTypedArray("F32", [6, 7, 5], values)]]), { format: "pt" });
  const syncFile = openFile(writeTemp(bytes), { backend: "pread" });
  const dim = (n: number) =>
    fc.oneof(
      fc.integer({ min: -n, max: n - 1 }),
      fc
        .tuple(
          fc.option(fc.integer({ min: -n - 2, max: n + 2 })),
          fc.option(fc.integer({ min: -n - 2, max: n + 2 })),
          fc.option(fc.integer({ min: -3, max: 3 }).filter((s) => s !== 0)),
        )
        .map(([a, b, c]) => `${a ?? ""}:${b ?? ""}:${c ?? ""}`),
    );

  test("any basic index: the same bytes as the sync reader, for any maxGap", async () => {
    const source = new Recording(new MemoryByteSource(bytes));
    const file = await AsyncSafetensorsFile.open(source, { firstReadBytes: 8 });
    await fc.assert(
      fc.asyncProperty(fc.tuple(dim(6), dim(7), dim(5)), fc.integer({ min: 0, max: 64 }), async (index, gap) => {
        const spec = index.join(", ");
        const want: Tensor = syncFile.getSlice("x").get(spec);
        const plan = file.getSlice("x").plan(spec);
        const got = new Tensor("F32", plan.shape.map(Number), await file.readPlan("x", plan, { maxGap: gap }));
        assert.deepEqual(got.shape, want.shape);
        assert.deepEqual(got.data, want.data, spec);
        assert.deepEqual((await file.getSlice("x").get(spec)).data, want.data, spec);
      }),
      { numRuns: 150 },
    );
  });

  test("maxGap 0 reads exactly the selected runs", async () => {
    const source = new Recording(new MemoryByteSource(bytes));
    const file = await AsyncSafetensorsFile.open(source, { firstReadBytes: 8 });
    source.reads.length = 0;
    const plan = file.getSlice("x").plan("1:3, :, 0");
    await file.readPlan("x", plan, { maxGap: 0 });
    assert.equal(
      source.reads.reduce((sum, [, n]) => sum + n, 0),
      plan.byteLength,
    );
  });
});

describe("lifetime, abort, limits", () => {
  test("closed files and aborted reads fail clearly", async () => {
    const bytes = fileWithHeaderLength(120, 1 << 20);
    const file = await open(bytes, { firstReadBytes: 128 });
    const controller = new AbortController();
    controller.abort(new Error("stop"));
    await assert.rejects(file.getTensor("t", { signal: controller.signal }), /stop/);
    await assert.rejects(open(bytes, { signal: controller.signal }), /stop/);
    await file.close();
    assert.equal(file.closed, true);
    await assert.rejects(file.getTensor("t"), code("Closed"));
    await assert.rejects(file.getTensor("missing"), code("TensorNotFound"));
  });

  test("long ranges are split into maxReadBytes reads, at most `concurrency` in flight", async () => {
    const bytes = fileWithHeaderLength(64, 1000);
    const source = new Recording(new MemoryByteSource(bytes), false, 2);
    const file = await AsyncSafetensorsFile.open(source, { firstReadBytes: 72, maxReadBytes: 100, concurrency: 3 });
    source.reads.length = 0;
    assert.deepEqual((await file.getTensor("t")).data, bytes.subarray(72));
    assert.equal(source.reads.length, 10);
    assert.equal(source.maxInFlight, 3);
  });

  test("loadFileAsync reads a local file and a Blob alike", async () => {
    const tensors = new Map([
      ["a", Tensor.fromTypedArray("I32", [3], Int32Array.from([1, -2, 3]))],
      ["b", Tensor.fromFloat32("BF16", [2, 2], [1, 2, 3, 4])],
    ]);
    const bytes = serialize(tensors, { format: "pt" });
    for (const input of [writeTemp(bytes), new Blob([bytes as Uint8Array<ArrayBuffer>])]) {
      const loaded = await loadFileAsync(input);
      assert.deepEqual([...loaded.keys()], ["a", "b"]);
      assert.deepEqual(loaded.get("a")!.data, tensors.get("a")!.data);
      assert.deepEqual(loaded.get("b")!.data, tensors.get("b")!.data);
    }
    await assert.rejects(loadFileAsync(path.join(tmp, "missing.safetensors")), code("IoError"));
  });

  test("a file that shrinks after open is SourceChanged", async () => {
    const file = writeTemp(fileWithHeaderLength(64, 200_000));
    const handle = await open(file);
    fs.truncateSync(file, 100_000);
    await assert.rejects(handle.getTensor("t"), code("SourceChanged"));
    await handle.close();
  });
});

describe("decorators", () => {
  const bytes = fill(1 << 16, 7);

  test("coalescing: reads issued together become one read per cluster", async () => {
    const inner = new Recording(new MemoryByteSource(bytes));
    const source = withCoalescing(inner, { maxGap: 100 });
    const parts = await Promise.all([
      source.read(0, 10),
      source.read(50, 10),
      source.read(300, 10),
      source.read(105, 5),
    ]);
    assert.deepEqual(inner.reads, [
      [0, 110],
      [300, 10],
    ]);
    assert.deepEqual(parts[0], bytes.subarray(0, 10));
    assert.deepEqual(parts[1], bytes.subarray(50, 60));
    assert.deepEqual(parts[2], bytes.subarray(300, 310));
    assert.deepEqual(parts[3], bytes.subarray(105, 110));
    await assert.rejects(source.read(bytes.length, 1), code("IoError"));
  });

  test("cache: repeated and overlapping reads are served from memory", async () => {
    const inner = new Recording(new MemoryByteSource(bytes));
    const source = withCache(inner, { blockSize: 1024, maxBytes: 8192 });
    assert.deepEqual(await source.read(1000, 100), bytes.subarray(1000, 1100));
    assert.deepEqual(await source.read(1020, 10), bytes.subarray(1020, 1030));
    assert.deepEqual(inner.reads, [
      [0, 1024],
      [1024, 1024],
    ]);
    // Larger than a quarter of the cache: straight through.
    await source.read(0, 4000);
    assert.equal(inner.reads.length, 3);
    // LRU: filling 8 other blocks evicts the first two.
    for (let b = 2; b < 10; b++) await source.read(b * 1024, 1);
    const before = inner.reads.length;
    await source.read(0, 1);
    assert.equal(inner.reads.length, before + 1);
  });

  test("concurrency limit", async () => {
    const inner = new Recording(new MemoryByteSource(bytes), false, 1);
    const source = withConcurrencyLimit(inner, 2);
    await Promise.all(Array.from({ length: 10 }, (_, i) => source.read(i * 10, 10)));
    assert.equal(inner.maxInFlight, 2);
    assert.throws(() => withConcurrencyLimit(inner, 0), code("InvalidOption"));
  });

  test("Blob reads are range-checked", async () => {
    const source = new BlobSource(new Blob([bytes as Uint8Array<ArrayBuffer>]));
    assert.deepEqual(await source.read(5, 3), bytes.subarray(5, 8));
    await assert.rejects(source.read(bytes.length - 1, 2), code("IoError"));
  });
});
