/**
 * to-gguf against llama.cpp's converter: tiny models (scripts/gen_gguf_fixtures.py) converted by us must give the
 * GGUF convert_hf_to_gguf.py gave (byte for byte: every key, tensor and offset) for f32, f16, bf16 and q8_0, and
 * for q4_0/q4_1/q5_0/q5_1 the tensors gguf-py's quantizer gives. Refusals write nothing.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { toGguf } from "../src/gguf/node-convert.js";
import { fromGguf } from "../src/gguf/node-from-gguf.js";
import { openGgufSync } from "../src/gguf/node-gguf.js";
import type { OutputType } from "../src/gguf/plan.js";
import type { GgufHeader } from "../src/gguf/reader.js";
import { encodeArray } from "../src/gguf/writer.js";
import { openFile, saveFile, Tensor } from "../src/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { referencePython } from "./helpers/reference.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/gguf");

interface Summary {
  size: number;
  sha256: string;
  kv: unknown[][];
  tensors: [string, string, number[], number, string][];
}
interface Expected {
  pre: string | null;
  types: Record<string, Summary>;
  quantized: Record<string, Record<string, [string, string]>>;
}
const expected = JSON.parse(fs.readFileSync(path.join(FIXTURES, "expected.json"), "utf8")) as Record<string, Expected>;

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

function tmpDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "gguf-convert-"));
}

/** The same summary the fixture script makes with gguf-py's reader. */
function summary(file: string): Summary {
  const g = openGgufSync(file);
  try {
    const h: GgufHeader = g.header;
    const kv = [...h.metadata].map(([key, v]) => {
      if (v.type === "ARRAY") return [key, "ARRAY", v.value.itemType, v.value.items.length, sha(encodeArray(v.value))];
      if (v.type === "FLOAT32") {
        const b = new DataView(new ArrayBuffer(4));
        b.setFloat32(0, v.value as number, true);
        return [key, v.type, `f32:${b.getUint32(0, true).toString(16).padStart(8, "0")}`];
      }
      return [key, v.type, typeof v.value === "bigint" ? Number(v.value) : v.value];
    });
    const tensors = h.tensors.map(
      (t) => [t.name, t.type.name, [...t.dims], t.fileOffset, sha(g.tensorBytes(t.name))] as Summary["tensors"][number],
    );
    const whole = fs.readFileSync(file);
    return { size: whole.length, sha256: sha(whole), kv, tensors };
  } finally {
    g.close();
  }
}

