/**
 * Kohya / sd-scripts LoRA files baked into Stable Diffusion checkpoints, against sd-scripts' merge (restated in
 * scripts/gen_kohya_fixtures.py, which made the checkpoints, the LoRA files and the expected tensors): the tensors a
 * LoRA changes within one unit of their dtype at the value (both add in float32 and round once), every other tensor
 * byte for byte; U-Net names mapped from the original layout (SD 1.x's diffusers names, SDXL's original ones), 3x3
 * LoCon, 1x1 convolutions, SDXL's fused OpenCLIP q/k/v, several LoRAs with ratios, a diffusers U-Net alone.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { toFloat32 } from "../src/codecs/index.js";
import { isKohyaLora, kohyaTargets, ldmUnetToDiffusers, planKohya } from "../src/merge/kohya.js";
import { bakeLora } from "../src/merge/node-lora.js";
import { loadFile } from "../src/read/node-files.js";
import { openSharded } from "../src/shards/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/kohya");
const cases = JSON.parse(fs.readFileSync(path.join(FIXTURES, "expected", "cases.json"), "utf8")) as Record<
  string,
  { base: string; loras: string[]; weights: number[]; skipped: number }
>;

function ulp(x: number, dtype: string): number {
  const mantissa = dtype === "F32" ? 23 : dtype === "BF16" ? 7 : 10;
  return 2 ** (Math.floor(Math.log2(Math.max(Math.abs(x), 2 ** -126))) - mantissa);
}

for (const [name, spec] of Object.entries(cases)) {
  test(`lora merge of Kohya LoRA ${name} equals sd-scripts' merge`, async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), `kohya-${name}-`));
    try {
      const summary = await bakeLora(
        path.join(FIXTURES, spec.base),
        spec.loras.map((file, i) => ({ location: path.join(FIXTURES, file), weight: spec.weights[i] })),
        out,
      );
      const expected = loadFile(path.join(FIXTURES, "expected", `${name}.safetensors`));
      const base = loadFile(path.join(FIXTURES, spec.base));
      assert.equal(summary.format, "kohya");
      assert.equal(summary.updated, expected.size, "tensors changed");
      assert.equal(summary.skipped, spec.skipped, "modules of another component");
      const ours = openSharded(out);
      try {
        assert.deepEqual(ours.keys().sort(), [...base.keys()].sort());
        for (const [tensorName, original] of base) {
          const got = ours.getTensor(tensorName);
          const want = expected.get(tensorName);
          assert.equal(got.dtype, original.dtype, tensorName);
          assert.deepEqual(got.shape, original.shape, tensorName);
          if (want === undefined) {
            assert.ok(Buffer.from(got.data).equals(Buffer.from(original.data)), `${tensorName} is unchanged`);
            continue;
          }
          const a = toFloat32(got.dtype, got.data, { count: got.numel });
          const b = toFloat32(want.dtype, want.data, { count: want.numel });
          for (let i = 0; i < a.length; i++) {
            if (!(Math.abs(a[i]! - b[i]!) <= ulp(b[i]!, want.dtype))) {
              assert.fail(`${tensorName}[${i}]: ${a[i]} vs sd-scripts' ${b[i]}`);
            }
          }
        }
      } finally {
        ours.close();
      }
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
}

test("original U-Net names map to diffusers' by the blocks' arithmetic", () => {
  assert.equal(ldmUnetToDiffusers("input_blocks.0.0"), "conv_in");
  assert.equal(ldmUnetToDiffusers("input_blocks.4.0.in_layers.2"), "down_blocks.1.resnets.0.conv1");
  assert.equal(ldmUnetToDiffusers("input_blocks.8.1.proj_in"), "down_blocks.2.attentions.1.proj_in");
  assert.equal(ldmUnetToDiffusers("input_blocks.9.0.op"), "down_blocks.2.downsamplers.0.conv");
  assert.equal(ldmUnetToDiffusers("input_blocks.3.0.skip_connection"), null);
  assert.equal(ldmUnetToDiffusers("middle_block.2.emb_layers.1"), "mid_block.resnets.1.time_emb_proj");
  assert.equal(
    ldmUnetToDiffusers("middle_block.1.transformer_blocks.0.attn2.to_k"),
    "mid_block.attentions.0.transformer_blocks.0.attn2.to_k",
  );
  assert.equal(ldmUnetToDiffusers("output_blocks.2.1.conv"), "up_blocks.0.upsamplers.0.conv");
  assert.equal(ldmUnetToDiffusers("output_blocks.5.2.conv"), "up_blocks.1.upsamplers.0.conv");
  assert.equal(ldmUnetToDiffusers("output_blocks.7.0.skip_connection"), "up_blocks.2.resnets.1.conv_shortcut");
  assert.equal(ldmUnetToDiffusers("label_emb.0.2"), "add_embedding.linear_2");
  assert.equal(ldmUnetToDiffusers("out.2"), "conv_out");
  const fused = kohyaTargets(
    new Map([
      ["conditioner.embedders.1.model.transformer.resblocks.3.attn.in_proj_weight", { dtype: "F16", shape: [30, 10] }],
    ]),
  );
  assert.deepEqual(fused.get("lora_te2_text_model_encoder_layers_3_self_attn_v_proj"), {
    tensor: "conditioner.embedders.1.model.transformer.resblocks.3.attn.in_proj_weight",
    rows: [20, 10],
  });
});

test("Kohya files are told apart from PEFT's; other LyCORIS kinds and unmatched modules are refused by name", async () => {
  assert.equal(isKohyaLora(["lora_unet_mid_block_attentions_0_proj_in.lora_down.weight"]), true);
  assert.equal(isKohyaLora(["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]), false);
  const base = new Map([["model.diffusion_model.out.2.weight", { dtype: "F16" as const, shape: [4, 2, 3, 3] }]]);
  const refuse = (tensors: Record<string, readonly number[]>, code: string, pattern: RegExp) =>
    assert.throws(
      () =>
        planKohya(base, [
          {
            tensors: new Map(Object.entries(tensors).map(([k, shape]) => [k, { dtype: "F16" as const, shape }])),
            alphas: new Map(),
            weight: 1,
          },
        ]),
      (error: Error & { code?: string }) => error.code === code && pattern.test(error.message),
    );
  refuse({ "lora_unet_out_2.hada_w1_a": [4, 2] }, "UnsupportedAdapter", /LoHa/);
  refuse({ "lora_unet_out_2.dora_scale": [4, 1] }, "UnsupportedAdapter", /DoRA/);
  refuse(
    { "lora_unet_nothing.lora_down.weight": [2, 18], "lora_unet_nothing.lora_up.weight": [4, 2] },
    "InvalidAdapter",
    /lora_unet_nothing matches no tensor/,
  );
  refuse(
    { "lora_unet_out_2.lora_down.weight": [2, 17], "lora_unet_out_2.lora_up.weight": [4, 2] },
    "InvalidAdapter",
    /do not fit/,
  );
  const plan = planKohya(base, [
    {
      tensors: new Map([
        ["lora_unet_conv_out.lora_down.weight", { dtype: "F16", shape: [2, 2, 3, 3] }],
        ["lora_unet_conv_out.lora_up.weight", { dtype: "F16", shape: [4, 2, 1, 1] }],
      ]),
      alphas: new Map([["lora_unet_conv_out", 1]]),
      weight: 0.5,
    },
  ]);
  assert.equal(plan.plan[0]!.updates[0]!.scaling, 0.5, "alpha / dim");
  assert.equal(plan.plan[0]!.updates[0]!.ratio, 0.5);

  const out = fs.mkdtempSync(path.join(os.tmpdir(), "kohya-cli-"));
  try {
    const result = await cli(
      "lora",
      "merge",
      path.join(FIXTURES, "sd1.safetensors"),
      path.join(FIXTURES, "lora-sd1-a.safetensors"),
      path.join(FIXTURES, "lora-sd1-b.safetensors"),
      path.join(out, "m"),
      "--weights",
      "0.8,-0.6",
      "--json",
    );
    assert.equal(result.code, 0, result.stderr);
    const summary = JSON.parse(result.stdout);
    assert.equal(summary.format, "kohya");
    assert.ok(fs.existsSync(path.join(out, "m", "model.safetensors")));
    const wrong = await cli(
      "lora",
      "merge",
      path.join(FIXTURES, "sdxl.safetensors"),
      path.join(FIXTURES, "lora-sd1-a.safetensors"),
      path.join(out, "n"),
    );
    assert.notEqual(wrong.code, 0);
    assert.match(wrong.stderr, /InvalidAdapter/);
    assert.ok(!fs.existsSync(path.join(out, "n")), "nothing written");
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("q, k and v updates of a fused projection land on their rows whatever the blocks of rows", async () => {
  const outs: string[] = [];
  try {
    for (const options of [{}, { chunkElements: 7, threads: 1 }, { chunkElements: 13 }]) {
      const out = fs.mkdtempSync(path.join(os.tmpdir(), "kohya-blocks-"));
      outs.push(out);
      const lora = { location: path.join(FIXTURES, "lora-sdxl.safetensors"), weight: 0.7 };
      await bakeLora(path.join(FIXTURES, "sdxl.safetensors"), [lora], out, options);
    }
    const [first, ...others] = outs.map((out) => fs.readFileSync(path.join(out, "model.safetensors")));
    for (const other of others) assert.ok(first!.equals(other), "the same bytes in blocks of one row and of two");
  } finally {
    for (const out of outs) fs.rmSync(out, { recursive: true, force: true });
  }
});
