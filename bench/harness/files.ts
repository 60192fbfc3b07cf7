/** The checkpoint and its torch.save twin: found in the output directory, or made there. */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { BENCH_DIR, CHECKPOINT_NAME, DEFAULT_OUT_DIR, PT_NAME, REPO_DIR } from "../spec.js";
import { lastLines, runChild } from "./child.js";

export interface Files {
  dir: string;
  checkpoint: string;
  pt: string | null;
  ptReason?: string;
  /** Emptied before each figure run; figures that write files use it. */
  scratch: string;
}

const GB = 1e9;
/** The compiled checkpoint tool next to this module's compiled twin (bench/out/js/bench/checkpoint.js). */
const CHECKPOINT_JS = fileURLToPath(new URL("../checkpoint.js", import.meta.url));

/** Free bytes for unprivileged users on the file system holding `dir`. */
function freeBytes(dir: string): number | null {
  try {
    const s = fs.statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return null;
  }
}

/** null when `file` is the expected checkpoint, else why not; throws when the check itself cannot run. */
function checkCheckpoint(file: string, timeoutMs: number): string | null {
  if (!fs.existsSync(file)) return "missing";
  const child = spawnSync(process.execPath, [CHECKPOINT_JS, "check", file], {
    cwd: REPO_DIR,
    encoding: "utf8",
    timeout: timeoutMs,
    killSignal: "SIGKILL",
  });
  if (child.status === 0) return null;
  if (child.status === 3) return child.stdout.trim() || "not the expected checkpoint";
  throw new Error(`cannot check ${file}: ${child.error?.message ?? lastLines(child.stderr ?? "", 3)}`);
}

/**
 * Make sure the checkpoint (and, when `wantPt`, its .pt twin) exist in `dir`, building what is missing. Files outside
 * bench/out that exist but do not check are never overwritten (they may be someone else's).
 */
export function prepareFiles(
  dir: string,
  timeoutMs: number,
  python: string | null,
  wantPt: boolean,
  progress: (message: string) => void,
): Files {
  const own = path.resolve(dir) === path.resolve(DEFAULT_OUT_DIR);
  fs.mkdirSync(dir, { recursive: true });
  const checkpoint = path.join(dir, CHECKPOINT_NAME);
  const scratch = path.join(dir, `scratch-${process.pid}`);
  const files: Files = { dir, checkpoint, pt: null, scratch };

  const problem = checkCheckpoint(checkpoint, Math.max(timeoutMs, 120_000));
  if (problem) {
    if (problem !== "missing" && !own) {
      throw new Error(
        `${checkpoint} exists but is not the benchmark checkpoint (${problem}); it is outside bench/out, so the harness will not overwrite it`,
      );
    }
    const free = freeBytes(dir);
    if (free !== null && free < 3 * GB) {
      throw new Error(`only ${(free / GB).toFixed(1)} GB free in ${dir}; the checkpoint needs 2.55 GB`);
    }
    progress(`building ${checkpoint} (${problem}) with our saveFile ...`);
    const child = spawnSync(process.execPath, [CHECKPOINT_JS, "build", checkpoint], {
      cwd: REPO_DIR,
      encoding: "utf8",
      timeout: Math.max(timeoutMs, 1_800_000),
      killSignal: "SIGKILL",
    });
    if (child.status !== 0) {
      throw new Error(`building the checkpoint failed: ${child.error?.message ?? lastLines(child.stderr ?? "", 5)}`);
    }
    progress(child.stdout.trim());
  } else {
    progress(`checkpoint ${checkpoint} is present and checks`);
  }

  if (!wantPt) return files;
  if (!python) {
    files.ptReason = "the reference is unavailable";
    return files;
  }
  const pt = path.join(dir, PT_NAME);
  const ckStat = fs.statSync(checkpoint);
  let ptStat: fs.Stats | null = null;
  try {
    ptStat = fs.statSync(pt);
  } catch {}
  if (ptStat?.isFile() && ptStat.size > ckStat.size * 0.99 && ptStat.mtimeMs >= ckStat.mtimeMs) {
    progress(`torch.load twin ${pt} is present`);
    files.pt = pt;
    return files;
  }
  if (ptStat && !own) {
    files.ptReason = `${pt} exists but looks stale or incomplete, and it is outside bench/out: not overwritten`;
    return files;
  }
  const free = freeBytes(dir);
  if (free === null || free < 8 * GB) {
    files.ptReason = `${free === null ? "unknown" : (free / GB).toFixed(1)} GB free in ${dir}, need ≥ 8 GB to write the .pt twin`;
    return files;
  }
  progress(`building the torch.load twin ${pt} (torch.save of the same tensors) ...`);
  const { result } = runChild(
    [python, path.join(BENCH_DIR, "ref_worker.py"), "make_pt", checkpoint, pt],
    Math.max(timeoutMs, 1_800_000),
  );
  if (!result.ok) {
    files.ptReason = `building the .pt twin failed: ${result.error}`;
    return files;
  }
  files.pt = pt;
  return files;
}
