import * as path from "node:path";
import { defineFigure } from "./types.js";

/**
 * `hash --json` as a whole process: SHA-256 of the file, of the data region (kohya's sshs_model_hash) and of every
 * tensor, plus AutoV1/AutoV2 (reads all 2.37 GiB once). Three SHA-256 streams over nearly every byte on both sides;
 * ours runs two of them on worker threads.
 */
export default defineFigure<void>({
  name: "cli_hash",
  method: {
    ours: "`node bin/safetensors.js hash --json FILE`, spawn to exit",
    reference:
      "`python bench/ref_hash.py FILE` (`safe_open` + hashlib, three SHA-256 streams in one pass, the same JSON), spawn to exit; outputs compared",
  },
  backends: ["auto"],
  sameStdout: true,
  goal: { ratio: 1 },
  ours: {
    kind: "process",
    argv: (ctx) => [ctx.node, path.join(ctx.repo, "bin", "safetensors.js"), "hash", "--json", ctx.path],
  },
  reference: { kind: "process", argv: (ctx) => [ctx.python, path.join(ctx.bench, "ref_hash.py"), ctx.path] },
});
