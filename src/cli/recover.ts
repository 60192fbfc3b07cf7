/** `safetensors recover`: roll back an in-place edit that a crash interrupted. */
import * as fs from "node:fs";
import type { RecoverResult } from "../edit/journal.js";
import { recoverFile } from "../edit/journal.js";
import { recoverCheckpoint } from "../edit/sharded-edit.js";
import { ioError } from "../io/node-file.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

function describe(file: string, result: RecoverResult): string {
  if (!result.recovered) return `${file}: no interrupted edit`;
  if (result.committed) return `${file}: the edit had committed (all its shards were written): journal discarded`;
  return `${file}: rolled back ${result.records} region${result.records === 1 ? "" : "s"} (${result.bytes} bytes)`;
}

function json(file: string, result: RecoverResult): string {
  return `{"file":${JSON.stringify(file)},"recovered":${result.recovered},"records":${result.records},"bytes":${result.bytes},"committed":${result.committed === true}}`;
}

export const command = defineCommand({
  usage: "recover FILE|DIR [--json]",
  description: `Undo an in-place edit (edit, apply-mask) that was interrupted: the old bytes saved in the file's undo
journal (.FILE-journal) are written back, byte for byte, the file is fsynced and the journal removed. A DIR (or an
index) recovers every shard that has a journal; the shards of a multi-shard edit that had reached its commit point
keep the edit instead. A journal that is damaged, torn or written for another file is refused (JournalCorrupt) and
nothing is changed. --json prints {"file","recovered","records","bytes","committed"} (for a DIR an array, one per
shard that had a journal).`,
  options: { json: { type: "boolean", help: "print the result as JSON" } },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 1) throw new UsageError("recover takes one FILE or DIR");
    const target = positionals[0]!;
    let stat: fs.Stats;
    try {
      stat = fs.statSync(target);
    } catch (error) {
      throw ioError(error, `cannot open ${target}`);
    }
    if (stat.isDirectory() || target.endsWith(".index.json")) {
      const { shards } = recoverCheckpoint(target);
      const entries = [...shards];
      if (values.json) io.stdout(`[${entries.map(([file, result]) => json(file, result)).join(",")}]\n`);
      else if (entries.length === 0) io.stdout(`${target}: no interrupted edit\n`);
      else for (const [file, result] of entries) io.stdout(`${describe(file, result)}\n`);
      return 0;
    }
    const result = recoverFile(target);
    io.stdout(`${values.json ? json(target, result) : describe(target, result)}\n`);
    return 0;
  },
});
