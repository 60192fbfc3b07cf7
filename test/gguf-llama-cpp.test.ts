/**
 * Checked by llama.cpp itself: node-llama-cpp (3.21.1, prebuilt llama.cpp, never built or downloaded here) loads our
 * GGUF of the tiny fixture models and continues fixed prompts greedily; the tokens must be transformers' greedy
 * continuation of the same safetensors model (scripts/gen_gguf_fixtures.py) for f32 and f16, and agree on the first
 * tokens for q8_0.
 *
 * node-llama-cpp is not a devDependency: with its prebuilt binaries it is 83 MB and 117 packages even for linux-x64
 * alone (732 MB with the CUDA and Vulkan builds npm pulls by default), too much for every `npm install`. .ci/run
 * installs it into .llama-side/ (or point SAFETENSORS_NODE_LLAMA_CPP at a node-llama-cpp package folder); without it
 * this test says it is skipped.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import { toGguf } from "../src/gguf/node-convert.js";
import type { OutputType } from "../src/gguf/plan.js";
import { repoRoot } from "./helpers/corpus.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/gguf");
const packageDir =
  process.env.SAFETENSORS_NODE_LLAMA_CPP ?? path.join(repoRoot, ".llama-side/node_modules/node-llama-cpp");
const entry = path.join(packageDir, "dist/index.js");
const missing = fs.existsSync(entry)
  ? false
  : `node-llama-cpp not found at ${packageDir}: install it with ` +
    "`npm i --prefix .llama-side -E --omit=optional --ignore-scripts node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1` " +
    "(or set SAFETENSORS_NODE_LLAMA_CPP to its package folder)";
if (missing) process.emitWarning(missing, { code: "SAFETENSORS_LLAMA_CPP_MISSING" });

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
  skip: missing,
  timeout: 600_000,
}, async (t) => {
  const { getLlama } = (await import(pathToFileURL(entry).href)) as {
    getLlama: (o: object) => Promise<LlamaApi>;
  };
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
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
              // One thread: llama.cpp's worker threads spin while they wait, and on a busy machine a tiny model's
              // 8 tokens took 18 s with two of them, 6 ms with one.
              const context = await loaded.createContext({ contextSize: 64, threads: 1 });
              try {
                const got: number[] = [];
                for await (const token of context.getSequence().evaluate(g.ids, { temperature: 0 })) {
                  got.push(token);
                  if (got.length >= g.continuation.length) break;
                }
                const n = AGREE[type]!;
                assert.deepEqual(
                  got.slice(0, n),
                  g.continuation.slice(0, n),
                  `${g.prompt}: ${got} vs ${g.continuation}`,
                );
              } finally {
                await context.dispose();
              }
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

interface LlamaApi {
  loadModel(o: { modelPath: string }): Promise<{
    createContext(o: { contextSize: number; threads: number }): Promise<{
      getSequence(): { evaluate(tokens: number[], o: { temperature: number }): AsyncIterable<number> };
      dispose(): Promise<void>;
    }>;
    dispose(): Promise<void>;
  }>;
  dispose(): Promise<void>;
}
