/**
 * `safetensors get --out x.npy` writes a NumPy file: the header np.save writes, numpy's own type where it has one,
 * untyped items (<V2, <V1) for BF16 and F8, float32 with --as f32; raw bytes only for other names or --format raw.
 * Against the reference: np.load of each gives what safe_open gives.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { npyHeader, parseNpy } from "../src/edit/npy.js";
import type { Dtype } from "../src/format/dtypes.js";
import { openFile, saveFile, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { repoRoot, runReference, skipWithoutReference } from "./helpers/reference.js";
import { cli } from "./helpers/run-cli.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-get-npy-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));

const WIDTH: Partial<Record<Dtype, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  U16: 2,
  I16: 2,
  U32: 4,
  I32: 4,
  U64: 8,
  I64: 8,
  F16: 2,
  F32: 4,
  F64: 8,
  C64: 8,
  BF16: 2,
  F8_E4M3: 1,
  F8_E5M2: 1,
};
/** Every dtype numpy has a type for. */
const NUMPY_DTYPES: Dtype[] = [
  "BOOL",
  "U8",
  "I8",
  "U16",
  "I16",
  "U32",
  "I32",
  "U64",
  "I64",
  "F16",
  "F32",
  "F64",
  "C64",
];
const SHAPES: number[][] = [[3, 5], [], [0, 4], [7]];

function sample(): { file: string; names: string[] } {
  const tensors = new Map<string, Tensor>();
  let seed = 1;
  for (const dtype of [...NUMPY_DTYPES, "BF16", "F8_E4M3", "F8_E5M2"] as Dtype[]) {
    for (const shape of SHAPES) {
      const count = shape.reduce((a, b) => a * b, 1);
      let data = fill(count * WIDTH[dtype]!, seed++);
      if (dtype === "BOOL") data = data.map((b) => b & 1);
      tensors.set(`${dtype.toLowerCase()}_${shape.join("x") || "scalar"}`, new Tensor(dtype, shape, data));
    }
  }
  const file = path.join(tmp, "all.safetensors");
  saveFile(file, tensors);
  return { file, names: [...tensors.keys()] };
}

const { file, names } = sample();

describe("the .npy header", () => {
  test("is byte for byte what np.save writes", () => {
    const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("latin1");
    const expected = (dict: string) => {
      const body = dict.padEnd(128 - 10 - 1, " ");
      return `\x93NUMPY\x01\x00${String.fromCharCode(body.length + 1)}\x00${body}\n`;
    };
    assert.equal(
      text(npyHeader("<V2", [2, 3])),
      expected("{'descr': '<V2', 'fortran_order': False, 'shape': (2, 3), }"),
    );
    assert.equal(text(npyHeader("<f4", [5])), expected("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"));
    assert.equal(text(npyHeader("|b1", [])), expected("{'descr': '|b1', 'fortran_order': False, 'shape': (), }"));
    for (const shape of [[], [1], [3, 4, 5], new Array(40).fill(2)]) {
      assert.equal(npyHeader("<f8", shape).length % 64, 0);
    }
  });
});

describe("get --out", () => {
  test("x.npy is a .npy file that reads back as the tensor; x.bin and --format raw are raw bytes", async () => {
    using opened = openFile(file);
    const tensor = opened.getTensor("f32_3x5");
    const npy = path.join(tmp, "x.npy");
    assert.deepEqual(await cli("get", file, "f32_3x5", "--out", npy), { code: 0, stdout: "", stderr: "" });
    const array = parseNpy(fs.readFileSync(npy));
    assert.equal(array.descr, "<f4");
    assert.deepEqual(array.shape, [3, 5]);
    assert.deepEqual(new Uint8Array(array.data), new Uint8Array(tensor.data));

    const bin = path.join(tmp, "x.bin");
    assert.equal((await cli("get", file, "f32_3x5", "--out", bin)).code, 0);
    assert.deepEqual(new Uint8Array(fs.readFileSync(bin)), new Uint8Array(tensor.data));
    assert.equal((await cli("get", file, "f32_3x5", "--out", npy, "--format", "raw")).code, 0);
    assert.deepEqual(new Uint8Array(fs.readFileSync(npy)), new Uint8Array(tensor.data));

    const bad = await cli("get", file, "f32_3x5", "--out", npy, "--format", "csv");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--format must be raw or npy/);
  });

  test("a slice has the slice's shape; BF16 says how it was written; F4 asks for --as f32", async () => {
    const npy = path.join(tmp, "slice.npy");
    assert.equal((await cli("get", file, "i16_3x5", "--slice", "1:, ::2", "--out", npy)).code, 0);
    assert.deepEqual(parseNpy(fs.readFileSync(npy)).shape, [2, 3]);

    const bf16 = await cli("get", file, "bf16_3x5", "--out", npy);
    assert.equal(bf16.code, 0);
    assert.match(
      bf16.stderr,
      /^note: numpy has no BF16 type: wrote its items as untyped <V2 .*ml_dtypes\.bfloat16.*--as f32/,
    );
    assert.equal(parseNpy(fs.readFileSync(npy)).descr, "<V2");
    const f32 = await cli("get", file, "bf16_3x5", "--out", npy, "--as", "f32");
    assert.deepEqual(f32, { code: 0, stdout: "", stderr: "" });
    assert.equal(parseNpy(fs.readFileSync(npy)).descr, "<f4");

    const f4 = path.join(tmp, "f4.safetensors");
    saveFile(f4, new Map([["q", new Tensor("F4", [4], new Uint8Array([0x12, 0x34]))]]));
    const refused = await cli("get", f4, "q", "--out", npy);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^error\[UnsupportedDtype\]: F4 packs several values a byte.*--as f32/);
    assert.equal((await cli("get", f4, "q", "--out", npy, "--as", "f32")).code, 0);
    assert.deepEqual(parseNpy(fs.readFileSync(npy)).shape, [4]);
  });

  test("--out - with --format npy writes the .npy file to standard output", async () => {
    const { cliProcessSync } = await import("./helpers/cli.js");
    const run = cliProcessSync(["get", file, "u8_7", "--out", "-", "--format", "npy"], { input: new Uint8Array(0) });
    assert.equal(run.status, 0, String(run.stderr));
    const array = parseNpy(new Uint8Array(run.stdout as Buffer));
    assert.equal(array.descr, "|u1");
    assert.deepEqual(array.shape, [7]);
  });

  test("np.load of every dtype numpy has gives what safe_open gives (and BF16/F8 viewed, or as float32)", {
    skip: skipWithoutReference(),
  }, async () => {
    const arrays: { name: string; npy: string; as: string }[] = [];
    for (const name of names) {
      const own = NUMPY_DTYPES.some((dtype) => name.startsWith(`${dtype.toLowerCase()}_`));
      const npy = path.join(tmp, `${name}.npy`);
      const run = await cli("get", file, name, "--out", npy);
      assert.equal(run.code, 0, run.stderr);
      arrays.push({ name, npy, as: own ? "own" : "view" });
      if (!own) {
        const f32 = path.join(tmp, `${name}.f32.npy`);
        assert.equal((await cli("get", file, name, "--out", f32, "--as", "f32")).code, 0);
        arrays.push({ name, npy: f32, as: "f32" });
      }
    }
    const results = runReference<{ name: string; ok: boolean; why: string | null }[]>(
      path.join(repoRoot, "scripts", "npy_check.py"),
      [],
      { file, arrays },
    );
    assert.equal(results.length, arrays.length);
    const failed = results.filter((r) => !r.ok).map((r) => `${r.name}: ${r.why}`);
    assert.deepEqual(failed, []);
  });
});
