/** `safetensors merge`: a sharded checkpoint into one file, by byte copies. */
import { mergedMetadata } from "../edit/checkpoint.js";
import { writeFileFrom } from "../edit/write.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { guardOutputs, REWRITE_NOTES, REWRITE_OPTIONS, rewrite } from "./rewrite.js";

export const command = defineCommand({
  usage: "merge DIR|INDEX OUT [--json]",
  description: `Write every tensor the index lists into one file OUT, bytes copied as they are (never decoded). The
metadata is the shards' metadata combined; a key whose value differs between shards keeps the first shard's value,
with a warning. The index is checked against every shard first (as openSharded checks it).

${REWRITE_NOTES}`,
  options: { ...REWRITE_OPTIONS },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("merge takes DIR|INDEX and OUT");
    const [input, out] = positionals as [string, string];
    return rewrite(input, io, values.json, (checkpoint, progress) => {
      guardOutputs(checkpoint, [out], values["in-place"]);
      const { metadata, conflicts } = mergedMetadata(checkpoint.files);
      for (const key of conflicts) {
        io.stderr(`warning: shards disagree on metadata ${JSON.stringify(key)}: the first shard's value is kept\n`);
      }
      const tensors = checkpoint.tensors.map((source) => ({ name: source.name, source, dtype: source.dtype }));
      const bytes = writeFileFrom(out, tensors, metadata, { fsync: values.fsync }, progress);
      const shards = checkpoint.files.length;
      return { files: [out], bytes, tensors: tensors.length, detail: `from ${shards} shard${shards === 1 ? "" : "s"}` };
    });
  },
});
