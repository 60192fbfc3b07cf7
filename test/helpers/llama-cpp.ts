/**
 * node-llama-cpp (llama.cpp's prebuilt binaries) for the GGUF tests: where it is, why it is missing, and greedy
 * continuation. It is not a devDependency (83 MB with its linux-x64 binaries, 732 MB with the CUDA and Vulkan builds
 * npm pulls by default): .ci/run installs it into .llama-side/, or SAFETENSORS_NODE_LLAMA_CPP names its package
 * folder.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { repoRoot } from "./corpus.js";

const packageDir =
  process.env.SAFETENSORS_NODE_LLAMA_CPP ?? path.join(repoRoot, ".llama-side/node_modules/node-llama-cpp");
const entry = path.join(packageDir, "dist/index.js");

/** Why node-llama-cpp cannot be used (a skip reason), or false. */
export const llamaCppMissing: string | false = fs.existsSync(entry)
  ? false
  : `node-llama-cpp not found at ${packageDir}: install it with ` +
    "`npm i --prefix .llama-side -E --omit=optional --ignore-scripts node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1` " +
    "(or set SAFETENSORS_NODE_LLAMA_CPP to its package folder)";

/** llama.cpp on the CPU, never built or downloaded. */
export async function loadLlamaCpp(): Promise<Llama> {
  const { getLlama } = (await import(pathToFileURL(entry).href)) as { getLlama: (o: object) => Promise<Llama> };
  return getLlama({ gpu: false, build: "never", logLevel: "error" });
}

/**
 * llama.cpp's greedy continuation of `ids`, up to `count` tokens; an end-of-generation token is included and ends it.
 */
export async function greedyTokens(model: LlamaModel, ids: number[], count: number): Promise<number[]> {
  // One thread: llama.cpp's worker threads spin while they wait, and on a busy machine a tiny model's 8 tokens took
  // 18 s with two of them, 6 ms with one.
  const context = await model.createContext({ contextSize: 64, threads: 1 });
  try {
    const got: number[] = [];
    for await (const token of context.getSequence().evaluate(ids, { temperature: 0, yieldEogToken: true })) {
      got.push(token);
      if (got.length >= count) break;
    }
    return got;
  } finally {
    await context.dispose();
  }
}

/** The part of node-llama-cpp's API used here. */
export interface LlamaModel {
  tokens: { bos: number | null };
  tokenize(text: string): number[];
  createContext(o: { contextSize: number; threads: number }): Promise<{
    getSequence(): {
      evaluate(tokens: number[], o: { temperature: number; yieldEogToken: boolean }): AsyncIterable<number>;
    };
    dispose(): Promise<void>;
  }>;
  dispose(): Promise<void>;
}
export interface Llama {
  loadModel(o: { modelPath: string }): Promise<LlamaModel>;
  dispose(): Promise<void>;
}
