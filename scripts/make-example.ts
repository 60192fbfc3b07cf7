/**
 * Generates examples/tiny-llama.safetensors: a small Llama-shaped checkpoint (2 layers, hidden 64, vocab 256) with
 * deterministic pseudo-random weights in F16, norms in F32, a BF16 lm_head and an I64 buffer, plus metadata.
 * Run: npm run example
 */
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { saveFile, Tensor } from "../src/node.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(root, "examples", "tiny-llama.safetensors");

/** xorshift32: the same bytes on every machine. */
function random(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 2 ** 32;
  };
}

const hidden = 64;
const intermediate = 172;
const vocab = 256;
const layers = 2;
const next = random(20261130);
const normal = (scale: number) => () => (next() + next() + next() - 1.5) * scale;

const tensors = new Map<string, Tensor>();
const weight = (name: string, dtype: "F16" | "BF16" | "F32", shape: number[], fill: () => number) => {
  const values = new Float32Array(shape.reduce((a, b) => a * b, 1)).map(fill);
  tensors.set(name, Tensor.fromFloat32(dtype, shape, values));
};

weight("model.embed_tokens.weight", "F16", [vocab, hidden], normal(0.05));
for (let i = 0; i < layers; i++) {
  const p = `model.layers.${i}`;
  for (const proj of ["q", "k", "v", "o"])
    weight(`${p}.self_attn.${proj}_proj.weight`, "F16", [hidden, hidden], normal(0.04));
  weight(`${p}.mlp.gate_proj.weight`, "F16", [intermediate, hidden], normal(0.04));
  weight(`${p}.mlp.up_proj.weight`, "F16", [intermediate, hidden], normal(0.04));
  weight(`${p}.mlp.down_proj.weight`, "F16", [hidden, intermediate], normal(0.04));
  weight(`${p}.input_layernorm.weight`, "F32", [hidden], () => 1);
  weight(`${p}.post_attention_layernorm.weight`, "F32", [hidden], () => 1);
}
weight("model.norm.weight", "F32", [hidden], () => 1);
weight("lm_head.weight", "BF16", [vocab, hidden], normal(0.05));
tensors.set(
  "rotary_emb.position_ids",
  Tensor.fromTypedArray(
    "I64",
    [1, 32],
    BigInt64Array.from({ length: 32 }, (_, i) => BigInt(i)),
  ),
);

saveFile(out, tensors, {
  format: "pt",
  generator: "safetensors-ts scripts/make-example.ts",
  architecture: "LlamaForCausalLM (tiny)",
});
console.log(`wrote ${path.relative(root, out)}`);
