import { TENSOR_32MIB } from "../spec.js";
import { openChecked, touchPages } from "./touch.js";
import { defineFigure, type Lib } from "./types.js";

type OurFile = ReturnType<Lib["openFile"]>;

/**
 * One 32 MiB tensor copied into memory the caller owns, every page touched.
 *
 * Where the time goes (2-vCPU VM with a free-page-reporting balloon, THP `madvise`; see native/owned.c): the
 * reference maps the file and clones into fresh 4 KiB pages, 8,737 faults, 20-25 ms of CPU over torch's two threads,
 * 11.3-16 ms of wall time when it gets both CPUs. Ours reads into fresh huge pages with pread: 0.45-0.65 ms of CPU a
 * 2 MiB chunk (zeroing a third, the page-cache copy half), 5.0-5.5 ms for the figure with both CPUs, 6-9 ms with one.
 * After the guest has freed much memory (a 2.4 GiB file written and removed, as the save figures do), the host has
 * dropped the free 2 MiB blocks, and each huge page costs 4-6.5 ms to fault in again; the copy then falls back to
 * 4 KiB pages (1.1-2 ms a chunk, like the reference's pages) and the ratio falls to about 1x.
 */
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
