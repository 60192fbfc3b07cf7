/**
 * Inputs of the merge and LoRA benchmark figures: the bench's synthetic 2.37 GiB Llama-style fp16 checkpoint layout
 * (bench/spec.ts) as a model directory with a config.json, two seeded fine-tunes of it, a PEFT LoRA adapter (r = 16
 * on every linear layer of every block) and the mergekit configs the figures run (linear of the two fine-tunes, TIES
 * of both over the base).
 *
 *   node --import tsx scripts/gen_merge_bench.ts DIR      (default /work/bench-data/merge; ~7.2 GiB)
 *
 * Files are written with the library's streaming writer, 4 Mi elements at a time; values come from a counter-based
 * hash, so every run makes the same bytes.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { checkpointSpec, HIDDEN, INTERMEDIATE, LAYERS, VOCAB } from "../bench/spec.js";
import { fromFloat32 } from "../src/codecs/index.js";
import { createWriter } from "../src/io/stream-writer.js";
import { uniform } from "../src/merge/kernels.js";

const dir = path.resolve(process.argv[2] ?? "/work/bench-data/merge");
const CHUNK = 1 << 22;

const LLAMA_CONFIG = {
  architectures: ["LlamaForCausalLM"],
  model_type: "llama",
  hidden_size: HIDDEN,
  intermediate_size: INTERMEDIATE,
  num_hidden_layers: LAYERS,
  num_attention_heads: 32,
  num_key_value_heads: 32,
  vocab_size: VOCAB,
  max_position_embeddings: 2048,
  rms_norm_eps: 1e-5,
  tie_word_embeddings: false,
  torch_dtype: "float16",
  bos_token_id: 1,
  eos_token_id: 2,
};

/** Write one fp16 model: value(tensorIndex, element) for every element. */
function writeModel(name: string, value: (tensor: number, index: number) => number): void {
  const out = path.join(dir, name);
  fs.mkdirSync(out, { recursive: true });
  const target = path.join(out, "model.safetensors");
  if (fs.existsSync(target)) return;
  const specs = checkpointSpec();
  const writer = createWriter(
    target,
    specs.map((s) => [s.name, { dtype: "F16", shape: s.shape }] as const),
    { format: "pt" },
  );
  const values = new Float32Array(CHUNK);
  specs.forEach((spec, t) => {
    const count = spec.shape.reduce((a, b) => a * b, 1);
    for (let first = 0; first < count; first += CHUNK) {
      const n = Math.min(CHUNK, count - first);
      for (let i = 0; i < n; i++) values[i] = value(t, first + i);
      writer.write(spec.name, fromFloat32("F16", values.subarray(0, n)), first * 2);
    }
  });
  writer.commit();
  fs.writeFileSync(path.join(out, "config.json"), `${JSON.stringify(LLAMA_CONFIG, null, 2)}\n`);
  console.log("wrote", target);
}

const base = (t: number, i: number) => (uniform(1, t, i) - 0.5) * 0.1;
writeModel("base", base);
writeModel("ft1", (t, i) => base(t, i) + (uniform(2, t, i) - 0.5) * 0.01);
writeModel("ft2", (t, i) => base(t, i) + (uniform(3, t, i) - 0.5) * 0.01);

// A PEFT LoRA adapter, r = 16 on q, k, v, o, gate, up and down of every layer (float32, as PEFT saves).
const adapterDir = path.join(dir, "lora-r16");
fs.mkdirSync(adapterDir, { recursive: true });
const adapterFile = path.join(adapterDir, "adapter_model.safetensors");
if (!fs.existsSync(adapterFile)) {
  const R = 16;
  const tensors: [string, { dtype: "F32"; shape: number[] }][] = [];
  for (let l = 0; l < LAYERS; l++) {
    for (const [module, out, inp] of [
      ["self_attn.q_proj", HIDDEN, HIDDEN],
      ["self_attn.k_proj", HIDDEN, HIDDEN],
      ["self_attn.v_proj", HIDDEN, HIDDEN],
      ["self_attn.o_proj", HIDDEN, HIDDEN],
      ["mlp.gate_proj", INTERMEDIATE, HIDDEN],
      ["mlp.up_proj", INTERMEDIATE, HIDDEN],
      ["mlp.down_proj", HIDDEN, INTERMEDIATE],
    ] as const) {
      const prefix = `base_model.model.model.layers.${l}.${module}`;
      tensors.push([`${prefix}.lora_A.weight`, { dtype: "F32", shape: [R, inp] }]);
      tensors.push([`${prefix}.lora_B.weight`, { dtype: "F32", shape: [out, R] }]);
    }
  }
  const writer = createWriter(adapterFile, tensors, null);
  tensors.forEach(([name, { shape }], t) => {
    const n = shape[0]! * shape[1]!;
    const values = new Float32Array(n);
    for (let i = 0; i < n; i++) values[i] = (uniform(9, t, i) - 0.5) * 0.02;
    writer.write(name, values);
  });
  writer.commit();
  fs.writeFileSync(
    path.join(adapterDir, "adapter_config.json"),
    `${JSON.stringify(
      {
        peft_type: "LORA",
        r: R,
        lora_alpha: 32,
        target_modules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        base_model_name_or_path: path.join(dir, "base"),
        fan_in_fan_out: false,
        use_rslora: false,
        use_dora: false,
        lora_dropout: 0,
        bias: "none",
        task_type: "CAUSAL_LM",
        inference_mode: true,
      },
      null,
      2,
    )}\n`,
  );
  console.log("wrote", adapterFile);
}

fs.writeFileSync(
  path.join(dir, "linear.yml"),
  `merge_method: linear
dtype: float16
models:
  - model: ${dir}/ft1
    parameters: {weight: 0.6}
  - model: ${dir}/ft2
    parameters: {weight: 0.4}
`,
);
fs.writeFileSync(
  path.join(dir, "ties.yml"),
  `merge_method: ties
base_model: ${dir}/base
dtype: float16
models:
  - model: ${dir}/ft1
    parameters: {weight: 0.5, density: 0.5}
  - model: ${dir}/ft2
    parameters: {weight: 0.5, density: 0.5}
`,
);
