/**
 * Acceptance against the reference venv (huggingface_hub, transformers, torch, safetensors), one python process in
 * all (scripts/shards_reference.py serve): `shard` gives huggingface_hub's assignment for a file's tensors in offset order and its shards load in the
 * reference with identical tensors; `saveSharded` writes what `save_torch_state_dict` writes, byte for byte; `merge`
 * of a transformers-sharded checkpoint reproduces every tensor; transformers loads a model from a directory we
 * re-sharded; `cast` equals torch's `.to(dtype)` byte for byte on NaN, inf, subnormal, tie and random values.
 * Skipped with the reason when the venv is absent.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { loadFile, openFile, openSharded, saveFile, saveSharded, Tensor } from "../src/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { fill } from "./helpers/fill.js";
import { referenceMissingReason, referencePython, skipWithoutReference } from "./helpers/reference.js";
import { cli as runCli } from "./helpers/run-cli.js";

const script = path.join(repoRoot, "scripts", "shards_reference.py");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-shards-ref-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const at = (...parts: string[]) => path.join(tmp, ...parts);

/**
 * scripts/shards_reference.py serve: one Python for every request (torch and transformers imported once, ~7 s of CPU);
 * `ask` sends one and resolves to its answer. The process ends when `close` ends its standard input.
 */
function reference() {
  const python = referencePython();
  if (!python) throw new Error(referenceMissingReason());
  const child = spawn(python.python, [script, "serve"], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, PYTHONIOENCODING: "utf-8" },
  });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return {
    async ask<T>(command: string, request: unknown): Promise<T> {
      child.stdin.write(`${JSON.stringify([command, request])}\n`);
      const line = await lines.next();
      if (line.done) {
        const [code] = child.exitCode === null ? await once(child, "close") : [child.exitCode];
        throw new Error(`shards_reference.py ${command} failed (exit ${code}):\n${stderr}`);
      }
      return JSON.parse(line.value) as T;
    },
    close: () => child.stdin.end(),
  };
}

async function cli(...argv: string[]): Promise<void> {
  const run = await runCli(...argv);
  assert.equal(run.code, 0, `${argv.join(" ")}: ${run.stderr}`);
}

type Hashes = Record<string, [string, number[], string]>;

/** Edge values of each float dtype: every bit pattern of the 8- and 16-bit ones; specials, ties and random bits. */
function castInput(): Map<string, Tensor> {
  const tensors = new Map<string, Tensor>();
  const all16 = new Uint16Array(65536).map((_, i) => i);
  tensors.set("f16_all", Tensor.fromTypedArray("F16", [65536], all16));
  tensors.set("bf16_all", Tensor.fromTypedArray("BF16", [65536], all16));
  const all8 = new Uint8Array(256).map((_, i) => i);
  tensors.set("e4m3_all", new Tensor("F8_E4M3", [256], all8));
  tensors.set("e5m2_all", new Tensor("F8_E5M2", [256], all8));
  const f32 = [
    0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff812345, 0x7fbfffff, 0x00000001,
    0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000,
    0x387fc000, 0x33800000, 0x33800001, 0x337fffff, 0x3f808000, 0x3f818000, 0x3f808001, 0x7f7f8000, 0x7f7f7fff,
  ];
  const random32 = new Uint32Array(fill(4 * 4096, 11).buffer);
  tensors.set("f32_edges", Tensor.fromTypedArray("F32", [f32.length + 4096], new Uint32Array([...f32, ...random32])));
  const f64 = new Float64Array([
    0,
    -0,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Number.NaN,
    5e-324,
    -5e-324,
    Number.MAX_VALUE,
    3.4028235677973366e38,
    3.402823567797337e38,
    1 + 2 ** -24,
    1 + 2 ** -24 + 2 ** -52,
    1 + 2 ** -8 + 2 ** -30,
    1 + 2 ** -9,
    65519.99,
    65520,
    2 ** -149,
    2 ** -150,
    2 ** -150 + 2 ** -200,
    1e-40,
    -1e-45,
  ]);
  const random64 = new Float64Array(fill(8 * 2048, 12).buffer);
  const nan64 = new BigUint64Array([
    0x7ff0000000000001n,
    0xfff8000000000000n,
    0x7ff4000000000000n,
    0xfff123456789abcdn,
  ]);
  const f64bytes = new Uint8Array(8 * (f64.length + random64.length + nan64.length));
  f64bytes.set(new Uint8Array(f64.buffer), 0);
  f64bytes.set(new Uint8Array(random64.buffer), f64.byteLength);
  f64bytes.set(new Uint8Array(nan64.buffer), f64.byteLength + random64.byteLength);
  tensors.set("f64_edges", new Tensor("F64", [f64bytes.length / 8], f64bytes));
  tensors.set("ints", new Tensor("I32", [4], fill(16, 13)));
  tensors.set("mask", new Tensor("BOOL", [3], new Uint8Array([1, 0, 1])));
  return tensors;
}

