/**
 * The lazy file API over both backends: keys, metadata, info, views vs owned copies and their lifetimes, slices,
 * eager loading (incl. grouping into several buffers), files > 4 GiB and a tensor > 2 GiB (sparse files).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { loadNative } from "../src/io/native.js";
import { isSafetensorError, loadFile, openFile, SafetensorError, saveFile, serialize, Tensor } from "../src/node.js";
import { moduleUrl } from "./helpers/compiled.js";
import { repoRoot } from "./helpers/corpus.js";
import { runWithoutAddon } from "./helpers/no-addon.js";

const backends = loadNative() ? (["pread", "mmap"] as const) : (["pread"] as const);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-file-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const code = (expected: string) => (error: unknown) => {
  assert.ok(isSafetensorError(error), `not a SafetensorError: ${error}`);
  assert.equal(error.code, expected, error.message);
  return true;
};

function sample(): string {
  const file = path.join(tmp, "sample.safetensors");
  saveFile(
    file,
    new Map<string, Tensor>([
      ["b", Tensor.fromTypedArray("F32", [2, 3], Float32Array.from([1, 2, 3, 4, 5, 6]))],
      ["a", Tensor.fromTypedArray("I64", [2], BigInt64Array.from([-1n, 2n ** 62n]))],
      ["__proto__", Tensor.fromFloat32("BF16", [4], [0.5, -2, 3, 65536])],
      ["é", Tensor.fromTypedArray("U8", [0, 3], new Uint8Array(0))],
    ]),
    { format: "pt", "": "empty key" },
  );
  return file;
}

for (const backend of backends) {
  describe(`openFile (${backend})`, () => {
    test("keys, offset keys, metadata, info", () => {
      using file = openFile(sample(), { backend });
      assert.equal(file.backend, backend);
      assert.deepEqual(file.keys(), ["__proto__", "a", "b", "é"]);
      assert.deepEqual(file.offsetKeys(), ["a", "b", "__proto__", "é"]);
      assert.deepEqual(Object.fromEntries(file.metadata()!), { "": "empty key", format: "pt" });
      assert.deepEqual(file.info("b"), {
        name: "b",
        dtype: "F32",
        shape: [2, 3],
        dataOffsets: [16, 40],
        byteLength: 24,
      });
      assert.throws(() => file.info("c"), code("TensorNotFound"));
      assert.throws(() => file.getTensor("constructor"), code("TensorNotFound"));
    });

    test("tensors: typed views and decoding", () => {
      using file = openFile(sample(), { backend });
      assert.deepEqual([...(file.getTensor("b").typed() as Float32Array)], [1, 2, 3, 4, 5, 6]);
      assert.deepEqual([...(file.getTensor("a").typed() as BigInt64Array)], [-1n, 2n ** 62n]);
      assert.deepEqual([...file.getTensor("__proto__").toFloat32()], [0.5, -2, 3, 65536]);
      assert.equal(file.getTensor("é").byteLength, 0);
      assert.deepEqual(file.getTensor("é").shape, [0, 3]);
    });

    test("views die with close(); owned copies live on", () => {
      const path_ = path.join(tmp, "views.safetensors");
      saveFile(path_, { big: Tensor.fromTypedArray("F32", [32768], new Float32Array(32768).fill(2)) });
      const file = openFile(path_, { backend });
      const view = file.getTensor("big");
      const owned = file.getTensor("big", { memory: "owned" });
      const slice = file.getSlice("big").get("-2:", { memory: "owned" });
      file.close();
      assert.ok(file.closed);
      assert.equal((owned.typed() as Float32Array)[32767], 2);
      assert.deepEqual([...(slice.typed() as Float32Array)], [2, 2]);
      // On mmap, a view of an unmapped file is detached (length 0), never dangling.
      assert.equal(view.data.byteLength, backend === "mmap" ? 0 : 131072);
      assert.throws(() => file.getTensor("big"), code("Closed"));
      file.close(); // idempotent
    });

    test("writing through a view never reaches the file", () => {
      const file = path.join(tmp, "cow.safetensors");
      saveFile(file, { big: Tensor.fromTypedArray("F32", [32768], new Float32Array(32768).fill(1)) });
      const before = fs.readFileSync(file);
      using opened = openFile(file, { backend });
      const view = opened.getTensor("big").typed() as Float32Array;
      view[0] = 42;
      assert.equal(view[0], 42);
      assert.deepEqual(fs.readFileSync(file), before);
      assert.equal((opened.getTensor("big", { memory: "owned" }).typed() as Float32Array)[0], 1);
    });

    test("slices", () => {
      using file = openFile(sample(), { backend });
      const slice = file.getSlice("b");
      assert.deepEqual([slice.dtype, slice.shape], ["F32", [2, 3]]);
      const column = slice.get(":, -1");
      assert.deepEqual([column.shape, [...(column.typed() as Float32Array)]], [[2], [3, 6]]);
      const reversed = slice.get("::-1, ::-2");
      assert.deepEqual(
        [reversed.shape, [...(reversed.typed() as Float32Array)]],
        [
          [2, 2],
          [6, 4, 3, 1],
        ],
      );
      assert.deepEqual(slice.get([1, { start: 5 }]).shape, [0]);
      assert.throws(() => slice.get("2"), code("InvalidSlice"));
    });

    test("unaligned data (unpadded header) gives correct typed copies", () => {
      // A 5-byte header "{}   " is not a multiple of 8: craft one by hand with one F32 tensor.
      const json = '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}';
      const bytes = new Uint8Array(8 + json.length + 8);
      new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
      bytes.set(new TextEncoder().encode(json), 8);
      new DataView(bytes.buffer).setFloat32(8 + json.length, 1.5, true);
      new DataView(bytes.buffer).setFloat32(12 + json.length, -3, true);
      assert.notEqual((8 + json.length) % 4, 0);
      const file = path.join(tmp, "unaligned.safetensors");
      fs.writeFileSync(file, bytes);
      using opened = openFile(file, { backend });
      assert.deepEqual([...(opened.getTensor("x").typed() as Float32Array)], [1.5, -3]);
    });

    test("loadFile reads everything, also in several buffers", () => {
      const file = sample();
      for (const maxBufferBytes of [undefined, 24]) {
        const tensors = loadFile(file, { backend, maxBufferBytes });
        assert.deepEqual([...tensors.keys()], ["a", "b", "__proto__", "é"]);
        assert.deepEqual([...(tensors.get("b")!.typed() as Float32Array)], [1, 2, 3, 4, 5, 6]);
        assert.deepEqual([...(tensors.get("a")!.typed() as BigInt64Array)], [-1n, 2n ** 62n]);
      }
      if (backend === "pread") assert.throws(() => loadFile(file, { backend, maxBufferBytes: 8 }), code("TooLarge"));
    });

    test("invalid files are refused with the header's error code, and the file is closed", () => {
      const file = path.join(tmp, "truncated.safetensors");
      fs.writeFileSync(file, serialize({ x: Tensor.fromFloat32("F32", [4], [1, 2, 3, 4]) }).subarray(0, -1));
      assert.throws(() => openFile(file, { backend }), code("MetadataIncompleteBuffer"));
      assert.throws(() => openFile(path.join(tmp, "missing"), { backend }), code("IoError"));
      assert.throws(() => openFile(tmp, { backend }), code("IoError"));
    });
  });
}

describe("files beyond 4 GiB (sparse)", () => {
  // One tensor of 2 GiB + 16 bytes, then one starting past 4 GiB: exercises 64-bit offsets end to end.
  const big = 2 ** 31 + 16;
  const json = JSON.stringify({
    big: { dtype: "U8", shape: [big], data_offsets: [0, big] },
    pad: { dtype: "U8", shape: [2 ** 31], data_offsets: [big, big + 2 ** 31] },
    far: { dtype: "F32", shape: [2], data_offsets: [big + 2 ** 31, big + 2 ** 31 + 8] },
  }).padEnd(256, " ");
  const file = path.join(tmp, "sparse.safetensors");
  const dataStart = 8 + json.length;
  const length = dataStart + big + 2 ** 31 + 8;

  test("create", () => {
    const fd = fs.openSync(file, "w");
    try {
      const prefix = Buffer.alloc(8);
      prefix.writeBigUInt64LE(BigInt(json.length));
      fs.writeSync(fd, prefix, 0, 8, 0);
      fs.writeSync(fd, Buffer.from(json), 0, json.length, 8);
      fs.ftruncateSync(fd, length);
      fs.writeSync(fd, Buffer.from([7]), 0, 1, dataStart); // big[0]
      fs.writeSync(fd, Buffer.from([9]), 0, 1, dataStart + big - 1); // big[-1]
      const far = Buffer.alloc(8);
      far.writeFloatLE(1.25, 0);
      far.writeFloatLE(-8, 4);
      fs.writeSync(fd, far, 0, 8, length - 8);
    } finally {
      fs.closeSync(fd);
    }
    assert.ok(fs.statSync(file).size > 2 ** 32);
  });

  for (const backend of backends) {
    test(`${backend}: tensor past 4 GiB, and a 2 GiB tensor`, () => {
      using opened = openFile(file, { backend });
      assert.equal(opened.info("far").dataOffsets[0], big + 2 ** 31);
      assert.deepEqual([...(opened.getTensor("far").typed() as Float32Array)], [1.25, -8]);
      assert.deepEqual([...(opened.getSlice("far").get("-1:").typed() as Float32Array)], [-8]);
      const ends = opened.getSlice("big").get("::2147483663");
      assert.deepEqual([...ends.data], [7, 9]);
      if (backend === "mmap") {
        // [2 GiB + 16, 4 GiB + 16) of the data region: crosses the 4 GiB boundary of the shared windows.
        const across = opened.getTensor("pad");
        assert.equal(across.byteLength, 2 ** 31);
        assert.deepEqual([across.data[0], across.data[2 ** 31 - 1]], [0, 0]);
        const whole = opened.getTensor("big");
        assert.equal(whole.byteLength, big);
        assert.deepEqual([whole.data[0], whole.data[big - 1]], [7, 9]);
      }
    });
  }

  test("pread: a 2 GiB tensor as one owned buffer", () => {
    using opened = openFile(file, { backend: "pread" });
    const whole = opened.getTensor("big");
    assert.equal(whole.byteLength, big);
    assert.deepEqual([whole.data[0], whole.data[1], whole.data[big - 1]], [7, 0, 9]);
  });
});

describe("backend selection", () => {
  test("mmap without the addon is BackendUnavailable; auto falls back to pread", () => {
    const script = `
      import { openFile } from ${JSON.stringify(moduleUrl(path.join(repoRoot, "src/node.ts")))};
      const file = openFile(${JSON.stringify(path.join(repoRoot, "examples/tiny-llama.safetensors"))});
      let mmap = "ok";
      try { openFile(${JSON.stringify(path.join(repoRoot, "examples/tiny-llama.safetensors"))}, { backend: "mmap" }); }
      catch (error) { mmap = error.code; }
      console.log(JSON.stringify({ auto: file.backend, mmap }));`;
    assert.deepEqual(runWithoutAddon(script), { auto: "pread", mmap: "BackendUnavailable" });
  });

  test("SafetensorError is exported and carries its code", () => {
    const error = new SafetensorError("InvalidSlice", "x", { tensor: "t" });
    assert.deepEqual([error.code, error.tensor, error.name], ["InvalidSlice", "t", "SafetensorError"]);
  });
});

describe("parallel reads (native)", { skip: loadNative() ? false : "native addon not built" }, () => {
  test("preadParallel fills the buffer exactly, from any position, with any thread count", async () => {
    const { preadParallel } = await import("../src/io/native.js");
    const file = path.join(tmp, "parallel.bin");
    const bytes = new Uint8Array(5 * 2 ** 20 + 123).map((_, i) => (i * 2654435761) >>> 24);
    fs.writeFileSync(file, bytes);
    const fd = fs.openSync(file, "r");
    try {
      for (const [position, length, threads] of [
        [0, bytes.length, 3],
        [7, bytes.length - 7, 16],
        [2 ** 20 + 1, 3 * 2 ** 20, 2],
        [5, 10, 4],
        [0, 0, 4],
      ] as const) {
        const target = new Uint8Array(length);
        assert.ok(preadParallel(fd, target, position, threads));
        assert.deepEqual(target, bytes.subarray(position, position + length), `${position} ${length} ${threads}`);
      }
      assert.throws(() => preadParallel(fd, new Uint8Array(10), bytes.length - 5, 2), code("IoError"));
    } finally {
      fs.closeSync(fd);
    }
  });
});
