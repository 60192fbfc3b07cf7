/**
 * The byte-copy commands (shard, merge, extract, drop, rename, set-metadata, cast) in-process through `main()`: the
 * bytes they write, huggingface_hub's assignment for `shard`, the output guard, atomicity, --json summaries.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { fromFloat32, toFloat32 } from "../src/codecs/index.js";
import { castElements } from "../src/edit/cast.js";
import { openFile, openSharded, saveFile, Tensor } from "../src/node.js";
import { planShards } from "../src/shards/index.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { fill } from "./helpers/fill.js";
import { cli as runCli } from "./helpers/run-cli.js";

const cli = runCli;
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-rewrite-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
let count = 0;
const fresh = (name = "") => path.join(tmp, `${count++}${name}`);

/** A file of mixed dtypes, sizes (one empty tensor) and metadata. */
function sample(): { file: string; tensors: Map<string, Tensor> } {
  const tensors = new Map<string, Tensor>();
  const dtypes = ["F32", "BF16", "F16", "I64", "U8", "F64", "BOOL", "F8_E4M3"] as const;
  for (let i = 0; i < 16; i++) {
    const dtype = dtypes[i % dtypes.length]!;
    const n = [3, 40, 100, 0, 7, 250][i % 6]!;
    const bytes = (n * { F32: 4, BF16: 2, F16: 2, I64: 8, U8: 1, F64: 8, BOOL: 1, F8_E4M3: 1 }[dtype]) as number;
    const data = fill(bytes, i + 1);
    if (dtype === "BOOL") for (let j = 0; j < data.length; j++) data[j]! &= 1;
    tensors.set(`model.layers.${i}.w`, new Tensor(dtype, [n], data));
  }
  // Empty tensors, two of them adjacent in the file (the same offset: one storage to huggingface_hub).
  tensors.set("empty", new Tensor("F32", [0, 4], new Uint8Array(0)));
  tensors.set("empty2", new Tensor("F32", [4, 0], new Uint8Array(0)));
  const file = fresh(".safetensors");
  saveFile(file, tensors, { format: "pt", note: "sample" });
  return { file, tensors };
}

function readAll(target: string): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  if (fs.statSync(target).isDirectory() || target.endsWith(".json")) {
    using ckpt = openSharded(target);
    assert.deepEqual(ckpt.warnings, []);
    for (const name of ckpt.keys()) out.set(name, ckpt.getTensor(name, { memory: "owned" }).data);
  } else {
    using file = openFile(target);
    for (const name of file.keys()) out.set(name, file.getTensor(name, { memory: "owned" }).data);
  }
  return out;
}

