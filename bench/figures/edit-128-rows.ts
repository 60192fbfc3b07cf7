import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { BENCH_DIR, REPO_DIR } from "../spec.js";
import { defineFigure } from "./types.js";

const TENSOR = "model.layers.3.self_attn.q_proj.weight";
const START = 1024;
const STOP = 1152;
const COPY = "edit-128-rows.safetensors";

/**
 * The copy every run edits (the shared checkpoint is never written): made once per figure in the scratch directory,
 * and before each run its target rows are put back from the checkpoint, so every run, on either side, zeroes the
 * same original bytes of a file whose pages the copy left in the page cache.
 */
function prepareCopy(checkpoint: string, scratch: string, offset: number, length: number): string {
  const copy = path.join(scratch, COPY);
  if (!fs.existsSync(copy)) {
    const temp = `${copy}.${process.pid}.tmp`;
    fs.copyFileSync(checkpoint, temp);
    fs.renameSync(temp, copy);
  }
  const bytes = Buffer.alloc(length);
  const from = fs.openSync(checkpoint, "r");
  const to = fs.openSync(copy, "r+");
  try {
    fs.readSync(from, bytes, 0, length, offset);
    fs.writeSync(to, bytes, 0, length, offset);
  } finally {
    fs.closeSync(from);
    fs.closeSync(to);
  }
  return copy;
}

/** The Python twin of prepareCopy (the sides run in any order). */
const PREPARE_PY = `
import json, os, shutil, struct

def prepare(ctx):
    copy = os.path.join(ctx["scratch"], "${COPY}")
    with open(ctx["path"], "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        info = json.loads(f.read(n))[ctx["tensor"]]
        row = info["shape"][1] * 2
        offset = 8 + n + info["data_offsets"][0] + ctx["start"] * row
        length = (ctx["stop"] - ctx["start"]) * row
        f.seek(offset)
        original = f.read(length)
    if not os.path.exists(copy):
        temp = copy + ".%d.tmp" % os.getpid()
        shutil.copyfile(ctx["path"], temp)
        os.replace(temp, copy)
    with open(copy, "r+b") as f:
        f.seek(offset)
        f.write(original)
    return copy

def setup(ctx):
    return prepare(ctx)
`;

/** What a user writes with numpy: parse the header for the offset, map the tensor writable, zero the rows. */
const MEMMAP_PY = `${PREPARE_PY}
import numpy as np

def view(path, name, mode):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        info = json.loads(f.read(n))[name]
    offset = 8 + n + info["data_offsets"][0]
    return np.memmap(path, dtype=np.float16, mode=mode, offset=offset, shape=tuple(info["shape"]))

def edit(path, name, start, stop):
    m = view(path, name, "r+")
    m[start:stop] = 0
    return m

def finish(ctx, copy, value):
    if not (view(copy, ctx["tensor"], "r")[ctx["start"]:ctx["stop"]] == 0).all():
        raise RuntimeError("np.memmap did not zero the rows")
`;

/** The reference's python (as the harness finds it), to read our edited file; null when there is none. */
function referencePython(): string | null {
  const python = process.env.SAFETENSORS_REF_PYTHON ?? path.join(REPO_DIR, ".venv-ref", "bin", "python");
  return fs.existsSync(python) ? python : null;
}

