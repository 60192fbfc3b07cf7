// Zero rows 8:24 of one tensor in place, and prove nothing else changed: the edit's own proof (verify "full"), then
// a diff against a copy made before. Written from docs/editing.md alone; test/docs-tasks.test.ts runs it.
//
//   npx tsx zero-rows-in-place.ts MODEL.safetensors NAME     (edits a copy in a temporary folder)
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { diffCheckpoints, openFile, openForEdit } from "safetensors-ts";

const [source, name] = process.argv.slice(2);
if (!source || !name) throw new Error("usage: zero-rows-in-place.ts MODEL.safetensors NAME");
const dir = mkdtempSync(join(tmpdir(), "zero-rows-"));
const model = join(dir, "model.safetensors");
const before = join(dir, "before.safetensors");
copyFileSync(source, model);
copyFileSync(source, before);

{
  using edit = openForEdit(model, { fsync: true });
  const result = edit.write(name, "8:24", { fill: 0 }, { verify: "full" });
  edit.commit();
  console.log(result.ranges, result.proof);
}

// From outside: the only difference is rows 8..24 of that tensor, and no metadata.
const diff = diffCheckpoints(before, model);
const changed = diff.tensors.filter((t) => t.status !== "same");
console.log(
  changed.map((t) => [t.name, t.status, t.rows]),
  diff.metadata,
);
if (changed.length !== 1 || changed[0]!.name !== name) throw new Error("more than one tensor changed");
const rows = changed[0]!.status === "changed" ? changed[0]!.rows : [];
if (JSON.stringify(rows) !== "[[8,24]]") throw new Error(`rows ${JSON.stringify(rows)}`);
if (diff.metadata.length !== 0) throw new Error("metadata changed");

{
  using file = openFile(model);
  const zeroed = file.getSlice(name).get("8:24").toFloat32();
  if (!zeroed.every((v) => v === 0)) throw new Error("rows not zero");
  console.log(`ok: ${zeroed.length} values zeroed in ${name}, nothing else changed`);
}
rmSync(dir, { recursive: true, force: true });
