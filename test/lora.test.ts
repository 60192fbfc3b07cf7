/**
 * LoRA bakes against PEFT: each case of test/fixtures/lora/expected/cases.json (scripts/gen_lora_fixtures.py ran
 * PEFT's merge_and_unload() + save_pretrained() on seeded adapters) baked by `bakeLora` and compared tensor by
 * tensor: within one unit in the last place of the tensor's dtype (both compute in float32 and round once; PEFT's
 * B @ A runs through BLAS, which sums the rank in an order of its own).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, test } from "node:test";
import { toFloat32 } from "../src/codecs/index.js";
import { parseAdapterConfig, planLora } from "../src/merge/lora.js";
import { bakeLora } from "../src/merge/node-lora.js";
import { poolCounters } from "../src/merge/node-pool.js";
import { loadFile } from "../src/read/node-files.js";
import { openSharded } from "../src/shards/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { logitsDifferences, mergePython } from "./helpers/python-modules.js";
import { cli } from "./helpers/run-cli.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/lora");
const cases = JSON.parse(fs.readFileSync(path.join(FIXTURES, "expected", "cases.json"), "utf8")) as Record<
  string,
  { base: string; adapters: string[]; weights: number[] }
>;

/** A Python with torch and transformers for the logits check (SAFETENSORS_MERGE_PYTHON, else /work/venv's). */
const python = mergePython(["torch", "transformers"]);

/**
 * Each case's bake from its comparison with PEFT, kept for the two-worker comparison and transformers' logits check
 * below (instead of baking them all again), removed after the file.
 */
const baked = new Map<string, string>();

/**
 * The comparisons with PEFT bake on the main thread (threads 1): the two-worker test below shows for every case that
 * two workers write the same bytes, so PEFT's tensors hold for both. A bake that starts the worker pool costs ~0.85 s
 * of CPU under tsx however small its models (two workers registering tsx), and each comparison started one: the file
 * took 23 s of CPU, 8 of them in those pools (2026-12-03, load 4-6 on 2 cores).
 */
const MAIN_THREAD = { threads: 1 } as const;

/** The adapters of case `spec`, as bakeLora takes them. */
function adaptersOf(spec: { adapters: string[]; weights: number[] }) {
  return spec.adapters.map((adapter, i) => ({
    location: path.join(FIXTURES, "adapters", adapter),
    weight: spec.weights[i],
  }));
}
after(() => {
  for (const out of baked.values()) fs.rmSync(out, { recursive: true, force: true });
});

function ulp(x: number, dtype: string): number {
  const mantissa = dtype === "F32" ? 23 : dtype === "BF16" ? 7 : 10;
  return 2 ** (Math.floor(Math.log2(Math.max(Math.abs(x), 2 ** -126))) - mantissa);
}

for (const [name, spec] of Object.entries(cases)) {
  test(`lora merge ${name} equals PEFT's merge_and_unload`, async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), `lora-${name}-`));
    try {
      const summary = await bakeLora(path.join(FIXTURES, spec.base), adaptersOf(spec), out, MAIN_THREAD);
      assert.ok(summary.updated > 0);
      const expected = loadFile(path.join(FIXTURES, "expected", `${name}.safetensors`));
      const ours = openSharded(out);
      try {
        for (const [tensorName, want] of expected) {
          const got = ours.getTensor(tensorName);
          assert.equal(got.dtype, want.dtype, tensorName);
          assert.deepEqual(got.shape, want.shape, tensorName);
          const a = toFloat32(got.dtype, got.data, { count: got.numel });
          const b = toFloat32(want.dtype, want.data, { count: want.numel });
          // float32 results: units at the tensor's largest magnitude (terms of B @ A cancel); 16-bit: at the value.
          const scale = b.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
          for (let i = 0; i < a.length; i++) {
            const unit = want.dtype === "F32" ? 4 * ulp(scale, "F32") : ulp(b[i]!, want.dtype);
            if (!(Math.abs(a[i]! - b[i]!) <= unit)) {
              assert.fail(`${tensorName}[${i}]: ${a[i]} vs PEFT's ${b[i]}`);
            }
          }
        }
      } finally {
        ours.close();
      }
    } finally {
      baked.set(name, out);
    }
  });
}

