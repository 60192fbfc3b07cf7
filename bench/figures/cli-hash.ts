import * as path from "node:path";
import { defineFigure } from "./types.js";

/** `hash --json` as a whole process: SHA-256 of the file and of every tensor (reads all 2.37 GiB). */
export default defineFigure<void>({
  name: "cli_hash",
  method: {
    ours: "`node bin/safetensors.js hash --json FILE`, spawn to exit",
    reference:
      "`python bench/ref_hash.py FILE` (`safe_open` + hashlib, the same JSON), spawn to exit; outputs compared",
  },
  backends: ["auto"],
  sameStdout: true,
  ours: {
    kind: "process",
    argv: (ctx) => [ctx.node, path.join(ctx.repo, "bin", "safetensors.js"), "hash", "--json", ctx.path],
  },
  reference: { kind: "process", argv: (ctx) => [ctx.python, path.join(ctx.bench, "ref_hash.py"), ctx.path] },
});
