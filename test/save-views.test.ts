/**
 * saveFile of tensors that are views of a mapped file (loadFile's default on Linux with the addon): unmodified runs
 * are copied file to file with copy_file_range, as `cp` does; a view written through (its pages copied on write),
 * a file replaced at its path since it was mapped, or views of a file that is gone, are written from memory, so the
 * saved bytes are always the views' bytes.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { loadNative } from "../src/io/native.js";
import { copyCounters } from "../src/io/node-copy.js";
import { loadFile, saveFile, serialize, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";

let dir = "";
before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-save-views-"));
});
after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Four tensors of 600 KB (one run of 2.4 MB in the file), plus a small one. */
function tensors(seed: number): Map<string, Tensor> {
  const map = new Map<string, Tensor>();
  for (let i = 0; i < 4; i++) map.set(`w${i}`, new Tensor("U8", [600_000], fill(600_000, seed + i)));
  map.set("bias", new Tensor("U8", [100], fill(100, seed + 9)));
  return map;
}

function writeSource(name: string, seed: number): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, serialize(tensors(seed), { seed: String(seed) }));
  return file;
}

/** The kernel copies saveFile makes. */
function kernelCopies(body: () => void): number {
  const before = copyCounters.kernel;
  body();
  return copyCounters.kernel - before;
}

const expectedBytes = (loaded: Map<string, Tensor>) => serialize(loaded, { seed: "1" });

describe("saveFile of views of a mapped file", { skip: loadNative() ? false : "native addon not built" }, () => {
  test("unmodified views are copied file to file and give the same bytes", () => {
    const source = writeSource("a.safetensors", 1);
    const loaded = loadFile(source, { backend: "mmap" });
    const out = path.join(dir, "a-out.safetensors");
    const copies = kernelCopies(() => saveFile(out, loaded, { seed: "1" }));
    assert.deepEqual(fs.readFileSync(out), fs.readFileSync(source));
    if (process.platform === "linux") assert.ok(copies >= 1, "no copy_file_range");
  });

  test("a view written through is saved with its new bytes", () => {
    const source = writeSource("b.safetensors", 1);
    const loaded = loadFile(source, { backend: "mmap" });
    const w2 = loaded.get("w2")!.data;
    w2[300_000] = w2[300_000]! ^ 0xff;
    const out = path.join(dir, "b-out.safetensors");
    saveFile(out, loaded, { seed: "1" });
    const saved = fs.readFileSync(out);
    assert.deepEqual(new Uint8Array(saved), expectedBytes(loaded));
    assert.notDeepEqual(saved, fs.readFileSync(source));
  });

  test("a file replaced at its path since it was mapped: the views' bytes are saved, not the new file's", () => {
    const source = writeSource("c.safetensors", 1);
    const loaded = loadFile(source, { backend: "mmap" });
    fs.renameSync(writeSource("c2.safetensors", 2), source);
    const out = path.join(dir, "c-out.safetensors");
    const copies = kernelCopies(() => saveFile(out, loaded, { seed: "1" }));
    assert.equal(copies, 0);
    assert.deepEqual(new Uint8Array(fs.readFileSync(out)), expectedBytes(loaded));
  });

  test("saving views over their own file keeps their bytes", () => {
    const source = writeSource("d.safetensors", 1);
    const before = fs.readFileSync(source);
    const loaded = loadFile(source, { backend: "mmap" });
    saveFile(source, loaded, { seed: "1" });
    assert.deepEqual(fs.readFileSync(source), before);
  });
});
