/**
 * The inspector's pure modules: summaries equal `inspect --json` (real corpus files and the 6-shard set), parameter
 * counting of packed quantized layouts (synthetic headers of each layout), the name tree, metadata rows and facts.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { Dtype } from "../src/format/dtypes.js";
import { openFile } from "../src/node.js";
import { openSharded } from "../src/shards/node.js";
import { describeMetadata, parseJsonValue } from "../src/view/metadata.js";
import { countParameters, detectQuantization, type ParamTensor, quantizationFromConfig } from "../src/view/params.js";
import { type ByteRange, tensorReport } from "../src/view/report.js";
import { heatmap, tensorStats } from "../src/view/stats.js";
import { summarizeFile, summarizeSharded, type TensorEntry } from "../src/view/summary.js";
import { buildTree, visibleRows } from "../src/view/tree.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const KOHYA = "kohya-lycoris-lokr-smart-falcon.safetensors";
const SHARDED = "julia-test-sharded-6";

test("a file's summary carries inspect --json exactly, and totals that agree with it", {
  skip: !corpusAvailable && corpusMissingReason,
}, async () => {
  const files = expectedFiles().filter((f) => f.ok);
  assert.ok(files.length > 20);
  for (const { file } of files) {
    const full = path.join(corpusDir, file);
    const inspected = await cli("inspect", "--json", full);
    assert.equal(inspected.code, 0, inspected.stderr);
    const expected = JSON.parse(inspected.stdout) as Record<string, unknown> & { tensors: { name: string }[] };
    using handle = openFile(full);
    const summary = summarizeFile(handle.header, { source: file });
    for (const key of Object.keys(expected)) {
      assert.deepEqual((summary as unknown as Record<string, unknown>)[key], expected[key], `${file}: ${key}`);
    }
    assert.equal(summary.kind, "file");
    assert.equal(summary.totals.tensors, expected.tensors.length);
    assert.equal(summary.totals.parameters, expected.parameters);
    assert.equal(summary.totals.file_bytes, expected.file_bytes);
    assert.deepEqual(
      summary.tensor_index.map((t) => t.name),
      expected.tensors.map((t) => t.name),
    );
    const byDtype = summary.dtypes.reduce((s, d) => s + d.parameters, 0);
    assert.equal(byDtype, expected.parameters, file);
    for (const t of summary.tensor_index) {
      assert.equal(t.byte_range[1] - t.byte_range[0], t.bytes);
      assert.equal(t.byte_range[0], 8 + (expected.header_bytes as number) + t.data_offsets[0]);
    }
  }
});

test("the 6-shard set: inspect --json exactly, plus which shard holds each tensor", {
  skip: !corpusAvailable && corpusMissingReason,
}, async () => {
  const dir = path.join(corpusDir, SHARDED);
  const inspected = await cli("inspect", "--json", dir);
  assert.equal(inspected.code, 0, inspected.stderr);
  const expected = JSON.parse(inspected.stdout) as {
    shards: {
      file: string;
      tensors: { name: string; data_offsets: number[] }[];
      header_bytes: number;
      file_bytes: number;
    }[];
    parameters: number;
    data_bytes: number;
  };
  using sharded = openSharded(dir);
  const headers = new Map(sharded.shards.map((file) => [file, sharded.shard(file).header]));
  const summary = summarizeSharded({ indexPath: sharded.indexPath, index: sharded.index, headers });
  for (const key of Object.keys(expected)) {
    assert.deepEqual(
      (summary as unknown as Record<string, unknown>)[key],
      (expected as Record<string, unknown>)[key],
      key,
    );
  }
  assert.equal(summary.kind, "sharded");
  assert.equal(summary.placement.length, 6);
  assert.equal(summary.totals.data_bytes, expected.data_bytes);
  assert.equal(summary.totals.parameters, expected.parameters);
  expected.shards.forEach((shard, i) => {
    assert.equal(summary.placement[i]!.file, shard.file);
    assert.equal(summary.placement[i]!.file_bytes, shard.file_bytes);
    assert.equal(summary.placement[i]!.tensors, shard.tensors.length);
    for (const tensor of shard.tensors) {
      const entry: TensorEntry = summary.tensor_index.find((e) => e.name === tensor.name)!;
      assert.equal(summary.placement[entry.file]!.file, shard.file, tensor.name);
      assert.equal(sharded.shardOf(tensor.name), shard.file);
      assert.deepEqual(entry.byte_range, [
        8 + shard.header_bytes + tensor.data_offsets[0]!,
        8 + shard.header_bytes + tensor.data_offsets[1]!,
      ]);
    }
  });
});

test("the kohya LoRA: metadata JSON parsed, training facts surfaced", {
  skip: !corpusAvailable && corpusMissingReason,
}, () => {
  using handle = openFile(path.join(corpusDir, KOHYA));
  const summary = summarizeFile(handle.header);
  const view = summary.metadata_view;
  assert.equal(view.rows.length, handle.header.metadata!.size);
  const tags = view.rows.find((r) => r.key === "ss_tag_frequency")!;
  assert.equal(typeof tags.json, "object");
  assert.equal(view.rows.find((r) => r.key === "ss_dataset_dirs")!.group, "kohya");
  const fact = (id: string) => view.facts.find((f) => f.id === id)?.value;
  assert.equal(fact("network_module"), "lycoris.kohya");
  assert.equal(fact("network_algo"), "lokr");
  assert.equal(fact("network_dim"), "4");
  assert.equal(fact("network_alpha"), "4.0");
  assert.equal(fact("base_model"), "animefull-final-pruned.safetensors");
  assert.equal(fact("resolution"), "(768, 768)");
  assert.equal(fact("epochs"), "10");
  assert.equal(fact("steps"), "3010");
  assert.match(fact("trigger_words")!, /smart falcon/);
  const json = JSON.parse(handle.header.metadata!.get("ss_tag_frequency")!) as Record<string, Record<string, number>>;
  const totals = new Map<string, number>();
  for (const d of Object.values(json))
    for (const [tag, n] of Object.entries(d)) totals.set(tag, (totals.get(tag) ?? 0) + n);
  const top = Math.max(...totals.values());
  assert.equal(view.topTags[0]!.count, top);
  assert.equal(summary.hub_parameters.quantization, null);
});

test("metadata: ModelSpec keys, JSON only for objects and arrays, __proto__ an ordinary key", () => {
  const view = describeMetadata(
    new Map([
      ["modelspec.title", "My model"],
      ["modelspec.architecture", "stable-diffusion-xl-v1-base/lora"],
      ["modelspec.resolution", "1024x1024"],
      ["__proto__", '{"a": 1}'],
      ["n", "12"],
      ["bad", "{not json}"],
    ]),
  );
  assert.deepEqual(
    view.facts.map((f) => [f.id, f.value]),
    [
      ["title", "My model"],
      ["architecture", "stable-diffusion-xl-v1-base/lora"],
      ["resolution", "1024x1024"],
    ],
  );
  assert.deepEqual(view.rows.find((r) => r.key === "__proto__")!.json, { a: 1 });
  assert.equal(view.rows.find((r) => r.key === "n")!.json, undefined);
  assert.equal(parseJsonValue("{not json}"), undefined);
  assert.deepEqual(parseJsonValue(' ["x"] '), ["x"]);
});

const t = (name: string, dtype: string, shape: number[]): ParamTensor => ({ name, dtype, shape });
const counted = (tensors: ParamTensor[], quantization?: Parameters<typeof countParameters>[1]) =>
  countParameters(tensors, quantization);

test("GPTQ: qweight packs 32/bits per I32; qzeros, scales, g_idx not counted; bits inferred from the shapes", () => {
  // A 4096 x 11008 linear layer, group size 128: qweight [4096*bits/32, 11008], scales [32, 11008].
  for (const bits of [2, 4, 8]) {
    const per = 32 / bits;
    const layer = [
      t("model.layers.0.mlp.up_proj.qweight", "I32", [4096 / per, 11008]),
      t("model.layers.0.mlp.up_proj.qzeros", "I32", [32, 11008 / per]),
      t("model.layers.0.mlp.up_proj.scales", "F16", [32, 11008]),
      t("model.layers.0.mlp.up_proj.g_idx", "I32", [4096]),
      t("model.layers.0.mlp.up_proj.bias", "F16", [11008]),
      t("lm_head.weight", "F16", [32000, 4096]),
    ];
    const withConfig = counted(layer, { quantization: { quant_method: "gptq", bits } });
    assert.equal(withConfig.total, 4096 * 11008 + 11008 + 32000 * 4096, `${bits} bits`);
    assert.equal(withConfig.perTensor.get("model.layers.0.mlp.up_proj.scales"), 0);
    assert.equal(withConfig.quantization?.source, "config");
    const inferred = counted(layer);
    assert.deepEqual(inferred.perTensor, withConfig.perTensor, `${bits} bits inferred`);
    assert.equal(inferred.quantization?.method, "gptq");
    assert.equal(inferred.quantization?.bits, bits);
    assert.equal(inferred.quantization?.source, "inferred");
  }
  // 3 bits: the Hub's floor(32 / 3) = 10 per element.
  const three = counted([t("a.qweight", "I32", [100, 64])], { quantization: { quant_method: "gptq", bits: 3 } });
  assert.equal(three.total, 100 * 64 * 10);
  // modules_to_not_convert keeps a module's tensors as they are.
  const kept = counted([t("lm_head.qweight", "I32", [10, 10])], {
    quantization: { quant_method: "gptq", bits: 4, modules_to_not_convert: ["lm_head"] },
  });
  assert.equal(kept.total, 100);
});

test("AWQ: qweight [in, out*bits/32] detected as AWQ, same counting", () => {
  const layer = [
    t("m.q_proj.qweight", "I32", [4096, 4096 / 8]),
    t("m.q_proj.qzeros", "I32", [32, 4096 / 8]),
    t("m.q_proj.scales", "F16", [32, 4096]),
  ];
  const c = counted(layer);
  assert.equal(c.quantization?.method, "awq");
  assert.equal(c.quantization?.bits, 4);
  assert.equal(c.total, 4096 * 4096);
  assert.deepEqual(detectQuantization(layer), { quant_method: "awq", bits: 4 });
});

test("bitsandbytes 4-bit: U8 weight x2, quant state not counted", () => {
  const layer = [
    t("m.o_proj.weight", "U8", [(4096 * 4096) / 2, 1]),
    t("m.o_proj.weight.absmax", "F32", [262144]),
    t("m.o_proj.weight.quant_map", "F32", [16]),
    t("m.o_proj.weight.nested_absmax", "F32", [1024]),
    t("m.o_proj.weight.nested_quant_map", "F32", [256]),
    t("m.o_proj.weight.quant_state.bitsandbytes__nf4", "U8", [100]),
    t("m.norm.weight", "F16", [4096]),
  ];
  const c = counted(layer);
  assert.equal(c.quantization?.method, "bitsandbytes");
  assert.equal(c.total, 4096 * 4096 + 4096);
  assert.equal(c.notes.get("m.o_proj.weight"), "packed x2");
  const config = quantizationFromConfig({ quantization_config: { quant_method: "bitsandbytes", load_in_4bit: true } });
  assert.deepEqual(counted(layer, { quantization: config }).perTensor, c.perTensor);
});

test("MXFP4 (gpt-oss): U8 _blocks x2, U8 _scales not counted; F8_E8M0 never counted", () => {
  const layer = [
    t("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", [32, 5760, 90, 16]),
    t("model.layers.0.mlp.experts.gate_up_proj_scales", "U8", [32, 5760, 90]),
    t("model.layers.0.mlp.experts.gate_up_proj_bias", "BF16", [32, 5760]),
    t("model.layers.0.mlp.router.weight", "BF16", [32, 2880]),
  ];
  const c = counted(layer);
  assert.equal(c.quantization?.method, "mxfp4");
  assert.equal(c.total, 32 * 5760 * 90 * 16 * 2 + 32 * 5760 + 32 * 2880);
  const e8 = counted([t("w", "F8_E4M3", [4, 4]), t("w_scale", "F8_E8M0", [4])], { quantization: null });
  assert.equal(e8.total, 16);
});

test("compressed-tensors pack-quantized: weight_packed x (container / num_bits); weight_shape, scales not counted", () => {
  const layer = [
    t("m.down_proj.weight_packed", "I32", [4096, 11008 / 8]),
    t("m.down_proj.weight_scale", "BF16", [4096, 86]),
    t("m.down_proj.weight_zero_point", "I32", [4096, 11]),
    t("m.down_proj.weight_shape", "I64", [2]),
    t("lm_head.weight", "BF16", [32000, 4096]),
  ];
  const inferred = counted(layer);
  assert.equal(inferred.quantization?.method, "compressed-tensors");
  assert.equal(inferred.total, 4096 * 11008 + 32000 * 4096);
  const eight = counted(layer, {
    quantization: {
      quant_method: "compressed-tensors",
      format: "pack-quantized",
      config_groups: { group_0: { targets: ["Linear"], weights: { num_bits: 8 } } },
      ignore: ["lm_head"],
    },
  });
  assert.equal(eight.perTensor.get("m.down_proj.weight_packed"), 4096 * (11008 / 8) * 4);
  assert.equal(eight.perTensor.get("lm_head.weight"), 32000 * 4096);
  // A `re:` target picks the group; regex syntax beyond the common subset never matches.
  const targeted = counted([t("model.layers.3.mlp.weight_packed", "I32", [8, 8])], {
    quantization: {
      quant_method: "compressed-tensors",
      config_groups: {
        a: { format: "pack-quantized", targets: ["re:.*mlp$"], weights: { num_bits: 2 } },
        b: { format: "pack-quantized", targets: ["re:(evil)+"], weights: { num_bits: 8 } },
      },
    },
  });
  assert.equal(targeted.total, 64 * 16);
});

test("fp8 with weight_scale_inv: scales not counted; plain files count elements, scalars excepted", () => {
  const c = counted([t("m.w.weight", "F8_E4M3", [128, 128]), t("m.w.weight_scale_inv", "F32", [1, 1])]);
  assert.equal(c.quantization?.method, "fp8");
  assert.equal(c.total, 128 * 128);
  const plain = counted([t("a", "F32", [3, 4]), t("scale", "F32", []), t("weight_scale", "F32", [2])]);
  assert.equal(plain.quantization, null);
  assert.equal(plain.total, 14);
  assert.equal(plain.notes.get("scale"), "scalar");
});

test("tree: dotted names, layers folded and sorted numerically, subtotals per node", () => {
  const names = [
    "model.embed.weight",
    "model.layers.10.attn.weight",
    "model.layers.2.attn.weight",
    "model.layers.2.mlp.weight",
    "model.layers.10",
    "lm_head.weight",
    "__proto__.x",
  ];
  const root = buildTree(names.map((name, i) => ({ name, bytes: 10 * (i + 1), parameters: i + 1 })));
  assert.equal(root.tensors, names.length);
  assert.equal(root.parameters, 28);
  const model = root.children[0]!;
  assert.equal(model.path, "model");
  const layers = model.children[1]!;
  assert.equal(layers.segment, "layers");
  assert.ok(layers.folded);
  assert.equal(layers.layers, 2);
  assert.deepEqual(
    layers.children.map((c) => c.segment),
    ["2", "10"],
  );
  const ten = layers.children[1]!;
  assert.equal(ten.tensor, "model.layers.10");
  assert.equal(ten.tensors, 2);
  assert.equal(ten.parameters, 2 + 5);
  assert.equal(ten.bytes, 20 + 50);
  assert.equal(root.children[2]!.segment, "__proto__");
  const closed = visibleRows(root, () => false);
  assert.deepEqual(
    closed.map((r) => r.node.path),
    ["model", "lm_head", "__proto__"],
  );
  const open = visibleRows(root, (n) => n.path !== "model.layers");
  assert.deepEqual(
    open.map((r) => r.node.path),
    [
      "model",
      "model.embed",
      "model.embed.weight",
      "model.layers",
      "lm_head",
      "lm_head.weight",
      "__proto__",
      "__proto__.x",
    ],
  );
});

test("tree of the kohya LoRA: 1,750 tensors, subtotals add up", {
  skip: !corpusAvailable && corpusMissingReason,
}, () => {
  using handle = openFile(path.join(corpusDir, KOHYA));
  const summary = summarizeFile(handle.header);
  const root = buildTree(summary.tensor_index);
  assert.equal(root.tensors, 1750);
  assert.equal(root.parameters, summary.parameters);
  assert.equal(root.bytes, summary.totals.data_bytes);
  const check = (node: typeof root): void => {
    if (node.children.length === 0) return;
    const own = node.tensor ? summary.tensor_index.find((e) => e.name === node.tensor)!.parameters : 0;
    assert.equal(
      node.children.reduce((s, c) => s + c.parameters, own),
      node.parameters,
      node.path,
    );
    node.children.forEach(check);
  };
  check(root);
  assert.ok(fs.existsSync(path.join(corpusDir, KOHYA)));
});

test("tensorReport reads only the tensor's byte ranges (the page's path for dropped files)", {
  skip: !corpusAvailable && corpusMissingReason,
}, async () => {
  const bytes = new Uint8Array(fs.readFileSync(path.join(corpusDir, KOHYA)));
  using handle = openFile(path.join(corpusDir, KOHYA));
  const summary = summarizeFile(handle.header);
  const asked: ByteRange[] = [];
  const target = {
    summary,
    readRanges: async (_file: number, ranges: readonly ByteRange[]) => {
      asked.push(...ranges);
      return ranges.map((r) => bytes.slice(r.start, r.end));
    },
  };
  for (const entry of summary.tensor_index.filter((e) => e.shape.length === 2).slice(0, 10)) {
    asked.length = 0;
    const report = await tensorReport(target, entry.name, { bins: 12, heatmap: 5 });
    for (const r of asked) assert.ok(r.start >= entry.byte_range[0] && r.end <= entry.byte_range[1], entry.name);
    const data = bytes.subarray(entry.byte_range[0], entry.byte_range[1]);
    const tensor = { dtype: entry.dtype as Dtype, shape: entry.shape, data };
    const whole = tensorStats(tensor, { bins: 12 });
    assert.deepEqual(report.stats, whole.stats);
    assert.deepEqual(report.histogram, whole.histogram);
    assert.deepEqual(report.heatmap, heatmap(tensor, { size: 5 }));
    assert.deepEqual(report.byte_range, entry.byte_range);
  }
  await assert.rejects(tensorReport(target, "missing"), { code: "TensorNotFound" });
});
