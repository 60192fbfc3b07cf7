import { loadFileHasPopulate } from "./features.js";
import { touchPages } from "./touch.js";
import { defineFigure, type PythonSide, Unavailable } from "./types.js";

/**
 * Plain reads of the whole file into nothing (coreutils cat: 128 KiB reads into one reused buffer, no page faults):
 * the limit of a whole-file load without mmap, the anchor of the no-addon rows of load_all and load_views.
 */
export const CAT_FILE: PythonSide & { key: string } = {
  key: "cat",
  kind: "python",
  label: "cat FILE > /dev/null",
  code: `
import subprocess

def run(ctx, state):
    subprocess.run(["cat", ctx["path"]], stdout=subprocess.DEVNULL, check=True)
`,
};

/** All bytes resident and every 4 KiB page touched: a model loaded for inference. */
export default defineFigure<void>({
  name: "load_all",
  method: {
    ours: "`loadFile(path, {populate: true})` + read one byte per 4 KiB page of every tensor",
    reference:
      "`load_file(path)` + the same touch (`t.view(uint8)[::4096].sum()`); extra lines: `cat FILE > /dev/null` (plain reads, the anchor of the no-addon row) and `torch.load(pt, mmap=False, weights_only=True)` + touch",
  },
  ours: {
    kind: "in-process",
    setup: () => {
      if (!loadFileHasPopulate()) throw new Unavailable("this build's loadFile has no populate option");
    },
    run: (ctx) => {
      const tensors = ctx.lib.loadFile(ctx.path, { ...ctx.open, populate: true } as Parameters<
        typeof ctx.lib.loadFile
      >[1]);
      let sum = 0;
      for (const tensor of tensors.values()) sum += touchPages(tensor.data);
      return { tensors, sum };
    },
    finish: (ctx, _state, value) => {
      ctx.extra.tensors = (value as { tensors: Map<string, unknown> }).tensors.size;
    },
  },
  reference: {
    kind: "python",
    label: "load_file(path) + touch every page",
    code: `
def run(ctx, state):
    tensors = load_file(ctx["path"])
    return tensors, sum(touch_pages(t) for t in tensors.values())
`,
  },
  referenceExtras: [
    CAT_FILE,
    {
      key: "torch_load",
      kind: "python",
      label: "torch.load(pt, mmap=False, weights_only=True) + touch",
      needsPt: true,
      code: `
def run(ctx, state):
    tensors = torch.load(ctx["pt"], mmap=False, weights_only=True)
    return tensors, sum(touch_pages(t) for t in tensors.values())
`,
    },
  ],
  goal: { ratio: 1.2 },
});
