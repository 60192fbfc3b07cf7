import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { defineFigure, type Lib } from "./types.js";

interface State {
  tensors: ReturnType<Lib["loadFile"]>;
  metadata: ReadonlyMap<string, string> | null;
}

const OUT = "save-all.safetensors";

/** The first and last MiB of two files are the same bytes (our output must reproduce the checkpoint we wrote). */
function sameEnds(a: string, b: string): boolean {
  const ends = (file: string) => {
    const fd = fs.openSync(file, "r");
    try {
      const size = fs.fstatSync(fd).size;
      const head = Buffer.alloc(Math.min(size, 1 << 20));
      const tail = Buffer.alloc(head.length);
      fs.readSync(fd, head, 0, head.length, 0);
      fs.readSync(fd, tail, 0, tail.length, size - tail.length);
      return Buffer.concat([head, tail]);
    } finally {
      fs.closeSync(fd);
    }
  };
  return ends(a).equals(ends(b));
}

const CP_CODE = `
import os, subprocess

def setup(ctx):
    os.sync()

def run(ctx, state):
    subprocess.run(["cp", ctx["path"], os.path.join(ctx["scratch"], "save-all-cp.safetensors")], check=True)

def finish(ctx, state, value):
    os.unlink(os.path.join(ctx["scratch"], "save-all-cp.safetensors"))
`;

/**
 * Every tensor of the checkpoint, already in memory, written to a new file: the save of a trained model. Both sides
 * start from tensors in their own (anonymous) memory, with the page cache's dirty pages flushed (`sync`) before the
 * window, and stop when the save returns (no fsync, like `cp`). The `cp` line is the same bytes copied file to file by
 * coreutils (copy_file_range inside the kernel): the limit a writer from memory can approach.
 */
export default defineFigure<State>({
  name: "save_all",
  method: {
    ours: '`saveFile(out, tensors, metadata)` of every tensor, loaded before the window with `loadFile(path, {backend: "pread"})` (owned memory); `sync` before the window',
    reference:
      "`save_file(tensors, out)`, tensors loaded before the window by `load_file(path)` and cloned (owned memory); `sync` before the window; extra line: `cp path out` (coreutils) after a `sync`",
  },
  backends: ["auto"],
  ours: {
    kind: "in-process",
    setup: (ctx) => {
      const tensors = ctx.lib.loadFile(ctx.path, { backend: "pread" });
      const file = ctx.lib.openFile(ctx.path, { backend: "pread" });
      const metadata = file.metadata();
      file.close();
      execFileSync("sync");
      return { tensors, metadata };
    },
    run: (ctx, { tensors, metadata }) => ctx.lib.saveFile(path.join(ctx.scratch, OUT), tensors, metadata),
    finish: (ctx) => {
      const out = path.join(ctx.scratch, OUT);
      const size = fs.statSync(out).size;
      const same = size === fs.statSync(ctx.path).size && sameEnds(out, ctx.path);
      fs.unlinkSync(out);
      if (!same) throw new Error("saveFile did not reproduce the checkpoint's bytes");
      ctx.extra.bytes = size;
    },
  },
  reference: {
    kind: "python",
    label: "save_file(tensors, out)",
    code: `
import os

def setup(ctx):
    tensors = load_file(ctx["path"])
    for name in list(tensors):
        tensors[name] = tensors[name].clone()
    os.sync()
    return tensors

def run(ctx, tensors):
    save_file(tensors, os.path.join(ctx["scratch"], "save-all-ref.safetensors"))

def finish(ctx, tensors, value):
    os.unlink(os.path.join(ctx["scratch"], "save-all-ref.safetensors"))
`,
  },
  referenceExtras: [
    {
      key: "cp",
      kind: "python",
      label: "cp path out (coreutils, same bytes)",
      code: CP_CODE,
    },
    {
      // On VMs whose fresh pages are slow to touch (the machine line's "4 KiB first touch"), which pages a writer
      // gets depends on what the machine holds: a writer from memory holds the bytes it writes, cp does not.
      key: "cp_holding",
      kind: "python",
      label: "cp path out while this process holds as many touched bytes",
      code: `${CP_CODE}
import mmap

_setup = setup

def setup(ctx):
    size = os.path.getsize(ctx["path"])
    held = mmap.mmap(-1, size)
    for i in range(0, size, 4096):
        held[i] = 1
    _setup(ctx)
    return held
`,
    },
  ],
  // Within 1.3x of cp: cp / ours >= 1 / 1.3 (0.769, rounded up).
  goal: { ratio: 0.77, against: "cp" },
});