/** Every file of a checkpoint directory, by name. */
function filesOf(dir: string): Map<string, Buffer> {
  return new Map(fs.readdirSync(dir).map((name) => [name, fs.readFileSync(path.join(dir, name))]));
}

test("two workers reading, baking and writing their own blocks give the main thread's bytes, for every case", async () => {
  const before = poolCounters.fileTasks;
  for (const [name, spec] of Object.entries(cases)) {
    // The main thread's bake: the one its comparison with PEFT kept, else made now.
    let one = baked.get(name);
    if (one === undefined) {
      one = fs.mkdtempSync(path.join(os.tmpdir(), `lora-${name}-1-`));
      baked.set(name, one);
      await bakeLora(path.join(FIXTURES, spec.base), adaptersOf(spec), one, MAIN_THREAD);
    }
    const two = fs.mkdtempSync(path.join(os.tmpdir(), `lora-${name}-2-`));
    try {
      // Blocks of a few rows: every updated tensor is several file tasks, in flight on both workers at once.
      await bakeLora(path.join(FIXTURES, spec.base), adaptersOf(spec), two, { threads: 2, chunkElements: 200 });
      assert.deepEqual(filesOf(two), filesOf(one), name);
    } finally {
      fs.rmSync(two, { recursive: true, force: true });
    }
  }
  assert.ok(poolCounters.fileTasks - before > 20, `${poolCounters.fileTasks - before} file tasks`);
});

test("lora merge on the command line, and adapters refused by name", async () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "lora-cli-"));
  try {
    const base = path.join(FIXTURES, cases.lora!.base);
    const result = await cli(
      "lora",
      "merge",
      base,
      path.join(FIXTURES, "adapters", "lora"),
      path.join(out, "m"),
      "--json",
    );
    assert.equal(result.code, 0, result.stderr);
    const summary = JSON.parse(result.stdout);
    assert.equal(summary.updated, 28);
    assert.ok(fs.existsSync(path.join(out, "m", "config.json")));
    const bad = path.join(out, "bad");
    fs.mkdirSync(bad);
    fs.copyFileSync(
      path.join(FIXTURES, "adapters", "lora", "adapter_model.safetensors"),
      path.join(bad, "adapter_model.safetensors"),
    );
    const config = JSON.parse(fs.readFileSync(path.join(FIXTURES, "adapters", "lora", "adapter_config.json"), "utf8"));
    fs.writeFileSync(path.join(bad, "adapter_config.json"), JSON.stringify({ ...config, use_qalora: true }));
    const refused = await cli("lora", "merge", base, bad, path.join(out, "n"));
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /UnsupportedAdapter/);
    assert.match(refused.stderr, /use_qalora/);
    assert.ok(!fs.existsSync(path.join(out, "n")));
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("transformers loads every baked model, and its logits are those of PEFT's merged model", {
  skip: python === null ? "no Python with torch and transformers (set SAFETENSORS_MERGE_PYTHON)" : false,
}, async () => {
  const names = Object.keys(cases).filter((name) => !name.startsWith("gpt2"));
  // The bakes the comparisons above kept (all of them, unless a name pattern left some of those tests out).
  const outs = await Promise.all(
    names.map(async (name) => {
      const kept = baked.get(name);
      if (kept !== undefined) return kept;
      const spec = cases[name]!;
      const out = fs.mkdtempSync(path.join(os.tmpdir(), `lora-logits-${name}-`));
      baked.set(name, out);
      await bakeLora(path.join(FIXTURES, spec.base), adaptersOf(spec), out, MAIN_THREAD);
      return out;
    }),
  );
  const differences = logitsDifferences(
    python!,
    names.map((name, i) => [outs[i]!, path.join(FIXTURES, "expected", `${name}.safetensors`)] as const),
  );
  names.forEach((name, i) => {
    const { max_abs, max_ref } = differences[i]!;
    assert.ok(max_abs <= 1e-2 * Math.max(1, max_ref), `${name}: logits differ by ${max_abs} (largest ${max_ref})`);
  });
});

