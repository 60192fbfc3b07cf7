import * as fs from "node:fs";
import * as path from "node:path";
import { defineFigure, Unavailable } from "./types.js";

/**
 * The torch.save twin of the checkpoint converted to safetensors. Ours reads the pickle as data and copies the
 * stored records (kernel-side where possible); the reference must unpickle every tensor into memory first. `cp` of
 * the same bytes is the floor: the goal is within 1.5× of it with RSS ≤ 200 MiB (compare the `cp` line).
 */
export default defineFigure<string>({
  name: "convert_pickle",
  method: {
    ours: "`convertPickleFile(pt, out)` (scan, plan, stream every storage into the writer; file committed)",
    reference:
      "`torch.load(pt, weights_only=True)` + `save_file(tensors, out)`; extra line: `cp pt out` (the same bytes copied)",
  },
  backends: ["auto"],
  ours: {
    kind: "in-process",
    setup: (ctx) => {
      if (!ctx.pt) throw new Unavailable("no torch.save twin of the checkpoint");
      if (typeof (ctx.lib as { convertPickleFile?: unknown }).convertPickleFile !== "function") {
        throw new Unavailable("this build has no convertPickleFile");
      }
      fs.mkdirSync(ctx.scratch, { recursive: true });
      return path.join(ctx.scratch, `converted-${process.pid}.safetensors`);
    },
    run: (ctx, out) => ctx.lib.convertPickleFile(ctx.pt!, out),
    finish: (ctx, out) => {
      const size = fs.statSync(out).size;
      const expected = fs.statSync(ctx.path).size;
      fs.rmSync(out, { force: true });
      // The converted file is the checkpoint itself, byte for byte in size (same tensors, same layout).
      if (size !== expected) throw new Error(`converted file is ${size} bytes, the checkpoint ${expected}`);
      ctx.extra.bytes = size;
    },
  },
  reference: {
    kind: "python",
    label: "torch.load(pt, weights_only=True) + save_file",
    needsPt: true,
    code: `
import os
def run(ctx, state):
    out = os.path.join(ctx["scratch"], "converted-ref.safetensors")
    save_file(torch.load(ctx["pt"], weights_only=True), out)
    return out

def finish(ctx, state, value):
    os.remove(value)
`,
  },
  referenceExtras: [
    {
      key: "cp",
      kind: "python",
      label: "cp pt out (the floor)",
      needsPt: true,
      code: `
import os, subprocess
def run(ctx, state):
    out = os.path.join(ctx["scratch"], "copied.pt")
    subprocess.run(["cp", ctx["pt"], out], check=True)
    return out

def finish(ctx, state, value):
    os.remove(value)
`,
    },
  ],
  goal: { ratio: 1, rssMaxMib: 200 },
});
