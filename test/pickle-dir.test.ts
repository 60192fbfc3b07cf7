/**
 * Converting checkpoint directories of PyTorch pickles (fixtures from scripts/gen_pickle_dir_fixtures.py: a tiny
 * Llama sharded as transformers saved .bin checkpoints, the same as one pytorch_model.bin, a *.pt set with its
 * index, and copies with a hostile or an unknown shard): every tensor equals torch.load's bytes, the output is
 * huggingface_hub's naming and index, and a refused shard refuses the directory with nothing written. With the
 * reference venv, transformers loads the converted directories with identical parameters.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { deserialize, isSafetensorError, type Tensor } from "../src/index.js";
import { openSharded } from "../src/node.js";
import { convertPickleDirectory } from "../src/pickle/node-pickle-dir.js";
import { parseIndex } from "../src/shards/index.js";
import { loaderArgs, modulePath } from "./helpers/compiled.js";
import { repoRoot } from "./helpers/corpus.js";
import { runReference, skipWithoutReference } from "./helpers/reference.js";

const fixtures = path.join(repoRoot, "test/fixtures/pickle-dirs");
const manifest = JSON.parse(fs.readFileSync(path.join(fixtures, "manifest.json"), "utf8")) as {
  marker: string;
  dirs: {
    dir: string;
    tensors: Record<string, { dtype: string; shape: number[]; sha256: string }>;
    tied: Record<string, string>;
  }[];
  refused: { dir: string; code: string; globals: string[] }[];
};
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-pickle-dir-"));

/** Every output shard's tensors and its `NAME: KEPT` aliases. */
function readOut(dir: string): { tensors: Map<string, Tensor>; aliases: Map<string, string>; files: string[] } {
  const tensors = new Map<string, Tensor>();
  const aliases = new Map<string, string>();
  const files = fs.readdirSync(dir).sort();
  for (const file of files.filter((f) => f.endsWith(".safetensors"))) {
    const read = deserialize(fs.readFileSync(path.join(dir, file)));
    for (const [name, t] of read.tensors) tensors.set(name, t);
    for (const [k, v] of read.metadata ?? []) if (read.tensors.has(v)) aliases.set(k, v);
  }
  return { tensors, aliases, files };
}

function sha256(t: Tensor): string {
  return createHash("sha256")
    .update(t.data as Uint8Array)
    .digest("hex");
}

/** A copy of a fixture directory to change. */
function copyFixture(name: string, as: string): string {
  const target = path.join(tmp, as);
  fs.cpSync(path.join(fixtures, name), target, { recursive: true });
  return target;
}

