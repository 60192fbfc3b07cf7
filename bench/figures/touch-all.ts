import { checkBackend, firstAndLast, openChecked } from "./touch.js";
import { defineFigure } from "./types.js";

/**
 * Open + every tensor's default view + its first and last element: a model that reads every weight once.
 *
 * The window in a fresh process, after the setup's open and the worker's gc() (probe, 6 processes, load ~2): open
 * 83-107 µs, offsetKeys 11-13, the first getTensor 51-61 (the file mapped, its window made and registered), the first
 * element read 43-65 (firstAndLast compiled on its first call, two page faults), the other 47 getTensor calls 40-43,
 * the other reads 248-319 (about 42 first-touch page faults of the mapping, ~6 µs each here; the reference takes them
 * too). The open right after a full GC had cost 150-250 µs: the hidden classes of objects that live only during an
 * open were collected and rebuilt (src/format/wide.ts); the first getTensor ~110 µs.
 */
export default defineFigure<void>({
  name: "touch_all",
  method: {
    ours: "`openFile(path)` + for every tensor (file order) `getTensor(name)` (default memory) + its first and last element",
    reference: '`safe_open(path, "pt")` + `get_tensor` (file order) + `flat[0].item()`, `flat[-1].item()`',
  },
  ours: {
    kind: "in-process",
    setup: (ctx) => openChecked(ctx).close(),
    run: (ctx) => {
      const file = ctx.lib.openFile(ctx.path, ctx.open);
      let sum = 0;
      for (const name of file.offsetKeys()) sum += firstAndLast(file.getTensor(name).data);
      return { file, sum };
    },
    finish: (ctx, _state, value) => {
      const { file } = value as { file: ReturnType<typeof ctx.lib.openFile> };
      checkBackend(ctx, file);
      file.close();
    },
  },
  reference: {
    kind: "python",
    label: "safe_open + get_tensor + first/last",
    code: `
def run(ctx, state):
    f = safe_open(ctx["path"], "pt")
    total = 0
    for name in f.offset_keys():
        total += first_and_last(f.get_tensor(name))
    return f, total
`,
  },
  // A guard since the first open in its window compiles the open path (see open.ts).
  goal: { ratio: 1.5, guard: true },
});
