/**
 * Held-out models: tiny Llama, Qwen2 and Qwen3 models that transformers makes fresh for this run, each with a byte-level
 * BPE tokenizer trained on another corpus (scripts/gen_gguf_unseen.py; shapes, dtypes, tying and rope scaling drawn
 * from the seed, SAFETENSORS_GGUF_SEED, default 7001; the committed fixtures use seeds 0 to 5). Nothing about them
 * was seen while the converter was written:
 *  - gguf-py's GGUFReader reads our GGUF of each, for every --type, and finds the values that follow from the
 *    checkpoint and its tokenizer files (computed by the generator with gguf-py and numpy: TensorNameMap's names,
 *    llama.cpp's Q/K permutation, gguf.quants.quantize's blocks, the vocabulary, merges and special ids);
 *  - with SAFETENSORS_LLAMA_CPP_CONVERTER (a llama.cpp checkout: its convert_hf_to_gguf.py is run, never copied), our
 *    files for f32, f16, bf16 and q8_0 equal the converter's byte for byte;
 *  - from-gguf of our q8_0 equals gguf-py's dequantize;
 *  - node-llama-cpp (see test/gguf-llama-cpp.test.ts) tokenizes the prompts from our f16 GGUF as transformers does
 *    and continues them greedily with transformers' tokens.
 * Needs the reference venv with transformers, tokenizers, torch and gguf (.ci/run installs them); skips otherwise.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { toGguf } from "../src/gguf/node-convert.js";
import { fromGguf } from "../src/gguf/node-from-gguf.js";
import type { OutputType } from "../src/gguf/plan.js";
import { repoRoot } from "./helpers/corpus.js";
import { greedyTokens, llamaCppMissing, loadLlamaCpp } from "./helpers/llama-cpp.js";
import { missingModules } from "./helpers/python-modules.js";
import { referenceMissingReason, referencePython } from "./helpers/reference.js";

const SEED = Number(process.env.SAFETENSORS_GGUF_SEED ?? 7001);
const CONVERTER = process.env.SAFETENSORS_LLAMA_CPP_CONVERTER;

/** The reference python when it can make and read the models (transformers, tokenizers, torch, gguf-py). */
function modelPython(): { python: string | null; why: string } {
  const ref = referencePython();
  if (ref === null) return { python: null, why: referenceMissingReason() };
  const missing = missingModules(ref.python, ["transformers", "tokenizers", "torch", "gguf"]);
  if (missing.length > 0) return { python: null, why: `${ref.python} has no ${missing.join(", ")}` };
  return { python: ref.python, why: "" };
}
const { python, why } = modelPython();
const noPython = python === null ? `held-out GGUF models not made: ${why}` : false;
if (noPython) process.emitWarning(noPython, { code: "SAFETENSORS_GGUF_UNSEEN_MISSING" });

interface Greedy {
  prompt: string;
  ids: number[];
  continuation: number[];
  margins: number[];
}
interface Expected {
  seed: number;
  models: Record<string, { pre: string; dtype: string; tensors: Record<string, unknown>; greedy: Greedy[] }>;
}
interface Verdict {
  checked: number;
  converter_checked: number;
  mismatches: unknown[][];
}

let dir = "";
let expected: Expected;
const TYPES: OutputType[] = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"];
const gguf = (model: string, type: string) => path.join(dir, "out", `${model}-${type.toLowerCase()}.gguf`);

function runPython(args: string[]): string {
  const run = spawnSync(python as string, args, { encoding: "utf8", maxBuffer: 64 << 20, timeout: 600_000 });
  assert.equal(run.status, 0, `${args[0]} failed (seed ${SEED}):\n${run.stderr}`);
  return run.stdout;
}

before(async () => {
  if (noPython) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "gguf-unseen-"));
  runPython([path.join(repoRoot, "scripts/gen_gguf_unseen.py"), dir, `--seed=${SEED}`]);
  expected = JSON.parse(fs.readFileSync(path.join(dir, "expected.json"), "utf8")) as Expected;
  fs.mkdirSync(path.join(dir, "out"));
  for (const [model, exp] of Object.entries(expected.models)) {
    for (const type of TYPES) {
      await toGguf(path.join(dir, model), gguf(model, type), { type, tokenizerPre: exp.pre, threads: 0 });
    }
  }
});

after(() => {
  if (dir !== "") fs.rmSync(dir, { recursive: true, force: true });
});

