/**
 * saveFile's direct writes (O_DIRECT for the whole pages of tensor bytes from memory, native/direct_write.c): the
 * file is byte for byte what the page-cache path writes, whatever the alignment of the tensors in memory and in the
 * file; memory loaded by loadFile (pread) is written straight from where it is, other memory through a bounce
 * buffer; a descriptor that refuses direct I/O falls back to ordinary writes. Byte-range copies between files
 * (copyRange, under shard/merge/extract and saves of mapped views) take the same direct writes.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { copyCounters, copyRange, directCounters, writeDirect } from "../src/io/node-copy.js";
import { writeViewsAt } from "../src/io/node-save.js";
import { loadFile, saveFile, serialize, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";

let dir = "";
before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-save-direct-"));
});
after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const counted = () => ({ ...directCounters });
/** Whether this build and platform can write directly at all (Linux with the copy addon). */
function directAvailable(): boolean {
  const file = path.join(dir, "probe.bin");
  const fd = fs.openSync(file, "w");
  try {
    return writeDirect(fd, [new Uint8Array(8192)], 0);
  } finally {
    fs.closeSync(fd);
    fs.unlinkSync(file);
  }
}

describe("saveFile with direct writes", () => {
  test("gives the bytes serialize() gives, for any sizes and alignments in memory", () => {
    const direct = directAvailable();
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 20_000 }), fc.integer({ min: 0, max: 4095 })), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.integer({ min: 0, max: 40 }),
        (shapes, metaLength) => {
          const tensors = new Map<string, Tensor>();
          shapes.forEach(([length, shift], i) => {
            // A view `shift` bytes into a larger buffer: tensors at every alignment in memory.
            const backing = fill(length + shift, i + 1);
            tensors.set(`t${i}`, new Tensor("U8", [length], backing.subarray(shift)));
          });
          const metadata = { note: "x".repeat(metaLength) };
          const out = path.join(dir, "prop.safetensors");
          const before = counted();
          saveFile(out, tensors, metadata, { directMinBytes: 0 });
          assert.deepEqual(fs.readFileSync(out), Buffer.from(serialize(tensors, metadata)));
          const wrote = shapes.some(([length]) => length > 0);
          if (direct && wrote) assert.equal(directCounters.calls, before.calls + 1);
        },
      ),
      { numRuns: 40, seed: 7 },
    );
  });

  test("tensors loaded by loadFile are written straight from their memory", (t) => {
    if (!directAvailable()) return t.skip("no direct I/O here (addon not built, or not Linux)");
    const tensors = new Map<string, Tensor>();
    // 21 MiB of tensors: loadFile reads them into one hugepage-backed group placed as in the file.
    for (let i = 0; i < 3; i++) tensors.set(`w${i}`, new Tensor("U8", [7 << 20], fill(7 << 20, i + 3)));
    const source = path.join(dir, "loaded.safetensors");
    fs.writeFileSync(source, serialize(tensors, { a: "b" }));
    const loaded = loadFile(source, { backend: "pread" });
    const out = path.join(dir, "loaded-out.safetensors");
    const before = counted();
    saveFile(out, loaded, { a: "b" }, { directMinBytes: 0 });
    assert.deepEqual(fs.readFileSync(out), fs.readFileSync(source));
    // Every 16 MiB chunk of direct writes but the first (which holds the header) comes straight from memory: all
    // whole pages past the first 16 MiB.
    const size = fs.statSync(out).size;
    assert.equal(directCounters.fromMemory - before.fromMemory, Math.floor(size / 4096) * 4096 - (16 << 20));
  });

  test("after a file-to-file copy, memory written from an unaligned position keeps every byte", (t) => {
    if (!directAvailable()) return t.skip("no direct I/O here (addon not built, or not Linux)");
    // A view run of a mapped file (copied in the kernel) followed by memory: the memory starts mid-page.
    const viewSource = path.join(dir, "views.safetensors");
    const first = new Map([["v", new Tensor("U8", [1_500_001], fill(1_500_001, 9))]]);
    fs.writeFileSync(viewSource, serialize(first));
    const mapped = loadFile(viewSource);
    const tensors = new Map<string, Tensor>([
      ["v", mapped.get("v")!],
      ["m", new Tensor("U8", [300_003], fill(300_003, 10))],
      ["s", new Tensor("U8", [5], fill(5, 11))],
    ]);
    const out = path.join(dir, "mixed.safetensors");
    const before = counted();
    const kernel = copyCounters.kernel;
    saveFile(out, tensors, undefined, { directMinBytes: 0 });
    assert.deepEqual(fs.readFileSync(out), Buffer.from(serialize(tensors)));
    assert.ok(directCounters.calls > before.calls);
    // The view run is still copied file to file (copy_file_range measured faster than direct writes for views).
    assert.equal(copyCounters.kernel, kernel + 1);
  });

  test("below directMinBytes the page cache is used; the target keeps its mode", () => {
    const out = path.join(dir, "small.safetensors");
    fs.writeFileSync(out, "old");
    fs.chmodSync(out, 0o640);
    const tensors = new Map([["x", new Tensor("U8", [100_000], fill(100_000, 1))]]);
    const before = counted();
    saveFile(out, tensors);
    assert.equal(directCounters.calls, before.calls);
    saveFile(out, tensors, undefined, { directMinBytes: 0 });
    assert.deepEqual(fs.readFileSync(out), Buffer.from(serialize(tensors)));
    assert.equal(fs.statSync(out).mode & 0o777, 0o640);
    assert.deepEqual(
      fs.readdirSync(dir).filter((name) => name.includes("small")),
      ["small.safetensors"],
    );
  });

  test("adaptive writes (direct or through the page cache, whichever cost less) keep every byte", (t) => {
    if (!directAvailable()) return t.skip("no direct I/O here (addon not built, or not Linux)");
    // Ranges of 1 MiB and more are learned from: until both ways are measured the calls alternate between them, so
    // these calls take both (in memory at every alignment, at odd positions, and past the file's end).
    const out = path.join(dir, "adaptive.bin");
    const size = 48 << 20;
    fs.writeFileSync(out, new Uint8Array(size).fill(0xcd));
    const want = fs.readFileSync(out);
    const fd = fs.openSync(out, "r+");
    try {
      const calls: [position: number, length: number, shift: number][] = [
        [0, 5 << 20, 0],
        [(6 << 20) + 3, (4 << 20) + 4097, 1],
        [(12 << 20) + 4096, 6 << 20, 4096],
        [(20 << 20) + 511, (5 << 20) + 1, 7],
        [(30 << 20) + 1, 8 << 20, 0],
        [size - (2 << 20), 5 << 20, 3],
      ];
      for (const [i, [position, length, shift]] of calls.entries()) {
        const backing = fill(length + shift, i + 21);
        assert.equal(writeDirect(fd, [backing.subarray(shift)], position, true), true);
        if (position + length > want.length) {
          const grown = Buffer.alloc(position + length);
          want.copy(grown);
          grown.set(backing.subarray(shift), position);
          assert.deepEqual(fs.readFileSync(out), grown);
        } else {
          want.set(backing.subarray(shift), position);
          assert.deepEqual(fs.readFileSync(out), want);
        }
      }
    } finally {
      fs.closeSync(fd);
    }
  });

  test("a descriptor that refuses direct I/O falls back to ordinary writes", (t) => {
    if (process.platform !== "linux") return t.skip("O_DIRECT is Linux's");
    // /dev/null cannot be opened for direct I/O (fcntl F_SETFL O_DIRECT gives EINVAL).
    const fd = fs.openSync("/dev/null", "w");
    try {
      const before = counted();
      assert.equal(writeDirect(fd, [new Uint8Array(1 << 16)], 0), false);
      if (directAvailable()) assert.equal(directCounters.refused, before.refused + 1);
      writeViewsAt(fd, [new Uint8Array(1 << 16)], 0, { directMinBytes: 0 });
    } finally {
      fs.closeSync(fd);
    }
  });
});

