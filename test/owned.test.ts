/**
 * Owned copies (`getTensor(name, {memory: "owned"})`, the pread backend's reads): a private copy of the bytes, which
 * later writes to the file and its truncation never change, on every backend, with and without the addon; the
 * addon's one-call `readOwned` (native/owned.c) with each page choice and thread count, its errors, its memory's
 * lifetime, and the route an older addon without it takes.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { freeHuge, loadNative } from "../src/io/native.js";
import { ownedPageChoice, readOwnedFrom } from "../src/io/node-owned.js";
import { isSafetensorError, openFile, saveFile, Tensor } from "../src/node.js";
import { moduleUrl } from "./helpers/compiled.js";
import { repoRoot } from "./helpers/corpus.js";
import { runWithoutAddon } from "./helpers/no-addon.js";

const native = loadNative();
const backends = native ? (["pread", "mmap"] as const) : (["pread"] as const);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-owned-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const MIB = 1 << 20;

/** Bytes that differ from their neighbours and from any shifted copy (a misplaced piece shows). */
function pattern(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

/**
 * A file with a small tensor first (so the big one starts at no page boundary) and a tensor of `size` bytes: sizes
 * below 2 MiB take the plain route, larger ones the addon's readOwned, 6 MiB + 5 several threads and pieces.
 */
function sampleFile(name: string, size: number): { file: string; big: Uint8Array } {
  const file = path.join(tmp, `${name}.safetensors`);
  const big = pattern(size, size);
  saveFile(
    file,
    new Map([
      ["small", new Tensor("U8", [1000], pattern(1000, 1))],
      ["big", new Tensor("U8", [size], big)],
    ]),
  );
  return { file, big };
}

const SIZES = [3000, 2 * MIB, 6 * MIB + 5];

describe("owned copies are private", () => {
  for (const backend of backends) {
    for (const size of SIZES) {
      test(`${backend}, ${size} bytes: rewriting the file in place, then truncating it, leaves the copy as read`, () => {
        const { file, big } = sampleFile(`private-${backend}-${size}`, size);
        const opened = openFile(file, { backend });
        try {
          const { offset } = opened.byteRange("big");
          const owned = opened.getTensor("big", { memory: "owned" }).data;
          const view = backend === "mmap" ? opened.getTensor("big").data : null;
          assert.deepEqual(owned, big);
          // The same file (same inode) rewritten where the tensor lies.
          const fd = fs.openSync(file, "r+");
          try {
            fs.writeSync(fd, new Uint8Array(size).fill(0xa5), 0, size, offset);
          } finally {
            fs.closeSync(fd);
          }
          // The test can tell: a view of the mapping sees the new bytes, the owned copy does not.
          if (view) assert.equal(view[size - 1], 0xa5);
          assert.deepEqual(owned, big);
          assert.equal(opened.getTensor("big", { memory: "owned" }).data[0], 0xa5);
          fs.truncateSync(file, 0);
          // Reading every byte of the copy after the truncation neither faults nor finds the file's new state.
          assert.deepEqual(owned, big);
        } finally {
          opened.close();
        }
      });
    }
  }

  for (const backend of backends) {
    test(`${backend}: owned slices are read as owned pieces, so a truncated file is an IoError, not SIGBUS`, () => {
      const file = path.join(tmp, `slices-${backend}.safetensors`);
      const [rows, cols] = [1024, 3000];
      const grid = pattern(rows * cols, 7);
      saveFile(
        file,
        new Map([
          ["small", new Tensor("U8", [1000], pattern(1000, 1))],
          ["grid", new Tensor("U8", [rows, cols], grid)],
        ]),
      );
      const rowsOf = (from: number, to: number) => grid.subarray(from * cols, to * cols);
      const columns = (from: number, to: number) => {
        const out: number[] = [];
        for (let r = 0; r < rows; r++) out.push(...grid.subarray(r * cols + from, r * cols + to));
        return Uint8Array.from(out);
      };
      const opened = openFile(file, { backend });
      try {
        const slice = opened.getSlice("grid");
        const contiguous = slice.get("8:900", { memory: "owned" }).data;
        const strided = slice.get(":, 10:20", { memory: "owned" }).data;
        assert.deepEqual(contiguous, rowsOf(8, 900));
        assert.deepEqual(strided, columns(10, 20));
        // Views and owned slices agree.
        assert.deepEqual(slice.get(":, 10:20").data, strided);
        const { offset } = opened.byteRange("grid");
        fs.truncateSync(file, offset + 100 * cols);
        assert.deepEqual(contiguous, rowsOf(8, 900));
        assert.deepEqual(strided, columns(10, 20));
        for (const index of ["8:900", ":, 10:20", "500:501"]) {
          assert.throws(
            () => slice.get(index, { memory: "owned" }),
            (error: unknown) => isSafetensorError(error) && error.code === "IoError",
            index,
          );
        }
        // Rows still in the file read as before.
        assert.deepEqual(slice.get("0:50", { memory: "owned" }).data, rowsOf(0, 50));
      } finally {
        opened.close();
      }
    });
  }

  test("without the addon (SAFETENSORS_NO_NATIVE=1): the pread backend's owned copies are private too", () => {
    const { file, big } = sampleFile("private-no-addon", 6 * MIB + 5);
    const script = `
      import * as fs from "node:fs";
      import { createHash } from "node:crypto";
      import { openFile } from ${JSON.stringify(moduleUrl(path.join(repoRoot, "src/node.ts")))};
      import { nativeStatus } from ${JSON.stringify(moduleUrl(path.join(repoRoot, "src/io/native.ts")))};
      const opened = openFile(${JSON.stringify(file)});
      const owned = opened.getTensor("big", { memory: "owned" }).data;
      const { offset } = opened.byteRange("big");
      const fd = fs.openSync(${JSON.stringify(file)}, "r+");
      fs.writeSync(fd, new Uint8Array(owned.length), 0, owned.length, offset);
      fs.closeSync(fd);
      fs.truncateSync(${JSON.stringify(file)}, 0);
      const sha = createHash("sha256").update(owned).digest("hex");
      console.log(JSON.stringify({ backend: opened.backend, native: nativeStatus().available, sha }));`;
    assert.deepEqual(runWithoutAddon(script), {
      backend: "pread",
      native: false,
      sha: createHash("sha256").update(big).digest("hex"),
    });
  });
});

describe("the addon's readOwned", { skip: native?.readOwned ? false : "native addon without readOwned" }, () => {
  const bytes = pattern(9 * MIB + 77, 42);
  const file = path.join(tmp, "raw.bin");
  fs.writeFileSync(file, bytes);

  test("every page choice and thread count gives the file's bytes, from any position", () => {
    const fd = fs.openSync(file, "r");
    try {
      for (const pages of [0, 1, 2]) {
        for (const [position, length, threads] of [
          [0, bytes.length, 4],
          [4097, 6 * MIB + 3, 2],
          [13, 2 * MIB, 16],
          [bytes.length - 5, 5, 3],
          [MIB - 1, 4 * MIB + 1, 1],
        ] as const) {
          const chunks = new Float64Array(2);
          const got = new Uint8Array(native!.readOwned!(fd, position, length, threads, pages, chunks));
          assert.equal(got.length, length);
          // Each thread's piece is whole 2 MiB chunks, so the chunks are the 2 MiB steps of the copy.
          const expected = Math.ceil(length / (2 * MIB));
          if (pages === 0) assert.equal(chunks[0]! + chunks[1]!, expected);
          else assert.deepEqual([...chunks], pages === 1 ? [expected, 0] : [0, expected]);
          assert.ok(
            Buffer.from(got).equals(bytes.subarray(position, position + length)),
            `pages ${pages}, at ${position}, ${length} bytes, ${threads} threads`,
          );
        }
        assert.equal(native!.readOwned!(fd, 0, 0, 2, pages).byteLength, 0);
      }
      // A copy that chose as it went leaves the page size it ended with.
      assert.match(String(ownedPageChoice()), /^(huge|small)$/);
    } finally {
      fs.closeSync(fd);
    }
  });

  test("copies in a row with helper threads are whole (a helper's chunk may be taken back and read again)", () => {
    const fd = fs.openSync(file, "r");
    try {
      for (let i = 0; i < 40; i++) {
        const buffer = native!.readOwned!(fd, 3, bytes.length - 3, 2, 0);
        assert.ok(Buffer.from(buffer).equals(bytes.subarray(3)), `copy ${i}`);
        freeHuge(buffer);
      }
    } finally {
      fs.closeSync(fd);
    }
  });

  test("a file shorter than the read, a bad descriptor and bad arguments are errors, not crashes", () => {
    const fd = fs.openSync(file, "r");
    try {
      assert.throws(() => native!.readOwned!(fd, bytes.length - 10, 4 * MIB, 2, 0), { code: "EIO" });
      assert.throws(
        () => readOwnedFrom(fd, bytes.length - 10, 4 * MIB),
        (error: unknown) => {
          assert.ok(isSafetensorError(error), String(error));
          assert.equal(error.code, "IoError");
          assert.match(error.message, /ended early/);
          return true;
        },
      );
      assert.throws(() => native!.readOwned!(-1, 0, 4 * MIB, 2, 0), { code: "EBADF" });
      assert.throws(() => native!.readOwned!(fd, 0, 4 * MIB, 2, 3), { code: "ERANGE" });
      assert.throws(() => native!.readOwned!(fd, 0, 2 ** 32 + 1, 2, 0), { code: "ERANGE" });
      assert.throws(() => native!.readOwned!(fd, -1, 10, 2, 0), { code: "EINVAL" });
      assert.throws(() => native!.readOwned!(fd, 0, 10, 2, 0, new Float64Array(1)), { code: "EINVAL" });
      assert.throws(() => (native!.readOwned as unknown as (fd: number) => void)(fd), { code: "EINVAL" });
    } finally {
      fs.closeSync(fd);
    }
  });

  test("its memory is unmapped by freeHuge (the buffer is detached) and counted until then", () => {
    const fd = fs.openSync(file, "r");
    try {
      const before = native!.stats().hugeAllocations;
      const buffer = native!.readOwned!(fd, 0, 5 * MIB, 2, 0);
      assert.equal(native!.stats().hugeAllocations, before + 1);
      freeHuge(buffer);
      assert.equal(buffer.byteLength, 0);
      assert.equal(native!.stats().hugeAllocations, before);
    } finally {
      fs.closeSync(fd);
    }
  });

  test("an older addon without readOwned: the same bytes through allocation and pread", () => {
    const fd = fs.openSync(file, "r");
    try {
      for (const [position, length] of [
        [3, 6 * MIB + 1],
        [0, 100],
      ] as const) {
        const got = readOwnedFrom(fd, position, length, {});
        assert.ok(Buffer.from(got).equals(bytes.subarray(position, position + length)));
      }
    } finally {
      fs.closeSync(fd);
    }
  });
});
