// Convert a directory of PyTorch .bin shards to safetensors, and check every tensor against what
// torch.load(weights_only=True) gave for the same shards (dtype, shape, SHA-256 of the bytes: the manifest.json that
// scripts/gen_pickle_dir_fixtures.py writes). Written from docs/pytorch.md and docs/reading.md alone;
// test/docs-tasks.test.ts runs it.
//
//   npx tsx convert-bin-directory.ts test/fixtures/pickle-dirs
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { convertPickleDirectory, openSharded, scanPickleFile } from "safetensors-ts";

const fixtures = process.argv[2];
if (!fixtures) throw new Error("usage: convert-bin-directory.ts PICKLE_DIRS_FIXTURES");
const input = join(fixtures, "sharded"); // pytorch_model-0000k-of-00003.bin + pytorch_model.bin.index.json
const output = join(mkdtempSync(join(tmpdir(), "convert-")), "model-safetensors");

for (const name of readdirSync(input).filter((n) => n.endsWith(".bin"))) {
  console.log("scan", name, scanPickleFile(join(input, name)).verdict);
}
const report = convertPickleDirectory(input, output);
console.log(report.outputIndex, report.totalSize, report.shards.length, report.warnings);
console.log(readdirSync(output).sort());

type Expected = { dtype: string; shape: number[]; sha256: string };
const manifest = JSON.parse(readFileSync(join(fixtures, "manifest.json"), "utf8"));
const expected: Record<string, Expected> = manifest.dirs.find((d: { dir: string }) => d.dir === "sharded").tensors;

using ckpt = openSharded(output);
// A tied name is not a tensor of the output: the shard holding the kept tensor records it as NAME: KEPT.
const tied = new Map<string, string>();
for (const file of ckpt.shards) {
  for (const [alias, kept] of ckpt.shard(file).metadata() ?? []) if (alias !== "format") tied.set(alias, kept);
}
let checked = 0;
for (const [name, want] of Object.entries(expected)) {
  const t = ckpt.getTensor(tied.get(name) ?? name);
  const sha = createHash("sha256").update(t.data).digest("hex");
  if (t.dtype !== want.dtype || String(t.shape) !== String(want.shape) || sha !== want.sha256) {
    throw new Error(`${name}: ${t.dtype} ${t.shape} ${sha} is not torch's ${want.dtype} ${want.shape} ${want.sha256}`);
  }
  checked++;
}
console.log("tied:", tied);
if (checked !== Object.keys(expected).length || tied.size === 0) throw new Error("not every tensor was checked");
console.log(`ok: ${checked} tensors equal torch's (${tied.size} tied), in ${report.shards.length} shards`);
