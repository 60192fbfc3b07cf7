/**
 * Views of mapped files: shared windows that V8 does not count as external memory, their lifetime, and what
 * `loadFile` returns with and without `populate`.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { loadNative, nativeStats, uncountedWindows } from "../src/io/native.js";
import { loadFile, openFile, saveFile, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-views-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Three tensors of 1 MiB and one small one, with known contents. */
function sample(): { file: string; tensors: Map<string, Tensor> } {
  const tensors = new Map<string, Tensor>();
  for (const [i, name] of ["a", "b", "c"].entries()) {
    tensors.set(name, new Tensor("U8", [1 << 20], fill(1 << 20, i + 1)));
  }
  tensors.set("small", new Tensor("U8", [3], new Uint8Array([1, 2, 3])));
  const file = path.join(tmp, "sample.safetensors");
  saveFile(file, tensors);
  return { file, tensors };
}

describe("mapped views", { skip: loadNative() ? false : "native addon not built" }, () => {
  test("the addon makes windows V8 does not count (this build)", () => {
    assert.equal(uncountedWindows(), true);
  });

  test("views of one file share one window, and close() empties every one of them", () => {
    const { file, tensors } = sample();
    const opened = openFile(file, { backend: "mmap" });
    const views = ["a", "b", "c"].map((name) => opened.getTensor(name).data);
    assert.equal(new Set(views.map((view) => view.buffer)).size, 1);
    for (const [i, name] of ["a", "b", "c"].entries()) assert.deepEqual(views[i], tensors.get(name)!.data);
    opened.close();
    for (const view of views) assert.equal(view.byteLength, 0);
  });

  test("loadFile(path) maps and returns views, reading nothing; they outlive every handle", () => {
    const { file, tensors } = sample();
    const before = nativeStats()!.mapped;
    const loaded = loadFile(file);
    assert.equal(nativeStats()!.mapped, before + 1);
    assert.deepEqual([...loaded.keys()], ["a", "b", "c", "small"]);
    for (const [name, tensor] of tensors) assert.deepEqual(loaded.get(name)!.data, tensor.data);
    (globalThis as { gc?: () => void }).gc?.();
    assert.equal(loaded.get("c")!.data[12345], tensors.get("c")!.data[12345]);
  });

  test("loadFile(path, {populate: true}) gives the same tensors; pread gives owned copies", () => {
    const { file, tensors } = sample();
    for (const options of [
      { populate: true },
      { backend: "pread" as const },
      { backend: "pread" as const, populate: true },
    ]) {
      const loaded = loadFile(file, options);
      for (const [name, tensor] of tensors)
        assert.deepEqual(loaded.get(name)!.data, tensor.data, JSON.stringify(options));
    }
  });

  test("writing through a view changes neither the file nor another handle's view", () => {
    const { file } = sample();
    const first = loadFile(file);
    const second = loadFile(file);
    const view = first.get("b")!.data;
    view[7] = view[7]! ^ 0xff;
    assert.notEqual(first.get("b")!.data[7], second.get("b")!.data[7]);
    assert.equal(fs.readFileSync(file)[first.get("b")!.data.byteOffset + 7], second.get("b")!.data[7]);
  });
});
