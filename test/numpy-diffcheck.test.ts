/**
 * Differential check against numpy (+ ml_dtypes): random edits (`--fill`, `--from` .npy of the tensor's type,
 * float32 or float64, raw bytes), masks (BOOL, numeric, packed flat and per-row, both bit orders, mode multiply and
 * zero, a subset of the tensors) over tensors of every dtype numpy can express (F4 / F6 unpacked and packed back),
 * 0-d / 1-d / 4-d / empty, rows of kilobytes, a sharded checkpoint, and copies of real corpus files (the sharded set
 * too), each compared byte for byte with what numpy gives for the same operation (scripts/numpy_diffcheck.py);
 * refusals (values numpy would truncate or cast, masks that do not fit) must leave the files as they were. For
 * every success, `diff BASE NEW --json` must report numpy's counts (elements, max |a - b|, NaN pairs, row ranges),
 * `patch create` + `patch apply` must rebuild NEW byte for byte, and applying the patch to another base must be
 * PatchBaseMismatch with nothing written. Every write path is taken (--verify none / tensor / full, the library's
 * applyMask in 64-byte chunks, checkpoints named by their index). Seeded; `SAFETENSORS_DIFFCHECK_CASES=5000
 * SAFETENSORS_DIFFCHECK_SEED=7` runs more. Needs the reference venv (numpy, ml_dtypes); skipped with the reason
 * when it is absent.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { applyMask, journalPathFor } from "../src/node.js";
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
  /** What numpy computes for `diff BASE EXPECTED`, per changed tensor. */
  diff?: Record<string, { elements: number; max_abs_diff: number | string; nan_elements: number; rows: number[][] }>;
  /** A base `patch apply` must refuse (another file, or this one with a byte changed). */
  wrong_base?: string;
  /** F4 / F6: an edit whose runs do not start and end on a byte may be refused (MisalignedSlice) instead. */
  packed?: boolean;
  expected: string;
}

const CASES = Number(process.env.SAFETENSORS_DIFFCHECK_CASES ?? 150);
const SEED = Number(process.env.SAFETENSORS_DIFFCHECK_SEED ?? 1);
const CORPUS = [
  "julia-test-numpy-all-dtypes.safetensors",
  "burn-boolean.safetensors",
  "r-hello.safetensors",
  "julia-test-sharded-6",
];

/** A file's bytes, or a directory's files by name. */
function contentOf(target: string): Map<string, Buffer> {
  if (!fs.statSync(target).isDirectory()) return new Map([["", fs.readFileSync(target)]]);
  return new Map(
    fs
      .readdirSync(target)
      .sort()
      .map((name) => [name, fs.readFileSync(path.join(target, name))]),
  );
}

/** How `ours` differs from `numpy` (files or directories), or "" when they are byte-identical. */
function compareContent(before: Map<string, Buffer>, ours: Map<string, Buffer>, numpy: Map<string, Buffer>): string {
  if ([...ours.keys()].join() !== [...numpy.keys()].join())
    return `files ${[...ours.keys()]} against ${[...numpy.keys()]}`;
  for (const [name, bytes] of numpy) {
    if (!ours.get(name)!.equals(bytes)) return `${name}: ${firstDifference(before.get(name)!, ours.get(name)!, bytes)}`;
  }
  return "";
}

/** apply-mask through the library, in chunks of 64 bytes (many chunks, packed rows split across them), as the CLI reports. */
function maskWithLibrary(target: string, job: Job): { code: number; stdout: string; stderr: string } {
  try {
    const { tensors } = applyMask(target, job.mask!, { bitOrder: job.bit_order, mode: job.mode, chunkBytes: 64 });
    return { code: 0, stdout: JSON.stringify({ tensors }), stderr: "" };
  } catch (error) {
    return { code: 1, stdout: "", stderr: String(error) };
  }
}

/** What `diff --json` shows of numpy's counts: the first 1000 row ranges (its default `--max-row-ranges`), all counted. */
function expectedDiff(numpy: NonNullable<Job["diff"]>[string]) {
  return { ...numpy, rows: numpy.rows.slice(0, 1000), row_ranges: numpy.rows.length };
}

