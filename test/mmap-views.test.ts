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
import { getGc } from "./helpers/gc.js";

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

  test("a window never leaves its thread, and close() detaches it (every Node: native/unaccounted.h)", () => {
    const { file } = sample();
    const opened = openFile(file, { backend: "mmap" });
    const view = opened.getTensor("a").data;
    const windowBuffer = view.buffer as ArrayBuffer;
    // Through Node 22 postMessage copies a marked buffer; from Node 24 the buffer is its own detach key and the
    // transfer throws. Either way it is not moved out (a moved window would outlive close()'s munmap).
    try {
      structuredClone(windowBuffer, { transfer: [windowBuffer] });
    } catch (error) {
      assert.match(String((error as Error).name), /TypeError|DataCloneError/);
    }
    assert.equal(view.byteLength, 1 << 20, "the window was moved out");
    const transfer = (windowBuffer as { transfer?: () => ArrayBuffer }).transfer;
    if (transfer && Number(process.versions.node.split(".")[0]) >= 24) {
      assert.throws(() => transfer.call(windowBuffer), TypeError);
    }
    opened.close(); // Node 24 and 26 aborted here while windows were marked by markAsUntransferable
    assert.equal(view.byteLength, 0);
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

  test("loadFile's one-call path: one window over the whole file, the same tensors as the ordinary way", () => {
    const cases = new Map<string, Map<string, Tensor>>();
    cases.set("sample", sample().tensors);
    // Metadata, empty and scalar tensors, shapes shared by several tensors, a header longer than the 16 KiB read first.
    const mixed = new Map<string, Tensor>();
    mixed.set("scalar", new Tensor("F32", [], new Uint8Array(4).fill(7)));
    mixed.set("empty", new Tensor("BF16", [0, 3], new Uint8Array(0)));
    for (let i = 0; i < 400; i++) mixed.set(`layer.${i}.weight`, new Tensor("F16", [2, 3], fill(12, i)));
    mixed.set("packed", new Tensor("F4", [5, 2], fill(5, 9)));
    cases.set("mixed", mixed);
    for (const [label, tensors] of cases) {
      const file = path.join(tmp, `${label}.safetensors`);
      saveFile(file, tensors, label === "mixed" ? { format: "pt", note: "x".repeat(20_000) } : undefined);
      const before = nativeStats()!;
      const loaded = loadFile(file);
      const after = nativeStats()!;
      assert.equal(after.mapped, before.mapped + 1, label);
      assert.equal(after.windows, before.windows + 1, `${label}: one window for every view`);
      const buffers = new Set([...loaded.values()].map((t) => t.data.buffer));
      assert.equal(buffers.size, 1, label);
      assert.equal([...buffers][0]!.byteLength, fs.statSync(file).size, label);
      const ordinary = loadFile(file, { backend: "pread" });
      assert.deepEqual([...loaded.keys()], [...ordinary.keys()], label);
      for (const [name, tensor] of ordinary) {
        const view = loaded.get(name)!;
        assert.equal(view.dtype, tensor.dtype, name);
        assert.deepEqual(view.shape, tensor.shape, name);
        assert.ok(Object.isFrozen(view.shape), name);
        assert.deepEqual(view.data, tensor.data, name);
      }
    }
  });

  test("loadFile leaves to the ordinary way what its one call does not take, which reports it as before", () => {
    const { file } = sample();
    // A limit below the header's size: the ordinary way's HeaderTooLarge.
    assert.throws(() => loadFile(file, { maxHeaderBytes: 10 }), { code: "HeaderTooLarge" });
    assert.throws(() => loadFile(file, { maxHeaderBytes: -1 }), { code: "InvalidOption" });
    assert.throws(() => loadFile(path.join(tmp, "missing.safetensors")), { code: "IoError", message: /ENOENT/ });
    assert.throws(
      () => loadFile(tmp),
      (error: { code?: string }) => error.code !== undefined,
    );
    const truncated = path.join(tmp, "truncated.safetensors");
    fs.writeFileSync(truncated, fs.readFileSync(file).subarray(0, 200));
    assert.throws(() => loadFile(truncated), { code: "InvalidHeaderLength" });
    const short = path.join(tmp, "short.safetensors");
    fs.writeFileSync(short, fs.readFileSync(file).subarray(0, fs.statSync(file).size - 1));
    assert.throws(
      () => loadFile(short),
      (error: { code?: string }) => typeof error.code === "string",
    );
    assert.equal(loadFile(file, { maxHeaderBytes: Number.POSITIVE_INFINITY }).size, 4);
  });

  const gc = getGc();
  test("the one window unmaps the file when the views are collected", {
    skip: gc ? false : "needs --expose-gc",
  }, async () => {
    // Collect what earlier tests left first, so that only this file's mapping is counted.
    const settle = async () => {
      for (let i = 0; i < 5; i++) {
        gc!();
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    const { file } = sample();
    await settle();
    const before = nativeStats()!.mapped;
    let loaded: Map<string, Tensor> | null = loadFile(file);
    assert.equal(nativeStats()!.mapped, before + 1);
    assert.equal(loaded.size, 4);
    loaded = null;
    await settle();
    assert.equal(nativeStats()!.mapped, before);
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
