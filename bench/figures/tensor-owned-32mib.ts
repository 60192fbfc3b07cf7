import { TENSOR_32MIB } from "../spec.js";
import { openChecked, touchPages } from "./touch.js";
import { defineFigure, type Lib } from "./types.js";

type OurFile = ReturnType<Lib["openFile"]>;

/** One 32 MiB tensor copied into memory the caller owns, every page touched. */
export default defineFigure<OurFile>({
  name: "tensor_owned_32mib",
  method: {
    ours: '`getTensor(name, {memory: "owned"})` + touch every page',
    reference: "`f.get_tensor(name).clone()` + touch every page",
  },
  context: { tensor: TENSOR_32MIB },
  ours: {
    kind: "in-process",
    setup: (ctx) => openChecked(ctx),
    run: (_ctx, file) => {
      const tensor = file.getTensor(TENSOR_32MIB, { memory: "owned" });
      return { tensor, sum: touchPages(tensor.data) };
    },
    finish: (ctx, file, value) => {
      ctx.extra.bytes = (value as { tensor: { data: Uint8Array } }).tensor.data.byteLength;
      file.close();
    },
  },
  reference: {
    kind: "python",
    label: "f.get_tensor(name).clone() + touch",
    code: `
def setup(ctx):
    return safe_open(ctx["path"], "pt")

def run(ctx, f):
    t = f.get_tensor(ctx["tensor"]).clone()
    touch_pages(t)
    return t
`,
  },
  goal: { ratio: 2 },
});
