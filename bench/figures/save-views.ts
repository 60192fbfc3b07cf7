import { CP_CODE, saveEveryTensor } from "./save-all.js";
import { defineFigure } from "./types.js";

/**
 * Every tensor of the checkpoint, as loaded by default (ours: views of the mapped file; the reference: `load_file`'s
 * tensors, without a clone), written to a new file: the re-save of a loaded checkpoint (after editing its metadata,
 * or dropping tensors). This is what `cp` does with the same bytes, so cp is the like-for-like limit: saveFile copies
 * runs of unmodified views file to file with copy_file_range (a view written through is saved from memory).
 */
export default defineFigure({
  name: "save_views",
  method: {
    ours: "`saveFile(out, tensors, metadata)` of every tensor, loaded before the window with `loadFile(path)` (the default: views of the mapped file); `sync` before the window",
    reference:
      "`save_file(tensors, out)`, tensors loaded before the window by `load_file(path)` (no clone); `sync` before the window; extra line: `cp path out` (coreutils) after a `sync`",
  },
  backends: ["auto"],
  ours: saveEveryTensor({}, "save-views.safetensors"),
  reference: {
    kind: "python",
    label: "save_file(load_file(path), out)",
    code: `
import os

def setup(ctx):
    tensors = load_file(ctx["path"])
    os.sync()
    return tensors

def run(ctx, tensors):
    save_file(tensors, os.path.join(ctx["scratch"], "save-views-ref.safetensors"))

def finish(ctx, tensors, value):
    os.unlink(os.path.join(ctx["scratch"], "save-views-ref.safetensors"))
`,
  },
  referenceExtras: [{ key: "cp", kind: "python", label: "cp path out (coreutils, same bytes)", code: CP_CODE }],
  // Within 1.3x of cp: cp / ours >= 1 / 1.3 (0.769, rounded up).
  goal: { ratio: 0.77, against: "cp" },
});
