/**
 * LoRA extraction (`lora extract`, `extractLora`) against numpy's SVD, mergekit-extract-lora and PEFT, on
 * test/fixtures/extract (scripts/gen_extract_fixtures.py): a float32 tiny Llama, a fine-tune of it moved by full-rank
 * updates of decaying spectrum (the rank-R truncation leaves a known error) and one moved by rank-3 products (an
 * extraction at rank >= 3 gives the fine-tune back). Also the SVD kernel on its own (svd.ts).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { toFloat32 } from "../src/codecs/index.js";
import { SafetensorError } from "../src/format/errors.js";
import { extractLora } from "../src/merge/node-extract.js";
import { bakeLora } from "../src/merge/node-lora.js";
import { gaussian, symmetricEigen, truncatedSvd } from "../src/merge/svd.js";
import { loadFile, saveFile } from "../src/read/node-files.js";
import { openSharded } from "../src/shards/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { mergePython } from "./helpers/python-modules.js";
import { cli } from "./helpers/run-cli.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/extract");
const MODELS = path.join(FIXTURES, "models");
const expected = JSON.parse(fs.readFileSync(path.join(FIXTURES, "expected", "svd.json"), "utf8")) as Record<
  string,
  Record<string, { singular_values: number[]; optimal_error: Record<string, number>; norm: number }>
>;

type Tensors = Map<string, { values: Float32Array; shape: readonly number[]; dtype: string }>;

function tensorsOf(file: string): Tensors {
  const out: Tensors = new Map();
  for (const [name, t] of loadFile(file)) {
    out.set(name, { values: toFloat32(t.dtype, t.data, { count: t.numel }).slice(), shape: t.shape, dtype: t.dtype });
  }
  return out;
}

const model = (name: string) => tensorsOf(path.join(MODELS, name, "model.safetensors"));

/** B·A of a module (float64), as PEFT adds it with r = lora_alpha; an embedding's is transposed back. */
function product(adapter: Tensors, module: string, abs = false): { values: Float64Array; rows: number; cols: number } {
  const embedding = adapter.has(`base_model.model.${module}.lora_embedding_A`);
  const a = adapter.get(`base_model.model.${module}.${embedding ? "lora_embedding_A" : "lora_A.weight"}`)!;
  const b = adapter.get(`base_model.model.${module}.${embedding ? "lora_embedding_B" : "lora_B.weight"}`)!;
  const [r, n] = a.shape as [number, number];
  const m = b.shape[0]!;
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let k = 0; k < r; k++) {
        const term = b.values[i * r + k]! * a.values[k * n + j]!;
        s += abs ? Math.abs(term) : term;
      }
      out[i * n + j] = s;
    }
  }
  if (!embedding) return { values: out, rows: m, cols: n };
  const t = new Float64Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) t[j * m + i] = out[i * n + j]!;
  return { values: t, rows: n, cols: m };
}

/** Σ_k |B_ik · A_kj| of a module's factors. */
const absProduct = (adapter: Tensors, module: string) => product(adapter, module, true).values;

function frobenius(values: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < values.length; i++) s += values[i]! * values[i]!;
  return Math.sqrt(s);
}