function sameContent(a: Map<string, Buffer>, b: Map<string, Buffer>): boolean {
  return a.size === b.size && [...a].every(([name, bytes]) => b.get(name)?.equals(bytes) === true);
}

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
    let checkedDiffs = 0;
    let checkedPatches = 0;
    let refusedBases = 0;
    let misaligned = 0;
    // Varied by job so that every path is taken: the library with small chunks (masks), the checked write paths
    // (--verify tensor / full), a checkpoint named by its index.
    for (const [n, job] of jobs.entries()) {
      const sharded = fs.statSync(job.file).isDirectory();
      const work = path.join(dir, sharded ? "work" : "work.safetensors");
      fs.rmSync(work, { recursive: true, force: true });
      fs.cpSync(job.file, work, { recursive: true });
      const before = contentOf(work);
      const target = sharded && n % 2 === 1 ? path.join(work, "model.safetensors.index.json") : work;
      const out =
        job.kind === "mask" && n % 3 === 1
          ? maskWithLibrary(target, job)
          : job.kind === "mask"
            ? await cli(
                "apply-mask",
                target,
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
                target,
                job.tensor!,
                "--slice",
                job.slice!,
                ...(job.fill !== undefined ? ["--fill", job.fill] : ["--from", job.from!]),
                "--no-fsync",
                "--verify",
                ["none", "tensor", "full"][n % 3]!,
              );
      const after = contentOf(work);
      if (!sharded && fs.existsSync(journalPathFor(work))) failures.push(`${describe(job)}: a journal was left`);
      if (job.expected === "error") {
        if (out.code !== 1) failures.push(`${describe(job)}: expected a refusal, got status ${out.code} ${out.stderr}`);
        else if (!sameContent(before, after)) failures.push(`${describe(job)}: refused but the file changed`);
        continue;
      }
      if (job.packed && out.code === 1 && /MisalignedSlice/.test(out.stderr) && sameContent(before, after)) {
        misaligned++;
        continue;
      }
      if (out.code !== 0) {
        failures.push(`${describe(job)}: status ${out.code}: ${out.stderr.trim()}`);
        continue;
      }
      const differs = compareContent(before, after, contentOf(job.expected));
      if (differs) failures.push(`${describe(job)}: ${differs}`);
      if (job.kind === "mask") {
        const report = JSON.parse(out.stdout) as { tensors: { tensor: string; zeroed: number }[] };
        const zeroed = Object.fromEntries(report.tensors.map((t) => [t.tensor, t.zeroed]));
        const keys = Object.keys(job.zeroed!).sort();
        if (JSON.stringify(zeroed, keys) !== JSON.stringify(job.zeroed, keys)) {
          failures.push(`${describe(job)}: zeroed ${JSON.stringify(zeroed)}, numpy ${JSON.stringify(job.zeroed)}`);
        }
      }
      if (differs) continue;
      // diff BASE NEW: the changed tensors and their counts as numpy computes them.
      const diff = await cli("diff", job.file, work, "--json");
      const report = JSON.parse(diff.stdout) as {
        tensors: (Record<string, unknown> & { name: string; status: string })[];
      };
      const changed = Object.fromEntries(
        report.tensors
          .filter((t) => t.status !== "same")
          .map((t) => [
            t.name,
            {
              elements: t.elements,
              max_abs_diff: t.max_abs_diff,
              nan_elements: t.nan_elements,
              rows: t.rows,
              row_ranges: t.row_ranges,
            },
          ]),
      );
      const names = Object.keys(job.diff!).sort();
      if (
        diff.code !== (names.length ? 1 : 0) ||
        JSON.stringify(changed, null, 0) !==
          JSON.stringify(Object.fromEntries(names.map((n) => [n, expectedDiff(job.diff![n]!)])))
      ) {
        failures.push(
          `${describe(job)}: diff ${diff.code} ${JSON.stringify(changed)}, numpy ${JSON.stringify(job.diff)}`,
        );
      }
      checkedDiffs++;
      // patch create BASE NEW, patch apply BASE: NEW byte for byte; another base refused, nothing written.
      const patch = path.join(dir, "patch.safetensors");
      const rebuilt = path.join(dir, sharded ? "rebuilt" : "rebuilt.safetensors");
      fs.rmSync(patch, { force: true });
      fs.rmSync(rebuilt, { recursive: true, force: true });
      const created = await cli("patch", "create", job.file, work, patch);
      const applied = created.code === 0 ? await cli("patch", "apply", job.file, patch, rebuilt) : created;
      if (applied.code !== 0) failures.push(`${describe(job)}: patch: ${applied.stderr.trim()}`);
      else if (!sameContent(contentOf(rebuilt), after))
        failures.push(`${describe(job)}: the patch did not rebuild NEW`);
      else checkedPatches++;
      if (job.wrong_base && created.code === 0) {
        const refused = path.join(dir, sharded ? "refused" : "refused.safetensors");
        const wrong = await cli("patch", "apply", job.wrong_base, patch, refused);
        if (wrong.code !== 1 || !/PatchBaseMismatch/.test(wrong.stderr) || fs.existsSync(refused)) {
          failures.push(
            `${describe(job)}: patch applied to ${path.basename(job.wrong_base)}: ${wrong.code} ${wrong.stderr}`,
          );
        } else refusedBases++;
      }
    }
    console.log(
      `# ${jobs.length} cases: ${checkedDiffs} diffs, ${checkedPatches} patches, ${refusedBases} wrong bases refused, ${misaligned} F4/F6 edits refused as misaligned`,
    );
    assert.deepEqual(failures.slice(0, 30), [], `${failures.length} of ${jobs.length} cases differ from numpy`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
