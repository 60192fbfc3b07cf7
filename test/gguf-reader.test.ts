/**
 * The GGUF reader: versions 2 and 3 read; every malformed or hostile header refused with a coded error
 * (InvalidGguf, GgufLimit), never a crash or a huge allocation; random damage to a valid file only ever gives coded
 * errors. Also openGguf's reads: the header in one read when it fits in the first.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { isSafetensorError } from "../src/format/errors.js";
import { AsyncGgufFile, GgufFile } from "../src/gguf/file.js";
import { KvBuilder } from "../src/gguf/kv.js";
import { parseGgufHeader } from "../src/gguf/reader.js";
import { ggmlTypeByName } from "../src/gguf/types.js";
import { planGguf } from "../src/gguf/writer.js";
import { MemoryByteSource } from "../src/io/async-source.js";
import { MemorySource } from "../src/io/source.js";

/** A little-endian byte builder for hand-made headers. */
class B {
  bytes: number[] = [];
  u32(v: number) {
    for (let i = 0; i < 4; i++) this.bytes.push((v >>> (8 * i)) & 0xff);
    return this;
  }
  u64(v: number | bigint) {
    let x = BigInt(v);
    for (let i = 0; i < 8; i++) {
      this.bytes.push(Number(x & 0xffn));
      x >>= 8n;
    }
    return this;
  }
  raw(b: ArrayLike<number>) {
    for (let i = 0; i < b.length; i++) this.bytes.push(b[i]!);
    return this;
  }
  str(s: string) {
    const b = new TextEncoder().encode(s);
    return this.u64(b.length).raw(b);
  }
  pad(to: number) {
    while (this.bytes.length % to !== 0) this.bytes.push(0);
    return this;
  }
  zeros(n: number) {
    for (let i = 0; i < n; i++) this.bytes.push(0);
    return this;
  }
  get out() {
    return new Uint8Array(this.bytes);
  }
}

const MAGIC = 0x46554747;
const head = (version: number, tensors: number | bigint, kvs: number | bigint) =>
  new B().u32(MAGIC).u32(version).u64(tensors).u64(kvs);

function parse(bytes: Uint8Array, limits = {}) {
  return parseGgufHeader(bytes, bytes.length, limits);
}

function refused(bytes: Uint8Array, code: string, message?: RegExp, limits = {}) {
  assert.throws(
    () => parse(bytes, limits),
    (e: Error & { code?: string }) => {
      assert.equal(e.code, code, e.message);
      if (message) assert.match(e.message, message);
      return true;
    },
  );
}

function validFile(): Uint8Array {
  const kv = new KvBuilder();
  kv.str("general.architecture", "llama").u32("llama.block_count", 1).f32("x.f", 0.5).bool("x.b", true);
  kv.strings("tokenizer.ggml.tokens", ["a", "b", "c"]).i32s("tokenizer.ggml.token_type", new Int32Array([1, 1, 3]));
  const tensors = [
    { name: "a.weight", dims: [32, 2], type: ggmlTypeByName("Q8_0") },
    { name: "b.weight", dims: [4], type: ggmlTypeByName("F32") },
  ];
  const plan = planGguf(kv.map, tensors);
  const file = new Uint8Array(plan.fileSize);
  file.set(plan.header);
  return file;
}

