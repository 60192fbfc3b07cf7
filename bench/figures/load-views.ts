import { CAT_FILE } from "./load-all.js";
import { defineFigure, type Lib } from "./types.js";

/** Every tensor as a zero-copy view, nothing touched: what Python's `load_file` returns. */
export default defineFigure<Lib["loadFile"]>({
  name: "load_views",
  method: {
    ours: "`loadFile(path)`: every tensor (a view where the backend can), nothing touched; RSS growth kept",
    reference:
      "`safetensors.torch.load_file(path)`; extra line: `cat FILE > /dev/null` (plain reads: the no-addon row's anchor, which copies every byte)",
  },
  ours: {
    kind: "in-process",
    // The name is bound before the window, as the reference's `from safetensors.torch import load_file` is (and as
    // `import { loadFile }` is at link time): the first property load from a module namespace object makes V8 turn
    // the namespace's ~100 exports into a fast object (~90 k instructions, callgrind), which is no part of loading.
    setup: (ctx) => ctx.lib.loadFile,
    run: (ctx, loadFile) => loadFile(ctx.path, ctx.open),
    finish: (ctx, _state, value) => {
      ctx.extra.tensors = (value as Map<string, unknown>).size;
    },
  },
  reference: {
    kind: "python",
    label: "load_file(path)",
    code: `
def run(ctx, state):
    return load_file(ctx["path"])

def finish(ctx, state, tensors):
    ctx["extra"]["tensors"] = len(tensors)
`,
  },
  referenceExtras: [CAT_FILE],
  goal: { ratio: 5, rssMaxMib: 2 },
});
