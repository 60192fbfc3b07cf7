/**
 * Records the reference's verdict on every hostile header of bench/hostile-cases.ts, built small enough for the test
 * suite, into test/fixtures/hostile-verdicts.jsonl (one line per case and size: id, size, ok, error). The cases are
 * rebuilt from their descriptions at test time; only the verdicts are committed. Needs the reference venv:
 *
 *   node --import tsx scripts/gen_hostile_verdicts.ts
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { buildHostileFile, HOSTILE_CASES, testSizes } from "../bench/hostile-cases.js";
import { referenceMissingReason, referencePython } from "../test/helpers/reference.js";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(repo, "test", "fixtures", "hostile-verdicts.jsonl");

const python = referencePython()?.python;
if (!python) throw new Error(referenceMissingReason());
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-hostile-verdicts-"));
try {
  const jobs: { id: string; size: number; file: string }[] = [];
  for (const hostile of HOSTILE_CASES) {
    for (const size of testSizes(hostile)) {
      const file = path.join(dir, `${hostile.id}-${size}.safetensors`);
      fs.writeFileSync(file, buildHostileFile(hostile, size));
      jobs.push({ id: hostile.id, size, file });
    }
  }
  const result = spawnSync(python, [path.join(repo, "bench", "hostile_ref.py"), ...jobs.map((j) => j.file)], {
    encoding: "utf8",
    maxBuffer: 1 << 28,
  });
  if (result.status !== 0) throw new Error(`reference failed (status ${result.status}):\n${result.stderr}`);
  const verdicts = result.stdout
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as { ok: boolean; error: string | null });
  if (verdicts.length !== jobs.length) throw new Error(`expected ${jobs.length} verdicts, got ${verdicts.length}`);
  const lines = jobs.map((job, i) => {
    const { ok, error } = verdicts[i]!;
    // Positions and long names are not part of a verdict; keep the lines short.
    return JSON.stringify({ id: job.id, size: job.size, ok, error: error === null ? null : error.slice(0, 300) });
  });
  fs.writeFileSync(out, `${lines.join("\n")}\n`);
  console.log(`wrote ${lines.length} verdicts to ${path.relative(repo, out)}`);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