describe("copyRange with direct writes", () => {
  test("copies exactly the range asked for, at any offsets", () => {
    const input = path.join(dir, "copy-in.bin");
    const bytes = fill(300_000, 5);
    fs.writeFileSync(input, bytes);
    const direct = directAvailable();
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 299_999 }),
        fc.integer({ min: 1, max: 300_000 }),
        fc.integer({ min: 0, max: 20_000 }),
        (from, want, to) => {
          const length = Math.min(want, bytes.length - from);
          const out = path.join(dir, "copy-out.bin");
          fs.writeFileSync(out, fill(to, 6));
          const fdIn = fs.openSync(input, "r");
          const fdOut = fs.openSync(out, "r+");
          const before = copyCounters.direct;
          try {
            copyRange(fdIn, from, fdOut, to, length, { directMinBytes: 0 });
          } finally {
            fs.closeSync(fdIn);
            fs.closeSync(fdOut);
          }
          const expected = Buffer.concat([fill(to, 6), bytes.subarray(from, from + length)]);
          assert.deepEqual(fs.readFileSync(out), expected);
          if (direct) assert.equal(copyCounters.direct, before + 1);
        },
      ),
      { numRuns: 30, seed: 11 },
    );
  });

  test("an input that ends before the range is an IoError", () => {
    const input = path.join(dir, "short-in.bin");
    fs.writeFileSync(input, fill(10_000, 1));
    const fdIn = fs.openSync(input, "r");
    const fdOut = fs.openSync(path.join(dir, "short-out.bin"), "w");
    try {
      assert.throws(() => copyRange(fdIn, 0, fdOut, 0, 50_000, { directMinBytes: 0 }), { code: "IoError" });
    } finally {
      fs.closeSync(fdIn);
      fs.closeSync(fdOut);
    }
  });

  test("an output that refuses direct I/O gets an ordinary copy", (t) => {
    if (process.platform !== "linux") return t.skip("O_DIRECT is Linux's");
    const input = path.join(dir, "null-in.bin");
    fs.writeFileSync(input, fill(1 << 16, 1));
    const fdIn = fs.openSync(input, "r");
    const fdOut = fs.openSync("/dev/null", "w");
    try {
      const before = { ...copyCounters };
      copyRange(fdIn, 0, fdOut, 0, 1 << 16, { directMinBytes: 0 });
      assert.equal(copyCounters.direct, before.direct);
      assert.equal(copyCounters.kernel + copyCounters.buffered, before.kernel + before.buffered + 1);
    } finally {
      fs.closeSync(fdIn);
      fs.closeSync(fdOut);
    }
  });
});
