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
 * of the bytes. What made a write from memory slow on this 2-vCPU VM (C probes, 2.37 GiB from anonymous memory
 * filled by pread, `sync` before): buffered pwrite into a new file 4.0-7.3 s, all of it in copy_folio_from_iter_atomic;
 * the same pwrite over the pages of a file already cached 0.36 s; a memcpy into fresh anonymous memory 9.8 s, again
 * 0.25 s. So the time is the first touch of fresh pages (~16 µs per 4 KiB page then): the VM's balloon reports free
 * memory to the host (free page reporting, order-9 blocks), and a reported page is faulted in again on the host at
 * its first touch; which free pages a write gets depends on what the machine holds (the `cp_holding` line: cp while
 * this process holds as many touched bytes). Smaller writes (4 KiB to 64 MiB pieces) and THP sources did not help.
 * saveFile therefore writes large runs from memory with O_DIRECT (native/direct_write.c): no page-cache page is
 * allocated, the bytes go from the tensors to the device (0.82-1.03 s in 3 interleaved runs, cp 0.91-1.04 s; the
 * data is on the device when the save returns, which cp does not promise). loadFile's pread path places each group
 * at the file's page alignment, so the save writes straight from it (only the first 16 MiB, holding the header, go
 * through a bounce buffer). `save_views` is the like-for-like figure for cp: tensors that
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
