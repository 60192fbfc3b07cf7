/**
 * Checked by llama.cpp itself: node-llama-cpp (3.21.1, prebuilt llama.cpp, never built or downloaded here) loads our
 * GGUF of the tiny fixture models and continues fixed prompts greedily; the tokens must be transformers' greedy
 * continuation of the same safetensors model (scripts/gen_gguf_fixtures.py) for f32 and f16, and agree on the first
 * tokens for q8_0.
 *
 * node-llama-cpp is a side install (test/helpers/llama-cpp.ts); without it this test says it is skipped.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { toGguf } from "../src/gguf/node-convert.js";
import type { OutputType } from "../src/gguf/plan.js";
import { repoRoot } from "./helpers/corpus.js";
import { greedyTokens, llamaCppMissing, loadLlamaCpp } from "./helpers/llama-cpp.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/gguf");
if (llamaCppMissing) process.emitWarning(llamaCppMissing, { code: "SAFETENSORS_LLAMA_CPP_MISSING" });

interface Greedy {
  prompt: string;
  ids: number[];
  continuation: number[];
}
const expected = JSON.parse(fs.readFileSync(path.join(FIXTURES, "expected.json"), "utf8")) as Record<
  string,
  { pre: string | null; greedy?: Greedy[] }
>;

/** The fixture models checked here (all six; the Gemma ones set query_pre_attn_scalar to head_dim, as llama.cpp assumes). */
const CHECKED = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral-spm", "tiny-gemma2", "tiny-gemma3"];

/**
 * How many leading tokens must agree for each type. q8_0 changes every weight a little: on these random tiny
 * models the first token always agrees, later ones can flip where transformers' top two logits are close.
 */
const AGREE: Record<string, number> = { F32: 8, F16: 8, Q8_0: 1 };

test("node-llama-cpp continues prompts from our GGUF as transformers does", {
  skip: llamaCppMissing,
  timeout: 600_000,
}, async (t) => {
  const llama = await loadLlamaCpp();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gguf-llama-cpp-"));
  try {
    for (const [model, exp] of Object.entries(expected)) {
      if (exp.greedy === undefined || !CHECKED.includes(model)) continue;
      for (const type of Object.keys(AGREE) as OutputType[]) {
        await t.test(`${model} ${type}`, async () => {
          const file = path.join(dir, `${model}-${type}.gguf`);
          await toGguf(path.join(FIXTURES, model), file, { type, tokenizerPre: exp.pre ?? undefined, threads: 0 });
          const loaded = await llama.loadModel({ modelPath: file });
          try {
            for (const g of exp.greedy!) {
              const got = await greedyTokens(loaded, g.ids, g.continuation.length);
              const n = AGREE[type]!;
              assert.deepEqual(got.slice(0, n), g.continuation.slice(0, n), `${g.prompt}: ${got} vs ${g.continuation}`);
            }
          } finally {
            await loaded.dispose();
          }
        });
      }
    }
  } finally {
    await llama.dispose();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
