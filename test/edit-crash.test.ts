/**
 * Crash safety of in-place edits: a child process runs a deterministic sequence of edits (each two writes + commit),
 * printing one byte before every positional write it makes from JavaScript (data, and the journal's when the addon
 * is off, as in every other child; with it the journal is one native call; each edit writes its slice as dozens of
 * separate ranges). Told a seeded random write number, it stops before that write and the parent, having seen that
 * many bytes, SIGKILLs it — so the kill lands at an exact, reproducible point: before the journal, inside it, or
 * between two data writes. The parent then recovers and requires the file to equal, byte for byte (SHA-256), the
 * content before or after some edit of the sequence, never anything in between; the expected contents come from
 * running the same sequence uninterrupted.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fsModule, * as fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { journalPathFor, openForEdit, recoverFile, saveFile, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { killAtWrite, tellParent } from "./helpers/kill-child.js";

const EDITS = 100;
const TRIALS = 4;

/** Edit `k` of the sequence: a seeded slice of one tensor, with seeded values (many runs, so writes take a while). */
function edit(k: number): { name: string; spec: string; values: Float32Array } {
  const names = ["a", "b", "c"];
  const name = names[k % 3]!;
  // Rows ≥ 8 KiB and a step ≥ 2: the rows are separate ranges (gaps above fetchRanges' 4 KiB), written one by one.
  const start = (k * 7) % 64;
  const step = 2 + (k % 3);
  const spec = `${start}:${start + 64}:${step}, ${k % 2 === 0 ? "::2" : ":"}`;
  const rows = Math.ceil(64 / step);
  const cols = k % 2 === 0 ? 2048 : 4096;
  const values = new Float32Array(rows * cols);
  for (let i = 0; i < values.length; i++) values[i] = ((i * 31 + k * 17) % 101) / 7 - 7;
  return { name, spec, values };
}

function makeFile(file: string): void {
  saveFile(file, {
    a: new Tensor("F16", [128, 4096], fill(128 * 4096 * 2, 11)),
    b: new Tensor("BF16", [128, 4096], fill(128 * 4096 * 2, 12)),
    c: new Tensor("F32", [128, 4096], fill(128 * 4096 * 4, 13)),
  });
}

/** Edits `from`…EDITS-1 of the sequence on `file`, each committed, then `after()`. */
function runEdits(file: string, from: number, after?: () => void): void {
  for (let k = from; k < EDITS; k++) {
    const { name, spec, values } = edit(k);
    const handle = openForEdit(file);
    handle.write(name, spec, values);
    // A second write in the same transaction: appended to the journal, undone with the first.
    handle.write(name === "c" ? "a" : "c", spec, values);
    handle.commit();
    handle.close();
    after?.();
  }
}

/** Call `before()` ahead of every fs.writeSync / fs.writevSync except to standard output; returns the undo. */
function hookWrites(before: () => void): () => void {
  const original = fsModule.writeSync;
  const originalV = fsModule.writevSync;
  fsModule.writeSync = ((fd: number, ...rest: unknown[]) => {
    if (fd !== 1) before();
    return (original as (...args: unknown[]) => number)(fd, ...rest);
  }) as typeof fsModule.writeSync;
  fsModule.writevSync = ((fd: number, ...rest: unknown[]) => {
    if (fd !== 1) before();
    return (originalV as (...args: unknown[]) => number)(fd, ...rest);
  }) as typeof fsModule.writevSync;
  syncBuiltinESMExports();
  return () => {
    fsModule.writeSync = original;
    fsModule.writevSync = originalV;
    syncBuiltinESMExports();
  };
}

const sha = (file: string) => createHash("sha256").update(fs.readFileSync(file)).digest("hex");

/** xorshift32 from a seed. */
function random(seed: number): () => number {
  let x = seed | 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

if (process.env.ST_EDIT_CRASH_CHILD !== undefined) {
  const file = process.env.ST_EDIT_CRASH_CHILD;
  const stopAt = Number(process.env.ST_EDIT_CRASH_AT);
  let writes = 0;
  hookWrites(() => {
    tellParent();
    // Wait here for the kill (5 min at most: a parent that never kills makes the test fail, not hang). 60 s was
    // reached once while real-time processes of a benchmark held both cores of a 2-core machine.
    if (++writes === stopAt) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300_000);
  });
  runEdits(file, 0);
  process.exit(0);
} else {
  test(`SIGKILL at random points of ${TRIALS}×${EDITS} edits: after recovery the file is always an old or new content`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-edit-crash-"));
    try {
      const reference = path.join(dir, "reference.safetensors");
      makeFile(reference);
      const states = [sha(reference)];
      let totalWrites = 0;
      const unhook = hookWrites(() => totalWrites++);
      runEdits(reference, 0, () => states.push(sha(reference)));
      unhook();
      assert.equal(new Set(states).size, states.length, "every edit changes the file");
      const next = random(20261201);
      const self = fileURLToPath(import.meta.url);
      let killedMidEdit = 0;
      for (let trial = 0; trial < TRIALS; trial++) {
        const file = path.join(dir, `t${trial}.safetensors`);
        makeFile(file);
        const killAt = 1 + Math.floor(next() * totalWrites);
        // Every other child without the addon: its journal is then written from JavaScript, and the kill can also
        // land between the journal's own writes (with the addon the journal is one native call).
        const env = {
          ST_EDIT_CRASH_CHILD: file,
          ST_EDIT_CRASH_AT: String(killAt),
          SAFETENSORS_NO_NATIVE: trial % 2 ? "1" : "",
        };
        const signal = await killAtWrite(self, env, killAt);
        if (fs.existsSync(journalPathFor(file))) killedMidEdit++;
        recoverFile(file);
        const state = states.indexOf(sha(file));
        assert.ok(state >= 0, `trial ${trial}: after recovery the file is none of the ${states.length} contents`);
        assert.equal(signal, "SIGKILL", `trial ${trial}: the child was killed`);
        // The interrupted sequence finishes from there, ending at the same final content.
        runEdits(file, state);
        assert.equal(sha(file), states[EDITS], `trial ${trial}: resumed edits end at the final content`);
      }
      // How often the kill fell between the journal and the end of the data writes (fixed by the seed).
      console.log(`# ${killedMidEdit} of ${TRIALS} kills left a journal to roll back`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