const check = (extra: string[] = []): Verdict =>
  JSON.parse(
    runPython([
      path.join(repoRoot, "test/helpers/gguf_unseen_check.py"),
      path.join(dir, "expected.json"),
      path.join(dir, "out"),
      ...extra,
    ]),
  ) as Verdict;

test(`held-out models (seed ${SEED}): gguf-py reads our GGUF with the expected keys and tensors, every --type`, {
  skip: noPython,
}, () => {
  const verdict = check();
  assert.equal(verdict.checked, Object.keys(expected.models).length * TYPES.length);
  assert.deepEqual(verdict.mismatches, []);
});

test(`held-out models (seed ${SEED}): our f32/f16/bf16/q8_0 GGUF equal llama.cpp's converter's`, {
  skip:
    noPython ||
    (CONVERTER === undefined
      ? "SAFETENSORS_LLAMA_CPP_CONVERTER is not set (a llama.cpp checkout whose convert_hf_to_gguf.py is run)"
      : false),
  timeout: 900_000,
}, () => {
  const verdict = check(["--converter", CONVERTER as string, dir]);
  assert.equal(verdict.converter_checked, Object.keys(expected.models).length * 4);
  assert.deepEqual(verdict.mismatches, []);
});

test(`held-out models (seed ${SEED}): from-gguf of our q8_0 equals gguf-py's dequantize`, {
  skip: noPython,
}, async () => {
  for (const model of Object.keys(expected.models)) {
    const back = path.join(dir, `${model}-back`);
    await fromGguf(gguf(model, "Q8_0"), back);
    const theirs = JSON.parse(
      runPython([
        path.join(repoRoot, "test/helpers/gguf_check.py"),
        gguf(model, "Q8_0"),
        path.join(back, "model.safetensors"),
      ]),
    ) as { dequantized_equal: Record<string, boolean> };
    const names = Object.keys(theirs.dequantized_equal);
    assert.ok(names.length >= 10, `${model}: ${names.length} tensors compared`);
    assert.deepEqual(
      Object.entries(theirs.dequantized_equal).filter(([, same]) => !same),
      [],
      `${model}: from-gguf differs from gguf-py's dequantize`,
    );
  }
});

/**
 * How far apart transformers' top two logits must be for llama.cpp to have to pick the same token: the f16 GGUF
 * rounds every weight, and llama.cpp sums in another order, so a near tie may go either way. A difference is
 * accepted only at a step whose margin is below this, and the comparison stops there.
 */
const NEAR_TIE = 0.02;

test(`held-out models (seed ${SEED}): node-llama-cpp tokenizes and continues prompts from our f16 GGUF as transformers does`, {
  skip: noPython || llamaCppMissing,
  timeout: 600_000,
}, async () => {
  const llama = await loadLlamaCpp();
  let compared = 0;
  try {
    for (const [model, exp] of Object.entries(expected.models)) {
      const loaded = await llama.loadModel({ modelPath: gguf(model, "F16") });
      try {
        for (const g of exp.greedy) {
          const bos = loaded.tokens.bos;
          const ids = bos !== null && g.ids[0] === bos ? g.ids.slice(1) : g.ids;
          assert.deepEqual(loaded.tokenize(g.prompt), ids, `${model}: llama.cpp tokenizes ${JSON.stringify(g.prompt)}`);
          const got = await greedyTokens(loaded, g.ids, g.continuation.length);
          assert.ok(got.length > 0, `${model} ${JSON.stringify(g.prompt)}: llama.cpp generated nothing`);
          for (let i = 0; i < got.length; i++) {
            if (got[i] === g.continuation[i]) {
              compared++;
              continue;
            }
            assert.ok(
              g.margins[i]! < NEAR_TIE,
              `${model} ${JSON.stringify(g.prompt)} step ${i}: llama.cpp ${got} vs transformers ${g.continuation} ` +
                `(top-2 margin ${g.margins[i]})`,
            );
            break;
          }
        }
      } finally {
        await loaded.dispose();
      }
    }
  } finally {
    await llama.dispose();
  }
  const total = Object.values(expected.models).reduce(
    (n, m) => n + m.greedy.length * m.greedy[0]!.continuation.length,
    0,
  );
  assert.ok(compared >= total / 2, `only ${compared} of ${total} tokens compared before near ties and end tokens`);
});
