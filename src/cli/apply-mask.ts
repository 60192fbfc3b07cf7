/** `safetensors apply-mask`: W ⊙ 1[G > 0] in place for every weight a mask file names, journaled. */
import { applyMask } from "../edit/mask.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

export const command = defineCommand({
  usage:
    "apply-mask FILE|DIR --mask MASK.safetensors [--bit-order big|little] [--mode multiply|zero] [--no-fsync] [--json]",
  description: `Zero, in place, the weights a mask does not keep: every tensor of MASK names a weight of FILE (or of a
sharded checkpoint's DIR / index), which becomes W ⊙ 1[G > 0]. A mask is element-wise (any dtype but C64, the
weight's shape: kept where G > 0; BOOL and unsigned integers: nonzero) or packed bits in U8 as numpy's packbits
writes them: shape [ceil(n/8)] for np.packbits(keep, axis=None) of the flattened weight, or the weight's shape with
its last axis ceil(last/8) for np.packbits(keep, axis=-1) (each row padded). A U8 mask of the weight's own shape is
element-wise. --bit-order: big (numpy's default: element 0 in the most significant bit) or little.

--mode multiply (default) is numpy's w * (g > 0): a masked negative weight becomes -0.0, NaN stays NaN, an infinity
becomes NaN; --mode zero is np.where(g > 0, w, 0): +0 everywhere masked.

Every mask is checked against its weight (name, shape or packed byte count, dtype) before anything is written; then
each weight is streamed in 8 MiB chunks, the old bytes of every chunk that changes journaled first (fsynced unless
--no-fsync), all weights in one transaction: a crash leaves the old or the new checkpoint after "safetensors
recover". Prints per tensor how many weights were zeroed; --json: {"tensors":[{"tensor","file","mask_dtype",
"layout","elements","zeroed"}],"bytes_written"}.`,
  options: {
    mask: { type: "string", value: "MASK", help: "the mask file (.safetensors); required" },
    "bit-order": { type: "string", value: "big|little", help: "bit order of packed masks (default big)" },
    mode: { type: "string", value: "multiply|zero", help: "numpy's product (signed zeros; default) or +0" },
    "no-fsync": { type: "boolean", help: "do not fsync the journal and the file" },
    json: { type: "boolean", help: "print the result as JSON" },
  },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 1) throw new UsageError("apply-mask takes one FILE (or DIR)");
    if (values.mask === undefined) throw new UsageError("apply-mask needs --mask MASK.safetensors");
    const bitOrder = values["bit-order"] ?? "big";
    if (bitOrder !== "big" && bitOrder !== "little") throw new UsageError("--bit-order must be big or little");
    const mode = values.mode ?? "multiply";
    if (mode !== "multiply" && mode !== "zero") throw new UsageError("--mode must be multiply or zero");
    const result = applyMask(positionals[0]!, values.mask, { bitOrder, mode, fsync: !values["no-fsync"] });
    if (values.json) {
      const tensors = result.tensors.map(
        (t) =>
          `{"tensor":${JSON.stringify(t.tensor)},"file":${JSON.stringify(t.file)},"mask_dtype":"${t.maskDtype}",` +
          `"layout":"${t.layout}","elements":${t.elements},"zeroed":${t.zeroed}}`,
      );
      io.stdout(`{"tensors":[${tensors.join(",")}],"bytes_written":${result.bytesWritten}}\n`);
      return 0;
    }
    for (const t of result.tensors) {
      const percent = t.elements === 0 ? 0 : (100 * t.zeroed) / t.elements;
      io.stdout(
        `${t.tensor}: zeroed ${t.zeroed} of ${t.elements} (${percent.toFixed(2)}%, ${t.maskDtype} ${t.layout} mask)\n`,
      );
    }
    io.stdout(
      `${result.tensors.length} tensor${result.tensors.length === 1 ? "" : "s"} masked, ${result.bytesWritten} bytes rewritten\n`,
    );
    return 0;
  },
});
