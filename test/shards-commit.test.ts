/**
 * The commit protocol of checkpoint saves (src/shards/save-commit.ts) beyond what the SIGKILL trials of
 * crash.test.ts reach: a commit record left behind is finished by the next reader, a record that is not ours is
 * refused without touching anything, leftovers of dead writers are removed and those of live ones kept, and a reader
 * that raced a commit opens again.
 */
import assert from "node:assert/strict";
import mutableFs, * as fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { SafetensorError } from "../src/format/errors.js";
import { openSharded, saveSharded, Tensor } from "../src/node.js";
import { recordPath } from "../src/shards/save-commit.js";
import { fill } from "./helpers/fill.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-commit-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
let count = 0;
const freshDir = () => fs.mkdtempSync(path.join(tmp, `d${count++}-`));
const code = (expected: string) => (error: unknown) => error instanceof SafetensorError && error.code === expected;
const INDEX = "model.safetensors.index.json";

/** Three 40 KB tensors in three shards, with bytes that depend on `step`. */
function tensorsAt(step: number): Map<string, Tensor> {
  return new Map(
    [0, 1, 2].map((i) => [`layer.${i}.weight`, new Tensor("U8", [40_000], fill(40_000, step * 10 + i))] as const),
  );
}

const save = (dir: string, step: number) => saveSharded(dir, tensorsAt(step), { maxShardSize: "50KB" });

describe("checkpoint commits", () => {
  test("a commit record left by a killed save is finished by openSharded", () => {
    const dir = freshDir();
    save(dir, 1);
    // What a save killed right after its commit point leaves: every new file staged, the record, nothing renamed.
    const next = freshDir();
    save(next, 2);
    const renames: [string, string][] = [];
    for (const name of fs.readdirSync(next)) {
      const staged = `.${name}.safetensors-stage-999999999-abcdefgh`;
      fs.copyFileSync(path.join(next, name), path.join(dir, staged));
      renames.push([staged, name]);
    }
    renames.sort((a, b) => Number(a[1] === INDEX) - Number(b[1] === INDEX));
    fs.writeFileSync(recordPath(dir, INDEX), JSON.stringify({ renames, remove: [] }));
    using opened = openSharded(dir);
    for (const [name, tensor] of tensorsAt(2)) assert.deepEqual(opened.getTensor(name).data, tensor.data);
    assert.deepEqual(fs.readdirSync(dir).sort(), fs.readdirSync(next).sort());
  });

  test("a record naming files outside the directory is refused and nothing moves", () => {
    const dir = freshDir();
    save(dir, 1);
    const before = fs.readdirSync(dir).sort();
    const outside = path.join(tmp, "victim");
    fs.writeFileSync(outside, "keep");
    const record = recordPath(dir, INDEX);
    fs.writeFileSync(record, JSON.stringify({ renames: [], remove: ["../victim"] }));
    assert.throws(() => openSharded(dir), code("InterruptedSave"));
    assert.throws(() => save(dir, 2), code("InterruptedSave"));
    assert.equal(fs.readFileSync(outside, "utf8"), "keep");
    assert.deepEqual(fs.readdirSync(dir).sort(), [...before, path.basename(record)].sort());
  });

  test("staged files of a dead writer are removed by the next save, a live writer's are kept", () => {
    const dir = freshDir();
    save(dir, 1);
    const dead = ".model-00001-of-00003.safetensors.safetensors-stage-999999999-abcdefgh";
    const deadTemp = `.${dead}.safetensors-tmp-999999999-abcdefgh`;
    const live = `.model-00001-of-00003.safetensors.safetensors-stage-${process.ppid}-abcdefgh`;
    for (const name of [dead, deadTemp, live]) fs.writeFileSync(path.join(dir, name), "partial");
    save(dir, 2);
    const left = fs.readdirSync(dir).filter((name) => name.startsWith("."));
    assert.deepEqual(left, [live]);
  });

  test("a save over a larger checkpoint removes the old shards only once the new set is in place", () => {
    const dir = freshDir();
    saveSharded(dir, tensorsAt(1), { maxShardSize: "50KB" });
    saveSharded(dir, tensorsAt(2), { maxShardSize: "100KB" });
    assert.deepEqual(fs.readdirSync(dir).sort(), [
      "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors",
      INDEX,
    ]);
    saveSharded(dir, tensorsAt(3), { maxShardSize: "1MB" });
    assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
    using opened = openSharded(dir);
    for (const [name, tensor] of tensorsAt(3)) assert.deepEqual(opened.getTensor(name).data, tensor.data);
  });

  /**
   * Runs `commit` (a whole save into the directory) inside the reader's open, just before it resolves the path of its
   * second shard: the reader then holds the old index and a shard of the old set, and finds the rest new (or gone).
   */
  function openRacing(dir: string, commit: () => void): ReturnType<typeof openSharded> {
    // The module object (its named exports follow it after syncBuiltinESMExports), as the crash tests' child does.
    const realpathSync = mutableFs.realpathSync;
    const restore = () => {
      mutableFs.realpathSync = realpathSync;
      syncBuiltinESMExports();
    };
    let raced = false;
    mutableFs.realpathSync = ((...args: Parameters<typeof fs.realpathSync>) => {
      if (!raced && String(args[0]).endsWith("model-00002-of-00003.safetensors")) {
        raced = true;
        restore();
        commit();
      }
      return realpathSync(...args);
    }) as typeof fs.realpathSync;
    syncBuiltinESMExports();
    try {
      return openSharded(dir);
    } finally {
      restore();
      assert.ok(raced, "the reader never reached its second shard: the race did not happen");
    }
  }

  test("a reader that races a commit of the same layout opens again and reads only the new checkpoint", () => {
    const dir = freshDir();
    save(dir, 1);
    // Same names, shapes and shard files at another step: the mixed set passes every index check.
    using opened = openRacing(dir, () => save(dir, 2));
    for (const [name, tensor] of tensorsAt(2)) assert.deepEqual(opened.getTensor(name).data, tensor.data);
  });

  test("a reader that races a commit of another layout opens again instead of failing", () => {
    const dir = freshDir();
    save(dir, 1);
    // Two shards instead of three: the old index names shard files that the commit removes under the reader.
    const next = tensorsAt(4);
    using opened = openRacing(dir, () => saveSharded(dir, next, { maxShardSize: "100KB" }));
    assert.deepEqual(opened.keys().sort(), [...next.keys()].sort());
    for (const [name, tensor] of next) assert.deepEqual(opened.getTensor(name).data, tensor.data);
  });
});
