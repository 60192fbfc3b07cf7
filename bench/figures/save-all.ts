import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { defineFigure, type InProcessSide, type Lib } from "./types.js";

interface State {
  tensors: ReturnType<Lib["loadFile"]>;
  metadata: ReadonlyMap<string, string> | null;
}

const OUT = "save-all.safetensors";

/**
 * Our side of the save figures: every tensor loaded with `options` before the window (and `sync`), saved to `out`
 * in the window, the output checked against the checkpoint after it.
 */
export function saveEveryTensor(options: Parameters<Lib["loadFile"]>[1], out: string): InProcessSide<State> {
  return {
    kind: "in-process",
    setup: (ctx) => {
      const tensors = ctx.lib.loadFile(ctx.path, options);
      const file = ctx.lib.openFile(ctx.path, { backend: "pread" });
      const metadata = file.metadata();
      file.close();
      execFileSync("sync");
      return { tensors, metadata };
    },
    run: (ctx, { tensors, metadata }) => ctx.lib.saveFile(path.join(ctx.scratch, out), tensors, metadata),
    finish: (ctx) => {
      const file = path.join(ctx.scratch, out);
      const size = fs.statSync(file).size;
      const same = size === fs.statSync(ctx.path).size && sameEnds(file, ctx.path);
      fs.unlinkSync(file);
      if (!same) throw new Error("saveFile did not reproduce the checkpoint's bytes");
      ctx.extra.bytes = size;
    },
  };
}

/** The first and last MiB of two files are the same bytes (our output must reproduce the checkpoint we wrote). */
export function sameEnds(a: string, b: string): boolean {
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

export const CP_CODE = `
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
 * start from tensors in their own (anonymous) memory, built before the window (ours: `loadFile` with pread, owned
 * buffers, hugepage-backed when the addon is there; the reference: `load_file` + `clone()`, torch's 4 KiB-page
 * allocations), with the page cache's dirty pages flushed (`sync`) before the window, and stop when the save returns
 * (no fsync, like `cp`). Neither side faults source pages inside the window (ours: ~60 minor faults in all).
 *
 * The `cp` line is not the same work: coreutils 9.1 on ext4 (no reflink: FICLONE is EOPNOTSUPP) calls
 * copy_file_range with 2 GiB requests, a page-cache-to-page-cache copy in the kernel by a process that holds no copy
 * of the bytes. Measured by hand on this 2-vCPU VM while it was loaded (so system CPU time; 4 interleaved rounds of a C
 * program doing only the write): copy_file_range 0.87-1.33 s, pwrite of 1 GiB pieces from 4 KiB anonymous pages
 * 2.1-3.3 s, from THP-backed pages 4.2-6.0 s; in Node, ours 0.8-4.9 s and the reference 4.3-5.6 s (the harness's last
 * quiet run: ours 6.2 s, the reference 1.4 s, which matches the THP-backed source being the difference). perf
 * (cpu-clock) puts the time in copy_folio_from_iter_atomic, the copy into the destination's page cache; it costs more
 * when the process holds 2.37 GiB of freshly written memory (likely the balloon's free page reporting: memory handed
 * back to the host is faulted in again there); the `cp_holding` line measures that effect on cp. Smaller writes
 * (64 KiB, 256 KiB pieces) did not help. `save_views` is the like-for-like figure: tensors that
 * are views of the file, which saveFile copies file to file as cp does.
 */
export default defineFigure<State>({
  name: "save_all",
  method: {
    ours: '`saveFile(out, tensors, metadata)` of every tensor, loaded before the window with `loadFile(path, {backend: "pread"})` (owned memory); `sync` before the window',
    reference:
      "`save_file(tensors, out)`, tensors loaded before the window by `load_file(path)` and cloned (owned memory); `sync` before the window; extra line: `cp path out` (coreutils) after a `sync`",
  },
  backends: ["auto"],
  ours: saveEveryTensor({ backend: "pread" }, OUT),
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