describe("shard", () => {
  test("huggingface_hub's assignment for the tensors in offset order; bytes and metadata kept", async () => {
    const { file, tensors } = sample();
    const out = fresh();
    const run = await cli("shard", file, out, "--max-shard-size", "0.5KB", "--json");
    assert.equal(run.code, 0, run.stderr);
    const summary = JSON.parse(run.stdout);
    assert.deepEqual(Object.keys(summary), ["files", "bytes", "tensors", "seconds"]);
    assert.equal(summary.tensors, tensors.size);
    assert.equal(
      summary.bytes,
      summary.files.reduce((sum: number, f: string) => sum + fs.statSync(f).size, 0),
    );
    using source = openFile(file);
    const plan = planShards(
      source.offsetKeys().map((name) => {
        const { byteLength: size, dataOffsets } = source.info(name);
        return { name, size, storage: size === 0 ? dataOffsets[0] : undefined };
      }),
      { maxShardSize: 500 },
    );
    assert.ok(plan.shards.length > 2);
    const index = JSON.parse(fs.readFileSync(path.join(out, "model.safetensors.index.json"), "utf8"));
    assert.deepEqual(Object.entries(index.weight_map), [...plan.weightMap]);
    assert.equal(index.metadata.total_size, plan.totalSize);
    assert.deepEqual(
      fs.readdirSync(out).sort(),
      [...plan.shards.map((s) => s.file), "model.safetensors.index.json"].sort(),
    );
    for (const shard of plan.shards) {
      using part = openFile(path.join(out, shard.file));
      assert.deepEqual(new Set(part.keys()), new Set(shard.tensors));
      assert.deepEqual(
        part.metadata(),
        new Map([
          ["format", "pt"],
          ["note", "sample"],
        ]),
      );
    }
    const back = readAll(out);
    for (const [name, tensor] of tensors) assert.deepEqual(back.get(name), tensor.data, name);
  });
  test("one shard is model.safetensors; a re-shard removes the earlier shards; transformers index style", async () => {
    const { file } = sample();
    const out = fresh();
    assert.equal((await cli("shard", file, out, "--max-shard-size", "600")).code, 0);
    assert.ok(fs.readdirSync(out).length > 3);
    fs.writeFileSync(path.join(out, "config.json"), "{}");
    assert.equal((await cli("shard", file, out)).code, 0);
    assert.deepEqual(fs.readdirSync(out).sort(), ["config.json", "model.safetensors"]);
    assert.equal(
      (await cli("shard", out, fresh("t"), "--max-shard-size", "1KB", "--index-style", "transformers")).code,
      0,
    );
  });
  test("re-sharding a checkpoint over itself needs --in-place, then keeps every tensor", async () => {
    const { file, tensors } = sample();
    const dir = fresh();
    assert.equal((await cli("shard", file, dir, "--max-shard-size", "1KB")).code, 0);
    const refused = await cli("shard", dir, dir, "--max-shard-size", "600");
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /part of the input; pass --in-place/);
    assert.equal((await cli("shard", dir, dir, "--max-shard-size", "600", "--in-place")).code, 0);
    const back = readAll(dir);
    for (const [name, tensor] of tensors) assert.deepEqual(back.get(name), tensor.data, name);
    assert.ok(!fs.readdirSync(dir).some((name) => name.includes(".tmp") || name.startsWith(".")));
  });
  test("usage errors", async () => {
    const { file } = sample();
    assert.equal((await cli("shard", file, fresh(), "--max-shard-size", "5 apples")).code, 2);
    assert.equal((await cli("shard", file)).code, 2);
    assert.equal((await cli("shard", file, fresh(), "--index-style", "x")).code, 2);
  });
});

describe("merge", () => {
  test("a sharded checkpoint back into one file, byte for byte", async () => {
    const { file, tensors } = sample();
    const dir = fresh();
    await cli("shard", file, dir, "--max-shard-size", "700");
    const merged = fresh(".safetensors");
    const run = await cli("merge", path.join(dir, "model.safetensors.index.json"), merged, "--json");
    assert.equal(run.code, 0, run.stderr);
    // The same tensors and metadata laid out as the writer lays out any file: the original bytes exactly.
    assert.deepEqual(fs.readFileSync(merged), fs.readFileSync(file));
    assert.equal(JSON.parse(run.stdout).tensors, tensors.size);
  });
  test("merge over an input refused; conflicting shard metadata warned", async () => {
    const dir = fresh();
    fs.mkdirSync(dir);
    saveFile(path.join(dir, "a.safetensors"), { x: new Tensor("U8", [1], new Uint8Array([1])) }, { k: "1" });
    saveFile(path.join(dir, "b.safetensors"), { y: new Tensor("U8", [1], new Uint8Array([2])) }, { k: "2" });
    fs.writeFileSync(
      path.join(dir, "model.safetensors.index.json"),
      JSON.stringify({ weight_map: { x: "a.safetensors", y: "b.safetensors" } }),
    );
    assert.equal((await cli("merge", dir, path.join(dir, "a.safetensors"))).code, 2);
    const out = fresh(".safetensors");
    const run = await cli("merge", dir, out);
    assert.equal(run.code, 0);
    assert.match(run.stderr, /shards disagree on metadata "k"/);
    using merged = openFile(out);
    assert.deepEqual(merged.metadata(), new Map([["k", "1"]]));
  });
});

describe("merge over the corpus's shard set", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  test("every tensor with the reference's bytes", async () => {
    const out = fresh(".safetensors");
    assert.equal((await cli("merge", path.join(corpusDir, "julia-test-sharded-6"), out)).code, 0);
    using merged = openFile(out);
    let n = 0;
    for (const file of expectedFiles().filter((f) => f.file.startsWith("julia-test-sharded-6/"))) {
      for (const t of file.tensors ?? []) {
        assert.equal(sha256(merged.getTensor(t.name).data), t.sha256, t.name);
        n++;
      }
    }
    assert.equal(n, 36);
    assert.equal(merged.keys().length, 36);
  });
});

