/**
 * Delta patches between sharded checkpoints: create + apply rebuild NEW's directory byte for byte (shards and index),
 * with an unchanged shard copied, a tensor that moved to another shard taken from its old one, changed rows stored
 * as rows; every base file is checked before anything is written (a changed or missing shard is refused, OUT left as
 * it was); a tampered patch is refused before the directory commit; OLD's directory can be updated in place.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { SafetensorError } from "../src/format/errors.js";
import { applyPatch } from "../src/integrity/patch-apply.js";
import { createPatch } from "../src/integrity/patch-create.js";
import { PATCH_METADATA_KEY } from "../src/integrity/patch-format.js";
import { openFile, saveSharded, Tensor } from "../src/node.js";
import { cli } from "./helpers/run-cli.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-patch-sharded-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
let count = 0;
const fresh = (name = "") => path.join(tmp, `${count++}${name}`);

const code = (expected: string) => (error: unknown) => error instanceof SafetensorError && error.code === expected;

/** 4 KiB per tensor (32 x 32 F32), values from a seed. */
function tensor(seed: number): Tensor {
  return Tensor.fromFloat32(
    "F32",
    [32, 32],
    Float32Array.from({ length: 1024 }, (_, i) => Math.sin(seed * 1000 + i)),
  );
}

/** OLD: six tensors in three shards of two (8 KiB each). */
function oldTensors(): Record<string, Tensor> {
  return { a: tensor(1), b: tensor(2), c: tensor(3), d: tensor(4), e: tensor(5), f: tensor(6) };
}

/**
 * NEW: a and b as they were (their shard unchanged), c's rows 3..5 changed, d moved to the last shard (after f),
 * e replaced entirely, g added; shards of two tensors again.
 */
function newTensors(): Record<string, Tensor> {
  const c = new Float32Array(tensor(3).toFloat32());
  for (let i = 3 * 32; i < 5 * 32; i++) c[i] = -i;
  return {
    a: tensor(1),
    b: tensor(2),
    c: Tensor.fromFloat32("F32", [32, 32], c),
    g: tensor(7),
    f: tensor(6),
    d: tensor(4),
    e: tensor(50),
  };
}

function save(tensors: Record<string, Tensor>): string {
  const dir = fresh("-ckpt");
  saveSharded(dir, tensors, { maxShardSize: 9000, metadata: { format: "pt" } });
  return dir;
}

/** Every regular file of a directory, by name, with its bytes. */
function files(dir: string): Map<string, Buffer> {
  return new Map(
    fs
      .readdirSync(dir)
      .sort()
      .map((name) => [name, fs.readFileSync(path.join(dir, name))]),
  );
}

function assertSameDir(actual: string, expected: string) {
  const a = files(actual);
  const b = files(expected);
  assert.deepEqual([...a.keys()], [...b.keys()]);
  for (const [name, bytes] of b) assert.ok(a.get(name)!.equals(bytes), `${name} differs`);
}

