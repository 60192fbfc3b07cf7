/** `safetensors set-metadata`: change `__metadata__`, bytes copied as they are. */
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { REWRITE_NOTES, REWRITE_OPTIONS, rewrite, rewriteEach } from "./rewrite.js";

export const command = defineCommand({
  usage: "set-metadata IN OUT [KEY=VALUE...] [--delete KEY...] [--clear] [--json]",
  description: `Write IN with its __metadata__ changed: --clear removes every entry first, then --delete KEY
(repeatable) removes entries, then each KEY=VALUE (split at the first "=") sets one. With no entries left the file
has no __metadata__. A sharded checkpoint (OUT a directory) gets the change in every shard; its index is kept.

${REWRITE_NOTES}`,
  options: {
    delete: { type: "string", multiple: true, value: "KEY", help: "remove an entry (repeatable)" },
    clear: { type: "boolean", help: "remove every entry first" },
    ...REWRITE_OPTIONS,
  },
  run({ values, positionals }, { io }) {
    if (positionals.length < 2) throw new UsageError("set-metadata takes IN, OUT and KEY=VALUE entries");
    const [input, out, ...pairs] = positionals as [string, string, ...string[]];
    const sets = pairs.map((pair) => {
      const at = pair.indexOf("=");
      if (at < 0) throw new UsageError(`${JSON.stringify(pair)}: expected KEY=VALUE`);
      return [pair.slice(0, at), pair.slice(at + 1)] as const;
    });
    if (sets.length === 0 && !values.clear && (values.delete?.length ?? 0) === 0) {
      throw new UsageError("nothing to change: give KEY=VALUE, --delete KEY or --clear");
    }
    return rewrite(input, io, values.json, (checkpoint, progress) => {
      let keys = 0;
      const summary = rewriteEach(
        checkpoint,
        out,
        { inPlace: values["in-place"], fsync: values.fsync },
        progress,
        (file) => {
          const metadata = new Map(values.clear ? [] : (file.metadata ?? []));
          for (const key of values.delete ?? []) metadata.delete(key);
          for (const [key, value] of sets) metadata.set(key, value);
          keys = Math.max(keys, metadata.size);
          return {
            tensors: file.tensors.map((source) => ({ name: source.name, source, dtype: source.dtype })),
            metadata: metadata.size > 0 ? metadata : null,
          };
        },
      );
      const changes = [
        ...(values.clear ? ["cleared"] : []),
        ...(values.delete?.length ? [`${values.delete.length} deleted`] : []),
        ...(sets.length ? [`${sets.length} set`] : []),
      ];
      return { ...summary, detail: `metadata ${changes.join(", ")}: ${keys} key${keys === 1 ? "" : "s"} now` };
    });
  },
});
