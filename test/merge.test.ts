/**
 * Merges against mergekit: every config in test/fixtures/merge/configs run through `mergeModels`, each output tensor
 * compared with mergekit's (scripts/gen_merge_fixtures.py made the models, ran mergekit and kept its outputs).
 * Deterministic methods: identical bits, or within 2 units of float32 at the tensor's scale where mergekit's
 * scalars (norms, angles) come from numpy/torch reductions summed in another order. DARE and DELLA: the keep rate and the rescale, statistically.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import { toFloat32 } from "../src/codecs/index.js";
import { evaluateSetting } from "../src/merge/config.js";
import { FloatBuffers } from "../src/merge/execute.js";
import { mergeModels, nativeFileCounters, parseMergeYaml } from "../src/merge/node-merge.js";
import { poolCounters } from "../src/merge/node-pool.js";
import { loadFile } from "../src/read/node-files.js";
import type { Tensor } from "../src/read/tensor.js";
import { openSharded } from "../src/shards/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { startEdgeServer } from "./helpers/edge-server.js";
import { killAtWrite, tellParent } from "./helpers/kill-child.js";
import { logitsDifferences, mergePython } from "./helpers/python-modules.js";
import { cli } from "./helpers/run-cli.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/merge");

const KILL_CHILD = process.env.MERGE_KILL_CHILD;
if (KILL_CHILD) {
  // Child of the SIGKILL test: merge ties into the directory, printing a byte at each progress step and waiting at
  // step MERGE_KILL_AT for the kill (5 min at most: a parent that never kills makes the test fail, not hang), as
  // edit-crash.test.ts's child does. It paused 20 ms at every step before: 492 steps over the six trials, ~10 s of
  // the test's 25.6 s asleep (2026-12-03, load 4-7 on 2 cores). Before any test is declared: the tests declared above
  // this await ran beside the merge in every child (~4 s of CPU each).
  const stopAt = Number(process.env.MERGE_KILL_AT);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  let steps = 0;
  await mergeModels(parseMergeYaml(fs.readFileSync(path.join(FIXTURES, "configs", "ties.yml"), "utf8")), KILL_CHILD, {
    modelsDir: FIXTURES,
    onProgress() {
      tellParent();
      if (++steps === stopAt) Atomics.wait(pause, 0, 0, 300_000);
    },
  });
  process.exit(0);
}

/** A Python with torch and transformers for the logits check (SAFETENSORS_MERGE_PYTHON, else /work/venv's). */
const python = mergePython(["torch", "transformers"]);

/**
 * Each config's output from its comparison with mergekit, kept for the tests below that need that merge (`outputOf`,
 * `copyOf`): transformers' logits check (instead of the 16 merges again: ~10 s of CPU), the old checkpoint of the kill
 * and abort tests, one side of the byte-for-byte comparisons. Removed after the file. Under tsx a merge that starts the
 * worker pool costs ~0.85 s of CPU however small its models (two workers registering tsx: 2026-12-03, load 4 on 2
 * cores), and the file made ~30 of them.
 */
const merged = new Map<string, string>();
after(() => {
  for (const out of merged.values()) fs.rmSync(out, { recursive: true, force: true });
});

/** How each config's output is compared: "exact" bits, "ulps" (N units of the output dtype), or "stats". */
const MODES: Record<string, { mode: "exact" } | { mode: "ulps"; ulps: number } | { mode: "stats" }> = {
  linear_f32: { mode: "exact" },
  linear_bf16: { mode: "exact" },
  task_arithmetic: { mode: "exact" },
  ties: { mode: "exact" },
  ties_bf16: { mode: "exact" },
  breadcrumbs: { mode: "exact" },
  breadcrumbs_ties: { mode: "exact" },
  dare_linear: { mode: "stats" },
  dare_ties: { mode: "stats" },
  della: { mode: "stats" },
  slerp: { mode: "ulps", ulps: 2 },
  nuslerp: { mode: "ulps", ulps: 2 },
  nuslerp_rows: { mode: "ulps", ulps: 4 },
  model_stock: { mode: "ulps", ulps: 2 },
  passthrough_stack: { mode: "exact" },
  slices_linear: { mode: "exact" },
};