/**
 * Zeroing rows 1024:1152 (1 MiB) of one q_proj in place in the 2.37 GiB checkpoint (a copy of it): the seeds' edit
 * that a rewrite would take half a minute for. Both sides in-process, the first edit of a fresh process (the library /
 * numpy imported before the window): a one-shot edit is what this operation is. Ours: `openForEdit` (header
 * validated), `write` (old bytes journaled, then the rows written), `commit` (journal removed), without fsync
 * (the library's default; the CLI fsyncs). numpy: header parsed for the offset, `np.memmap(..., mode="r+")`, rows set
 * to 0, the map dropped — no `flush()` (msync), as ours does not fsync; the `[flush]` line adds it. After each of our
 * runs the reference reads the edited file with safe_open and requires every tensor to equal the checkpoint's except
 * those rows, which must be zero.
 *
 * Where our time goes (fresh processes, 2-core VM at load 1.5–3, medians of 9–15 runs; `strace -T` for the system
 * calls): `openForEdit` 0.40 ms (the journal check, the header through the native open, the read-write descriptor);
 * `write` 1.3 ms, of which the native journal call ~0.4 (the old 1 MiB read through a shared mapping of the range,
 * CRC-32C 0.04, written into a new journal: fresh page-cache pages, 0.26 in pwritev), the rows written from one
 * shared 64 KiB zero block 0.17–0.2, and ~0.6 of JavaScript run for the first time in the process (planning, the
 * journal's header, the calls); `commit` 0.24 (unlink 0.09: the journal's pages freed); `close` 0.05. Total ~2.0 ms
 * in the probe, 2.26 ms in the figure (7 runs, load 1.5–3), against np.memmap's 0.49–0.6 ms. A second edit in the
 * same process takes ~0.9 ms (open 0.2–0.3, write 0.6, commit 0.08): the system calls alone (journal open, write
 * and unlink, the rows' write) are ~0.6 ms, more than numpy's whole edit, which dirties pages already cached and
 * journals nothing. The undo journal is the difference: the one copy of 1 MiB into fresh page-cache pages and its
 * removal cost ~0.35 ms that no cheaper checksum or fewer calls can remove.
 */
export default defineFigure<{ copy: string }>({
  name: "edit_128_rows",
  method: {
    ours: `\`openForEdit(copy)\`, \`write("${TENSOR}", "${START}:${STOP}", {fill: 0})\`, \`commit()\`, \`close()\` (undo journal written and removed, no fsync); first edit of a fresh process; afterwards the reference's safe_open checks that only those rows changed`,
    reference:
      "header parsed with `json`, `np.memmap(copy, float16, 'r+', offset, shape)[1024:1152] = 0`, map dropped (no msync); first edit of a fresh process; `[flush]`: plus `m.flush()`",
  },
  backends: ["auto"],
  context: { tensor: TENSOR, start: START, stop: STOP },
  ours: {
    kind: "in-process",
    setup: (ctx) => {
      const file = ctx.lib.openFile(ctx.path, { backend: "pread" });
      const { offset } = file.byteRange(TENSOR);
      const row = Number(file.info(TENSOR).shape[1]) * 2;
      file.close();
      return { copy: prepareCopy(ctx.path, ctx.scratch, offset + START * row, (STOP - START) * row) };
    },
    run: (ctx, { copy }) => {
      const editor = ctx.lib.openForEdit(copy);
      editor.write(TENSOR, `${START}:${STOP}`, { fill: 0 });
      editor.commit();
      editor.close();
    },
    finish: (ctx, { copy }) => {
      const python = referencePython();
      if (python === null) throw new Error("the reference python is needed to check the edited file");
      const out = execFileSync(
        python,
        [path.join(BENCH_DIR, "ref_edit_check.py"), copy, ctx.path, TENSOR, String(START), String(STOP)],
        { encoding: "utf8" },
      );
      const report = JSON.parse(out) as { ok: boolean; changed_bytes: number; tensors: number };
      if (!report.ok) throw new Error(`the edited file differs from the checkpoint elsewhere: ${out}`);
      ctx.extra.checked_tensors = report.tensors;
      ctx.extra.changed_bytes = report.changed_bytes;
    },
  },
  reference: {
    kind: "python",
    label: "np.memmap(r+)[1024:1152] = 0",
    code: `${MEMMAP_PY}
def run(ctx, copy):
    m = edit(copy, ctx["tensor"], ctx["start"], ctx["stop"])
    del m
`,
  },
  referenceExtras: [
    {
      key: "flush",
      kind: "python",
      label: "the same + m.flush() (msync)",
      code: `${MEMMAP_PY}
def run(ctx, copy):
    m = edit(copy, ctx["tensor"], ctx["start"], ctx["stop"])
    m.flush()
    del m
`,
    },
  ],
  goal: { ratio: 1 },
});
