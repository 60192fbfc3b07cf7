/** `safetensors extract` and `safetensors drop`: keep or remove tensors, by byte copies. */
import { mergedMetadata } from "../edit/checkpoint.js";
import { writeFileFrom } from "../edit/write.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { guardOutputs, REWRITE_NOTES, REWRITE_OPTIONS, rewrite, selectTensors } from "./rewrite.js";

/** extract keeps the selected tensors, drop keeps the others; both write one file. */
export function selectionCommand(kind: "extract" | "drop") {
  const verb = kind === "extract" ? "Copy" : "Copy all but";
  return defineCommand({
    usage: `${kind} IN OUT (--tensor NAME... | --match REGEX) [--json]`,
    description: `${verb} the tensors named by --tensor (repeatable; each must exist) or whose name matches REGEX (a
JavaScript regular expression, searched anywhere in the name: anchor it with ^ and $) from IN (a file, a checkpoint
directory or an index) into the single file OUT, with IN's metadata (a checkpoint's shards' metadata combined).

${REWRITE_NOTES}`,
    options: {
      tensor: { type: "string", multiple: true, value: "NAME", help: "a tensor to select (repeatable)" },
      match: { type: "string", value: "REGEX", help: "select tensors whose name matches" },
      ...REWRITE_OPTIONS,
    },
    run({ values, positionals }, { io }) {
      if (positionals.length !== 2) throw new UsageError(`${kind} takes IN and OUT`);
      const [input, out] = positionals as [string, string];
      return rewrite(input, io, values.json, (checkpoint, progress) => {
        const selected = selectTensors(checkpoint, values.tensor, values.match);
        guardOutputs(checkpoint, [out], values["in-place"]);
        const kept = checkpoint.tensors.filter((t) => selected.has(t.name) === (kind === "extract"));
        const tensors = kept.map((source) => ({ name: source.name, source, dtype: source.dtype }));
        const bytes = writeFileFrom(
          out,
          tensors,
          mergedMetadata(checkpoint.files).metadata,
          { fsync: values.fsync },
          progress,
        );
        const detail = kind === "extract" ? `of ${checkpoint.tensors.length}` : `${selected.size} dropped`;
        return { files: [out], bytes, tensors: tensors.length, detail };
      });
    },
  });
}

export const command = selectionCommand("extract");