function floats(tensor: Tensor): Float32Array {
  return toFloat32(tensor.dtype, tensor.data, { count: tensor.numel });
}

/** One unit in the last place of `dtype` at magnitude `x`. */
function ulp(x: number, dtype: string): number {
  const mantissa = dtype === "F32" ? 23 : dtype === "BF16" ? 7 : 10;
  return 2 ** (Math.floor(Math.log2(Math.max(Math.abs(x), 2 ** -126))) - mantissa);
}

function readOutput(dir: string): Map<string, Tensor> {
  const checkpoint = openSharded(dir);
  try {
    return new Map(checkpoint.keys().map((name) => [name, checkpoint.getTensor(name, { memory: "owned" })]));
  } finally {
    checkpoint.close();
  }
}

interface FixtureOptions {
  seed?: number;
  maxParallelSparsifyBytes?: number;
  threads?: number;
  chunkElements?: number;
  directWriteBytes?: number;
}

/**
 * The element-wise configs: their comparisons with mergekit merge on the main thread (threads 1), and the two-worker
 * test below shows for each that two workers (chunks of 100 elements, several file tasks per tensor) write the same
 * bytes, file for file, so mergekit's tensors hold for both. Each took a worker pool of its own before (~0.85 s of CPU
 * under tsx).
 */
const ELEMENT_WISE = ["linear_f32", "linear_bf16", "task_arithmetic", "passthrough_stack", "slices_linear"];

/** The options of config `name`'s kept merge (`outputOf`): the main thread for the element-wise ones, else the defaults. */
function keptOptions(name: string): FixtureOptions {
  return ELEMENT_WISE.includes(name) ? { threads: 1 } : {};
}

async function runFixture(name: string, options: FixtureOptions = {}): Promise<string> {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), `merge-${name}-`));
  const config = parseMergeYaml(fs.readFileSync(path.join(FIXTURES, "configs", `${name}.yml`), "utf8"));
  try {
    await mergeModels(config, out, { modelsDir: FIXTURES, ...options });
  } catch (error) {
    // The caller removes the output of a merge that ran; a refused one leaves nothing behind either.
    fs.rmSync(out, { recursive: true, force: true });
    throw error;
  }
  return out;
}

for (const [name, rule] of Object.entries(MODES)) {
  test(`merge-models ${name} equals mergekit (${rule.mode})`, async () => {
    const out = await runFixture(name, keptOptions(name));
    try {
      const ours = readOutput(out);
      const expected = loadFile(path.join(FIXTURES, "expected", name, "model.safetensors"));
      assert.deepEqual([...ours.keys()].sort(), [...expected.keys()].sort(), "tensor names");
      const config = JSON.parse(fs.readFileSync(path.join(out, "config.json"), "utf8"));
      const expectedConfig = JSON.parse(fs.readFileSync(path.join(FIXTURES, "expected", name, "config.json"), "utf8"));
      assert.equal(config.num_hidden_layers, expectedConfig.num_hidden_layers, "num_hidden_layers");
      if (rule.mode === "stats") return compareStats(name, ours, expected);
      for (const [tensorName, want] of expected) {
        const got = ours.get(tensorName)!;
        assert.equal(got.dtype, want.dtype, `${tensorName} dtype`);
        assert.deepEqual(got.shape, want.shape, `${tensorName} shape`);
        if (rule.mode === "exact") {
          if (!Buffer.from(got.data).equals(Buffer.from(want.data))) {
            const a = floats(got);
            const b = floats(want);
            const i = a.findIndex((v, k) => !Object.is(v, b[k]));
            assert.fail(`${tensorName}: element ${i} is ${a[i]}, mergekit's is ${b[i]}`);
          }
          continue;
        }
        // mergekit's norms and dot products come from numpy's / torch's reductions, summed in an order of their
        // own: a scalar one float32 ulp off moves results where terms cancel, so the bound is in units at the
        // tensor's largest magnitude.
        const a = floats(got);
        const b = floats(want);
        const unit = ulp(
          b.reduce((m, v) => Math.max(m, Math.abs(v)), 0),
          want.dtype,
        );
        for (let i = 0; i < a.length; i++) {
          const d = Math.abs(a[i]! - b[i]!) / unit;
          if (!(d <= rule.ulps)) assert.fail(`${tensorName}[${i}]: ${a[i]} vs mergekit's ${b[i]} (${d} units)`);
        }
      }
    } finally {
      merged.set(name, out);
    }
  });
}

