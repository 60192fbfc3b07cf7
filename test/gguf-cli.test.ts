/**
 * The CLI on GGUF files: inspect (text and --json), validate, hash --tensors, view's summary, to-gguf --json and
 * from-gguf, through `main` as users run them.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { ggufViewTarget } from "../src/cli/gguf-input.js";
import { main } from "../src/cli/main.js";
import { repoRoot } from "./helpers/corpus.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/gguf");

async function cli(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await main(argv, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t) });
  return { code, stdout, stderr };
}

test("to-gguf, inspect, validate, hash, view and from-gguf on a GGUF", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gguf-cli-"));
  try {
    const out = path.join(dir, "m.gguf");
    const made = await cli(
      "to-gguf",
      path.join(FIXTURES, "tiny-qwen2"),
      out,
      "--type",
      "q8_0",
      "--tokenizer-pre",
      "qwen2",
      "--json",
    );
    assert.equal(made.code, 0, made.stderr);
    const summary = JSON.parse(made.stdout);
    assert.equal(summary.architecture, "qwen2");
    assert.equal(summary.type, "q8_0");
    assert.equal(summary.bytes, fs.statSync(out).size);

    const text = await cli("inspect", out);
    assert.equal(text.code, 0);
    assert.match(text.stdout, /GGUF version 3, qwen2/);
    assert.match(text.stdout, /tokenizer\.ggml\.tokens \(ARRAY\[STRING\]\) = \{"itemType":"STRING","count":\d+/);
    assert.match(text.stdout, /gpt2 \(pre-tokenizer qwen2\)/);
    const json = JSON.parse((await cli("inspect", out, "--json")).stdout);
    assert.equal(json.format, "gguf");
    assert.ok(
      json.tensors.some((t: { name: string; type: string }) => t.name === "blk.0.attn_q.weight" && t.type === "Q8_0"),
    );
    assert.equal(json.tokenizer.pre, "qwen2");

    assert.deepEqual(await cli("validate", out), { code: 0, stdout: "ok\n", stderr: "" });
    const cut = path.join(dir, "cut.gguf");
    fs.writeFileSync(cut, fs.readFileSync(out).subarray(0, 5000));
    const bad = await cli("validate", cut, "--json");
    assert.equal(bad.code, 1);
    assert.equal(JSON.parse(bad.stdout).error.code, "InvalidGguf");

    const hash = await cli("hash", "--tensors", out);
    const whole = createHash("sha256").update(fs.readFileSync(out)).digest("hex");
    assert.ok(hash.stdout.startsWith(`${whole}  ${out}\n`));
    assert.match(hash.stdout, /# tensor [0-9a-f]{64} {2}token_embd\.weight/);

    const view = await ggufViewTarget(out);
    try {
      assert.equal(view.summary.tensor_index.length, json.tensors.length);
      const [bytes] = await view.readRanges(0, [{ start: json.tensors[0].offset, end: json.tensors[0].offset + 4 }]);
      assert.equal(bytes!.length, 4);
    } finally {
      await view.close();
    }

    const back = path.join(dir, "back");
    const from = await cli("from-gguf", out, back, "--dtype", "bf16", "--json");
    assert.equal(from.code, 0, from.stderr);
    const config = JSON.parse(fs.readFileSync(path.join(back, "config.json"), "utf8"));
    assert.deepEqual(config.architectures, ["Qwen2ForCausalLM"]);
    assert.equal(config.tie_word_embeddings, true);
    assert.equal(config.torch_dtype, "bfloat16");
    const inspected = JSON.parse((await cli("inspect", path.join(back, "model.safetensors"), "--json")).stdout);
    assert.ok(Object.keys(inspected.tensors ?? {}).length > 0 || Array.isArray(inspected.tensors));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("to-gguf refuses bad options and unsupported models with their codes", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gguf-cli-"));
  try {
    const usage = await cli("to-gguf", path.join(FIXTURES, "tiny-qwen2"), path.join(dir, "x.gguf"), "--type", "q2_k");
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--type must be one of/);
    const model = path.join(dir, "model");
    fs.cpSync(path.join(FIXTURES, "tiny-qwen2"), model, { recursive: true });
    const config = JSON.parse(fs.readFileSync(path.join(model, "config.json"), "utf8"));
    config.architectures = ["MixtralForCausalLM"];
    fs.writeFileSync(path.join(model, "config.json"), JSON.stringify(config));
    const refused = await cli("to-gguf", model, path.join(dir, "x.gguf"));
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^error\[UnsupportedModel\]: architecture MixtralForCausalLM is not supported/);
    assert.equal(fs.existsSync(path.join(dir, "x.gguf")), false);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
