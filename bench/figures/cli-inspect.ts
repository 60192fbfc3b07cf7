import * as path from "node:path";
import { defineFigure } from "./types.js";

/** `inspect --json` as a whole process: what a user waits for in a shell. */
export default defineFigure<void>({
  name: "cli_inspect",
  method: {
    ours: "`node bin/safetensors.js inspect --json FILE`, spawn to exit",
    reference: "`python bench/ref_inspect.py FILE` (`safe_open` + the same JSON), spawn to exit; outputs compared",
  },
  backends: ["auto"],
  sameStdout: true,
  ours: {
    kind: "process",
    argv: (ctx) => [ctx.node, path.join(ctx.repo, "bin", "safetensors.js"), "inspect", "--json", ctx.path],
  },
  reference: { kind: "process", argv: (ctx) => [ctx.python, path.join(ctx.bench, "ref_inspect.py"), ctx.path] },
  goal: { ratio: 1.2 },
});
