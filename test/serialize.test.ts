/**
 * The writer: input validation (everything the reference would write into an unreadable file is refused), header
 * layout (padding, order, sorted metadata), round trips, and `saveFile`'s atomic replacement (no temporary file left
 * on failure, permission bits, symlinks).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { deserialize, isSafetensorError, type SafetensorErrorCode, serialize } from "../src/index.js";
import { saveFile } from "../src/node.js";
import { fill } from "./helpers/fill.js";

const u8 = (...values: number[]) => new Uint8Array(values);
const t = (dtype: string, shape: number[], data: ArrayBufferView) => ({ dtype, shape, data });

function throwsCode(fn: () => unknown, code: SafetensorErrorCode, tensor?: string) {
  assert.throws(fn, (error: unknown) => {
    assert.ok(isSafetensorError(error), `expected a SafetensorError, got ${error}`);
    assert.equal(error.code, code, error.message);
    if (tensor !== undefined) {
      assert.equal(error.tensor, tensor);
      assert.ok(error.message.includes(JSON.stringify(tensor)) || error.message.includes(tensor), error.message);
    }
    return true;
  });
}

function headerText(file: Uint8Array): { n: number; json: string; raw: string } {
  const n = Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  const raw = Buffer.from(file.subarray(8, 8 + n)).toString("utf8");
  return { n, json: raw.trimEnd(), raw };
}

describe("serialize refuses", () => {
  test("a tensor named __metadata__", () => {
    throwsCode(() => serialize({ __metadata__: t("U8", [1], u8(0)) }), "InvalidTensor", "__metadata__");
    throwsCode(() => serialize(new Map([["__metadata__", t("U8", [1], u8(0))]])), "InvalidTensor", "__metadata__");
  });

  test("duplicate names from an iterable of entries", () => {
    const entries: [string, ReturnType<typeof t>][] = [
      ["a", t("U8", [1], u8(1))],
      ["b", t("U8", [1], u8(2))],
      ["a", t("U8", [1], u8(3))],
    ];
    throwsCode(() => serialize(entries), "DuplicateKey");
    function* generate() {
      yield ["x", t("U8", [0], u8())] as const;
      yield ["x", t("U8", [0], u8())] as const;
    }
    throwsCode(() => serialize(generate()), "DuplicateKey");
  });

  test("non-string metadata values and keys", () => {
    const one = { a: t("U8", [1], u8(0)) };
    for (const value of [1, null, undefined, true, { x: "y" }, ["a"], 1n]) {
      throwsCode(() => serialize(one, { k: value } as unknown as Record<string, string>), "InvalidMetadata");
      throwsCode(() => serialize(one, new Map([["k", value]]) as unknown as Map<string, string>), "InvalidMetadata");
    }
    throwsCode(() => serialize(one, new Map([[1, "v"]]) as unknown as Map<string, string>), "InvalidMetadata");
  });

  test("shape and byte length disagreeing", () => {
    throwsCode(() => serialize({ a: t("F32", [2], new Float32Array(3)) }), "InvalidTensor", "a");
    throwsCode(() => serialize({ a: t("F32", [2], new Uint8Array(7)) }), "InvalidTensor", "a");
    throwsCode(() => serialize({ a: t("F64", [], new Uint8Array(0)) }), "InvalidTensor", "a");
    throwsCode(() => serialize({ a: t("U8", [0], new Uint8Array(1)) }), "InvalidTensor", "a");
    throwsCode(() => serialize({ a: t("F4", [4], new Uint8Array(4)) }), "InvalidTensor", "a");
    throwsCode(() => serialize({ a: t("F6_E2M3", [4], new Uint8Array(4)) }), "InvalidTensor", "a");
  });

  test("F4 / F6 element counts that are not whole bytes", () => {
    throwsCode(() => serialize({ f: t("F4", [3], new Uint8Array(2)) }), "MisalignedSlice", "f");
    throwsCode(() => serialize({ f: t("F4", [], new Uint8Array(1)) }), "MisalignedSlice", "f");
    throwsCode(() => serialize({ f: t("F4", [1, 5], new Uint8Array(3)) }), "MisalignedSlice", "f");
    throwsCode(() => serialize({ f: t("F6_E3M2", [1], new Uint8Array(1)) }), "MisalignedSlice", "f");
    throwsCode(() => serialize({ f: t("F6_E2M3", [2], new Uint8Array(2)) }), "MisalignedSlice", "f");
  });

  test('empty metadata with no tensors (the reference writes `{},"__metadata__":{}}`)', () => {
    throwsCode(() => serialize({}, {}), "InvalidMetadata");
    throwsCode(() => serialize(new Map(), new Map()), "InvalidMetadata");
    throwsCode(() => serialize([], {}), "InvalidMetadata");
  });

  test("lone surrogates in names and metadata", () => {
    for (const name of ["\ud800", "\udc00", "a\ud83d", "\ude00b", "\udc00\ud800"]) {
      throwsCode(() => serialize(new Map([[name, t("U8", [1], u8(0))]])), "InvalidTensor", name);
    }
    throwsCode(() => serialize({ a: t("U8", [1], u8(0)) }, { "\ud800": "v" }), "InvalidMetadata");
    throwsCode(() => serialize({ a: t("U8", [1], u8(0)) }, { k: "x\udfff" }), "InvalidMetadata");
    // A proper pair is fine.
    serialize(new Map([["\ud83d\ude00", t("U8", [1], u8(0))]]), { "\ud83d\ude00": "\ud83d\ude00" });
  });

  test("unknown and mis-cased dtypes", () => {
    for (const dtype of ["f32", "float32", "E8M0", "FP4", "UE8", "", "F8_E4M3FN"]) {
      throwsCode(() => serialize({ a: t(dtype, [1], new Uint8Array(4)) }), "UnknownDtype", "a");
    }
  });

  test("shapes that are not lists of non-negative safe integers", () => {
    for (const dim of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
      throwsCode(() => serialize({ a: t("U8", [dim, 0], new Uint8Array(0)) }), "InvalidTensor", "a");
    }
  });

  test("data that is not a TypedArray or DataView", () => {
    throwsCode(() => serialize({ a: t("U8", [1], [1] as unknown as Uint8Array) }), "InvalidTensor", "a");
    throwsCode(() => serialize({ a: t("U8", [1], new ArrayBuffer(1) as unknown as Uint8Array) }), "InvalidTensor", "a");
  });

  test("headers over maxHeaderBytes", () => {
    const tensors = { ["x".repeat(100)]: t("U8", [0], u8()) };
    throwsCode(() => serialize(tensors, null, { maxHeaderBytes: 64 }), "HeaderTooLarge");
    const ok = serialize(tensors, null, { maxHeaderBytes: headerText(serialize(tensors)).n });
    assert.ok(ok.length > 0);
  });
});

describe("serialize layout", () => {
  test("header padded to a multiple of 8 with spaces, for every residue", () => {
    const residues = new Set<number>();
    for (let k = 1; k <= 16; k++) {
      const file = serialize({ ["n".repeat(k)]: t("U8", [1], u8(7)) });
      const { n, json, raw } = headerText(file);
      assert.equal(n % 8, 0);
      assert.ok(json.endsWith("}"));
      assert.match(raw.slice(json.length), /^ {0,7}$/);
      assert.equal(file.length, 8 + n + 1);
      assert.equal(file[8 + n], 7);
      residues.add(json.length % 8);
    }
    assert.equal(residues.size, 8);
  });

  test("no tensors, no metadata: `{}` and six spaces", () => {
    const file = serialize({});
    assert.equal(headerText(file).raw, "{}      ");
    assert.equal(file.length, 16);
  });

  test("compact JSON, __metadata__ first, fields dtype/shape/data_offsets, rank then name order", () => {
    const file = serialize(
      { b: t("U8", [2], u8(1, 2)), a: t("U8", [1], u8(3)), z: t("F64", [], new Float64Array([1])) },
      { k: "v" },
    );
    assert.equal(
      headerText(file).json,
      '{"__metadata__":{"k":"v"},"z":{"dtype":"F64","shape":[],"data_offsets":[0,8]},' +
        '"a":{"dtype":"U8","shape":[1],"data_offsets":[8,9]},"b":{"dtype":"U8","shape":[2],"data_offsets":[9,11]}}',
    );
  });

  test("metadata keys sorted by code point (astral after U+E000..U+FFFF)", () => {
    const keys = ["b", "a", "\u{1F600}", "\uE000", "\uFFFF", "", "A", "aa", "\u00e9", "__proto__"];
    const metadata = new Map(keys.map((k, i) => [k, String(i)]));
    const file = serialize({ x: t("U8", [1], u8(0)) }, metadata);
    const emitted = [...deserialize(file).metadata!.keys()];
    assert.deepEqual(emitted, ["", "A", "__proto__", "a", "aa", "b", "\u00e9", "\uE000", "\uFFFF", "\u{1F600}"]);
    // The same from a plain object (minus __proto__, which an object literal cannot hold as a key).
    const record: Record<string, string> = {};
    for (const k of keys) if (k !== "__proto__") record[k] = metadata.get(k)!;
    assert.deepEqual(
      [...deserialize(serialize({ x: t("U8", [1], u8(0)) }, record)).metadata!.keys()],
      emitted.filter((k) => k !== "__proto__"),
    );
  });

  test("Map, iterable and record inputs give the same bytes; input order never matters", () => {
    const entries: [string, ReturnType<typeof t>][] = [
      ["w", t("F32", [2], new Float32Array([1, 2]))],
      ["b", t("I64", [1], new BigInt64Array([5n]))],
      ["c", t("BF16", [3], new Uint16Array([1, 2, 3]))],
    ];
    const fromMap = serialize(new Map(entries));
    assert.deepEqual(serialize(entries), fromMap);
    assert.deepEqual(serialize(Object.fromEntries(entries)), fromMap);
    assert.deepEqual(serialize(entries.slice().reverse()), fromMap);
  });

  test("views with an offset and DataViews are written from their own bytes", () => {
    const backing = new Uint8Array([9, 9, 1, 2, 3, 4, 9, 9]);
    const file = serialize({
      a: t("U8", [4], backing.subarray(2, 6)),
      b: t("U16", [2], new DataView(backing.buffer, 2, 4)),
    });
    const parsed = deserialize(file);
    assert.deepEqual([...parsed.tensors.get("a")!.data], [1, 2, 3, 4]);
    assert.deepEqual([...parsed.tensors.get("b")!.data], [1, 2, 3, 4]);
  });

  test("a tensor named __proto__ and a metadata key __proto__ survive", () => {
    const file = serialize(new Map([["__proto__", t("U8", [1], u8(42))]]), new Map([["__proto__", "x"]]));
    const parsed = deserialize(file);
    assert.deepEqual([...parsed.tensors.get("__proto__")!.data], [42]);
    assert.equal(parsed.metadata!.get("__proto__"), "x");
    assert.equal(Object.getPrototypeOf({}), Object.prototype);
  });

  test("round trip with deserialize: every dtype, scalars, zero-size, odd names, metadata", () => {
    const tensors = new Map<string, ReturnType<typeof t>>([
      ["bool", t("BOOL", [3], u8(0, 1, 1))],
      ["f4", t("F4", [2, 2], u8(0x12, 0x34))],
      ["f6a", t("F6_E2M3", [4], u8(1, 2, 3))],
      ["f6b", t("F6_E3M2", [2, 4], u8(1, 2, 3, 4, 5, 6))],
      ["u8", t("U8", [], u8(255))],
      ["i8", t("I8", [2], new Int8Array([-1, 1]))],
      ["e5m2", t("F8_E5M2", [1], u8(1))],
      ["e4m3", t("F8_E4M3", [1], u8(2))],
      ["e8m0", t("F8_E8M0", [1], u8(127))],
      ["e4m3fnuz", t("F8_E4M3FNUZ", [1], u8(3))],
      ["e5m2fnuz", t("F8_E5M2FNUZ", [1], u8(4))],
      ["i16", t("I16", [1], new Int16Array([-2]))],
      ["u16", t("U16", [1], new Uint16Array([65535]))],
      ["f16", t("F16", [1], new Uint16Array([0x3c00]))],
      ["bf16", t("BF16", [1], new Uint16Array([0x3f80]))],
      ["i32", t("I32", [1], new Int32Array([-3]))],
      ["u32", t("U32", [1], new Uint32Array([3e9]))],
      ["f32", t("F32", [2, 1], new Float32Array([1.5, -0]))],
      ["c64", t("C64", [1], new Float32Array([1, -1]))],
      ["f64", t("F64", [], new Float64Array([Math.PI]))],
      ["i64", t("I64", [1], new BigInt64Array([-(2n ** 63n)]))],
      ["u64", t("U64", [1], new BigUint64Array([2n ** 64n - 1n]))],
      ["", t("F32", [0, 3], new Float32Array(0))],
      ['\u{1F600}"\\\n\x7f', t("U8", [1], u8(5))],
    ]);
    const metadata = new Map([
      ["format", "pt"],
      ["", ""],
      ["\u2028", "\u{10FFFF}"],
    ]);
    const file = serialize(tensors, metadata);
    const parsed = deserialize(file);
    assert.equal(parsed.tensors.size, tensors.size);
    for (const [name, input] of tensors) {
      const out = parsed.tensors.get(name);
      assert.ok(out, name);
      assert.equal(out.dtype, input.dtype);
      assert.deepEqual([...out.shape], input.shape);
      const bytes = new Uint8Array(input.data.buffer, input.data.byteOffset, input.data.byteLength);
      assert.deepEqual(out.data, bytes, name);
    }
    assert.deepEqual(new Map(parsed.metadata!), metadata);
    // Data follows the header with no gaps.
    let at = 0;
    for (const info of parsed.header.tensors.values()) {
      assert.equal(info.dataOffsets[0], at);
      at = info.dataOffsets[1];
    }
    assert.equal(parsed.header.dataStart + at, file.length);
  });
});

describe("saveFile", () => {
  let dir = "";
  const tensors = { w: t("F32", [2], new Float32Array([1, 2])) };
  const listTemps = () => fs.readdirSync(dir).filter((name) => name.endsWith(".tmp") || name.startsWith("."));

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-save-"));
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** Replace one `fs` function (as seen by every ESM importer) for the duration of `body`. */
  function withFsPatched<K extends "writeSync" | "writevSync" | "renameSync" | "fchmodSync" | "fsyncSync">(
    name: K,
    replacement: (original: (typeof fs)[K]) => (typeof fs)[K],
    body: () => void,
  ) {
    const original = fs[name];
    (fs as unknown as Record<string, unknown>)[name] = replacement(original);
    syncBuiltinESMExports();
    try {
      body();
    } finally {
      (fs as unknown as Record<string, unknown>)[name] = original;
      syncBuiltinESMExports();
    }
  }

  const errno = (code: string) => Object.assign(new Error(`${code}: injected`), { code });

  test("writes a file deserialize reads back", () => {
    const target = path.join(dir, "model.safetensors");
    saveFile(target, tensors, { a: "b" });
    assert.deepEqual(new Uint8Array(fs.readFileSync(target)), serialize(tensors, { a: "b" }));
    assert.deepEqual(listTemps(), []);
  });

  test("a write failing midway (disk full) leaves no temporary file and the old target intact", () => {
    const target = path.join(dir, "model.safetensors");
    fs.writeFileSync(target, "old content");
    let vectored = 0;
    let single = 0;
    // The vectored write stops short after the header; the continuation then finds the disk full.
    withFsPatched(
      "writevSync",
      (original) =>
        ((fd: number, buffers: readonly NodeJS.ArrayBufferView[], position?: number) => {
          vectored++;
          return original(fd, buffers.slice(0, 1), position);
        }) as typeof original,
      () =>
        withFsPatched(
          "writeSync",
          () =>
            (() => {
              single++;
              throw errno("ENOSPC");
            }) as never,
          () =>
            throwsCode(() => saveFile(target, { a: t("U8", [3], u8(1, 2, 3)), b: t("U8", [1], u8(4)) }), "DiskFull"),
        ),
    );
    assert.deepEqual([vectored, single], [1, 1], "the short write was continued and the injected failure reached");
    assert.equal(fs.readFileSync(target, "utf8"), "old content");
    assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
  });

  test("short vectored writes are continued to the last byte", () => {
    const target = path.join(dir, "model.safetensors");
    const many = new Map(Array.from({ length: 3000 }, (_, i) => [`t${i}`, t("U8", [i % 7], fill(i % 7, i + 1))]));
    let calls = 0;
    withFsPatched(
      "writevSync",
      (original) =>
        ((fd: number, buffers: readonly NodeJS.ArrayBufferView[], position?: number) => {
          calls++;
          assert.ok(buffers.length <= 1024);
          // Write a few bytes less than asked, cutting a buffer in the middle.
          const total = buffers.reduce((n, b) => n + b.byteLength, 0);
          const want = Math.max(0, total - 5);
          const cut: Uint8Array[] = [];
          let left = want;
          for (const b of buffers) {
            if (left === 0) break;
            const bytes = new Uint8Array(b.buffer, b.byteOffset, Math.min(b.byteLength, left));
            cut.push(bytes);
            left -= bytes.length;
          }
          return original(fd, cut, position);
        }) as typeof original,
      () => saveFile(target, many, { k: "v" }),
    );
    assert.ok(calls >= 3, `${calls} vectored writes for 3000 buffers`);
    assert.deepEqual(new Uint8Array(fs.readFileSync(target)), serialize(many, { k: "v" }));
    assert.deepEqual(listTemps(), []);
  });

  test("a failing rename leaves no temporary file and no target", () => {
    const target = path.join(dir, "new.safetensors");
    let called = false;
    withFsPatched(
      "renameSync",
      () => () => {
        called = true;
        throw errno("EXDEV");
      },
      () => throwsCode(() => saveFile(target, tensors), "IoError"),
    );
    assert.ok(called);
    assert.deepEqual(fs.readdirSync(dir), []);
  });

  test("a failing chmod or fsync leaves no temporary file", () => {
    const target = path.join(dir, "new.safetensors");
    withFsPatched(
      "fchmodSync",
      () => () => {
        throw errno("EPERM");
      },
      // EPERM (an immutable file, another owner) is one of the errors that mean "not writable here".
      () => throwsCode(() => saveFile(target, tensors), "NotWritable"),
    );
    withFsPatched(
      "fsyncSync",
      () => () => {
        throw errno("EIO");
      },
      () => throwsCode(() => saveFile(target, tensors, null, { fsync: true }), "IoError"),
    );
    assert.deepEqual(fs.readdirSync(dir), []);
  });

  test("a target that is a directory fails cleanly", () => {
    const target = path.join(dir, "sub");
    fs.mkdirSync(target);
    fs.writeFileSync(path.join(target, "keep"), "x");
    throwsCode(() => saveFile(target, tensors), "IoError");
    assert.deepEqual(fs.readdirSync(dir), ["sub"]);
    assert.deepEqual(fs.readdirSync(target), ["keep"]);
  });

  test("a missing directory fails cleanly", () => {
    throwsCode(() => saveFile(path.join(dir, "missing", "x.safetensors"), tensors), "IoError");
    assert.deepEqual(fs.readdirSync(dir), []);
  });

  test("invalid input never touches the target", () => {
    const target = path.join(dir, "model.safetensors");
    fs.writeFileSync(target, "old");
    throwsCode(() => saveFile(target, { a: t("F32", [2], u8(1)) }), "InvalidTensor");
    assert.equal(fs.readFileSync(target, "utf8"), "old");
    assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
  });

  test("an existing target keeps its mode (0640)", () => {
    const target = path.join(dir, "model.safetensors");
    fs.writeFileSync(target, "old");
    fs.chmodSync(target, 0o640);
    saveFile(target, tensors);
    assert.equal(fs.statSync(target).mode & 0o7777, 0o640);
    assert.deepEqual(new Uint8Array(fs.readFileSync(target)), serialize(tensors));
  });

  test("a new file is 0644 under umask 022, and options.mode is honoured", () => {
    const previous = process.umask(0o022);
    try {
      const target = path.join(dir, "new.safetensors");
      saveFile(target, tensors);
      assert.equal(fs.statSync(target).mode & 0o7777, 0o644);
      const private_ = path.join(dir, "private.safetensors");
      saveFile(private_, tensors, null, { mode: 0o600 });
      assert.equal(fs.statSync(private_).mode & 0o7777, 0o600);
      process.umask(0o077);
      const masked = path.join(dir, "masked.safetensors");
      saveFile(masked, tensors);
      assert.equal(fs.statSync(masked).mode & 0o7777, 0o600);
    } finally {
      process.umask(previous);
    }
  });

  test("a symlink target stays a symlink and points to the new content", () => {
    const real = path.join(dir, "real.safetensors");
    const link = path.join(dir, "link.safetensors");
    fs.writeFileSync(real, "old");
    fs.chmodSync(real, 0o640);
    fs.symlinkSync("real.safetensors", link);
    saveFile(link, tensors, { v: "2" });
    assert.ok(fs.lstatSync(link).isSymbolicLink());
    assert.equal(fs.readlinkSync(link), "real.safetensors");
    assert.deepEqual(new Uint8Array(fs.readFileSync(link)), serialize(tensors, { v: "2" }));
    assert.deepEqual(new Uint8Array(fs.readFileSync(real)), serialize(tensors, { v: "2" }));
    assert.equal(fs.statSync(real).mode & 0o7777, 0o640);
    assert.deepEqual(fs.readdirSync(dir).sort(), ["link.safetensors", "real.safetensors"]);
  });

  test("a dangling symlink stays a symlink and its target is created", () => {
    const sub = fs.mkdtempSync(path.join(dir, "dangling-"));
    const link = path.join(sub, "link.safetensors");
    fs.symlinkSync("made.safetensors", link);
    saveFile(link, tensors);
    assert.ok(fs.lstatSync(link).isSymbolicLink());
    assert.deepEqual(new Uint8Array(fs.readFileSync(path.join(sub, "made.safetensors"))), serialize(tensors));
    assert.deepEqual(fs.readdirSync(sub).sort(), ["link.safetensors", "made.safetensors"]);
  });

  test("fsync option writes the same bytes", () => {
    const target = path.join(dir, "synced.safetensors");
    saveFile(target, tensors, null, { fsync: true });
    assert.deepEqual(new Uint8Array(fs.readFileSync(target)), serialize(tensors));
  });
});