async function withDir<T>(prefix: string, body: (dir: string) => Promise<T>): Promise<T> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  try {
    return await body(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const adapterOf = (dir: string) => tensorsOf(path.join(dir, "adapter_model.safetensors"));
const configOf = (dir: string) => JSON.parse(fs.readFileSync(path.join(dir, "adapter_config.json"), "utf8"));

for (const rank of [1, 4, 8]) {
  test(`extraction at rank ${rank} is the optimal truncation (numpy's singular values and error)`, async () => {
    await withDir("extract-full-", async (out) => {
      const summary = await extractLora(path.join(MODELS, "base"), path.join(MODELS, "full"), out, { rank });
      const adapter = adapterOf(out);
      const base = model("base");
      const tuned = model("full");
      const reference = expected.full!;
      assert.equal(summary.modules.length, Object.keys(reference).length - 2); // embed_tokens, lm_head saved whole
      for (const { module, rank: kept, retained } of summary.modules) {
        const name = `${module}.weight`;
        const want = reference[name]!;
        assert.equal(kept, Math.min(rank, ...tuned.get(name)!.shape), module);
        const { values, rows, cols } = product(adapter, module);
        const delta = new Float64Array(values.length);
        const t = tuned.get(name)!.values;
        const b = base.get(name)!.values;
        for (let i = 0; i < delta.length; i++) delta[i] = t[i]! - b[i]! - values[i]!;
        const error = frobenius(delta);
        const optimal = want.optimal_error[String(rank)]!;
        // float32 factors of a float32 update: the error within 1e-5 of ‖ΔW‖ of the optimum.
        assert.ok(Math.abs(error - optimal) <= 1e-5 * want.norm, `${module}: error ${error}, optimum ${optimal}`);
        assert.ok(Math.abs(retained - (1 - (optimal / want.norm) ** 2)) <= 1e-5, `${module}: retained ${retained}`);
        const svd = truncatedSvd(Float32Array.from(values), rows, cols, kept, { method: "exact" });
        for (let i = 0; i < kept; i++) {
          const s = want.singular_values[i]!;
          assert.ok(Math.abs(svd.s[i]! - s) <= 1e-5 * want.singular_values[0]!, `${module} σ${i}: ${svd.s[i]} vs ${s}`);
        }
      }
    });
  });
}

test("a rank-3 fine-tune comes back whole at ranks 3 and 8 (float32)", async () => {
  const base = model("base");
  const tuned = model("lowrank");
  for (const rank of [3, 8]) {
    await withDir("extract-low-", async (out) => {
      const summary = await extractLora(path.join(MODELS, "base"), path.join(MODELS, "lowrank"), out, { rank });
      const adapter = adapterOf(out);
      for (const { module } of summary.modules) {
        const name = `${module}.weight`;
        const { values } = product(adapter, module);
        const t = tuned.get(name)!.values;
        const b = base.get(name)!.values;
        const scale = t.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
        for (let i = 0; i < t.length; i++) {
          const got = Math.fround(b[i]! + values[i]!);
          assert.ok(Math.abs(got - t[i]!) <= 2 ** -20 * scale, `${name}[${i}]: ${got} vs ${t[i]}`);
        }
        // The singular values past 3 are float32 noise: nothing left to keep.
        const expectedSv = expected.lowrank![name]!.singular_values;
        assert.ok(expectedSv[3]! < 1e-5 * expectedSv[0]!);
      }
      // Saved whole: the fine-tune's norms and embeddings, bit for bit.
      for (const [name, t] of tuned) {
        if (t.shape.length === 2 && !/embed_tokens|lm_head/.test(name)) continue;
        assert.deepEqual(adapter.get(`base_model.model.${name}`)!.values, t.values, name);
      }
    });
  }
});

test("bfloat16: the adapter baked by lora merge gives the fine-tune back", async () => {
  for (const dtype of [undefined, "F32"] as const) {
    await withDir("extract-bf16-", async (dir) => {
      const adapterDir = path.join(dir, "adapter");
      await extractLora(path.join(MODELS, "base_bf16"), path.join(MODELS, "lowrank_bf16"), adapterDir, {
        rank: 3,
        dtype,
      });
      const adapter = adapterOf(adapterDir);
      const a = [...adapter.values()].find((t) => t.shape.length === 2)!;
      assert.equal(a.dtype, dtype ?? "BF16");
      await bakeLora(path.join(MODELS, "base_bf16"), [adapterDir], path.join(dir, "baked"));
      const tuned = model("lowrank_bf16");
      const baked = openSharded(path.join(dir, "baked"));
      try {
        let off = 0;
        let total = 0;
        for (const [name, want] of tuned) {
          const got = baked.getTensor(name);
          const values = toFloat32(got.dtype, got.data, { count: got.numel });
          // Σ |b_ik · a_kj|: what rounding each factor to bfloat16 (2^-8 relative) can move an element by.
          const module = name.replace(/^base_model\.model\./, "").replace(/\.weight$/, "");
          const size = adapter.has(`base_model.model.${module}.lora_A.weight`) ? absProduct(adapter, module) : null;
          // bf16(base + B·A) is rank 3 plus the rounding of each element: the truncation drops that rounding noise and
          // spreads what it keeps of it, so the bound is the dtype's unit at the tensor's scale, plus, with bfloat16
          // factors, their rounding (2^-8 relative each): 2^-7 · Σ_k |b_ik · a_kj|.
          const top = want.values.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
          const unit = 2 ** (Math.floor(Math.log2(Math.max(top, 2 ** -126))) - 7);
          for (let i = 0; i < values.length; i++) {
            const diff = Math.abs(values[i]! - want.values[i]!);
            const bound = unit + (dtype === "F32" ? 0 : 2 ** -7 * (size?.[i] ?? 0));
            assert.ok(diff <= bound, `${name}[${i}]: ${values[i]} vs ${want.values[i]}`);
            if (diff !== 0) off++;
            total++;
          }
        }
        // Most elements come back to the bit.
        // float32 factors: 17% of the elements differ from the fine-tune, by its rounding noise the truncation drops.
        assert.ok(off <= total / (dtype === "F32" ? 4 : 2), `${off} of ${total} elements differ`);
        // Against the optimum (numpy's rank-3 truncation in float64, rounded once to bfloat16).
        const optimum = tensorsOf(path.join(FIXTURES, "expected", "lowrank_bf16_r3.safetensors"));
        let same = 0;
        let count = 0;
        for (const [name, want] of optimum) {
          const got = baked.getTensor(name);
          const values = toFloat32(got.dtype, got.data, { count: got.numel });
          const module = name.replace(/\.weight$/, "");
          const size = absProduct(adapter, module);
          for (let i = 0; i < values.length; i++) {
            const unit = 2 ** (Math.floor(Math.log2(Math.max(Math.abs(want.values[i]!), 2 ** -126))) - 7);
            const diff = Math.abs(values[i]! - want.values[i]!);
            // float32 factors: one unit (our float32 B·A, then the rounding); bfloat16: plus the factors' rounding.
            const bound = unit + (dtype === "F32" ? 0 : 2 ** -7 * size[i]!);
            assert.ok(diff <= bound, `${name}[${i}]: ${values[i]} vs the optimum's ${want.values[i]}`);
            if (diff === 0) same++;
            count++;
          }
        }
        if (dtype === "F32") assert.ok(same >= 0.99 * count, `${same} of ${count} equal to the optimum's bits`);
      } finally {
        baked.close();
      }
    });
  }
});

const mergekitCases = fs.existsSync(path.join(FIXTURES, "mergekit", "cases.json"))
  ? (JSON.parse(fs.readFileSync(path.join(FIXTURES, "mergekit", "cases.json"), "utf8")) as Record<
      string,
      { base: string; tuned: string; rank: number; options: string[] }
    >)
  : null;

for (const [name, spec] of Object.entries(mergekitCases ?? { "(no mergekit fixtures)": null })) {
  test(`mergekit-extract-lora ${name}: the same adapter (reconstruction, config, tensors saved whole)`, {
    skip:
      spec === null
        ? "test/fixtures/extract/mergekit absent (run scripts/gen_extract_fixtures.py with mergekit)"
        : false,
  }, async () => {
    await withDir("extract-mk-", async (out) => {
      await extractLora(path.join(MODELS, spec!.base), path.join(MODELS, spec!.tuned), out, {
        rank: spec!.rank,
        embedLora: spec!.options.includes("--embed-lora"),
      });
      const theirsDir = path.join(FIXTURES, "mergekit", name);
      const ours = adapterOf(out);
      const theirs = adapterOf(theirsDir);
      // mergekit writes lora_B.bias without lora_bias, which PEFT drops with a warning; ours leaves out what PEFT
      // cannot apply (and says so), or sets lora_bias when every factored module has a bias.
      const theirKeys = [...theirs.keys()].filter((k) => !k.endsWith(".lora_B.bias"));
      assert.deepEqual([...ours.keys()].sort(), theirKeys.sort());
      for (const tensor of theirKeys) {
        const t = theirs.get(tensor)!;
        const o = ours.get(tensor)!;
        assert.deepEqual(o.shape, t.shape, tensor);
        assert.equal(o.dtype, t.dtype, tensor);
        if (!/lora_(embedding_)?A/.test(tensor) && !/lora_(embedding_)?B/.test(tensor)) {
          assert.deepEqual(o.values, t.values, tensor);
        }
      }
      // Factors differ by signs (and by rotations within equal singular values); their products do not.
      const modules = new Set(
        [...theirs.keys()]
          .filter((k) => /lora_(embedding_)?A/.test(k))
          .map((k) => k.replace(/^base_model\.model\./, "").replace(/\.lora_(embedding_A|A\.weight)$/, "")),
      );
      for (const module of modules) {
        const a = product(ours, module).values;
        const b = product(theirs, module).values;
        const diff = new Float64Array(a.length);
        for (let i = 0; i < a.length; i++) diff[i] = a[i]! - b[i]!;
        assert.ok(frobenius(diff) <= 1e-5 * frobenius(b), `${module}: ${frobenius(diff)} of ${frobenius(b)}`);
      }
      const ourConfig = configOf(out);
      const theirConfig = configOf(theirsDir);
      for (const key of ["r", "lora_alpha", "peft_type", "rank_pattern", "alpha_pattern", "use_rslora"]) {
        assert.deepEqual(ourConfig[key], theirConfig[key], key);
      }
      assert.deepEqual([...ourConfig.target_modules].sort(), [...theirConfig.target_modules].sort());
      assert.deepEqual([...(ourConfig.modules_to_save ?? [])].sort(), [...theirConfig.modules_to_save].sort());
    });
  });
}

test("a rank over a module's size is lowered for it (rank_pattern), or refused with strictRank", async () => {
  await withDir("extract-clamp-", async (out) => {
    const summary = await extractLora(path.join(MODELS, "base"), path.join(MODELS, "lowrank"), out, { rank: 20 });
    const config = configOf(out);
    assert.equal(config.r, 20);
    assert.equal(summary.rank, 20);
    assert.deepEqual(
      Object.keys(config.rank_pattern).sort(),
      summary.modules
        .filter((m) => /k_proj|v_proj/.test(m.module))
        .map((m) => m.module)
        .sort(),
    );
    assert.ok(Object.values(config.rank_pattern).every((r) => r === 16));
    assert.deepEqual(config.alpha_pattern, config.rank_pattern);
    await assert.rejects(
      extractLora(path.join(MODELS, "base"), path.join(MODELS, "lowrank"), path.join(out, "strict"), {
        rank: 20,
        strictRank: true,
      }),
      (e: unknown) => e instanceof SafetensorError && e.code === "InvalidOption" && /k_proj/.test(e.message),
    );
    assert.ok(!fs.existsSync(path.join(out, "strict")));
  });
});

test("sv-epsilon lowers each module's rank to the singular values above it", async () => {
  await withDir("extract-eps-", async (out) => {
    const summary = await extractLora(path.join(MODELS, "base"), path.join(MODELS, "lowrank"), out, {
      rank: 8,
      svEpsilon: 1e-3,
    });
    assert.ok(summary.modules.every((m) => m.rank === 3));
    assert.equal(configOf(out).r, 3);
  });
});

test("models that do not fit together are refused by code, and nothing is written", async () => {
  await withDir("extract-bad-", async (dir) => {
    const other = path.join(repoRoot, "test/fixtures/merge/models/base");
    await assert.rejects(
      extractLora(other, path.join(MODELS, "full"), path.join(dir, "a"), { rank: 2 }),
      (e: unknown) => e instanceof SafetensorError && e.code === "MergeMismatch" && /in the base/.test(e.message),
    );
    // A linear weight the base lacks.
    const tuned = path.join(dir, "tuned.safetensors");
    const base = path.join(dir, "base.safetensors");
    const w = new Float32Array(6).fill(1);
    saveFile(tuned, {
      "x.weight": { dtype: "F32", shape: [2, 3], data: w },
      "y.weight": { dtype: "F32", shape: [3, 2], data: w },
    });
    saveFile(base, { "x.weight": { dtype: "F32", shape: [2, 3], data: w } });
    await assert.rejects(
      extractLora(base, tuned, path.join(dir, "b"), { rank: 1 }),
      (e: unknown) => e instanceof SafetensorError && e.code === "MergeMismatch" && e.tensor === "y.weight",
    );
    await assert.rejects(
      extractLora(base, tuned, path.join(dir, "c"), { rank: 0 }),
      (e: unknown) => e instanceof SafetensorError && e.code === "InvalidOption",
    );
    await assert.rejects(
      extractLora(base, tuned, path.join(dir, "d"), { rank: 1, exclude: ["."] }),
      (e: unknown) => e instanceof SafetensorError && e.code === "InvalidOption" && /no module/.test(e.message),
    );
    for (const name of ["a", "b", "c", "d"]) assert.ok(!fs.existsSync(path.join(dir, name)), name);
  });
});

test("an aborted extraction leaves the output directory as it was", async () => {
  await withDir("extract-abort-", async (dir) => {
    const out = path.join(dir, "out");
    await extractLora(path.join(MODELS, "base"), path.join(MODELS, "lowrank"), out, { rank: 3 });
    const before = fs.readFileSync(path.join(out, "adapter_model.safetensors"));
    const controller = new AbortController();
    await assert.rejects(
      extractLora(path.join(MODELS, "base"), path.join(MODELS, "full"), out, {
        rank: 4,
        signal: controller.signal,
        onProgress: (p) => {
          if (p.modulesDone === 3) controller.abort();
        },
      }),
      (e: unknown) => (e as Error).name === "AbortError",
    );
    assert.deepEqual(fs.readFileSync(path.join(out, "adapter_model.safetensors")), before);
    assert.deepEqual(fs.readdirSync(out).sort(), ["adapter_config.json", "adapter_model.safetensors"]);
  });
});

test("lora extract on the command line: --json, and usage mistakes", async () => {
  await withDir("extract-cli-", async (dir) => {
    const out = path.join(dir, "a");
    const ok = await cli(
      "lora",
      "extract",
      path.join(MODELS, "base"),
      path.join(MODELS, "full"),
      out,
      "--rank",
      "2",
      "--embed-lora",
      "--json",
    );
    assert.equal(ok.code, 0, ok.stderr);
    const summary = JSON.parse(ok.stdout);
    assert.equal(summary.rank, 2);
    assert.ok(summary.modules.some((m: { module: string }) => m.module === "model.embed_tokens"));
    assert.ok(typeof summary.seconds === "number");
    assert.ok(fs.existsSync(path.join(out, "adapter_config.json")));
    const noRank = await cli(
      "lora",
      "extract",
      path.join(MODELS, "base"),
      path.join(MODELS, "full"),
      path.join(dir, "b"),
    );
    assert.equal(noRank.code, 2);
    assert.match(noRank.stderr, /--rank/);
    const wrong = await cli("lora", "merge", path.join(MODELS, "base"), out, path.join(dir, "c"), "--rank", "2");
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /lora extract/);
  });
});

const python = mergePython(["torch", "transformers", "peft"]);

test("PEFT loads the extracted adapters (PeftModel.from_pretrained), and merges them as lora merge does", {
  skip: python === null ? "no Python with torch, transformers and peft (set SAFETENSORS_MERGE_PYTHON)" : false,
}, async () => {
  await withDir("extract-peft-", async (dir) => {
    const cases: { name: string; base?: string; tuned: string; options: { rank: number } & Record<string, unknown> }[] =
      [
        { name: "plain", tuned: "full", options: { rank: 4 } },
        { name: "embed", tuned: "full", options: { rank: 4, embedLora: true } },
        { name: "clamped", tuned: "lowrank", options: { rank: 20 } },
        // Tied embeddings (lm_head saved from embed_tokens), biases changed in q/k/v but not elsewhere: left out.
        { name: "qwen", base: "qwen_base", tuned: "qwen_tuned", options: { rank: 4 } },
        // Only q/k/v, which all have a bias: lora_bias, and PEFT applies the changes.
        { name: "qwen_qkv", base: "qwen_base", tuned: "qwen_tuned", options: { rank: 4, include: ["(q|k|v)_proj"] } },
      ];
    const summaries = new Map<string, Awaited<ReturnType<typeof extractLora>>>();
    const args: string[] = [];
    for (const c of cases) {
      const base = path.join(MODELS, c.base ?? "base");
      const adapterDir = path.join(dir, c.name);
      summaries.set(c.name, await extractLora(base, path.join(MODELS, c.tuned), adapterDir, c.options));
      args.push(base, adapterDir, path.join(dir, `${c.name}.safetensors`));
    }
    const result = spawnSync(python!, [path.join(repoRoot, "scripts", "check_extract_peft.py"), ...args], {
      encoding: "utf8",
    });
    assert.equal(result.status, 0, result.stderr);
    // Rank 4 over rank-2 updates: PEFT's merged Qwen is the fine-tune, but for the biases the first adapter leaves out.
    const qwen = model("qwen_tuned");
    assert.ok(summaries.get("qwen")!.warnings.some((w) => /biases of 6 factored modules/.test(w)));
    assert.equal(configOf(path.join(dir, "qwen")).lora_bias, undefined);
    assert.equal(configOf(path.join(dir, "qwen_qkv")).lora_bias, true);
    for (const name of ["qwen", "qwen_qkv"]) {
      const merged = tensorsOf(path.join(dir, `${name}.safetensors`));
      for (const [tensor, want] of qwen) {
        const got = merged.get(tensor)!.values;
        const scale = want.values.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
        const close = got.every((v, i) => Math.abs(v - want.values[i]!) <= 2 ** -20 * scale);
        const leftOut = name === "qwen" && tensor.endsWith("_proj.bias");
        // --include: other layers are not factored, norms not saved (embeddings are: mergekit's rule).
        const untouched = name === "qwen_qkv" && /(mlp|o_proj|norm)/.test(tensor);
        assert.equal(close, !leftOut && !untouched, `${name}: ${tensor}`);
      }
      // transformers ties lm_head to embed_tokens: the merged model's lm_head is the fine-tune's embedding.
      if (merged.has("lm_head.weight")) {
        assert.deepEqual(merged.get("lm_head.weight")!.values, qwen.get("model.embed_tokens.weight")!.values);
      }
    }
    // lora merge of each adapter equals PEFT's merge: lora_bias (qwen_qkv), and an lm_head saved for a model with tied
    // embeddings (qwen), which gets its own (tie_word_embeddings false, as PEFT's config says).
    for (const c of cases) {
      const adapterDir = path.join(dir, c.name);
      const merged = path.join(dir, `${c.name}.safetensors`);
      await bakeLora(path.join(MODELS, c.base ?? "base"), [adapterDir], path.join(dir, `${c.name}-baked`));
      if (c.base !== undefined) {
        const config = JSON.parse(fs.readFileSync(path.join(dir, `${c.name}-baked`, "config.json"), "utf8"));
        assert.equal(config.tie_word_embeddings, false, c.name);
      }
      const peft = tensorsOf(merged);
      const ours = openSharded(path.join(dir, `${c.name}-baked`));
      try {
        for (const [name, want] of peft) {
          const got = ours.getTensor(name);
          const values = toFloat32(got.dtype, got.data, { count: got.numel });
          const scale = want.values.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
          for (let i = 0; i < values.length; i++) {
            assert.ok(Math.abs(values[i]! - want.values[i]!) <= 2 ** -20 * scale, `${c.name} ${name}[${i}]`);
          }
        }
        // A rank over the fine-tune's (3): PEFT's merged model is the fine-tune.
        if (c.tuned === "lowrank") {
          for (const [name, want] of model("lowrank")) {
            const got = peft.get(name)!.values;
            const scale = want.values.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
            for (let i = 0; i < got.length; i++) {
              assert.ok(Math.abs(got[i]! - want.values[i]!) <= 2 ** -20 * scale, `PEFT ${name}[${i}]`);
            }
          }
        }
      } finally {
        ours.close();
      }
    }
  });
});

test("svd: exact and randomized agree on a decaying spectrum; the same seed gives the same factors", () => {
  const random = gaussian(11);
  const m = 60;
  const n = 90;
  // A = Σ 0.6^i x_i y_iᵀ over random vectors: a decaying spectrum.
  const a = new Float32Array(m * n);
  for (let k = 0; k < 30; k++) {
    const x = Array.from({ length: m }, random);
    const y = Array.from({ length: n }, random);
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) a[i * n + j] = a[i * n + j]! + 0.6 ** k * x[i]! * y[j]!;
  }
  const exact = truncatedSvd(a, m, n, 5, { method: "exact" });
  const randomized = truncatedSvd(a, m, n, 5, { method: "randomized", seed: 3 });
  for (let i = 0; i < 5; i++) assert.ok(Math.abs(exact.s[i]! - randomized.s[i]!) <= 1e-6 * exact.s[0]!, `σ${i}`);
  assert.deepEqual(truncatedSvd(a, m, n, 5, { method: "randomized", seed: 3 }), randomized);
  // Orthonormal singular vectors.
  for (let p = 0; p < 5; p++) {
    for (let q = 0; q < 5; q++) {
      let dot = 0;
      for (let j = 0; j < n; j++) dot += exact.vt[p * n + j]! * exact.vt[q * n + j]!;
      assert.ok(Math.abs(dot - (p === q ? 1 : 0)) < 1e-9);
    }
  }
});

