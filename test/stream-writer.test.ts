/**
 * The streaming writer: files byte-identical to `serialize` whatever the order and chunking of the writes; refusals
 * (written twice, past the end, missing bytes, short or long streams) with their codes and nothing left behind;
 * byte-range copies from another file (copy_file_range and the buffered fallback); stale temporary files.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";
import { afterEach, beforeEach, describe, test } from "node:test";
import fc from "fast-check";
import { readFullyAt, writeAtPath } from "../src/io/node-chunk-io.js";
import { copyCounters, copyRange, preallocate } from "../src/io/node-copy.js";
import {
  createWriter,
  isSafetensorError,
  openFile,
  planLayout,
  type SafetensorErrorCode,
  saveFile,
  serialize,
  Tensor,
} from "../src/node.js";
import { loaderArgs, moduleUrl } from "./helpers/compiled.js";
import { repoRoot } from "./helpers/corpus.js";
import { fill } from "./helpers/fill.js";

function rejectsCode(error: unknown, code: SafetensorErrorCode): true {
  assert.ok(isSafetensorError(error), `expected a SafetensorError, got ${error}`);
  assert.equal(error.code, code, error.message);
  return true;
}

const throwsCode = (fn: () => unknown, code: SafetensorErrorCode) => assert.throws(fn, (e) => rejectsCode(e, code));

const u8 = (length: number, seed: number) => new Tensor("U8", [length], fill(length, seed));

describe("streaming writer", () => {
  let dir = "";
  const target = () => path.join(dir, "model.safetensors");
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-stream-"));
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test("any order, any chunking: byte-identical to serialize", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.constantFrom("F32", "BF16", "U8", "I64"), fc.nat(40)), { minLength: 0, maxLength: 6 }),
        fc.integer({ min: 1, max: 17 }),
        fc.nat(),
        (shapes, chunk, seed) => {
          const tensors = new Map<string, Tensor>(
            shapes.map(([dtype, n], i) => {
              const width = dtype === "U8" ? 1 : dtype === "BF16" ? 2 : dtype === "F32" ? 4 : 8;
              return [`t${i}`, new Tensor(dtype, [n], fill(n * width, seed + i))] as const;
            }),
          );
          const metadata = seed % 2 ? { seed: String(seed) } : undefined;
          if (tensors.size === 0 && metadata) return;
          const writer = createWriter(target(), tensors, metadata);
          // Every tensor cut into `chunk`-byte pieces, written in an order shuffled by the seed.
          const pieces: [string, number, number][] = [];
          for (const [name, t] of tensors) {
            for (let at = 0; at < t.data.byteLength; at += chunk) pieces.push([name, at, chunk]);
          }
          let x = seed | 1;
          for (let i = pieces.length - 1; i > 0; i--) {
            x = (Math.imul(x, 1103515245) + 12345) >>> 0;
            const j = x % (i + 1);
            [pieces[i], pieces[j]] = [pieces[j]!, pieces[i]!];
          }
          for (const [name, at, n] of pieces) writer.write(name, tensors.get(name)!.data.subarray(at, at + n), at);
          assert.equal(writer.remaining(), 0);
          writer.commit();
          assert.deepEqual(new Uint8Array(fs.readFileSync(target())), serialize(tensors, metadata));
          assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
        },
      ),
      { numRuns: 40 },
    );
  });

  test("sequential writes, sync and async iterables, Node streams", async () => {
    const tensors = { a: u8(1000, 1), b: u8(777, 2), c: u8(300, 3), d: u8(0, 4), e: u8(5, 5) };
    const writer = createWriter(target(), tensors, { k: "v" });
    assert.deepEqual(
      writer.layout.tensors.map((t) => t.name),
      ["a", "b", "c", "d", "e"],
    );
    assert.deepEqual(writer.layout.header, planLayout(tensors, { k: "v" }).header);
    // a: without offsets, each write continues where the last ended.
    for (let at = 0; at < 1000; at += 300) writer.write("a", tensors.a.data.subarray(at, at + 300));
    // b: a Node Readable in 64-byte chunks.
    await writer.writeFrom("b", Readable.from(chunks(tensors.b.data, 64)));
    // c: an async generator, then the last 100 bytes by a second source with an explicit range.
    await writer.writeFrom(
      "c",
      (async function* () {
        yield* chunks(tensors.c.data.subarray(0, 200), 7);
      })(),
      { length: 200 },
    );
    await writer.writeFrom("c", [tensors.c.data.subarray(200)], { offset: 200 });
    writer.write("e", new DataView(tensors.e.data.buffer));
    assert.equal(writer.remaining(), 0);
    writer.commit();
    assert.equal(writer.state, "committed");
    assert.deepEqual(new Uint8Array(fs.readFileSync(target())), serialize(tensors, { k: "v" }));
    throwsCode(() => writer.write("a", new Uint8Array(1), 0), "Closed");
    writer.abort(); // a no-op after commit
    assert.ok(fs.existsSync(target()));
  });

  /** Each case gets a fresh writer over an existing target; the failure must abort it and leave the old file. */
  async function refused(code: SafetensorErrorCode, body: (w: ReturnType<typeof createWriter>) => unknown) {
    fs.writeFileSync(target(), "old");
    const writer = createWriter(target(), { a: u8(100, 1), b: u8(10, 2) });
    await assert.rejects(
      async () => body(writer),
      (e) => rejectsCode(e, code),
    );
    assert.equal(writer.state, "aborted");
    throwsCode(() => writer.write("b", new Uint8Array(1), 0), "Closed");
    assert.equal(fs.readFileSync(target(), "utf8"), "old");
    assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
  }

  test("refusals abort the writer and leave nothing behind", async () => {
    const bytes = (n: number) => new Uint8Array(n);
    await refused("WriteConflict", (w) => {
      w.write("a", bytes(50), 10);
      w.write("a", bytes(5), 58);
    });
    await refused("WriteConflict", (w) => {
      w.write("a", bytes(10), 0);
      w.write("a", bytes(10), 20);
      w.write("a", bytes(15), 8); // over both
    });
    await refused("WriteOutOfRange", (w) => w.write("b", bytes(11), 0));
    await refused("WriteOutOfRange", (w) => w.write("b", bytes(1), 10));
    await refused("WriteOutOfRange", (w) => w.writeFrom("b", [bytes(6), bytes(6)]));
    await refused("IncompleteWrite", (w) => w.writeFrom("b", [bytes(6)]));
    await refused("IncompleteWrite", (w) => {
      w.write("a", bytes(100));
      w.write("b", bytes(4), 0);
      w.write("b", bytes(4), 6);
      w.commit();
    });
    await refused("TensorNotFound", (w) => w.write("zz", bytes(1)));
    await refused("InvalidTensor", (w) => w.writeFrom("a", ["text"]));
    await refused("InvalidOption", (w) => w.write("a", bytes(1), -1));
    await refused("IoError", (w) =>
      w.writeFrom(
        "a",
        (async function* () {
          yield bytes(10);
          throw new Error("network went away");
        })(),
      ),
    );
  });

  test("abort and dispose leave no file; an existing target keeps its content and mode", () => {
    const writer = createWriter(target(), { a: u8(4, 1) });
    writer.write("a", new Uint8Array(4));
    writer.abort();
    writer.abort();
    assert.deepEqual(fs.readdirSync(dir), []);
    {
      using w = createWriter(target(), { a: u8(4, 1) });
      w.write("a", new Uint8Array(2));
    }
    assert.deepEqual(fs.readdirSync(dir), []);
    fs.writeFileSync(target(), "old");
    fs.chmodSync(target(), 0o640);
    const w = createWriter(target(), { a: u8(4, 1) });
    w.write("a", fill(4, 1));
    w.commit();
    assert.equal(fs.statSync(target()).mode & 0o7777, 0o640);
    assert.deepEqual(new Uint8Array(fs.readFileSync(target())), serialize({ a: u8(4, 1) }));
  });

  test("invalid plans are refused before any file exists", () => {
    throwsCode(() => createWriter(target(), { a: { dtype: "Q9", shape: [1] } }), "UnknownDtype");
    throwsCode(() => createWriter(target(), { a: { dtype: "F4", shape: [3] } }), "MisalignedSlice");
    throwsCode(() => createWriter(path.join(dir, "missing", "x.safetensors"), { a: u8(1, 1) }), "IoError");
    assert.deepEqual(fs.readdirSync(dir), []);
  });

  for (const buffered of [false, true]) {
    test(`copyFrom copies byte ranges from another file (${buffered ? "buffered" : "copy_file_range"})`, () => {
      const source = path.join(dir, "source.safetensors");
      const original = { x: u8(5000, 7), y: u8(123, 8) };
      saveFile(source, original);
      const before = { ...copyCounters };
      using input = openFile(source, { backend: "pread" });
      const fd = fs.openSync(source, "r");
      try {
        const start = input.header.dataStart;
        const x = input.info("x").dataOffsets[0];
        const y = input.info("y").dataOffsets[0];
        if (buffered) {
          // The fallback on its own, through a small reused buffer.
          const out = path.join(dir, "raw.bin");
          const outFd = fs.openSync(out, "w");
          copyRange(fd, start + x, outFd, 3, 5000, { buffered: true, scratch: () => new Uint8Array(1000) });
          fs.closeSync(outFd);
          assert.deepEqual(new Uint8Array(fs.readFileSync(out)).subarray(3), original.x.data);
          assert.equal(copyCounters.buffered, before.buffered + 1);
          return;
        }
        const writer = createWriter(target(), {
          renamed: { dtype: "U8", shape: [5000] },
          y: { dtype: "U8", shape: [123] },
        });
        writer.copyFrom("renamed", fd, start + x + 1000, 4000, 1000);
        writer.copyFrom("renamed", fd, start + x, 1000, 0);
        writer.copyFrom("y", fd, start + y, 123);
        writer.commit();
        assert.deepEqual(new Uint8Array(fs.readFileSync(target())), serialize({ renamed: original.x, y: original.y }));
        // With the copy addon built, these went through copy_file_range (ext4, tmpfs and most Linux file systems).
        if (fs.existsSync(path.join(repoRoot, "build/Release/safetensors_copy.node")) && process.platform === "linux") {
          assert.equal(copyCounters.kernel, before.kernel + 3);
        }
        // A range past the source's end is refused, and the writer is aborted.
        const short = createWriter(path.join(dir, "short.safetensors"), { a: { dtype: "U8", shape: [200] } });
        throwsCode(() => short.copyFrom("a", fd, fs.fstatSync(fd).size - 100, 200), "IoError");
        assert.equal(short.state, "aborted");
        assert.deepEqual(fs.readdirSync(dir).sort(), ["model.safetensors", "source.safetensors"]);
      } finally {
        fs.closeSync(fd);
      }
    });
  }

  test("claim: bytes written through another descriptor at the claimed place; the file sized at the first claim", () => {
    const tensors = { a: u8(70000, 3), b: u8(9000, 4) };
    const writer = createWriter(target(), {
      a: { dtype: "U8", shape: [70000] },
      b: { dtype: "U8", shape: [9000] },
    });
    writer.write("a", tensors.a.data.subarray(0, 100), 0);
    const claimed = writer.claim("a", 100, 69900);
    assert.equal(fs.statSync(claimed.path).size, serialize(tensors).length, "sized to the whole file");
    // Whole pages go around the page cache (writeDirect), the ends through it: both land at the place claimed.
    writeAtPath(claimed.path, tensors.a.data.subarray(100), claimed.position);
    const b = writer.claim("b", 0, 9000);
    writeAtPath(b.path, tensors.b.data, b.position);
    // Claimed bytes count as written: claiming or writing them again is refused, and the writer aborted.
    assert.equal(writer.remaining(), 0);
    throwsCode(() => writer.claim("a", 69000, 500), "WriteConflict");
    assert.equal(writer.state, "aborted");
    const again = createWriter(target(), { a: { dtype: "U8", shape: [70000] }, b: { dtype: "U8", shape: [9000] } });
    const first = again.claim("a", 0, 70000);
    writeAtPath(first.path, tensors.a.data, first.position);
    const second = again.claim("b", 0, 9000);
    writeAtPath(second.path, tensors.b.data, second.position);
    again.commit();
    assert.deepEqual(new Uint8Array(fs.readFileSync(target())), serialize(tensors));
    throwsCode(() => again.claim("b", 0, 1), "Closed");
  });

  test("claim: the file gets its disk blocks at the first claim where the file system can (nothing for a rename to flush)", (t) => {
    const probe = path.join(dir, "probe.bin");
    const fd = fs.openSync(probe, "w");
    let can: boolean;
    try {
      can = preallocate(fd, 1 << 20);
      if (can) assert.equal(fs.fstatSync(fd).size, 1 << 20, "preallocate extends a shorter file");
    } finally {
      fs.closeSync(fd);
    }
    if (!can) {
      t.skip(`no preallocation here (copy addon not built, not Linux, or ${os.tmpdir()} without fallocate)`);
      return;
    }
    const writer = createWriter(target(), { a: { dtype: "U8", shape: [3 << 20] } });
    const claimed = writer.claim("a", 0, 3 << 20);
    const stat = fs.statSync(claimed.path);
    assert.ok(stat.blocks * 512 >= stat.size, `${stat.blocks} blocks of 512 bytes for ${stat.size} bytes`);
    writeAtPath(claimed.path, fill(3 << 20, 9), claimed.position);
    writer.commit();
    const bytes = new Uint8Array(fs.readFileSync(target()));
    assert.deepEqual(bytes.subarray(bytes.length - (3 << 20)), fill(3 << 20, 9));
  });

  test("readFullyAt reads a whole range, and a file shorter than promised is SourceChanged", () => {
    const file = path.join(dir, "bytes.bin");
    const bytes = fill(10000, 5);
    fs.writeFileSync(file, bytes);
    const fd = fs.openSync(file, "r");
    try {
      const into = new Uint8Array(5000);
      readFullyAt(fd, into, 4000);
      assert.deepEqual(into, bytes.subarray(4000, 9000));
      throwsCode(() => readFullyAt(fd, new Uint8Array(100), 9950), "SourceChanged");
    } finally {
      fs.closeSync(fd);
    }
  });

  test("stale temporary files of dead writers are removed by the next write; live ones are kept", () => {
    const dead = spawnSync(process.execPath, ["-e", ""]).pid!;
    const name = path.basename(target());
    const stale = `.${name}.safetensors-tmp-${dead}-abcdefgh`;
    const live = `.${name}.safetensors-tmp-${process.ppid}-abcdefgh`;
    const other = `.other.safetensors.safetensors-tmp-${dead}-abcdefgh`;
    for (const file of [stale, live, other]) fs.writeFileSync(path.join(dir, file), "partial");
    saveFile(target(), { a: u8(3, 1) });
    assert.deepEqual(fs.readdirSync(dir).sort(), [live, other, "model.safetensors"].sort());
    createWriter(target(), { a: u8(3, 1) }).abort();
    assert.deepEqual(fs.readdirSync(dir).sort(), [live, other, "model.safetensors"].sort());
  });

  test("a process that exits without committing leaves no temporary file", () => {
    const script = `
      import { createWriter } from ${JSON.stringify(moduleUrl(path.join(repoRoot, "src/node.ts")))};
      const w = createWriter(process.argv[1], { a: { dtype: "U8", shape: [4] } });
      w.write("a", new Uint8Array(2));
      process.stdout.write(String(w.remaining()));
    `;
    const child = spawnSync(process.execPath, [...loaderArgs, "--input-type=module", "-e", script, target()], {
      cwd: repoRoot,
      encoding: "utf8",
    });
    assert.equal(child.status, 0, child.stderr);
    assert.equal(child.stdout, "2");
    assert.deepEqual(fs.readdirSync(dir), []);
  });
});

function* chunks(bytes: Uint8Array, size: number): Generator<Uint8Array> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}