test("a valid file (version 3) is read: metadata in order, tensors placed and aligned", () => {
  const file = validFile();
  const h = parse(file);
  assert.equal(h.version, 3);
  assert.deepEqual(
    [...h.metadata.keys()],
    ["general.architecture", "llama.block_count", "x.f", "x.b", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type"],
  );
  assert.deepEqual(
    h.tensors.map((t) => [t.name, t.type.name, t.dims, t.offset, t.byteLength]),
    [
      ["a.weight", "Q8_0", [32, 2], 0, 68],
      ["b.weight", "F32", [4], 96, 16],
    ],
  );
  assert.equal(h.dataOffset % 32, 0);
  assert.equal(h.fileSize, file.length);
});

test("version 2 is read; versions 1 and 4 and big-endian files are refused", () => {
  const v2 = head(2, 0, 1).str("k").u32(4).u32(7).out;
  assert.equal(parse(v2).version, 2);
  refused(head(1, 0, 0).out, "InvalidGguf", /version 1/);
  refused(head(4, 0, 0).out, "InvalidGguf", /unknown GGUF version 4/);
  refused(new B().u32(MAGIC).u32(0x03000000).u64(0).u64(0).out, "InvalidGguf", /big-endian/);
  refused(new B().u32(0x12345678).u32(3).u64(0).u64(0).out, "InvalidGguf", /magic/);
  refused(new Uint8Array([0x47, 0x47]), "InvalidGguf", /truncated/);
});

test("counts past the limits or past what the file can hold are refused before allocating", () => {
  refused(head(3, 2n ** 40n, 0).out, "GgufLimit", /maxTensors/);
  refused(head(3, 0, 2n ** 40n).out, "GgufLimit", /maxKeyValues/);
  refused(head(3, 0, 60_000).out, "InvalidGguf", /cannot fit/);
  refused(head(3, 100_000, 0).out, "InvalidGguf", /cannot fit/);
  refused(
    head(3, 0, 1)
      .u64(2n ** 62n)
      .zeros(64).out,
    "InvalidGguf",
    /too large/,
  );
  refused(
    head(3, 0, 1)
      .u64(2n ** 40n)
      .zeros(64).out,
    "GgufLimit",
    /maxStringBytes/,
  );
  refused(head(3, 0, 1).str("k").u32(8).u64(1000).zeros(64).out, "InvalidGguf", /truncated/);
  refused(
    head(3, 0, 1)
      .str("k")
      .u32(9)
      .u32(4)
      .u64(2n ** 40n)
      .zeros(64).out,
    "GgufLimit",
    /maxArrayLength/,
  );
  refused(
    head(3, 0, 1).str("k").u32(9).u32(4).u64(1_000_000).zeros(16).zeros(64).out,
    "InvalidGguf",
    /claims 1000000 items/,
  );
  refused(head(3, 0, 1).str("k").u32(9).u32(8).u64(3).str("a").out, "InvalidGguf", /claims 3 items/);
  refused(head(3, 0, 2).str("a").u32(4).u32(1).str("b").u32(4).u32(1).zeros(64).out, "GgufLimit", /maxKeyValues/, {
    maxKeyValues: 1,
  });
  refused(head(3, 0, 1).str("k").u32(8).str("x".repeat(100)).zeros(64).out, "GgufLimit", /maxStringBytes/, {
    maxStringBytes: 64,
  });
  refused(head(3, 0, 1).str("k").u32(8).str("x".repeat(100)).zeros(64).out, "GgufLimit", /maxHeaderBytes/, {
    maxHeaderBytes: 64,
  });
});

test("nested arrays past maxArrayDepth are refused", () => {
  const b = head(3, 0, 1).str("k").u32(9);
  for (let i = 0; i < 3; i++) b.u32(9).u64(1);
  b.u32(4).u64(1).u32(7);
  refused(b.out, "GgufLimit", /maxArrayDepth/);
});

test("bad value types, bools, keys and duplicates are refused", () => {
  refused(head(3, 0, 1).str("k").u32(13).out, "InvalidGguf", /unknown value type 13/);
  refused(head(3, 0, 1).str("k").u32(7).raw([2]).out, "InvalidGguf", /bool of value 2/);
  refused(head(3, 0, 1).u64(2).raw([0xff, 0xfe]).u32(4).u32(1).out, "InvalidGguf", /not valid UTF-8/);
  refused(head(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).out, "InvalidGguf", /duplicate metadata key/);
  refused(head(3, 0, 1).str("general.alignment").u32(4).u32(24).out, "InvalidGguf", /power of two/);
  refused(head(3, 0, 1).str("general.alignment").u32(10).u64(32).out, "InvalidGguf", /UINT32/);
});

function tensorFile(infos: { name: string; dims: number[]; type: number; offset: number }[], dataBytes: number) {
  const b = head(3, infos.length, 0);
  for (const t of infos) {
    b.str(t.name).u32(t.dims.length);
    for (const d of t.dims) b.u64(d);
    b.u32(t.type).u64(t.offset);
  }
  return b.pad(32).zeros(dataBytes).out;
}

test("tensor infos: dimensions, types, blocks, alignment, bounds and overlaps are checked", () => {
  const ok = tensorFile([{ name: "t", dims: [4], type: 0, offset: 0 }], 32);
  assert.equal(parse(ok).tensors[0]!.byteLength, 16);
  refused(tensorFile([{ name: "t", dims: [], type: 0, offset: 0 }], 32), "InvalidGguf", /0 dimensions/);
  refused(tensorFile([{ name: "t", dims: [1, 1, 1, 1, 1], type: 0, offset: 0 }], 32), "InvalidGguf", /5 dimensions/);
  refused(tensorFile([{ name: "t", dims: [4], type: 99, offset: 0 }], 32), "InvalidGguf", /unknown ggml type 99/);
  refused(tensorFile([{ name: "t", dims: [31], type: 8, offset: 0 }], 64), "InvalidGguf", /multiple of Q8_0/);
  refused(tensorFile([{ name: "t", dims: [4], type: 0, offset: 8 }], 64), "InvalidGguf", /not aligned/);
  refused(tensorFile([{ name: "t", dims: [64], type: 0, offset: 0 }], 32), "InvalidGguf", /past the end/);
  refused(
    tensorFile([{ name: "t", dims: [2 ** 26, 2 ** 26, 2 ** 26], type: 0, offset: 0 }], 32),
    "InvalidGguf",
    /too many elements|past the end/,
  );
  refused(
    tensorFile(
      [
        { name: "a", dims: [16], type: 0, offset: 0 },
        { name: "b", dims: [16], type: 0, offset: 32 },
      ],
      96,
    ),
    "InvalidGguf",
    /overlap/,
  );
  refused(
    tensorFile(
      [
        { name: "a", dims: [4], type: 0, offset: 0 },
        { name: "a", dims: [4], type: 0, offset: 32 },
      ],
      64,
    ),
    "InvalidGguf",
    /duplicate tensor name/,
  );
});

test("random damage to a valid file gives coded errors only", () => {
  const file = validFile();
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.nat(file.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }),
      fc.nat(file.length),
      (flips, cut) => {
        const bytes = file.slice(0, Math.max(cut, 1));
        for (const [at, v] of flips) if (at < bytes.length) bytes[at] = v;
        try {
          parse(bytes);
        } catch (error) {
          assert.ok(isSafetensorError(error), String(error));
        }
      },
    ),
    { numRuns: 2000 },
  );
});

test("openGguf reads the header in one read when it fits, in more when it does not", async () => {
  const file = validFile();
  const small = await AsyncGgufFile.open(new MemoryByteSource(file), { firstReadBytes: 64 });
  assert.ok(small.headerReads > 1);
  assert.equal(small.header.tensors.length, 2);
  const whole = await AsyncGgufFile.open(new MemoryByteSource(file));
  assert.equal(whole.headerReads, 1);
  const sync = GgufFile.open(new MemorySource(file), { firstReadBytes: 40 });
  assert.equal(sync.header.tensors.length, 2);
  assert.deepEqual([...sync.tensorF32("b.weight")], [0, 0, 0, 0]);
});