describe("extract and drop", () => {
  test("--tensor and --match select; the rest is dropped", async () => {
    const { file, tensors } = sample();
    const a = fresh(".safetensors");
    assert.equal((await cli("extract", file, a, "--tensor", "empty", "--tensor", "model.layers.3.w")).code, 0);
    assert.deepEqual([...readAll(a).keys()].sort(), ["empty", "model.layers.3.w"]);
    const b = fresh(".safetensors");
    assert.equal((await cli("drop", file, b, "--match", "^model\\.layers\\.1\\d\\.")).code, 0);
    const kept = readAll(b);
    assert.equal(kept.size, tensors.size - 6);
    assert.ok(kept.has("empty2"));
    for (const [name, bytes] of kept) assert.deepEqual(bytes, tensors.get(name)!.data);
    using out = openFile(b);
    assert.deepEqual(
      out.metadata(),
      new Map([
        ["format", "pt"],
        ["note", "sample"],
      ]),
    );
  });
  test("errors: unknown tensor, both selectors, none, a bad regex", async () => {
    const { file } = sample();
    const missing = await cli("extract", file, fresh(), "--tensor", "nope");
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /error\[TensorNotFound\]/);
    assert.equal((await cli("extract", file, fresh(), "--tensor", "empty", "--match", "x")).code, 2);
    assert.equal((await cli("drop", file, fresh())).code, 2);
    assert.equal((await cli("drop", file, fresh(), "--match", "(")).code, 2);
  });
});

describe("rename", () => {
  test("--map and --sub; collisions refused; a checkpoint keeps its shards", async () => {
    const { file, tensors } = sample();
    const a = fresh(".safetensors");
    assert.equal((await cli("rename", file, a, "--map", "empty=nothing", "--map", "model.layers.0.w=first")).code, 0);
    const renamed = readAll(a);
    assert.deepEqual(renamed.get("first"), tensors.get("model.layers.0.w")!.data);
    assert.ok(renamed.has("nothing") && !renamed.has("empty"));
    const collide = await cli("rename", file, fresh(), "--sub", "\\d+=N");
    assert.equal(collide.code, 1);
    assert.match(collide.stderr, /DuplicateKey/);
    const dir = fresh();
    await cli("shard", file, dir, "--max-shard-size", "700");
    const out = fresh();
    assert.equal((await cli("rename", dir, out, "--sub", "^model\\.(?=layers)=")).code, 0);
    assert.deepEqual(fs.readdirSync(out).sort(), fs.readdirSync(dir).sort());
    const back = readAll(out);
    for (const [name, tensor] of tensors) assert.deepEqual(back.get(name.replace(/^model\./, "")), tensor.data, name);
  });
});

describe("set-metadata", () => {
  test("set, delete, clear; the input untouched; --in-place over the input", async () => {
    const { file } = sample();
    const before = fs.readFileSync(file);
    const a = fresh(".safetensors");
    assert.equal((await cli("set-metadata", file, a, "note=changed", "new=x=y", "--delete", "format")).code, 0);
    assert.deepEqual(
      openFile(a).metadata(),
      new Map([
        ["new", "x=y"],
        ["note", "changed"],
      ]),
    );
    const b = fresh(".safetensors");
    assert.equal((await cli("set-metadata", file, b, "--clear")).code, 0);
    assert.equal(openFile(b).metadata(), null);
    assert.deepEqual(fs.readFileSync(file), before);
    assert.equal((await cli("set-metadata", file, file, "a=b")).code, 2);
    assert.equal((await cli("set-metadata", file, file, "a=b", "--in-place")).code, 0);
    assert.equal(openFile(file).metadata()?.get("a"), "b");
    assert.equal((await cli("set-metadata", file, fresh())).code, 2);
  });
});

