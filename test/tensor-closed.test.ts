/** A tensor whose memory was released (file closed, buffer detached) throws `Closed` instead of reading as empty. */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { loadNative } from "../src/io/native.js";
import { isSafetensorError, openFile, saveFile, Tensor } from "../src/node.js";

const closed = (error: unknown) =>
  isSafetensorError(error) && error.code === "Closed" && /clone\(\)/.test(error.message);

function expectClosed(tensor: Tensor): void {
  assert.throws(() => tensor.typed(), closed);
  assert.throws(() => tensor.toFloat32(), closed);
  assert.throws(() => tensor.clone(), closed);
  assert.throws(() => tensor.byteLength, closed);
  // What never needed the bytes still works.
  assert.ok(tensor.numel > 0);
}

describe("Closed", () => {
  test("a tensor over a detached buffer", () => {
    const buffer = new ArrayBuffer(16);
    const tensor = new Tensor("F32", [2, 2], new Uint8Array(buffer));
    assert.equal(tensor.typed().length, 4);
    structuredClone(buffer, { transfer: [buffer] });
    expectClosed(tensor);
  });

  test("an empty tensor stays usable (nothing to release)", () => {
    const buffer = new ArrayBuffer(0);
    const tensor = new Tensor("BF16", [0, 3], new Uint8Array(buffer));
    structuredClone(buffer, { transfer: [buffer] });
    assert.equal(tensor.typed().length, 0);
    assert.equal(tensor.toFloat32().length, 0);
    assert.equal(tensor.byteLength, 0);
  });

  test("views of a mapped file after close(); owned copies live on", {
    skip: loadNative() ? false : "the native addon is not available: no mmap views to close",
  }, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-closed-"));
    try {
      const file = path.join(dir, "views.safetensors");
      saveFile(file, { big: Tensor.fromTypedArray("F32", [8, 4096], new Float32Array(8 * 4096).fill(2)) });
      const opened = openFile(file, { backend: "mmap" });
      const view = opened.getTensor("big");
      const rows = opened.getSlice("big").get("2:4");
      const owned = opened.getTensor("big", { memory: "owned" });
      opened.close();
      expectClosed(view);
      // A run of whole rows is a view of the mapping too.
      expectClosed(rows);
      assert.equal((owned.typed() as Float32Array)[0], 2);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
