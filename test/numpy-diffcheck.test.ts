/**
 * Differential check against numpy (+ ml_dtypes): random edits (`--fill`, `--from` .npy / raw), masks (BOOL,
 * numeric, packed flat and per-row, both bit orders, mode multiply and zero) over tensors of every dtype numpy can
 * express, 0-d / 1-d / 4-d / empty, and over copies of real corpus files, each compared byte for byte with what
 * numpy gives for the same operation (scripts/numpy_diffcheck.py), and refusals checked to leave the file as it was.
 * Seeded; `SAFETENSORS_DIFFCHECK_CASES=5000 SAFETENSORS_DIFFCHECK_SEED=7` runs more. Needs the reference venv
 * (numpy, ml_dtypes); skipped with the reason when it is absent.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { corpusAvailable, corpusDir } from "./helpers/corpus.js";
import { referencePython, repoRoot, skipWithoutReference } from "./helpers/reference.js";
import { cli } from "./helpers/run-cli.js";

interface Job {
  id: string;
  kind: "edit" | "mask";
  file: string;
  tensor?: string;
  slice?: string;
  fill?: string;
  from?: string;
  mask?: string;
  mode?: "multiply" | "zero";
  bit_order?: "big" | "little";
  zeroed?: Record<string, number>;
  expected: string;
}

const CASES = Number(process.env.SAFETENSORS_DIFFCHECK_CASES ?? 300);
const SEED = Number(process.env.SAFETENSORS_DIFFCHECK_SEED ?? 1);
const CORPUS = ["julia-test-numpy-all-dtypes.safetensors", "burn-boolean.safetensors", "r-hello.safetensors"];

/** Where two files first differ (tensor, element, old / our / numpy's bytes), for the failure message. */
function firstDifference(before: Buffer, ours: Buffer, numpy: Buffer): string {
  if (ours.length !== numpy.length) return `lengths ${ours.length} and ${numpy.length}`;
  const n = Number(before.readBigUInt64LE(0));
  const header = JSON.parse(before.subarray(8, 8 + n).toString()) as Record<
    string,
    { dtype: string; data_offsets: [number, number] }
  >;
  let differing = 0;
  let first = -1;
  for (let i = 0; i < ours.length; i++) {
    if (ours[i] !== numpy[i]) {
      differing++;
      if (first < 0) first = i;
    }
  }
  if (first < 0) return "equal";
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [b, e] = info.data_offsets.map((x) => x + 8 + n) as [number, number];
    if (first < b || first >= e) continue;
    const width = Math.max(1, DTYPE_BYTES[info.dtype] ?? 1);
    const at = b + Math.floor((first - b) / width) * width;
    const hex = (x: Buffer) => x.subarray(at, at + width).toString("hex");
    return `${differing} bytes differ, first in ${name} (${info.dtype}) element ${(at - b) / width}: was ${hex(before)}, ours ${hex(ours)}, numpy ${hex(numpy)}`;
  }
  return `${differing} bytes differ, first at byte ${first} (header)`;
}

const DTYPE_BYTES: Record<string, number> = {
  F64: 8,
  I64: 8,
  U64: 8,
  C64: 8,
  F32: 4,
  I32: 4,
  U32: 4,
  F16: 2,
  BF16: 2,
  I16: 2,
  U16: 2,
};

function describe(job: Job): string {
  if (job.kind === "mask") return `${job.id} apply-mask ${path.basename(job.file)} ${job.mode} ${job.bit_order}`;
  const input = job.fill !== undefined ? `--fill ${job.fill}` : `--from ${path.basename(job.from!)}`;
  return `${job.id} edit ${path.basename(job.file)} ${job.tensor} --slice "${job.slice}" ${input}`;
}

test(`edits and masks equal numpy's byte for byte (${CASES} cases, seed ${SEED})`, {
  skip: skipWithoutReference(),
}, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-diffcheck-"));
  try {
    const corpus = corpusAvailable ? CORPUS.map((name) => path.join(corpusDir, name)).filter(fs.existsSync) : [];
    const made = spawnSync(
      referencePython()!.python,
      [path.join(repoRoot, "scripts/numpy_diffcheck.py"), "make", dir, String(SEED), String(CASES), ...corpus],
      { encoding: "utf8" },
    );
    assert.equal(made.status, 0, made.stderr);
    const { jobs } = JSON.parse(fs.readFileSync(path.join(dir, "jobs.json"), "utf8")) as { jobs: Job[] };
    assert.equal(jobs.length, CASES);
    const failures: string[] = [];
    const work = path.join(dir, "work.safetensors");
    for (const job of jobs) {
      fs.copyFileSync(job.file, work);
      const before = fs.readFileSync(work);
      const out =
        job.kind === "mask"
          ? await cli(
              "apply-mask",
              work,
              "--mask",
              job.mask!,
              "--mode",
              job.mode!,
              "--bit-order",
              job.bit_order!,
              "--no-fsync",
              "--json",
            )
          : await cli(
              "edit",
              work,
              job.tensor!,
              "--slice",
              job.slice!,
              ...(job.fill !== undefined ? ["--fill", job.fill] : ["--from", job.from!]),
              "--no-fsync",
              "--verify",
              "none",
            );
      const after = fs.readFileSync(work);
      if (job.expected === "error") {
        if (out.code !== 1) failures.push(`${describe(job)}: expected a refusal, got status ${out.code} ${out.stderr}`);
        else if (!before.equals(after)) failures.push(`${describe(job)}: refused but the file changed`);
        continue;
      }
      if (out.code !== 0) {
        failures.push(`${describe(job)}: status ${out.code}: ${out.stderr.trim()}`);
        continue;
      }
      const expected = fs.readFileSync(job.expected);
      if (!after.equals(expected)) failures.push(`${describe(job)}: ${firstDifference(before, after, expected)}`);
      if (job.kind === "mask") {
        const report = JSON.parse(out.stdout) as { tensors: { tensor: string; zeroed: number }[] };
        const zeroed = Object.fromEntries(report.tensors.map((t) => [t.tensor, t.zeroed]));
        if (
          JSON.stringify(zeroed, Object.keys(job.zeroed!).sort()) !==
          JSON.stringify(job.zeroed, Object.keys(job.zeroed!).sort())
        ) {
          failures.push(`${describe(job)}: zeroed ${JSON.stringify(zeroed)}, numpy ${JSON.stringify(job.zeroed)}`);
        }
      }
    }
    assert.deepEqual(failures.slice(0, 30), [], `${failures.length} of ${jobs.length} cases differ from numpy`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
