/**
 * A file truncated underneath an open SafetensorsFile: owned copies are read with pread on every backend (mmap
 * included), so a read past the new end is an IoError, never a SIGBUS. (A zero-copy view of the mmap backend does
 * fault on pages past the end; README, "Backends", says so and names pread as the safe choice.)
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, test } from "node:test";
import { loadNative } from "../src/io/native.js";
import { isSafetensorError, openFile, saveFile, Tensor } from "../src/node.js";

const backends = loadNative() ? (["pread", "mmap"] as const) : (["pread"] as const);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-truncated-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Sizes that take each read path: a small copy, a pooled or hugepage-backed copy, a threaded native read. */
const SIZES = [1024, 3 << 20, 64 << 20];
const HEAD = 20 * 1024;

for (const backend of backends) {
  for (const size of SIZES) {
    test(`${backend}: an owned copy of ${size} bytes from a file truncated after open is an IoError`, () => {
      const file = path.join(tmp, `${backend}-${size}.safetensors`);
      saveFile(
        file,
        new Map([
          // Past the first 16 KiB, which are read at open and kept.
          ["head", new Tensor("U8", [HEAD], new Uint8Array(HEAD).fill(7))],
          ["tail", new Tensor("U8", [size], new Uint8Array(size))],
        ]),
      );
      const opened = openFile(file, { backend });
      try {
        const { offset } = opened.byteRange("tail");
        fs.truncateSync(file, offset + 8); // "tail" now runs past the end of the file
        assert.throws(
          () => opened.getTensor("tail", { memory: "owned" }),
          (error: unknown) => {
            assert.ok(isSafetensorError(error), `not a SafetensorError: ${error}`);
            assert.equal(error.code, "IoError", error.message);
            return true;
          },
        );
        // What is still in the file reads as before.
        assert.ok(opened.getTensor("head", { memory: "owned" }).data.every((byte) => byte === 7));
      } finally {
        opened.close();
      }
    });
  }
}