/** Config `name` merged with `keptOptions(name)`: the output its comparison with mergekit kept, else merged now, once. */
async function outputOf(name: string): Promise<string> {
  let out = merged.get(name);
  if (out === undefined) {
    out = await runFixture(name, keptOptions(name));
    merged.set(name, out);
  }
  return out;
}

/** A copy of `outputOf(name)` in a directory of its own, for a test that changes it. */
async function copyOf(name: string): Promise<string> {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), `merge-${name}-copy-`));
  fs.cpSync(await outputOf(name), out, { recursive: true });
  return out;
}

/**
 * DARE / DELLA: over the whole model, the share of entries whose merged delta from the base is non-zero, and the
 * merged deltas' L1 norm, as mergekit's (different random drops, same distribution).
 */
function compareStats(name: string, ours: Map<string, Tensor>, expected: Map<string, Tensor>): void {
  const base = loadFile(path.join(FIXTURES, "models", "base", "model.safetensors"));
  const summary = (tensors: Map<string, Tensor>) => {
    let changed = 0;
    let total = 0;
    let l1 = 0;
    for (const [tensorName, tensor] of tensors) {
      const values = floats(tensor);
      const b = floats(base.get(tensorName)!);
      for (let i = 0; i < values.length; i++) {
        const d = values[i]! - b[i]!;
        if (d !== 0) changed++;
        l1 += Math.abs(d);
        total++;
      }
    }
    return { keep: changed / total, l1 };
  };
  const a = summary(ours);
  const b = summary(expected);
  assert.ok(Math.abs(a.keep - b.keep) < 0.03, `${name}: ${a.keep} of entries changed, mergekit ${b.keep}`);
  assert.ok(Math.abs(a.l1 / b.l1 - 1) < 0.08, `${name}: L1 of the merged deltas ${a.l1}, mergekit ${b.l1}`);
}

/**
 * Fixture `name` merged with options `a` (or "kept": `outputOf(name)`, merged with `keptOptions(name)`) and with `b`:
 * every file of the outputs byte for byte the same.
 */
async function assertSameOutputs(name: string, a: FixtureOptions | "kept", b: FixtureOptions): Promise<void> {
  const one = a === "kept" ? await outputOf(name) : await runFixture(name, a);
  const two = await runFixture(name, b);
  try {
    const [first, second] = [one, two].map(
      (out) => new Map(fs.readdirSync(out).map((file) => [file, fs.readFileSync(path.join(out, file))])),
    );
    assert.deepEqual(second, first, name);
  } finally {
    if (a !== "kept") fs.rmSync(one, { recursive: true, force: true });
    fs.rmSync(two, { recursive: true, force: true });
  }
}

test("element-wise merges on two workers (each reads, computes and writes its own chunks) give one thread's bytes", async () => {
  const before = poolCounters.fileTasks;
  const nativeBefore = nativeFileCounters.tasks;
  for (const name of ELEMENT_WISE) {
    // One thread's output: the kept one (keptOptions). Chunks of 100 elements: every tensor is several file tasks, in
    // flight on both workers at once (16-bit linear ones: two addon tasks at once, no worker).
    assert.deepEqual(keptOptions(name), { threads: 1 }, name);
    await assertSameOutputs(name, "kept", { threads: 2, chunkElements: 100 });
  }
  assert.ok(poolCounters.fileTasks - before > 20, `${poolCounters.fileTasks - before} file tasks`);
  // linear_bf16 and the BF16 slices are the addon's from file to file where it is built (and O_DIRECT works here).
  if (fs.existsSync(path.join(repoRoot, "build/Release/safetensors_copy.node")) && process.platform === "linux") {
    assert.ok(nativeFileCounters.tasks - nativeBefore > 20, `${nativeFileCounters.tasks - nativeBefore} addon tasks`);
  }
});