test("svd: full-rank factors rebuild any small matrix (property)", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 9 }),
      fc.integer({ min: 1, max: 9 }),
      fc.integer({ min: 0, max: 1000 }),
      fc.boolean(),
      (m, n, seed, zeros) => {
        const random = gaussian(seed);
        const a = Float32Array.from({ length: m * n }, (_, i) => (zeros && i % 3 === 0 ? 0 : random()));
        const k = Math.min(m, n);
        const svd = truncatedSvd(a, m, n, k, { method: "exact" });
        for (let i = 1; i < k; i++) assert.ok(svd.s[i - 1]! >= svd.s[i]!);
        const scale = Math.max(1, ...Array.from(a, Math.abs));
        for (let i = 0; i < m; i++) {
          for (let j = 0; j < n; j++) {
            let s = 0;
            for (let r = 0; r < k; r++) s += svd.u[i * k + r]! * svd.s[r]! * svd.vt[r * n + j]!;
            assert.ok(Math.abs(s - a[i * n + j]!) <= 1e-6 * scale, `${m}x${n} [${i},${j}]`);
          }
        }
      },
    ),
    { numRuns: 200 },
  );
});

test("svd: symmetricEigen solves G v = λ v", () => {
  const random = gaussian(4);
  const p = 12;
  const g = new Float64Array(p * p);
  for (let i = 0; i < p; i++) for (let j = 0; j <= i; j++) g[i * p + j] = g[j * p + i] = random();
  const copy = g.slice();
  const values = symmetricEigen(g, p);
  for (let c = 0; c < p; c++) {
    for (let i = 0; i < p; i++) {
      let s = 0;
      for (let j = 0; j < p; j++) s += copy[i * p + j]! * g[j * p + c]!;
      assert.ok(Math.abs(s - values[c]! * g[i * p + c]!) < 1e-10);
    }
  }
});