for (const [model, exp] of Object.entries(expected)) {
  for (const [type, want] of Object.entries(exp.types)) {
    test(`to-gguf ${model} --type ${type} equals llama.cpp's converter`, async () => {
      const dir = tmpDir();
      try {
        const out = path.join(dir, "out.gguf");
        await toGguf(path.join(FIXTURES, model), out, {
          type: type.toUpperCase() as OutputType,
          tokenizerPre: exp.pre ?? undefined,
          threads: type === "q8_0" ? 2 : 0,
        });
        const got = summary(out);
        assert.deepEqual(got.kv, want.kv);
        assert.deepEqual(got.tensors, want.tensors);
        assert.equal(got.size, want.size);
        assert.equal(got.sha256, want.sha256);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  }
  for (const [type, tensors] of Object.entries(exp.quantized)) {
    test(`to-gguf ${model} --type ${type}: blocks equal gguf-py's quantizer`, async () => {
      const dir = tmpDir();
      try {
        const out = path.join(dir, "out.gguf");
        await toGguf(path.join(FIXTURES, model), out, {
          type: type.toUpperCase() as OutputType,
          tokenizerPre: exp.pre ?? undefined,
          threads: 0,
        });
        const g = openGgufSync(out);
        try {
          for (const [name, [qtype, digest]] of Object.entries(tensors)) {
            const info = g.tensorInfo(name);
            assert.equal(info.type.name, qtype, name);
            assert.equal(sha(g.tensorBytes(name)), digest, name);
          }
          const f32 = expected[model]!.types.f32!;
          assert.deepEqual(
            g.header.tensors.map((t) => t.name),
            f32.tensors.map((t) => t[0]),
          );
        } finally {
          g.close();
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  }
}

function copyModel(model: string, dir: string): string {
  const target = path.join(dir, model);
  fs.cpSync(path.join(FIXTURES, model), target, { recursive: true });
  return target;
}

test("an unsupported architecture is refused by name and nothing is written", async () => {
  const dir = tmpDir();
  try {
    const model = copyModel("tiny-qwen2", dir);
    const config = JSON.parse(fs.readFileSync(path.join(model, "config.json"), "utf8"));
    config.architectures = ["FalconForCausalLM"];
    fs.writeFileSync(path.join(model, "config.json"), JSON.stringify(config));
    const out = path.join(dir, "out.gguf");
    await assert.rejects(toGguf(model, out), (e: Error & { code?: string }) => {
      assert.equal(e.code, "UnsupportedModel");
      assert.match(e.message, /FalconForCausalLM/);
      return true;
    });
    assert.deepEqual(fs.readdirSync(dir), ["tiny-qwen2"]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a BPE tokenizer llama.cpp does not know is refused unless --tokenizer-pre names it", async () => {
  const dir = tmpDir();
  try {
    const model = copyModel("tiny-llama", dir);
    const out = path.join(dir, "out.gguf");
    await assert.rejects(toGguf(model, out), (e: Error & { code?: string }) => {
      assert.equal(e.code, "UnsupportedModel");
      assert.match(e.message, /pre-tokenizer not recognised/);
      return true;
    });
    assert.equal(fs.existsSync(out), false);
    await assert.rejects(toGguf(model, out, { tokenizerPre: "no-such-pre" }), { code: "InvalidOption" });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a model without config.json or tokenizer is refused", async () => {
  const dir = tmpDir();
  try {
    const model = copyModel("tiny-qwen2", dir);
    fs.rmSync(path.join(model, "tokenizer.json"));
    await assert.rejects(toGguf(model, path.join(dir, "o.gguf")), { code: "UnsupportedModel" });
    fs.rmSync(path.join(model, "config.json"));
    await assert.rejects(toGguf(model, path.join(dir, "o.gguf")), { code: "UnsupportedModel" });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** The reference python, when it can import gguf-py (.ci/run installs it into .venv-ref). */
function ggufPython(): string | false {
  const ref = referencePython();
  if (ref === null) return false;
  const probe = spawnSync(ref.python, ["-c", "import gguf"], { encoding: "utf8" });
  return probe.status === 0 ? ref.python : false;
}
const python = ggufPython();
const noGgufPy =
  python === false ? "gguf-py not found in the reference venv (.ci/run installs it into .venv-ref)" : false;
if (noGgufPy) process.emitWarning(noGgufPy, { code: "SAFETENSORS_GGUF_PY_MISSING" });

test("gguf-py reads our GGUF as we do, and from-gguf of our q8_0 equals its dequantize", {
  skip: noGgufPy,
}, async () => {
  const dir = tmpDir();
  try {
    for (const [model, exp] of Object.entries(expected)) {
      const out = path.join(dir, `${model}.gguf`);
      await toGguf(path.join(FIXTURES, model), out, { type: "Q8_0", tokenizerPre: exp.pre ?? undefined, threads: 0 });
      const back = path.join(dir, `${model}-back`);
      await fromGguf(out, back);
      const run = spawnSync(
        python as string,
        [path.join(repoRoot, "test/helpers/gguf_check.py"), out, path.join(back, "model.safetensors")],
        { encoding: "utf8", maxBuffer: 64 << 20 },
      );
      assert.equal(run.status, 0, run.stderr);
      const theirs = JSON.parse(run.stdout) as {
        kv: Record<string, unknown[]>;
        tensors: Record<string, [string, number[], string]>;
        dequantized_equal: Record<string, boolean>;
      };
      const g = openGgufSync(out);
      try {
        assert.deepEqual(Object.keys(theirs.kv), [...g.header.metadata.keys()]);
        for (const [key, v] of g.header.metadata) {
          const [type, value] = theirs.kv[key]!;
          if (v.type === "ARRAY") {
            assert.equal(type, v.value.itemType, key);
            assert.equal(value, v.value.items.length, key);
          } else {
            assert.equal(type, v.type, key);
            assert.deepEqual(value, typeof v.value === "bigint" ? Number(v.value) : v.value, key);
          }
        }
        for (const t of g.header.tensors) {
          assert.deepEqual(theirs.tensors[t.name], [t.type.name, [...t.dims].reverse(), sha(g.tensorBytes(t.name))]);
        }
      } finally {
        g.close();
      }
      const unequal = Object.entries(theirs.dequantized_equal).filter(([, same]) => !same);
      assert.deepEqual(unequal, [], `${model}: from-gguf tensors differ from gguf-py's dequantize`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * tiny-llama with every dimension but the vocabulary 4 times larger (hidden 128, head_dim 32), random BF16 weights:
 * tensors large enough for the worker threads (the fixtures' are below their 4096-value minimum).
 */
function widerLlama(dir: string): string {
  const from = path.join(FIXTURES, "tiny-llama");
  for (const f of fs.readdirSync(from))
    if (f !== "model.safetensors") fs.copyFileSync(path.join(from, f), path.join(dir, f));
  const config = JSON.parse(fs.readFileSync(path.join(from, "config.json"), "utf8")) as Record<string, unknown>;
  const vocab = config.vocab_size as number;
  Object.assign(config, { hidden_size: 128, intermediate_size: 128, head_dim: 32 });
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(config));
  const small = openFile(path.join(from, "model.safetensors"));
  const tensors: Record<string, Tensor> = {};
  let seed = 1;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return (seed / 2 ** 31) * 2 - 1;
  };
  try {
    for (const name of small.keys()) {
      const shape = small.info(name).shape.map((d: number) => (d === vocab ? d : d * 4));
      const values = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, random);
      tensors[name] = Tensor.fromFloat32("BF16", shape, values);
    }
  } finally {
    small.close();
  }
  saveFile(path.join(dir, "model.safetensors"), tensors);
  return dir;
}

for (const type of ["Q8_0", "Q4_0"] as const) {
  test(`to-gguf --type ${type}: two workers, 16 KiB chunks, give the main thread's bytes`, async () => {
    // Each chunk read, reordered (Q, K), quantized and written by a worker at its place, out of order, with the
    // whole pages of its middle written directly (O_DIRECT, where the file system has it) and its ends buffered.
    const dir = tmpDir();
    try {
      const model = widerLlama(fs.mkdtempSync(path.join(dir, "model-")));
      const one = path.join(dir, "one.gguf");
      const two = path.join(dir, "two.gguf");
      await toGguf(model, one, { type, tokenizerPre: "llama-bpe", threads: 0 });
      await toGguf(model, two, { type, tokenizerPre: "llama-bpe", threads: 2, chunkBytes: 16384 });
      assert.equal(sha(fs.readFileSync(two)), sha(fs.readFileSync(one)));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
