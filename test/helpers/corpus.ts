/** Where the shared real-file corpus lives, and its expectations. Tests read the files in place. */
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const corpusDir = path.resolve(process.env.SAFETENSORS_CORPUS ?? path.join(repoRoot, "../shared/corpus"));
export const corpusAvailable = fs.existsSync(path.join(corpusDir, "EXPECTED.jsonl"));
export const corpusMissingReason = `real-file corpus not found at ${corpusDir} (set SAFETENSORS_CORPUS to its folder)`;

export interface ExpectedTensor {
  name: string;
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
  sha256: string;
}

export interface ExpectedFile {
  file: string;
  ok: boolean;
  error: string | null;
  metadata?: Record<string, string> | null;
  tensors?: ExpectedTensor[];
}

export function expectedFiles(): ExpectedFile[] {
  if (!corpusAvailable) return [];
  return fs
    .readFileSync(path.join(corpusDir, "EXPECTED.jsonl"), "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as ExpectedFile);
}
