import { TENSOR_32MIB } from "../spec.js";
import { openChecked } from "./touch.js";
import { defineFigure, type Lib } from "./types.js";

type OurFile = ReturnType<Lib["openFile"]>;

/** One 32 MiB tensor in default memory (a view of the mapping where the backend maps) on an open file. */
export default defineFigure<OurFile>({
  name: "tensor_view_32mib",
  method: {
    ours: `\`getTensor("${TENSOR_32MIB}")\` on an open file, default memory (a view on mmap; pread copies)`,
    reference: "`f.get_tensor(name)` on an open `safe_open`",
  },
  context: { tensor: TENSOR_32MIB },
  ours: {
    kind: "in-process",
    setup: (ctx) => openChecked(ctx),
    run: (_ctx, file) => file.getTensor(TENSOR_32MIB),
    finish: (ctx, file, value) => {
      ctx.extra.bytes = (value as { data: Uint8Array }).data.byteLength;
      file.close();
    },
  },
  reference: {
    kind: "python",
    label: "f.get_tensor(name)",
    code: `
def setup(ctx):
    return safe_open(ctx["path"], "pt")

def run(ctx, f):
    return f.get_tensor(ctx["tensor"])
`,
  },
  goal: { ratio: 2 },
});
