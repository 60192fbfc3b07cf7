/**
 * Saving over a file that readers still hold: the writers replace the file by rename, so a reader's mapping or
 * descriptor keeps the old inode and reads the old bytes (never zeros, never SIGBUS, which writing in place would
 * give: the reference's own bug before it moved to temp + rename). Our mmap and pread readers, and the reference's
 * `safe_open` in a Python process holding the file open while we save over it.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { loadNative } from "../src/io/native.js";
import { createWriter, openFile, saveFile, Tensor } from "../src/node.js";
import { referencePython, skipWithoutReference } from "./helpers/reference.js";

let dir = "";
before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-save-over-"));
});
after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const f32 = (n: number, value: number) => Tensor.fromTypedArray("F32", [n], new Float32Array(n).fill(value));

/** The old file: 1 MiB of 1.0 in `x`, 256 KiB of 3.0 in `y`. */
function oldTensors() {
  return { x: f32(1 << 18, 1), y: f32(1 << 16, 3) };
}

const allEqual = (array: Float32Array, value: number) => array.every((v) => v === value);

describe("saving over a file that is open", () => {
  const backends = loadNative() ? (["mmap", "pread"] as const) : (["pread"] as const);
  for (const backend of backends) {
    test(`our ${backend} reader keeps reading the old bytes`, async () => {
      const target = path.join(dir, `ours-${backend}.safetensors`);
      saveFile(target, oldTensors());
      using reader = openFile(target, { backend });
      const x = reader.getTensor("x").typed() as Float32Array;
      // Replace it twice: with a much smaller file by saveFile, then with another by the streaming writer.
      saveFile(target, { x: f32(4, 2) });
      assert.ok(allEqual(x, 1), "a view of the old file changed after saveFile");
      const writer = createWriter(target, { x: { dtype: "F32", shape: [8] } });
      await writer.writeFrom("x", [new Uint8Array(f32(8, 5).data)]);
      writer.commit();
      assert.equal(x.length, 1 << 18);
      assert.ok(allEqual(x, 1), "a view of the old file changed after the streaming writer");
      // Tensors read after the saves, through the same open file, are the old ones too.
      assert.ok(allEqual(reader.getTensor("y").typed() as Float32Array, 3));
      assert.ok(allEqual(reader.getSlice("x").get("-4:").typed() as Float32Array, 1));
      using fresh = openFile(target, { backend });
      assert.deepEqual([...(fresh.getTensor("x").typed() as Float32Array)], [5, 5, 5, 5, 5, 5, 5, 5]);
    });
  }

  test("the reference's safe_open keeps reading the old bytes", { skip: skipWithoutReference() }, async () => {
    const target = path.join(dir, "reference.safetensors");
    saveFile(target, oldTensors());
    const script = `
import json, sys
from safetensors import safe_open
f = safe_open(sys.argv[1], "pt")
x = f.get_tensor("x")
print("ready", flush=True)
sys.stdin.readline()
y = f.get_tensor("y")
tail = f.get_slice("x")[-4:]
with safe_open(sys.argv[1], "pt") as g:
    new = g.get_tensor("x").tolist()
print(json.dumps({
    "x_old": bool((x == 1.0).all()), "x_len": x.numel(),
    "y_old": bool((y == 3.0).all()), "y_len": y.numel(),
    "tail_old": bool((tail == 1.0).all()),
    "new": new,
}), flush=True)
`;
    const python = spawn(referencePython()!.python, ["-c", script, target], { stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    python.stderr.on("data", (d: Buffer) => {
      stderr += d;
    });
    const exited = new Promise<number | null>((resolve) => python.on("exit", resolve));
    await new Promise<void>((resolve, reject) => {
      python.stdout.on("data", (d: Buffer) => {
        stdout += d;
        if (stdout.startsWith("ready\n")) resolve();
      });
      python.on("exit", () => reject(new Error(`python exited early: ${stderr}`)));
    });
    saveFile(target, { x: f32(4, 2) });
    python.stdin.write("go\n");
    assert.equal(await exited, 0, stderr);
    const report = JSON.parse(stdout.slice("ready\n".length));
    assert.deepEqual(report, {
      x_old: true,
      x_len: 1 << 18,
      y_old: true,
      y_len: 1 << 16,
      tail_old: true,
      new: [2, 2, 2, 2],
    });
  });
});