test("a bad threads option is refused before anything is written, also where the addon merges without workers", async () => {
  for (const threads of [0, 1.5, -2]) {
    await assert.rejects(runFixture("linear_bf16", { threads }), (error: { code?: string }) => {
      assert.equal(error.code, "InvalidOption", String(threads));
      return true;
    });
  }
});

test("whole-tensor merges written around the page cache (directWriteBytes 1) give the same bytes", async () => {
  for (const name of ["ties", "slerp"]) await assertSameOutputs(name, "kept", { directWriteBytes: 1 });
});

test("whole-tensor jobs reuse float32 buffers: the largest few kept, a buffer handed to another thread skipped", () => {
  const buffers = new FloatBuffers(2);
  const big = new Float32Array(100);
  const small = new Float32Array(10);
  const gone = new Float32Array(50);
  structuredClone(gone.buffer, { transfer: [gone.buffer] }); // detached, as a task vector sent to a worker
  buffers.give([small, big, gone, big]);
  const a = buffers.take(60);
  assert.equal(a.buffer, big.buffer);
  assert.equal(a.length, 60);
  assert.equal(buffers.take(5).buffer, small.buffer);
  assert.notEqual(buffers.take(5).buffer, small.buffer, "each buffer is taken once");
  buffers.give([new Float32Array(1), new Float32Array(2), new Float32Array(3)]);
  assert.equal(buffers.take(3).length, 3);
  assert.equal(buffers.take(2).buffer.byteLength, 8, "the two largest kept");
  assert.equal(buffers.take(1).buffer.byteLength, 4, "a fresh one");
});

