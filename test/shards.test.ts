/**
 * Sharded checkpoints: size parsing, shard assignment and index text against huggingface_hub's (golden fixtures from
 * scripts/gen_shard_fixtures.py), index checks, openSharded over the corpus's shard set, saveSharded round trips.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { SafetensorError } from "../src/format/errors.js";
import { openFile, openSharded, saveFile, saveSharded, Tensor } from "../src/node.js";
import { checkShardPath, formatIndex, type JsonValue, parseIndex, parseSize, planShards } from "../src/shards/index.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles, repoRoot } from "./helpers/corpus.js";
import { fill } from "./helpers/fill.js";

const fixtures = path.join(repoRoot, "test", "fixtures", "shards");
const readFixture = <T>(name: string): T => JSON.parse(fs.readFileSync(path.join(fixtures, name), "utf8")) as T;
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-shards-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
let dirCount = 0;
const freshDir = () => {
  const dir = path.join(tmp, `d${dirCount++}`);
  fs.mkdirSync(dir);
  return dir;
};
const code = (expected: string) => (error: unknown) => error instanceof SafetensorError && error.code === expected;

describe("parseSize", () => {
  // Extensions on purpose (huggingface_hub refuses them): plain byte counts and binary units. Refused on purpose
  // (huggingface_hub accepts it and then gives every tensor its own shard): negative sizes.
  const extensions = new Map([
    ["5", 5],
    ["2GiB", 2 * 2 ** 30],
    ["1MiB", 2 ** 20],
  ]);
  for (const { text, bytes, error } of readFixture<{ text: string; bytes?: number; error?: string }[]>("sizes.json")) {
    test(JSON.stringify(text), () => {
      if (extensions.has(text)) assert.equal(parseSize(text), extensions.get(text));
      else if (error !== undefined || bytes! < 0) assert.throws(() => parseSize(text), code("InvalidOption"));
      else assert.equal(parseSize(text), bytes);
    });
  }
  test("numbers are byte counts", () => {
    assert.equal(parseSize(1000), 1000);
    assert.throws(() => parseSize(1.5), code("InvalidOption"));
    assert.throws(() => parseSize(-1), code("InvalidOption"));
    assert.equal(parseSize("0.5KiB"), 512);
  });
});

interface AssignmentCase {
  max_shard_size: number | string;
  tensors: { name: string; size: number; storage: number | null }[];
  expected: { filename_to_tensors: [string, string[]][]; tensor_to_filename: [string, string][]; total_size: number };
}

test("planShards gives huggingface_hub's assignment", () => {
  const cases = readFixture<AssignmentCase[]>("assignments.json");
  assert.ok(cases.length > 60);
  for (const [i, c] of cases.entries()) {
    // torch gives every freshly made empty tensor the null data pointer: huggingface_hub sees one storage.
    const items = c.tensors.map((t) => ({
      name: t.name,
      size: t.size,
      storage: t.size === 0 ? "empty" : (t.storage ?? undefined),
    }));
    const plan = planShards(items, { maxShardSize: c.max_shard_size });
    const what = `case ${i} (max ${c.max_shard_size})`;
    assert.deepEqual(
      plan.shards.map((s) => [s.file, s.tensors]),
      c.expected.filename_to_tensors,
      what,
    );
    assert.deepEqual([...plan.weightMap], c.expected.tensor_to_filename, what);
    assert.equal(plan.totalSize, c.expected.total_size, what);
    assert.equal(plan.isSharded, c.expected.filename_to_tensors.length > 1);
  }
});

test("planShards refuses duplicate names and bad patterns", () => {
  assert.throws(
    () =>
      planShards([
        { name: "a", size: 1 },
        { name: "a", size: 1 },
      ]),
    code("DuplicateKey"),
  );
  assert.throws(
    () => planShards([{ name: "a", size: 1 }], { filenamePattern: "model.safetensors" }),
    code("InvalidOption"),
  );
  const plan = planShards(
    [
      { name: "a", size: 5 },
      { name: "b", size: 5 },
    ],
    { maxShardSize: 5, filenamePattern: "w{suffix}.st" },
  );
  assert.deepEqual(
    plan.shards.map((s) => s.file),
    ["w-00001-of-00002.st", "w-00002-of-00002.st"],
  );
});

test("formatIndex writes huggingface_hub's and transformers' text byte for byte", () => {
  const cases =
    readFixture<
      {
        style: "huggingface_hub" | "transformers";
        metadata: [string, JsonValue][];
        weight_map: [string, string][];
        text: string;
      }[]
    >("indexes.json");
  for (const c of cases) {
    assert.equal(formatIndex(new Map(c.metadata), new Map(c.weight_map), { indexStyle: c.style }), c.text, c.style);
    const parsed = parseIndex(c.text);
    assert.deepEqual(
      [...parsed.weightMap],
      c.style === "transformers" ? [...c.weight_map].sort((a, b) => (a[0] < b[0] ? -1 : 1)) : c.weight_map,
    );
    assert.equal(parsed.totalSize, 1234);
  }
});

describe("parseIndex", () => {
  test("strict JSON: duplicates are errors, not last-wins", () => {
    assert.throws(() => parseIndex('{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}'), code("InvalidIndex"));
    assert.throws(() => parseIndex('{"weight_map":{}, "weight_map":{}}'), code("InvalidIndex"));
    assert.throws(() => parseIndex("[]"), code("InvalidIndex"));
    assert.throws(() => parseIndex('{"metadata":{}}'), code("InvalidIndex"));
    assert.throws(() => parseIndex('{"weight_map":{"a":1}}'), code("InvalidIndex"));
    assert.throws(() => parseIndex('{"weight_map":{}} x'), code("InvalidIndex"));
  });
  test("keeps exact integers and odd keys", () => {
    const index = parseIndex(
      '{"metadata":{"total_size":18446744073709551615,"__proto__":[1,{"a":null}]},"weight_map":{"__proto__":"a.safetensors"}}',
    );
    assert.equal(index.totalSize, 18446744073709551615n);
    assert.deepEqual(index.metadata.get("__proto__"), [1, new Map([["a", null]])]);
    assert.equal(index.weightMap.get("__proto__"), "a.safetensors");
  });
  test("warnings: unknown keys, a total_size that is no byte count", () => {
    const index = parseIndex('{"metadata":{"total_size":"12"},"weight_map":{},"extra":1}');
    assert.equal(index.totalSize, null);
    assert.equal(index.warnings.length, 2);
  });
  test("shard paths stay inside the directory", () => {
    for (const bad of ["../x.safetensors", "/etc/passwd", "a/../../b", "C:x", "a\\b", "", "a//b", "./a", "a\0b"]) {
      assert.throws(() => checkShardPath(bad), code("UnsafePath"), JSON.stringify(bad));
      assert.throws(() => parseIndex(`{"weight_map":{"t":${JSON.stringify(bad)}}}`), code("UnsafePath"));
    }
    checkShardPath("sub/model-00001-of-00002.safetensors");
  });
});

describe("openSharded over the corpus's shard set", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  const dir = path.join(corpusDir, "julia-test-sharded-6");
  test("every tensor, from its shard, with the reference's bytes", () => {
    const expected = new Map<string, { sha256: string; file: string; dtype: string; shape: number[] }>();
    for (const file of expectedFiles().filter((f) => f.file.startsWith("julia-test-sharded-6/"))) {
      for (const t of file.tensors ?? []) expected.set(t.name, { ...t, file: path.basename(file.file) });
    }
    for (const target of [dir, path.join(dir, "model.safetensors.index.json")]) {
      using sharded = openSharded(target);
      assert.deepEqual(sharded.warnings, []);
      assert.equal(sharded.keys().length, 36);
      assert.equal(sharded.shards.length, 6);
      assert.equal(sharded.metadata().get("total_size"), 4305);
      assert.equal(sharded.dataBytes, 4305);
      assert.deepEqual(new Set(sharded.keys()), new Set(expected.keys()));
      for (const name of sharded.keys()) {
        const want = expected.get(name)!;
        assert.equal(sharded.shardOf(name), want.file);
        assert.equal(sha256(sharded.getTensor(name).data), want.sha256, name);
        assert.deepEqual([sharded.info(name).dtype, sharded.info(name).shape], [want.dtype, want.shape]);
      }
      const name = sharded.keys().find((k) => sharded.info(k).shape.length === 3)!;
      const slice = sharded.getSlice(name).get("1:, :2");
      assert.deepEqual(slice.shape, [2, 2, sharded.info(name).shape[2]]);
    }
  });
  test("closed handles refuse reads", () => {
    const sharded = openSharded(dir);
    sharded.close();
    assert.throws(() => sharded.getTensor(sharded.keys()[0]!), code("Closed"));
  });
});

describe("openSharded checks the index against the shards", () => {
  const t = (n: number, seed: number) => new Tensor("F32", [n], fill(n * 4, seed));
  const make = (index: unknown, shards: Record<string, Record<string, Tensor>>) => {
    const dir = freshDir();
    for (const [file, tensors] of Object.entries(shards)) saveFile(path.join(dir, file), tensors);
    fs.writeFileSync(
      path.join(dir, "model.safetensors.index.json"),
      typeof index === "string" ? index : JSON.stringify(index),
    );
    return dir;
  };
  const two = { "a.safetensors": { x: t(2, 1) }, "b.safetensors": { y: t(3, 2) } };
  test("a consistent index opens without warnings", () => {
    using sharded = openSharded(
      make({ metadata: { total_size: 20 }, weight_map: { x: "a.safetensors", y: "b.safetensors" } }, two),
    );
    assert.deepEqual(sharded.warnings, []);
    assert.equal(sharded.shardOf("y"), "b.safetensors");
  });
  test("a listed tensor missing from its shard", () => {
    const dir = make({ weight_map: { x: "b.safetensors", y: "b.safetensors" } }, two);
    assert.throws(() => openSharded(dir), code("InvalidIndex"));
  });
  test("a tensor in two shards", () => {
    const dir = make(
      { weight_map: { x: "a.safetensors", y: "b.safetensors" } },
      { "a.safetensors": { x: t(1, 1) }, "b.safetensors": { x: t(1, 2), y: t(1, 3) } },
    );
    assert.throws(() => openSharded(dir), code("InvalidIndex"));
  });
  test("a missing shard file", () => {
    const dir = make({ weight_map: { x: "a.safetensors", y: "c.safetensors" } }, two);
    assert.throws(() => openSharded(dir), code("IoError"));
  });
  test("a shard that is a symlink out of the directory", () => {
    const outside = freshDir();
    saveFile(path.join(outside, "evil.safetensors"), { y: t(3, 2) });
    const dir = make(
      { weight_map: { x: "a.safetensors", y: "link.safetensors" } },
      { "a.safetensors": { x: t(2, 1) } },
    );
    fs.symlinkSync(path.join(outside, "evil.safetensors"), path.join(dir, "link.safetensors"));
    assert.throws(() => openSharded(dir), code("UnsafePath"));
  });
  test("a shard with an invalid header", () => {
    const dir = make({ weight_map: { x: "a.safetensors", y: "b.safetensors" } }, { "a.safetensors": { x: t(2, 1) } });
    fs.writeFileSync(path.join(dir, "b.safetensors"), Buffer.from([4, 0, 0, 0, 0, 0, 0, 0, 0x7b, 0x7d, 0x7d, 0x20]));
    assert.throws(
      () => openSharded(dir),
      (e) => e instanceof SafetensorError && e.code !== "InvalidIndex",
    );
  });
  test("total_size mismatch and unlisted tensors are warnings", () => {
    const dir = make({ metadata: { total_size: 21 }, weight_map: { x: "a.safetensors" } }, two);
    fs.writeFileSync(
      path.join(dir, "model.safetensors.index.json"),
      JSON.stringify({ metadata: { total_size: 21 }, weight_map: { x: "a.safetensors", y: "b.safetensors" } }),
    );
    using sharded = openSharded(dir);
    assert.equal(sharded.warnings.length, 1);
    assert.match(sharded.warnings[0]!, /total_size is 21 but the listed tensors hold 20 bytes/);
    fs.writeFileSync(
      path.join(dir, "model.safetensors.index.json"),
      JSON.stringify({ weight_map: { x: "a.safetensors" } }),
    );
    saveFile(path.join(dir, "a.safetensors"), { x: t(2, 1), extra: t(1, 5) });
    using partial = openSharded(dir);
    assert.deepEqual(partial.keys(), ["x"]);
    assert.match(partial.warnings.join("\n"), /holds tensor "extra", which the index does not list/);
  });
  test("a directory with one model.safetensors and no index", () => {
    const dir = freshDir();
    saveFile(path.join(dir, "model.safetensors"), { x: t(2, 1) });
    using single = openSharded(dir);
    assert.equal(single.indexPath, null);
    assert.deepEqual(single.keys(), ["x"]);
  });
  test("an index over the size limit", () => {
    const dir = make({ weight_map: { x: "a.safetensors", y: "b.safetensors" } }, two);
    assert.throws(() => openSharded(dir, { maxIndexBytes: 10 }), code("TooLarge"));
  });
});

describe("saveSharded", () => {
  const tensors = new Map<string, Tensor>();
  for (let i = 0; i < 10; i++)
    tensors.set(`layers.${i}.weight`, new Tensor(i % 2 ? "BF16" : "F32", [4, 5], fill(i % 2 ? 40 : 80, i + 1)));
  test("shards, names and index as huggingface_hub; reads back", () => {
    const dir = freshDir();
    const saved = saveSharded(dir, tensors, { maxShardSize: 200, metadata: { note: "x" } });
    assert.ok(saved.plan.isSharded);
    const files = fs.readdirSync(dir).sort();
    assert.deepEqual(files, [...saved.plan.shards.map((s) => s.file), "model.safetensors.index.json"].sort());
    const index = fs.readFileSync(path.join(dir, "model.safetensors.index.json"), "utf8");
    assert.ok(
      index.startsWith('{\n  "metadata": {\n    "total_size": 600,\n    "note": "x"\n  },\n  "weight_map": {\n'),
    );
    using sharded = openSharded(dir);
    assert.deepEqual(sharded.warnings, []);
    for (const [name, tensor] of tensors) assert.deepEqual(sharded.getTensor(name).data, tensor.data);
    using first = openFile(path.join(dir, saved.plan.shards[0]!.file));
    assert.deepEqual(first.metadata(), new Map([["format", "pt"]]));
  });
  test("one shard is model.safetensors with the metadata; a later save removes stale shards", () => {
    const dir = freshDir();
    saveSharded(dir, tensors, { maxShardSize: 200 });
    fs.writeFileSync(path.join(dir, "model.bin"), "kept");
    const saved = saveSharded(dir, tensors, { metadata: { note: "x" } });
    assert.deepEqual(
      saved.plan.shards.map((s) => s.file),
      ["model.safetensors"],
    );
    assert.deepEqual(fs.readdirSync(dir).sort(), ["model.bin", "model.safetensors"]);
    using file = openFile(path.join(dir, "model.safetensors"));
    assert.deepEqual(
      file.metadata(),
      new Map([
        ["format", "pt"],
        ["note", "x"],
      ]),
    );
  });
  test("tied weights share a shard and count once", () => {
    const shared = fill(80, 9);
    const dir = freshDir();
    const saved = saveSharded(
      dir,
      [
        ["embed", new Tensor("F32", [20], shared)],
        ["x", new Tensor("F32", [20], fill(80, 3))],
        ["lm_head", new Tensor("F32", [20], shared)],
      ],
      { maxShardSize: 100 },
    );
    assert.equal(saved.plan.totalSize, 160);
    assert.deepEqual(
      saved.plan.shards.map((s) => s.tensors),
      [["embed", "lm_head"], ["x"]],
    );
  });
  test("refusals", () => {
    assert.throws(() => saveSharded(freshDir(), new Map()), code("InvalidTensor"));
    assert.throws(
      () => saveSharded(freshDir(), tensors, { maxShardSize: 100, metadata: { total_size: "1" } }),
      code("InvalidMetadata"),
    );
    assert.throws(() => saveSharded(freshDir(), tensors, { maxShardSize: "5 apples" }), code("InvalidOption"));
  });
});
