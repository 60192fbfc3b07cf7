/** `safetensors cast`: float tensors to bf16, f16 or f32 as torch's `.to()` rounds, in chunks. */
import { CAST_TARGETS, type CastTarget, isCastable } from "../edit/cast.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { REWRITE_NOTES, REWRITE_OPTIONS, regexOption, rewrite, rewriteEach } from "./rewrite.js";

export const command = defineCommand({
  usage: "cast IN OUT --to bf16|f16|f32 [--match REGEX] [--json]",
  description: `Convert float tensors (F64, F32, F16, BF16, F8_*) to the target dtype exactly as torch's Tensor.to() does,
bit for bit: through float32, rounding to nearest even, with torch's overflow and NaN rules. Integer, BOOL, C64 and
sub-byte (F4, F6) tensors, tensors already of the target dtype, and with --match those whose name does not match,
are copied unchanged. Tensors are converted in chunks of 1 Mi elements, never whole. A sharded checkpoint (OUT a
directory) keeps its shard assignment; the index's total_size is updated.

${REWRITE_NOTES}`,
  options: {
    to: { type: "string", value: "DTYPE", help: "bf16, f16 or f32; required" },
    match: { type: "string", value: "REGEX", help: "only tensors whose name matches" },
    ...REWRITE_OPTIONS,
  },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("cast takes IN and OUT");
    const [input, out] = positionals as [string, string];
    const target = values.to?.toUpperCase() as CastTarget | undefined;
    if (target === undefined || !CAST_TARGETS.includes(target)) throw new UsageError("--to must be bf16, f16 or f32");
    const match = values.match === undefined ? null : regexOption(values.match, "--match");
    return rewrite(input, io, values.json, (checkpoint, progress) => {
      let cast = 0;
      const summary = rewriteEach(
        checkpoint,
        out,
        { inPlace: values["in-place"], fsync: values.fsync },
        progress,
        (file) => ({
          tensors: file.tensors.map((source) => {
            const castable = isCastable(source.dtype) && (match === null || match.test(source.name));
            if (castable && source.dtype !== target) cast++;
            return { name: source.name, source, dtype: castable ? target : source.dtype };
          }),
          metadata: file.metadata,
        }),
      );
      return { ...summary, detail: `${cast} cast to ${target}` };
    });
  },
});
