// Diff two checkpoints: A is a sharded checkpoint; B is one file holding A's tensors with one element of float32_35
// changed, int8_3 dropped, "extra" added and the metadata's "format" changed. The diff must name exactly those, and
// the CLI's diff must exit 1. Written from docs/integrity.md, docs/reading.md and docs/writing.md alone;
// test/docs-tasks.test.ts runs it.
//
//   npx tsx diff-checkpoints.ts CHECKPOINT_DIR     (a checkpoint with F32 float32_35 [3, 5] and int8_3, as the
//                                                   corpus's julia-test-sharded-6)
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { diffCheckpoints, openSharded, saveFile, Tensor } from "safetensors-ts";

const a = process.argv[2];
if (!a) throw new Error("usage: diff-checkpoints.ts CHECKPOINT_DIR");
const b = join(mkdtempSync(join(tmpdir(), "diff-")), "b.safetensors");

{
  using ckpt = openSharded(a);
  const tensors = new Map<string, Tensor>();
  for (const name of ckpt.keys()) tensors.set(name, ckpt.getTensor(name, { memory: "owned" }));
  const w = tensors.get("float32_35")!;
  const values = w.toFloat32();
  values[5] = values[5]! + 1; // row 1, column 0
  tensors.set("float32_35", Tensor.fromFloat32("F32", w.shape, values));
  tensors.delete("int8_3");
  tensors.set("extra", Tensor.from(new Int32Array([1, 2, 3])));
  saveFile(b, tensors, { format: "np" });
}

const diff = diffCheckpoints(a, b);
for (const t of diff.tensors) {
  if (t.status === "changed") console.log(t.name, `${t.elements}/${t.total} elements`, t.maxAbsDiff, t.rows);
  else if (t.status !== "same") console.log(t.name, t.status);
}
console.log(diff.same, diff.metadata);
const summary = diff.tensors.filter((t) => t.status !== "same").map((t) => `${t.name}:${t.status}`);
const want = ["extra:only_b", "float32_35:changed", "int8_3:only_a"];
if (summary.sort().join() !== want.join()) throw new Error(`unexpected differences: ${summary}`);
const changed = diff.tensors.find((t) => t.name === "float32_35");
if (changed?.status !== "changed" || JSON.stringify(changed.rows) !== "[[1,2]]" || changed.elements !== 1) {
  throw new Error(`float32_35: ${JSON.stringify(changed)}`);
}
if (diff.same || diff.metadata.length !== 1 || diff.metadata[0]!.key !== "format") throw new Error("metadata");

// The CLI agrees: exit status 1 (different), as diff(1). (`npx safetensors diff A B` runs this same file.)
const bin = join(
  dirname(createRequire(import.meta.url).resolve("safetensors-ts/package.json")),
  "bin",
  "safetensors.js",
);
const cli = spawnSync(process.execPath, [bin, "diff", a, b], { encoding: "utf8" });
console.log(cli.stdout.trim());
if (cli.status !== 1) throw new Error(`safetensors diff exited ${cli.status}: ${cli.stderr}`);
console.log("ok: the diff names exactly the changes made");
