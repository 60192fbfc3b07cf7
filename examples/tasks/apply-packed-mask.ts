// Apply a packed pruning mask (np.packbits(keep, axis=None) of the flattened weight, element 0 in the most
// significant bit) to one weight of a copy of MODEL, then check every element against numpy's w * (g > 0) and that no
// other tensor changed. Written from docs/editing.md, docs/writing.md and docs/reading.md alone;
// test/docs-tasks.test.ts runs it.
//
//   npx tsx apply-packed-mask.ts MODEL.safetensors NAME     (NAME: an F32 weight)
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { applyMask, diffCheckpoints, openFile, saveFile, Tensor } from "safetensors-ts";

const [source, name] = process.argv.slice(2);
if (!source || !name) throw new Error("usage: apply-packed-mask.ts MODEL.safetensors NAME");
const dir = mkdtempSync(join(tmpdir(), "mask-"));
const model = join(dir, "model.safetensors");
const maskFile = join(dir, "mask.safetensors");
copyFileSync(source, model);

let before: Float32Array;
{
  using file = openFile(model);
  before = file.getTensor(name, { memory: "owned" }).toFloat32();
}
const n = before.length;
const keep = Array.from({ length: n }, (_, i) => (i * 7919) % 5 !== 0); // drop every fifth-ish element
const packed = new Uint8Array(Math.ceil(n / 8));
keep.forEach((k, i) => {
  if (k) packed[i >> 3]! |= 0x80 >> (i & 7);
});
saveFile(maskFile, { [name]: Tensor.from(packed) }); // U8 [ceil(n / 8)], under the weight's own name

const { tensors, bytesWritten } = applyMask(model, maskFile, { fsync: true });
for (const t of tensors) console.log(t.tensor, t.layout, `${t.zeroed} of ${t.elements} zeroed`);
console.log(bytesWritten);

{
  using file = openFile(model);
  const after = file.getTensor(name).toFloat32();
  for (let i = 0; i < n; i++) {
    const want = keep[i] ? before[i]! : before[i]! * 0; // numpy's w * (g > 0): -0.0 for a masked negative weight
    if (!Object.is(after[i], want)) throw new Error(`element ${i}: ${after[i]} is not ${want}`);
  }
}
const others = diffCheckpoints(source, model).tensors.filter((t) => t.status !== "same" && t.name !== name);
if (others.length > 0) throw new Error(`other tensors changed: ${others.map((t) => t.name)}`);
console.log(`ok: ${keep.filter((k) => !k).length} elements masked in ${name}, every other tensor unchanged`);
rmSync(dir, { recursive: true, force: true });