describe("cast", () => {
  test("floats to bf16 through float32 (round to nearest even), the rest untouched, chunk boundaries included", async () => {
    // 1.5 Mi elements: crosses the 1 Mi-element chunk.
    const big = new Tensor("F32", [3, 1 << 19], fill(4 * 3 * (1 << 19), 7));
    const ints = new Tensor("I32", [5], fill(20, 8));
    const half = new Tensor("F16", [300], fill(600, 9));
    const file = fresh(".safetensors");
    saveFile(file, { big, ints, half });
    const out = fresh(".safetensors");
    const run = await cli("cast", file, out, "--to", "bf16", "--json");
    assert.equal(run.code, 0, run.stderr);
    using cast = openFile(out);
    assert.equal(cast.info("ints").dtype, "I32");
    assert.deepEqual(cast.getTensor("ints").data, ints.data);
    assert.equal(cast.info("big").dtype, "BF16");
    assert.deepEqual(cast.getTensor("big").data, fromFloat32("BF16", toFloat32("F32", big.data)));
    // From F16, torch writes NaNs as 0x7FC0 (from F32 as 0xFFFF, which fromFloat32 gives).
    const halfFloats = toFloat32("F16", half.data);
    const expected = fromFloat32("BF16", halfFloats);
    halfFloats.forEach((value, i) => {
      if (Number.isNaN(value)) expected.set([0xc0, 0x7f], 2 * i);
    });
    assert.ok(halfFloats.some(Number.isNaN));
    assert.deepEqual(cast.getTensor("half").data, expected);
    const only = fresh(".safetensors");
    assert.equal((await cli("cast", file, only, "--to", "f32", "--match", "^half$")).code, 0);
    using partial = openFile(only);
    assert.deepEqual([partial.info("big").dtype, partial.info("half").dtype], ["F32", "F32"]);
    assert.deepEqual(partial.getTensor("big").data, big.data);
    assert.equal((await cli("cast", file, fresh(), "--to", "int8")).code, 2);
  });
  test("F64 NaNs keep their sign and top payload bits, as the cvtsd2ss instruction does", () => {
    const bytes = new Uint8Array(16);
    const view = new DataView(bytes.buffer);
    view.setUint32(4, 0xfff12345, true); // negative signalling NaN with payload
    view.setUint32(0, 0xe0000000, true);
    view.setFloat64(8, 1 + 2 ** -24, true); // a tie: rounds to even (1)
    const out = castElements("F64", "F32", bytes, 2, new Float32Array(2));
    const bits = new DataView(out.buffer, out.byteOffset);
    assert.equal(bits.getUint32(0, true).toString(16), ((0xffc00000 | (0x12345 << 3) | 7) >>> 0).toString(16));
    assert.equal(bits.getFloat32(4, true), 1);
  });
});

describe("inspect, validate, hash and get take a checkpoint directory or its index", () => {
  test("every command, both forms, and a broken index", async () => {
    const { file, tensors } = sample();
    const dir = fresh();
    await cli("shard", file, dir, "--max-shard-size", "700");
    const index = path.join(dir, "model.safetensors.index.json");
    const shards = fs
      .readdirSync(dir)
      .filter((name) => name.endsWith(".safetensors"))
      .sort();
    for (const target of [dir, index]) {
      const inspect = await cli("inspect", target, "--json");
      assert.equal(inspect.code, 0, inspect.stderr);
      const report = JSON.parse(inspect.stdout);
      assert.deepEqual(Object.keys(report), ["index", "metadata", "parameters", "data_bytes", "warnings", "shards"]);
      assert.deepEqual(report.shards.map((s: { file: string }) => s.file).sort(), shards);
      assert.equal(
        report.shards.reduce((n: number, s: { tensors: unknown[] }) => n + s.tensors.length, 0),
        tensors.size,
      );
      assert.match(
        (await cli("inspect", target)).stdout,
        new RegExp(`${shards.length} shards, ${tensors.size} tensors`),
      );
      assert.deepEqual(await cli("validate", target), { code: 0, stdout: "ok\n", stderr: "" });
      const hash = await cli("hash", target);
      assert.equal(hash.code, 0);
      for (const shard of shards) {
        assert.ok(hash.stdout.includes(`${sha256(fs.readFileSync(path.join(dir, shard)))}  ${path.join(dir, shard)}`));
      }
      const out = fresh(".bin");
      assert.equal((await cli("get", target, "model.layers.5.w", "--out", out)).code, 0);
      assert.deepEqual(new Uint8Array(fs.readFileSync(out)), tensors.get("model.layers.5.w")!.data);
    }
    const text = fs.readFileSync(index, "utf8");
    fs.writeFileSync(index, text.replace(/"total_size": \d+/, '"total_size": 1'));
    const warned = await cli("validate", dir);
    assert.equal(warned.code, 0);
    assert.match(warned.stderr, /^warning: .*total_size is 1 but the listed tensors hold/);
    fs.writeFileSync(index, text.replace(shards[0]!, "../escape.safetensors"));
    const escaped = await cli("validate", index);
    assert.equal(escaped.code, 1);
    assert.match(escaped.stderr, /error\[UnsafePath\]/);
    fs.writeFileSync(index, text.replace(shards[0]!, "missing.safetensors"));
    const missing = await cli("inspect", dir);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /error\[IoError\]: .*missing\.safetensors/);
  });
});