test("lora_bias: lora_B's bias goes to the layer's bias, which must exist and fit; without the option it is dropped", () => {
  const f32 = (...shape: number[]) => ({ dtype: "F32" as const, shape });
  const adapter = new Map([
    ["base_model.model.m.lora_A.weight", f32(2, 3)],
    ["base_model.model.m.lora_B.weight", f32(4, 2)],
    ["base_model.model.m.lora_B.bias", f32(4)],
  ]);
  const config = (loraBias: boolean) =>
    parseAdapterConfig({ peft_type: "LORA", r: 2, lora_alpha: 6, lora_bias: loraBias, target_modules: ["m"] });
  const plan = (base: Map<string, { dtype: "F32"; shape: number[] }>, loraBias: boolean) =>
    planLora(base, [{ config: config(loraBias), tensors: adapter, weight: 0.5 }]);
  const withBias = plan(
    new Map([
      ["m.weight", f32(4, 3)],
      ["m.bias", f32(4)],
    ]),
    true,
  );
  const bias = withBias.find((t) => t.name === "m.bias")!;
  assert.equal(bias.updates.length, 1);
  assert.equal(bias.updates[0]!.bias, true);
  assert.equal(bias.updates[0]!.b, "base_model.model.m.lora_B.bias");
  assert.equal(bias.updates[0]!.scaling, 1.5); // α / r times the adapter's weight
  assert.equal(withBias.find((t) => t.name === "m.weight")!.updates.length, 1);
  // PEFT loads a lora_B.bias into nothing (with a warning) when the config does not ask for it.
  const dropped = plan(
    new Map([
      ["m.weight", f32(4, 3)],
      ["m.bias", f32(4)],
    ]),
    false,
  );
  assert.equal(dropped.find((t) => t.name === "m.bias")!.updates.length, 0);
  assert.throws(() => plan(new Map([["m.weight", f32(4, 3)]]), true), {
    code: "InvalidAdapter",
    message: /no m\.bias/,
  });
  assert.throws(
    () =>
      plan(
        new Map([
          ["m.weight", f32(4, 3)],
          ["m.bias", f32(5)],
        ]),
        true,
      ),
    {
      code: "InvalidAdapter",
      message: /bias is \[4\]/,
    },
  );
});

test("an lm_head saved with the adapter for a base with tied embeddings becomes a tensor of its own", () => {
  const bf16 = (...shape: number[]) => ({ dtype: "BF16" as const, shape });
  const base = new Map([["model.embed_tokens.weight", bf16(8, 4)]]);
  const config = parseAdapterConfig({ peft_type: "LORA", r: 2, lora_alpha: 2, target_modules: ["q_proj"] });
  const plan = (tensors: Map<string, { dtype: "F32" | "BF16"; shape: number[] }>) =>
    planLora(base, [{ config, tensors, weight: 1 }]);
  const saved = plan(new Map([["base_model.model.lm_head.modules_to_save.default.weight", bf16(8, 4)]]));
  const head = saved.find((t) => t.name === "lm_head.weight")!;
  assert.deepEqual(head, {
    name: "lm_head.weight",
    dtype: "BF16",
    shape: [8, 4],
    updates: [],
    replacement: [0, "base_model.model.lm_head.modules_to_save.default.weight"],
    untied: true,
  });
  assert.throws(() => plan(new Map([["base_model.model.lm_head.modules_to_save.default.weight", bf16(9, 4)]])), {
    code: "InvalidAdapter",
  });
  assert.throws(() => plan(new Map([["base_model.model.other.weight", bf16(8, 4)]])), { code: "InvalidAdapter" });
});
