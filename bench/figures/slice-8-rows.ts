import { SLICE_SPEC, SLICE_TENSOR } from "../spec.js";
import { openChecked } from "./touch.js";
import { defineFigure, type InProcessSide, type Lib, type PythonSide } from "./types.js";

type OurFile = ReturnType<Lib["openFile"]>;

const reference: PythonSide = {
  kind: "python",
  label: "f.get_slice(name)[0:8]",
  code: `
def setup(ctx):
    return safe_open(ctx["path"], "pt")

def run(ctx, f):
    return f.get_slice(ctx["tensor"])[0:8]
`,
};

const ours: InProcessSide<OurFile> = {
  kind: "in-process",
  setup: (ctx) => openChecked(ctx),
  run: (_ctx, file) => file.getSlice(SLICE_TENSOR).get(SLICE_SPEC),
  finish: (ctx, file, value) => {
    ctx.extra.bytes = (value as { data: Uint8Array }).data.byteLength;
    file.close();
  },
};

/** The first 8 rows (64 KiB) of the embedding, the first slice call of a fresh process. */
export const slice8Rows = defineFigure<OurFile>({
  name: "slice_8_rows",
  method: {
    ours: `\`getSlice("${SLICE_TENSOR}").get("${SLICE_SPEC}")\` on an open file, the first call of the process`,
    reference: "`f.get_slice(name)[0:8]`, the first call of the process",
  },
  context: { tensor: SLICE_TENSOR },
  ours,
  reference,
});

/** The same slice, warm: median of 1,000 calls in one process. */
export const slice8RowsInProcess = defineFigure<OurFile>({
  name: "slice_8_rows_inprocess",
  method: {
    ours: "the same call: median of 1,000 calls after 100 untimed ones, one process",
    reference: "the same call, same counts",
  },
  repeat: { warmup: 100, calls: 1000 },
  context: { tensor: SLICE_TENSOR },
  ours,
  reference,
  goal: { ratio: 1, guard: true },
});