test("huggingface_hub, transformers and torch agree with shard, merge, saveSharded and cast", {
  skip: skipWithoutReference(),
}, async (t) => {
  // Python starts now (its imports take seconds) while the files below are written.
  const ref = reference();
  t.after(ref.close);
  // A file whose offset order differs from name order, with an empty tensor and one over the shard limit.
  const sample = new Map<string, Tensor>();
  for (let i = 0; i < 14; i++) {
    const n = [10, 300, 60, 2000, 0, 45][i % 6]!;
    sample.set(
      `z.${i}.${i % 3 ? "weight" : "bias"}`,
      new Tensor(i % 2 ? "F32" : "BF16", [n], fill(n * (i % 2 ? 4 : 2), i + 3)),
    );
  }
  const sampleFile = at("sample.safetensors");
  saveFile(sampleFile, sample, { format: "pt" });
  await cli("shard", sampleFile, at("ours"), "--max-shard-size", "2KB");
  const order = openFile(sampleFile).offsetKeys();
  // saveSharded takes tensors in the given order: hand it the offset order huggingface_hub is given.
  const offsetOrdered = loadFile(sampleFile);
  saveSharded(
    at("saved"),
    order.map((name) => [name, offsetOrdered.get(name)!] as const),
    { maxShardSize: "2KB" },
  );

  const castFile = at("cast-in.safetensors");
  saveFile(castFile, castInput());
  for (const to of ["bf16", "f16", "f32"]) await cli("cast", castFile, at(`cast-${to}.safetensors`), "--to", to);

  const ourShards = fs
    .readdirSync(at("ours"))
    .filter((f) => f.endsWith(".safetensors"))
    .map((f) => at("ours", f));
  const [split, ourHashes, tinyHashes, ...casts] = (await ref.ask<unknown[]>("batch", [
    ["split", { file: sampleFile, order, max_shard_size: "2KB", save_dir: at("hub") }],
    ["hashes", { files: ourShards }],
    ["tiny", { dir: at("transformers"), max_shard_size: "20KB" }],
    ...["bf16", "f16", "f32"].map((to) => ["cast", { file: castFile, out: at(`cast-${to}.safetensors`), dtype: to }]),
  ])) as [
    { filename_to_tensors: [string, string[]][]; tensor_to_filename: [string, string][]; total_size: number },
    Hashes,
    Hashes,
    ...{ tensors: number; mismatches: Record<string, string> }[],
  ];

  // shard: huggingface_hub's assignment, and its shards load in the reference with identical tensors.
  const ours = JSON.parse(fs.readFileSync(at("ours", "model.safetensors.index.json"), "utf8"));
  assert.ok(split.filename_to_tensors.length > 2);
  assert.deepEqual(Object.entries(ours.weight_map), split.tensor_to_filename);
  assert.equal(ours.metadata.total_size, split.total_size);
  assert.deepEqual(Object.keys(ourHashes).sort(), [...sample.keys()].sort());
  for (const [name, tensor] of sample) assert.equal(ourHashes[name]![2], sha256(tensor.data), name);

  // saveSharded: the files save_torch_state_dict writes, byte for byte (index text included).
  assert.deepEqual(fs.readdirSync(at("saved")).sort(), fs.readdirSync(at("hub")).sort());
  for (const name of fs.readdirSync(at("hub"))) {
    assert.deepEqual(fs.readFileSync(at("saved", name)), fs.readFileSync(at("hub", name)), name);
  }

  // merge of transformers' shards: every tensor byte for byte.
  await cli("merge", at("transformers"), at("merged.safetensors"));
  using merged = openFile(at("merged.safetensors"));
  using original = openSharded(at("transformers"));
  assert.deepEqual(merged.keys(), original.keys());
  for (const name of original.keys()) {
    assert.deepEqual(merged.getTensor(name).data, original.getTensor(name).data, name);
    assert.equal(sha256(merged.getTensor(name).data), tinyHashes[name]![2], name);
  }

  // transformers loads the model from a directory re-sharded by us (its config, our shards and index).
  const resharded = at("resharded");
  await cli("shard", at("merged.safetensors"), resharded, "--max-shard-size", "30KB");
  for (const name of ["config.json", "generation_config.json"]) {
    if (fs.existsSync(at("transformers", name))) fs.copyFileSync(at("transformers", name), path.join(resharded, name));
  }
  assert.ok(fs.existsSync(path.join(resharded, "model.safetensors.index.json")));
  const loaded = await ref.ask<Hashes>("load", { dir: resharded });
  assert.deepEqual(loaded, tinyHashes);

  // cast: torch's .to(dtype), byte for byte.
  for (const result of casts) {
    assert.equal(result.tensors, castInput().size);
    assert.deepEqual(result.mismatches, {});
  }
});
