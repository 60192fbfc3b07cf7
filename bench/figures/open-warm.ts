import { openChecked } from "./touch.js";
import { defineFigure } from "./types.js";

/**
 * Lazy open + close, warm: the median of 1,000 in one process (a server opening files over and over).
 *
 * Where a warm open goes (48-tensor checkpoint, 5.4 KB header, 2 vCPUs): the addon's open + fstat + 16 KB pread + stat
 * of the journal's path + close ~5.5 µs of system calls; the header scan ~2.5 µs (41.9 k instructions, callgrind);
 * decoding the header's text, checking the records and copying them ~3 µs; the rest is the sources' and the file's
 * objects. Medians per process are bimodal (~16 µs and ~22 µs with the same code; 19.5 / 29 µs before this session's
 * changes), and it is the process, not the code: a pure-JavaScript control loop of small allocations run in the same
 * processes was ~40% slower in the slow ones (3.5-3.9 µs against 4.8-5.6 µs) while an arithmetic loop was not
 * (21.7-22.2 µs in both); neither pinning the CPU (taskset), ASLR off (setarch -R), V8's random seed, GC timing
 * (PerformanceObserver), page faults (0 in the slow stretches) nor tier-up events (--trace-opt/--trace-deopt) told
 * the two apart. What the code can do is allocate and touch less memory per open: the head and header are no longer
 * copied, names are sliced when first needed, the per-tensor arrays are sized once.
 */
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
  goal: { ratio: 3, guard: true },
});