test("DARE's drops are seeded: the same seed gives the same bytes, another seed others", async () => {
  const first = await runFixture("dare_ties", { seed: 7 });
  const second = await runFixture("dare_ties", { seed: 7 });
  const third = await runFixture("dare_ties", { seed: 8 });
  try {
    const bytes = (dir: string) => fs.readFileSync(path.join(dir, "model.safetensors"));
    assert.ok(bytes(first).equals(bytes(second)));
    assert.ok(!bytes(first).equals(bytes(third)));
  } finally {
    for (const dir of [first, second, third]) fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("task vectors sparsified one after the other (a tensor over maxParallelSparsifyBytes) give the same bytes", async () => {
  const serial = await runFixture("ties", { maxParallelSparsifyBytes: 0 });
  try {
    const [a, b] = [await outputOf("ties"), serial].map((out) => fs.readFileSync(path.join(out, "model.safetensors")));
    assert.ok(a!.equals(b!));
  } finally {
    fs.rmSync(serial, { recursive: true, force: true });
  }
});

test("slices: config.json's layer_types follows the layers stacked (transformers checks its length)", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "merge-layer-types-"));
  try {
    for (const model of ["ft1", "ft2"]) {
      fs.cpSync(path.join(FIXTURES, "models", model), path.join(dir, "models", model), { recursive: true });
      const file = path.join(dir, "models", model, "config.json");
      const config = JSON.parse(fs.readFileSync(file, "utf8"));
      fs.writeFileSync(file, JSON.stringify({ ...config, layer_types: ["l0", "l1", "l2", "l3"] }));
    }
    const yaml = fs.readFileSync(path.join(FIXTURES, "configs", "passthrough_stack.yml"), "utf8");
    await mergeModels(yaml, path.join(dir, "out"), { modelsDir: dir });
    const config = JSON.parse(fs.readFileSync(path.join(dir, "out", "config.json"), "utf8"));
    assert.equal(config.num_hidden_layers, 6);
    assert.deepEqual(config.layer_types, ["l0", "l1", "l2", "l1", "l2", "l3"]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a config asking for what is not supported is refused by name before any model is opened", async () => {
  const refused = async (yaml: string, code: string, pattern: RegExp) => {
    await assert.rejects(mergeModels(yaml, "/nonexistent/out", { modelsDir: "/nonexistent" }), (error: unknown) => {
      assert.equal((error as { code?: string }).code, code);
      assert.match((error as Error).message, pattern);
      return true;
    });
  };
  const models = "models:\n  - model: a\n    parameters: {weight: 1}\n";
  await refused(`merge_method: karcher\n${models}`, "UnsupportedMergeConfig", /merge_method `karcher`/);
  await refused(`merge_method: linear\nchat_template: x\n${models}`, "UnsupportedMergeConfig", /`chat_template`/);
  await refused(`merge_method: linear\nfoo: 1\n${models}`, "UnsupportedMergeConfig", /key `foo`/);
  await refused(`merge_method: linear\nparameters: {density: 0.5}\n${models}`, "UnsupportedMergeConfig", /`density`/);
  await refused(`merge_method: linear\ndtype: int8\n${models}`, "UnsupportedMergeConfig", /dtype `int8`/);
  await refused(`merge_method: linear\ntokenizer_source: union\n${models}`, "UnsupportedMergeConfig", /union/);
  await refused(`merge_method: linear\nmodels:\n  - model: a+lora\n`, "UnsupportedMergeConfig", /model\+LoRA/);
  await refused(`merge_method: linear\n`, "InvalidMergeConfig", /`models` and `slices`/);
  await refused(`merge_method: [linear\n`, "InvalidMergeConfig", /not valid YAML/);
});

test("gradients interpolate across a slice's layers and filters pick by name, as mergekit's evaluate_setting", () => {
  const setting = [
    { filter: "self_attn", value: [0, 0.5, 1] },
    { filter: null, value: 0.25 },
  ];
  assert.equal(evaluateSetting("model.layers.3.self_attn.q_proj.weight", setting, 0.25), 0.25);
  assert.equal(evaluateSetting("model.layers.3.self_attn.q_proj.weight", setting, 0.75), 0.75);
  assert.equal(evaluateSetting("model.layers.3.mlp.up_proj.weight", setting, 0.75), 0.25);
  assert.equal(evaluateSetting("x", [0.2, 0.8], 1), 0.8);
  assert.equal(evaluateSetting("x", [{ filter: "mlp", value: 1 }], 0), undefined);
});

test("merge-models on the command line: --json says what was read and written; the output loads as a checkpoint", async () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "merge-cli-"));
  try {
    const config = path.join(out, "config.yml");
    fs.writeFileSync(
      config,
      fs
        .readFileSync(path.join(FIXTURES, "configs", "task_arithmetic.yml"), "utf8")
        .replaceAll("models/", `${FIXTURES}/models/`),
    );
    const result = await cli("merge-models", config, path.join(out, "merged"), "--json");
    assert.equal(result.code, 0, result.stderr);
    const summary = JSON.parse(result.stdout);
    assert.equal(summary.method, "task_arithmetic");
    assert.equal(summary.tensors, 39);
    assert.ok(summary.bytesRead > 0 && summary.bytesWritten > 0);
    const files = fs.readdirSync(path.join(out, "merged")).sort();
    assert.deepEqual(files, ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
    const refused = await cli("merge-models", path.join(out, "missing.yml"), path.join(out, "x"));
    assert.notEqual(refused.code, 0);
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("a merge killed at any point leaves the old checkpoint or the new one, never a mix", async () => {
  const tensorsOf = (dir: string) => {
    const all = readOutput(dir);
    return new Map([...all].map(([name, t]) => [name, Buffer.from(t.data).toString("base64")]));
  };
  const expectedOf = (name: string) =>
    new Map(
      [...loadFile(path.join(FIXTURES, "expected", name, "model.safetensors"))].map(([n, t]) => [
        n,
        Buffer.from(t.data).toString("base64"),
      ]),
    );
  const oldTensors = expectedOf("linear_f32");
  const newTensors = expectedOf("ties");
  const seen = new Set<string>();
  for (const killAt of [1, 7, 30, 80, 140, 100000]) {
    const out = await copyOf("linear_f32");
    try {
      const env = { MERGE_KILL_CHILD: out, MERGE_KILL_AT: String(killAt) };
      const signal = await killAtWrite(fileURLToPath(import.meta.url), env, killAt);
      const now = tensorsOf(out);
      const state = isDeepStrictEqual(now, oldTensors) ? "old" : isDeepStrictEqual(now, newTensors) ? "new" : "mix";
      assert.notEqual(state, "mix", `killed after ${killAt} steps (${signal}): the directory mixes two merges`);
      seen.add(state);
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  }
  assert.deepEqual([...seen].sort(), ["new", "old"], "the kills landed both before and after the commit");
});

test("a merge stops at an aborted signal and leaves the output directory as it was", async () => {
  const out = await copyOf("linear_f32");
  try {
    const before = fs.readdirSync(out).sort();
    const controller = new AbortController();
    let steps = 0;
    await assert.rejects(
      mergeModels(parseMergeYaml(fs.readFileSync(path.join(FIXTURES, "configs", "ties.yml"), "utf8")), out, {
        modelsDir: FIXTURES,
        signal: controller.signal,
        onProgress() {
          if (++steps === 10) controller.abort();
        },
      }),
      (error: Error) => error.name === "AbortError",
    );
    assert.deepEqual(fs.readdirSync(out).sort(), before);
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("transformers loads every merged output, and its logits are those of mergekit's model", {
  skip: python === null ? "no Python with torch and transformers (set SAFETENSORS_MERGE_PYTHON)" : false,
}, async () => {
  const names = Object.keys(MODES);
  // The outputs the comparisons above kept (all of them, unless a name pattern left some of those tests out).
  const outs = await Promise.all(
    names.map(async (name) => merged.get(name) ?? (await runFixture(name, keptOptions(name)))),
  );
  for (const [i, name] of names.entries()) merged.set(name, outs[i]!);
  const differences = logitsDifferences(
    python!,
    names.map((name, i) => [outs[i]!, path.join(FIXTURES, "expected", name, "model.safetensors")] as const),
  );
  names.forEach((name, i) => {
    const { max_abs, max_ref } = differences[i]!;
    // Same tensors give the same logits; DARE and DELLA drop other entries than mergekit's, so their logits
    // only stay of the same size.
    const bound = MODES[name]!.mode === "stats" ? max_ref : 1e-3 * Math.max(1, max_ref);
    assert.ok(max_abs <= bound, `${name}: logits differ by ${max_abs} (largest ${max_ref})`);
  });
});

test("models at http(s):// locations are read by range: the same bytes as from disk, only the tensors' bytes fetched", async () => {
  const files = new Map<string, { bytes: Uint8Array }>();
  for (const model of ["base", "ft1", "ft2"]) {
    for (const file of fs.readdirSync(path.join(FIXTURES, "models", model))) {
      files.set(`/${model}/${file}`, { bytes: fs.readFileSync(path.join(FIXTURES, "models", model, file)) });
    }
  }
  const server = await startEdgeServer(files);
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "merge-remote-"));
  try {
    const yaml = fs
      .readFileSync(path.join(FIXTURES, "configs", "ties.yml"), "utf8")
      .replaceAll("models/ft3", "models/ft2")
      .replaceAll("models/", `${server.url}/`);
    const local = fs.mkdtempSync(path.join(os.tmpdir(), "merge-local-"));
    try {
      await mergeModels(
        fs.readFileSync(path.join(FIXTURES, "configs", "ties.yml"), "utf8").replaceAll("models/ft3", "models/ft2"),
        local,
        { modelsDir: FIXTURES },
      );
      await mergeModels(yaml, out);
      const a = fs.readFileSync(path.join(out, "model.safetensors"));
      const b = fs.readFileSync(path.join(local, "model.safetensors"));
      assert.ok(a.equals(b), "a remote merge writes the bytes of the same merge from disk");
      assert.ok(fs.existsSync(path.join(out, "tokenizer.json")), "the base's tokenizer files are fetched too");
      assert.ok(
        server.requests.some((r) => r.range !== null),
        "tensors are read with Range requests",
      );
    } finally {
      fs.rmSync(local, { recursive: true, force: true });
    }
  } finally {
    await server.close();
    fs.rmSync(out, { recursive: true, force: true });
  }
});
