import { openChecked } from "./touch.js";
import { defineFigure } from "./types.js";

/** Lazy open + close, warm: the median of 1,000 in one process (a server opening files over and over). */
export default defineFigure<void>({
  name: "open_warm",
  method: {
    ours: "`openFile(path).close()`: median of 1,000 calls after 100 untimed ones, one process",
    reference: '`with safe_open(path, "pt"): pass`, same counts',
  },
  repeat: { warmup: 100, calls: 1000 },
  ours: {
    kind: "in-process",
    setup: (ctx) => openChecked(ctx).close(),
    run: (ctx) => ctx.lib.openFile(ctx.path, ctx.open).close(),
  },
  reference: {
    kind: "python",
    label: 'with safe_open(path, "pt"): pass',
    code: `
def run(ctx, state):
    with safe_open(ctx["path"], "pt"):
        pass
`,
  },
  goal: { ratio: 3 },
});
