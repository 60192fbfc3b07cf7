import { defineFigure } from "./types.js";

/** Every tensor as a zero-copy view, nothing touched: what Python's `load_file` returns. */
export default defineFigure<void>({
  name: "load_views",
  method: {
    ours: "`loadFile(path)`: every tensor (a view where the backend can), nothing touched; RSS growth kept",
    reference: "`safetensors.torch.load_file(path)`",
  },
  ours: {
    kind: "in-process",
    run: (ctx) => ctx.lib.loadFile(ctx.path, ctx.open),
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
  goal: { ratio: 5, rssMaxMib: 2 },
});
