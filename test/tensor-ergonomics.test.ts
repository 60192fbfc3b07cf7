/**
 * What a user guessed at (issue 20): Tensor.from(typedArray, shape, dtype?), toArray()/toNested() for small tensors,
 * console.log(tensor) showing dtype, shape and values as numpy and torch print them, saveFile's options object
 * with the metadata in it (the old form kept), what getSlice().get() returns, and close() on sharded handles.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { inspect } from "node:util";
import {
  DEFAULT_MAX_ARRAY_ELEMENTS,
  deserialize,
  loadFile,
  openFile,
  openSharded,
  saveFile,
  saveSharded,
  serialize,
  Tensor,
} from "../src/node.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-tensor-ergonomics-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));

describe("Tensor.from", () => {
  test("the dtype follows the array; the shape defaults to one axis; the bytes are shared, not copied", () => {
    const cases = [
      [new Float32Array([1, 2]), "F32"],
      [new Float64Array([1, 2]), "F64"],
      [new Int8Array([1, 2]), "I8"],
      [new Uint8Array([1, 2]), "U8"],
      [new Int16Array([1, 2]), "I16"],
      [new Uint16Array([1, 2]), "U16"],
      [new Int32Array([1, 2]), "I32"],
      [new Uint32Array([1, 2]), "U32"],
      [new BigInt64Array([1n, 2n]), "I64"],
      [new BigUint64Array([1n, 2n]), "U64"],
    ] as const;
    for (const [array, dtype] of cases) {
      const tensor = Tensor.from(array);
      assert.equal(tensor.dtype, dtype);
      assert.deepEqual(tensor.shape, [2]);
      assert.equal(tensor.data.buffer, array.buffer);
    }
    const matrix = Tensor.from(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
    assert.deepEqual(matrix.toNested(), [
      [1, 2, 3],
      [4, 5, 6],
    ]);
  });

  test("a dtype stored in another array type is named: F16/BF16 bits, BOOL, F8 bytes, C64 pairs", () => {
    assert.deepEqual(Tensor.from(new Uint16Array([0x3c00, 0xc000]), [2], "F16").toArray(), [1, -2]);
    assert.deepEqual(Tensor.from(new Uint16Array([0x3f80, 0x4040]), [2], "BF16").toArray(), [1, 3]);
    assert.deepEqual(Tensor.from(new Uint8Array([1, 0]), [2], "BOOL").toArray(), [true, false]);
    assert.deepEqual(Tensor.from(new Uint8Array([0x38]), [1], "F8_E4M3").toArray(), [1]);
    assert.deepEqual(Tensor.from(new Float32Array([1, 2, 3, -4]), undefined, "C64").toArray(), [
      [1, 2],
      [3, -4],
    ]);
  });

  test("a dtype the array cannot hold is InvalidTensor, pointing at fromFloat32 for floats", () => {
    assert.throws(() => Tensor.from(new Float32Array(4), [4], "F16"), {
      code: "InvalidTensor",
      message: /F16 is stored in a Uint16Array, not a Float32Array .*Tensor\.fromFloat32\("F16"/,
    });
    assert.throws(() => Tensor.from(new Int32Array(4), [4], "F32"), { code: "InvalidTensor" });
    assert.throws(() => Tensor.from(new Float32Array(4), [3]), { code: "InvalidTensor" });
  });
});

describe("toArray and toNested", () => {
  test("numbers, bigints for 64-bit integers, decoded small floats; a scalar is its value", () => {
    assert.deepEqual(Tensor.from(new BigInt64Array([-1n, 2n ** 62n])).toArray(), [-1n, 2n ** 62n]);
    assert.deepEqual(Tensor.fromFloat32("BF16", [2, 2], [1, 2.5, -3, 0.25]).toNested(), [
      [1, 2.5],
      [-3, 0.25],
    ]);
    assert.deepEqual(Tensor.fromFloat32("F4", [4], [0.5, 1, -6, 3]).toArray(), [0.5, 1, -6, 3]);
    assert.deepEqual(Tensor.fromFloat32("F6_E2M3", [4], [0.5, 1, -6, 3]).toArray(), [0.5, 1, -6, 3]);
    assert.equal(Tensor.from(new Float32Array([7]), []).toNested(), 7);
    assert.deepEqual(Tensor.from(new Float32Array(0), [0, 3]).toNested(), []);
  });

  test("over DEFAULT_MAX_ARRAY_ELEMENTS is TooLarge, unless maxElements allows it", () => {
    const big = Tensor.from(new Uint8Array(DEFAULT_MAX_ARRAY_ELEMENTS + 1));
    assert.throws(() => big.toArray(), { code: "TooLarge", message: /maxElements/ });
    assert.equal(big.toArray({ maxElements: DEFAULT_MAX_ARRAY_ELEMENTS + 1 }).length, DEFAULT_MAX_ARRAY_ELEMENTS + 1);
    assert.throws(() => Tensor.from(new Uint8Array(10)).toNested({ maxElements: 9 }), { code: "TooLarge" });
  });
});

describe("console.log(tensor) and toString()", () => {
  test("dtype, shape and values, as numpy and torch print them", () => {
    const small = Tensor.from(new Float32Array([1, 2.5, -3, 0.1, Number.NaN, Number.POSITIVE_INFINITY]), [2, 3]);
    assert.equal(small.toString(), "Tensor(F32, [2, 3]) [[1, 2.5, -3], [0.1, nan, inf]]");
    assert.equal(inspect(small), small.toString());
    assert.equal(String(Tensor.from(new BigInt64Array([1n, -2n]))), "Tensor(I64, [2]) [1, -2]");
    assert.equal(String(Tensor.from(new Uint8Array([1, 0]), [2], "BOOL")), "Tensor(BOOL, [2]) [true, false]");
    assert.equal(String(Tensor.from(new Float32Array([1, 2, 3, -4]), [2], "C64")), "Tensor(C64, [2]) [1+2j, 3-4j]");
    assert.equal(String(Tensor.from(new Float32Array([7]), [])), "Tensor(F32, []) 7");
  });

  test("past 1,000 elements the middle of each axis is left out, and only the shown values are read", () => {
    const row = Tensor.from(new Int32Array(2000).map((_, i) => i));
    assert.equal(row.toString(), "Tensor(I32, [2000]) [0, 1, 2, ..., 1997, 1998, 1999]");
    const matrix = Tensor.from(
      new Int32Array(5000).map((_, i) => i),
      [50, 100],
    );
    assert.equal(
      matrix.toString(),
      [
        "Tensor(I32, [50, 100])",
        "[[0, 1, 2, ..., 97, 98, 99],",
        " [100, 101, 102, ..., 197, 198, 199],",
        " [200, 201, 202, ..., 297, 298, 299],",
        " ...,",
        " [4700, 4701, 4702, ..., 4797, 4798, 4799],",
        " [4800, 4801, 4802, ..., 4897, 4898, 4899],",
        " [4900, 4901, 4902, ..., 4997, 4998, 4999]]",
      ].join("\n"),
    );
    // 64 Mi elements print as fast as 6: nothing else is decoded.
    const huge = new Tensor("BF16", [8192, 8192], new Uint8Array(2 * 8192 * 8192));
    const started = performance.now();
    assert.match(huge.toString(), /^Tensor\(BF16, \[8192, 8192\]\)\n\[\[0, 0, 0, \.\.\., 0, 0, 0\],\n/);
    assert.ok(performance.now() - started < 1000);
  });

  test("a tensor whose file was closed prints as released instead of throwing", () => {
    const file = path.join(tmp, "closed.safetensors");
    saveFile(file, new Map([["x", Tensor.from(new Float32Array([1, 2]))]]));
    // The default backend: mmap with the addon (the view is released), plain reads without it (owned bytes print).
    const opened = openFile(file);
    const view = opened.getTensor("x");
    opened.close();
    if (view.data.byteLength === 0) assert.equal(String(view), "Tensor(F32, [2]) <released>");
  });
});

describe("saveFile's third argument", () => {
  const tensors = new Map([["x", Tensor.from(new Float32Array([1, 2]))]]);

  test("an options object with the metadata in it, or the metadata itself (options fourth), as before", () => {
    const a = path.join(tmp, "a.safetensors");
    saveFile(a, tensors, { metadata: { format: "pt" }, fsync: true });
    assert.deepEqual(openFile(a).metadata(), new Map([["format", "pt"]]));
    const b = path.join(tmp, "b.safetensors");
    saveFile(b, tensors, { format: "np" }, { fsync: true });
    assert.deepEqual(openFile(b).metadata(), new Map([["format", "np"]]));
    const c = path.join(tmp, "c.safetensors");
    saveFile(c, tensors, new Map([["k", "v"]]));
    assert.deepEqual(openFile(c).metadata(), new Map([["k", "v"]]));
    const d = path.join(tmp, "d.safetensors");
    saveFile(d, tensors, { fsync: true });
    assert.equal(openFile(d).metadata(), null);
    // The same for serialize.
    assert.deepEqual(deserialize(serialize(tensors, { metadata: { a: "1" } })).metadata, new Map([["a", "1"]]));
    assert.throws(() => serialize(tensors, { metadata: { a: "1" }, maxHeaderBytes: 10 }), { code: "HeaderTooLarge" });
    assert.deepEqual(loadFile(a).get("x")?.toArray(), [1, 2]);
  });
});

describe("slices and sharded handles", () => {
  test("getSlice(name).get(index) is a Tensor of the slice's shape", () => {
    const file = path.join(tmp, "m.safetensors");
    saveFile(
      file,
      new Map([
        [
          "m",
          Tensor.from(
            new Float32Array(12).map((_, i) => i),
            [3, 4],
          ),
        ],
      ]),
    );
    using opened = openFile(file);
    const row = opened.getSlice("m").get("1");
    assert.ok(row instanceof Tensor);
    assert.deepEqual(row.shape, [4]);
    assert.deepEqual(row.toArray(), [4, 5, 6, 7]);
    assert.deepEqual(opened.getSlice("m").get("1:2, ::2").toNested(), [[4, 6]]);
  });

  test("a sharded handle is closed with close() (or using); reads after it are Closed", () => {
    const dir = path.join(tmp, "ckpt");
    const tensors = new Map<string, Tensor>();
    for (let k = 0; k < 4; k++) tensors.set(`w${k}`, Tensor.from(new Float32Array(64)));
    saveSharded(dir, tensors, { maxShardSize: 300 });
    const sharded = openSharded(dir);
    assert.equal(sharded.getTensor("w3").numel, 64);
    sharded.close();
    sharded.close();
    assert.throws(() => sharded.getTensor("w3"), { code: "Closed" });
  });
});
