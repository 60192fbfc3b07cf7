/**
 * Edits and masks checked byte for byte against numpy doing the same on a copy of the file (scripts/numpy_edits.py:
 * np.memmap, `w[slice] = np.load(npy).astype(w.dtype)`, `w[...] = w * (g > 0)` with np.unpackbits for packed
 * masks), over F16 / BF16 / F32 / F64 / I8 / I32 weights holding negatives, signed zeros, infinities and NaN. Needs
 * the reference venv (numpy, ml_dtypes, torch); skipped with the reason when it is absent.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { applyMask } from "../src/node.js";
import { referencePython, repoRoot, skipWithoutReference } from "./helpers/reference.js";
import { cli } from "./helpers/run-cli.js";

interface Job {
  id: string;
  kind: "edit" | "fill" | "mask";
  tensor?: string;
  slice?: string;
  npy?: string;
  fill?: number;
  mask?: string;
  bit_order?: "big" | "little";
  expected: string;
}

const sha = (file: string) => createHash("sha256").update(fs.readFileSync(file)).digest("hex");

test("edits and masks equal numpy's, byte for byte", { skip: skipWithoutReference() }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-edit-numpy-"));
  try {
    const seeds = [1, 2];
    const pairs = seeds.flatMap((seed) => [path.join(dir, String(seed)), String(seed)]);
    for (const seed of seeds) fs.mkdirSync(path.join(dir, String(seed)));
    // Both seeds' files from one Python process (its start is most of its CPU).
    const made = spawnSync(
      referencePython()!.python,
      [path.join(repoRoot, "scripts/numpy_edits.py"), "make", ...pairs],
      {
        encoding: "utf8",
      },
    );
    assert.equal(made.status, 0, made.stderr);
    for (const seed of seeds) {
      const work = path.join(dir, String(seed));
      const { weights, jobs } = JSON.parse(fs.readFileSync(path.join(work, "jobs.json"), "utf8")) as {
        weights: string;
        jobs: Job[];
      };
      for (const job of jobs) {
        const ours = path.join(work, `ours-${job.id}.safetensors`);
        fs.copyFileSync(weights, ours);
        if (job.kind === "mask") applyMask(ours, job.mask!, { bitOrder: job.bit_order });
        else {
          const input = job.kind === "edit" ? ["--from", job.npy!] : ["--fill", String(job.fill)];
          const out = await cli("edit", ours, job.tensor!, "--slice", job.slice!, ...input, "--no-fsync");
          assert.equal(out.code, 0, `${job.id}: ${out.stderr}`);
        }
        assert.notEqual(sha(ours), sha(weights), `${job.id} changes the file`);
        assert.equal(sha(ours), sha(job.expected), `seed ${seed} ${job.id}: differs from numpy's`);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