describe("checkpoint directories convert to safetensors shards", () => {
  for (const expected of manifest.dirs) {
    test(`${expected.dir}: tensors equal torch.load, huggingface_hub's names and index`, () => {
      const out = path.join(tmp, `out-${expected.dir}`);
      const report = convertPickleDirectory(path.join(fixtures, expected.dir), out);
      const { tensors, aliases, files } = readOut(out);
      for (const [name, want] of Object.entries(expected.tensors)) {
        const t = tensors.get(name) ?? tensors.get(aliases.get(name) ?? "");
        assert.ok(t, `${name} missing`);
        assert.equal(t.dtype, want.dtype, name);
        assert.deepEqual([...t.shape], want.shape, name);
        assert.equal(sha256(t), want.sha256, name);
      }
      assert.equal(tensors.size + aliases.size, Object.keys(expected.tensors).length);
      // Tied in torch (same storage and geometry): written once, the other name an alias of it.
      for (const [name, kept] of Object.entries(expected.tied)) {
        assert.ok(aliases.get(name) === kept || aliases.get(kept) === name, `${name} tied to ${kept}`);
      }
      const shards = report.shards.length;
      const names =
        shards === 1
          ? ["model.safetensors"]
          : Array.from({ length: shards }, (_, i) => `model-0000${i + 1}-of-0000${shards}.safetensors`);
      assert.deepEqual(files, shards === 1 ? names : [...names, "model.safetensors.index.json"]);
      if (shards > 1) {
        const index = parseIndex(fs.readFileSync(path.join(out, "model.safetensors.index.json"), "utf8"));
        assert.deepEqual([...index.weightMap.keys()].sort(), [...tensors.keys()].sort());
        const bytes = [...tensors.values()].reduce((n, t) => n + t.data.byteLength, 0);
        assert.equal(index.totalSize, bytes);
        assert.equal(report.totalSize, bytes);
        // transformers' style: keys sorted, a final newline.
        const text = fs.readFileSync(path.join(out, "model.safetensors.index.json"), "utf8");
        assert.ok(text.endsWith("}\n"));
        using sharded = openSharded(out);
        assert.deepEqual(sharded.warnings, []);
      }
      assert.deepEqual(report.warnings, []);
    });
  }

  test("the index itself may be named; OUTDIR may be the input directory (the .bin files stay)", () => {
    const dir = copyFixture("sharded", "in-place");
    const before = fs.readdirSync(dir).sort();
    const report = convertPickleDirectory(path.join(dir, "pytorch_model.bin.index.json"), dir);
    assert.equal(report.shards.length, 3);
    const after = fs.readdirSync(dir).sort();
    assert.deepEqual(
      after.filter((f) => !f.startsWith("model")),
      before,
    );
    assert.equal(after.filter((f) => f.startsWith("model")).length, 4);
  });

  test("a later conversion replaces an earlier one: stale shards and index removed, no staging left", () => {
    const out = path.join(tmp, "replaced");
    convertPickleDirectory(path.join(fixtures, "sharded"), out);
    convertPickleDirectory(path.join(fixtures, "single"), out);
    assert.deepEqual(fs.readdirSync(out), ["model.safetensors"]);
  });
});

