import { checkBackend, firstAndLast, openChecked } from "./touch.js";
import { defineFigure } from "./types.js";

/** Open + every tensor's default view + its first and last element: a model that reads every weight once. */
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
  goal: { ratio: 3 },
});