describe("sharded patches", () => {
  const oldDir = save(oldTensors());
  const newDir = save(newTensors());
  const patch = fresh(".patch.safetensors");
  const { plan } = createPatch(oldDir, newDir, patch);

  test("the plan: version 2, every file of both sides, a copied shard, a moved tensor from its old shard, rows", () => {
    assert.equal(plan.version, 2);
    assert.deepEqual(
      plan.base.map((b) => b.name),
      [...files(oldDir).keys()].filter((n) => n.endsWith(".safetensors")).concat("model.safetensors.index.json"),
    );
    assert.equal(plan.target.length, 5); // 4 shards + index
    const first = plan.target[0]!;
    assert.equal(first.copy, 0, "the shard of a and b is a copy of OLD's first shard");
    const index = plan.target.at(-1)!;
    assert.equal(index.name, "model.safetensors.index.json");
    assert.equal(index.data, "file/4");
    const ops = plan.target.flatMap((t) => t.tensors ?? []);
    assert.deepEqual(
      ops.find((op) => op.name === "d"),
      { name: "d", from: [1, "d"] },
      "d comes from OLD's second shard",
    );
    assert.deepEqual(ops.find((op) => op.name === "c")?.rows, [[3, 5]]);
    assert.equal(ops.find((op) => op.name === "e")?.data?.startsWith("data/"), true);
    assert.deepEqual(plan.summary.added, ["g"]);
    assert.deepEqual(plan.summary.rowPatched, ["c"]);
    // The patch is a valid safetensors file.
    using file = openFile(patch);
    assert.ok(file.metadata()!.has(PATCH_METADATA_KEY));
  });

  test("apply rebuilds NEW's directory byte for byte (also given index files, and over an existing OUT)", () => {
    const out = fresh("-out");
    const result = applyPatch(oldDir, patch, out);
    assertSameDir(out, newDir);
    assert.equal(result.files.length, 5);
    const viaIndex = fresh("-out2");
    const patch2 = fresh(".patch.safetensors");
    createPatch(
      path.join(oldDir, "model.safetensors.index.json"),
      path.join(newDir, "model.safetensors.index.json"),
      patch2,
    );
    applyPatch(path.join(oldDir, "model.safetensors.index.json"), patch2, viaIndex);
    assertSameDir(viaIndex, newDir);
    // Applied again over the same OUT: still NEW.
    applyPatch(oldDir, patch, out);
    assertSameDir(out, newDir);
  });

  test("a wrong base is refused before anything is written: a changed shard, a missing shard", () => {
    const wrong = fresh("-wrong");
    fs.cpSync(oldDir, wrong, { recursive: true });
    const shard = path.join(wrong, "model-00003-of-00003.safetensors");
    const bytes = fs.readFileSync(shard);
    bytes[bytes.length - 1]! ^= 1;
    fs.writeFileSync(shard, bytes);
    const out = fresh("-out");
    assert.throws(() => applyPatch(wrong, patch, out), code("PatchBaseMismatch"));
    assert.equal(fs.existsSync(out), false, "nothing written");
    // An existing OUT is left exactly as it was.
    const existing = fresh("-existing");
    fs.cpSync(oldDir, existing, { recursive: true });
    assert.throws(() => applyPatch(wrong, patch, existing), code("PatchBaseMismatch"));
    assertSameDir(existing, oldDir);
    // NEW is not OLD either.
    assert.throws(() => applyPatch(newDir, patch, fresh("-out")), code("PatchBaseMismatch"));
    // A base whose index no longer lists a shard the patch needs.
    const single = fresh(".safetensors");
    fs.copyFileSync(path.join(oldDir, "model-00001-of-00003.safetensors"), single);
    assert.throws(() => applyPatch(single, patch, fresh("-out")), code("PatchBaseMismatch"));
  });

  test("a tampered patch is refused before the commit: OUT stays as it was", () => {
    const bad = fresh(".patch.safetensors");
    const bytes = fs.readFileSync(patch);
    {
      // A byte of e's new values, stored whole in the patch.
      using file = openFile(patch);
      const name = [...file.header.tensors.keys()].find((n) => n.startsWith("data/") && n.endsWith("/e"))!;
      bytes[file.header.dataStart + file.header.tensors.get(name)!.dataOffsets[0] + 5]! ^= 0x40;
    }
    fs.writeFileSync(bad, bytes);
    const existing = fresh("-existing");
    fs.cpSync(oldDir, existing, { recursive: true });
    assert.throws(() => applyPatch(oldDir, bad, existing), code("PatchTargetMismatch"));
    assertSameDir(existing, oldDir);
    assert.deepEqual(
      fs.readdirSync(existing).filter((n) => n.startsWith(".")),
      [],
      "no staged files left",
    );
  });

  test("in place: OLD's directory becomes NEW (its dropped shards removed), atomically", () => {
    const dir = fresh("-inplace");
    fs.cpSync(oldDir, dir, { recursive: true });
    applyPatch(dir, patch, dir);
    assertSameDir(dir, newDir);
  });

  test("one file to a sharded checkpoint and back", () => {
    const single = fresh(".safetensors");
    const merged = fresh(".patch.safetensors");
    fs.copyFileSync(path.join(oldDir, "model-00002-of-00003.safetensors"), single);
    createPatch(single, newDir, merged);
    const out = fresh("-out");
    applyPatch(single, merged, out);
    assertSameDir(out, newDir);
    const back = fresh(".patch.safetensors");
    const { plan: backPlan } = createPatch(newDir, single, back);
    assert.equal(backPlan.version, 2);
    const out2 = fresh("-out");
    applyPatch(newDir, back, out2);
    assert.deepEqual([...files(out2).keys()], [path.basename(single)]);
    assert.ok(fs.readFileSync(path.join(out2, path.basename(single))).equals(fs.readFileSync(single)));
  });

  test("CLI: patch create / info / apply on directories", async () => {
    const p = fresh(".patch.safetensors");
    const made = await cli("patch", "create", oldDir, newDir, p);
    assert.equal(made.code, 0, made.stderr);
    const info = await cli("patch", "info", p);
    assert.match(info.stdout, /target [0-9a-f]{64} {2}\d+ bytes {2}"model-00001-of-00004.safetensors" \(copy of/);
    const out = fresh("-out");
    const applied = await cli("patch", "apply", oldDir, p, out);
    assert.equal(applied.code, 0, applied.stderr);
    assert.match(applied.stdout, /^wrote .* \(5 files, [\d,]+ bytes, each verified\)\n$/);
    assertSameDir(out, newDir);
    const refused = await cli("patch", "apply", newDir, p, fresh("-out"));
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /error\[PatchBaseMismatch\]/);
  });
});