describe("refused directories write nothing", () => {
  for (const refused of manifest.refused) {
    test(`${refused.dir}: ${refused.code}, globals named, no output`, () => {
      const out = path.join(tmp, `refused-${refused.dir}`);
      assert.throws(
        () => convertPickleDirectory(path.join(fixtures, refused.dir), out),
        (error: unknown) => {
          assert.ok(isSafetensorError(error), String(error));
          assert.equal(error.code, refused.code);
          for (const g of refused.globals) assert.ok(error.message.includes(g), `${error.message} names ${g}`);
          assert.match(error.message, /pytorch_model-00003-of-00003\.bin/);
          return true;
        },
      );
      assert.equal(fs.existsSync(out), false);
      // Over an earlier conversion: left exactly as it was.
      const earlier = path.join(tmp, `earlier-${refused.dir}`);
      convertPickleDirectory(path.join(fixtures, "pt-set"), earlier);
      const snapshot = fs.readdirSync(earlier).map((f) => [f, fs.readFileSync(path.join(earlier, f)).toString("hex")]);
      assert.throws(() => convertPickleDirectory(path.join(fixtures, refused.dir), earlier), { code: refused.code });
      assert.deepEqual(
        fs.readdirSync(earlier).map((f) => [f, fs.readFileSync(path.join(earlier, f)).toString("hex")]),
        snapshot,
      );
    });
  }

  test("allowUnknown converts the rest and lists what was dropped", () => {
    const report = convertPickleDirectory(path.join(fixtures, "unknown"), path.join(tmp, "unknown-allowed"), {
      allowUnknown: true,
    });
    const dropped = report.shards.flatMap((s) => s.report.dropped.map((d) => d.name));
    assert.deepEqual(dropped, ["extra_module"]);
  });

  test("an index that disagrees with its shards, or leaves the directory, is refused", () => {
    const moveTo = (tensor: string, file: string) => (index: { weight_map: Record<string, string> }) => {
      index.weight_map[tensor] = file;
    };
    const cases: [string, (index: { weight_map: Record<string, string> }) => void, string][] = [
      ["wrong-shard", moveTo("model.norm.weight", "pytorch_model-00001-of-00003.bin"), "InvalidIndex"],
      ["missing", moveTo("not.there", "pytorch_model-00001-of-00003.bin"), "InvalidIndex"],
      ["escape", moveTo("model.norm.weight", "../pytorch_model-00003-of-00003.bin"), "UnsafePath"],
    ];
    for (const [name, change, code] of cases) {
      const dir = copyFixture("sharded", `index-${name}`);
      const file = path.join(dir, "pytorch_model.bin.index.json");
      const index = JSON.parse(fs.readFileSync(file, "utf8"));
      change(index);
      fs.writeFileSync(file, JSON.stringify(index));
      const out = path.join(tmp, `index-${name}-out`);
      assert.throws(() => convertPickleDirectory(dir, out), { code }, name);
      assert.equal(fs.existsSync(out), false, name);
    }
    // The same tensor in two shards.
    const dir = copyFixture("sharded", "twice");
    fs.copyFileSync(path.join(dir, "pytorch_model-00003-of-00003.bin"), path.join(dir, "extra.bin"));
    const file = path.join(dir, "pytorch_model.bin.index.json");
    const index = JSON.parse(fs.readFileSync(file, "utf8"));
    index.weight_map["zz.unused"] = "extra.bin";
    fs.writeFileSync(file, JSON.stringify(index));
    assert.throws(() => convertPickleDirectory(dir, path.join(tmp, "twice-out")), {
      code: "InvalidIndex",
      message: /in two shards/,
    });
  });

  test("the CLI: --json summary, refusals exit 1 naming the globals, no payload runs", () => {
    const runs = [
      ["convert", path.join(fixtures, "sharded"), path.join(tmp, "cli-sharded"), "--json"],
      ["convert", path.join(fixtures, "hostile"), path.join(tmp, "cli-hostile")],
      ["convert", path.join(fixtures, "sharded"), path.join(tmp, "cli-x.safetensors")],
      ["convert", path.join(fixtures, "single"), path.join(tmp, "cli-single")],
    ];
    const result = spawnSync(
      process.execPath,
      [...loaderArgs, modulePath(path.join(repoRoot, "test/helpers/run-cli-batch.ts")), JSON.stringify(runs)],
      { encoding: "utf8", cwd: repoRoot, timeout: 120_000 },
    );
    const all = result.stdout + result.stderr;
    assert.ok(!all.includes(manifest.marker), "a payload ran");
    assert.deepEqual(
      [...result.stdout.matchAll(/^EXIT (\d+)$/gm)].map((m) => Number(m[1])),
      [0, 1, 2, 0],
      all,
    );
    const json = JSON.parse(result.stdout.split("\n").find((l) => l.startsWith("{"))!);
    assert.equal(json.shards.length, 3);
    assert.equal(json.tensors, Object.keys(manifest.dirs.find((d) => d.dir === "sharded")!.tensors).length - 1);
    assert.equal(path.basename(json.outputIndex), "model.safetensors.index.json");
    assert.deepEqual(json.shards[0].aliases, { "model.embed_tokens.weight": "lm_head.weight" });
    assert.ok(result.stderr.includes("os.system"), result.stderr);
    assert.equal(fs.existsSync(path.join(tmp, "cli-hostile")), false);
    assert.match(result.stdout, /pytorch_model\.bin -> model\.safetensors: 20 tensors/);
  });
});

describe("transformers loads the converted directories", () => {
  test("same parameters as from the .bin shards, nothing missing or unexpected", {
    skip: skipWithoutReference(),
  }, () => {
    const pairs = ["sharded", "single"].map((dir) => {
      const converted = path.join(tmp, `hf-${dir}`);
      convertPickleDirectory(path.join(fixtures, dir), converted);
      fs.copyFileSync(path.join(fixtures, dir, "config.json"), path.join(converted, "config.json"));
      return { source: path.join(fixtures, dir), converted };
    });
    const results = runReference<
      {
        converted: string;
        missing: string[];
        unexpected: string[];
        compared: number;
        mismatches: string[];
        tied: boolean;
      }[]
    >(path.join(repoRoot, "scripts/transformers_load_check.py"), [], pairs);
    for (const r of results) {
      assert.ok(r.compared > 0, r.converted);
      assert.deepEqual(r.missing, [], r.converted);
      assert.deepEqual(r.unexpected, [], r.converted);
      assert.deepEqual(r.mismatches, [], r.converted);
      assert.equal(r.tied, true, r.converted);
    }
  });
});
