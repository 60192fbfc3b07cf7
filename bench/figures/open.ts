import { checkBackend } from "./touch.js";
import { defineFigure, type Lib, Unavailable } from "./types.js";

type OurFile = ReturnType<Lib["openFile"]>;

/** Lazy open, cold: the first open of a fresh process (after the import), which is what a CLI or a script pays. */
export default defineFigure<Lib["openFile"]>({
  name: "open",
  method: {
    ours: "`openFile(path)`: header read + validation, the first open of a fresh process",
    reference: '`safe_open(path, "pt")`, the first of a fresh process',
  },
  ours: {
    kind: "in-process",
    // Bound before the window, as the reference's `safe_open` is (see load-views.ts).
    setup: (ctx) => ctx.lib.openFile,
    run: (ctx, openFile) => {
      try {
        return openFile(ctx.path, ctx.open);
      } catch (error) {
        if ((error as { code?: string }).code === "BackendUnavailable") throw new Unavailable((error as Error).message);
        throw error;
      }
    },
    finish: (ctx, _state, value) => {
      const file = value as OurFile;
      try {
        checkBackend(ctx, file);
        ctx.extra.tensors = file.offsetKeys().length;
      } finally {
        file.close();
      }
    },
  },
  reference: {
    kind: "python",
    label: 'safe_open(path, "pt")',
    code: `
def run(ctx, state):
    return safe_open(ctx["path"], "pt")

def finish(ctx, state, f):
    ctx["extra"]["tensors"] = len(f.keys())
`,
  },
  // A guard: the first open compiles the open path (~1 ms here). The import-time warm-up that compiled it before (0.2 ms
  // first opens) cost every importer more than it saved a script (bench/README.md, "Goals and guards").
  goal: { ratio: 0.25, guard: true },
});
