/**
 * What the byte-copy commands (shard, merge, extract, drop, rename, set-metadata, cast) share: the output guard (an
 * output never replaces an input unless --in-place), the progress bar, the --json summary, tensor selection, and
 * the per-file rewrite of a single file or of every shard of a checkpoint.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { type Checkpoint, type InputFile, identity, openCheckpoint } from "../edit/checkpoint.js";
import { type OutputTensor, type ProgressSink, storedBytes, writeFileFrom } from "../edit/write.js";
import { SafetensorError } from "../format/errors.js";
import type { MetadataInput } from "../format/serialize.js";
import { tensorNotFound } from "../format/suggest.js";
import type { JsonValue, ShardPlan } from "../shards/index.js";
import { commitCheckpoint } from "../shards/node.js";
import { group, humanBytes } from "../view/inspect-format.js";
import { type OptionSpecs, UsageError } from "./args.js";
import type { Io } from "./io.js";

/** Options every byte-copy command takes. */
export const REWRITE_OPTIONS = {
  json: { type: "boolean", help: 'print {"files","bytes","tensors","seconds"} when done' },
  "in-place": { type: "boolean", help: "allow OUT to replace the input (still written atomically)" },
  fsync: { type: "boolean", help: "fsync each file and its directory before reporting success" },
} as const satisfies OptionSpecs;

export const REWRITE_NOTES = `The input is never modified: OUT is written to a temporary file in its directory and renamed into place when
complete, and an OUT that is the input is refused unless --in-place. A progress bar is drawn on standard error when
it is a terminal and the work takes over a second. On success one line says what was written: the files, the
tensors, the bytes and the time taken (--json: the same as a JSON object).`;

export interface RunSummary {
  files: string[];
  bytes: number;
  tensors: number;
  /** What the command did to them, for the line printed on success ("3 renamed"); not in --json. */
  detail?: string;
}

/** The files written: one path, or "4 shards and model.safetensors.index.json in OUTDIR". */
function writtenFiles(files: readonly string[]): string {
  if (files.length === 1) return files[0]!;
  const index = files.find((file) => file.endsWith(".index.json"));
  const shards = files.length - (index === undefined ? 0 : 1);
  const where = path.dirname(files[0]!);
  return `${shards} shard${shards === 1 ? "" : "s"}${index === undefined ? "" : ` and ${path.basename(index)}`} in ${where}`;
}

/** The line printed on success: what was written, how much, how long. */
export function summaryLine(summary: RunSummary, seconds: number): string {
  const tensors = `${group(summary.tensors)} tensor${summary.tensors === 1 ? "" : "s"}`;
  const detail = summary.detail === undefined ? "" : ` (${summary.detail})`;
  const took = seconds < 0.1 ? seconds.toFixed(3) : seconds.toFixed(1);
  return `wrote ${writtenFiles(summary.files)}: ${tensors}${detail}, ${humanBytes(summary.bytes)} in ${took} s\n`;
}

/**
 * Run a rewrite: open IN, call `body`, print warnings, then one line saying what was written (or the --json
 * summary), and close everything.
 */
export function rewrite(
  input: string,
  io: Io,
  json: boolean | undefined,
  body: (checkpoint: Checkpoint, progress: ProgressSink) => RunSummary,
): number {
  const started = performance.now();
  const checkpoint = openCheckpoint(input);
  const bar = new ProgressBar(checkpoint.tensors.reduce((sum, t) => sum + t.byteLength, 0));
  try {
    for (const warning of checkpoint.warnings) io.stderr(`warning: ${warning}\n`);
    const summary = body(checkpoint, (bytes) => bar.advance(bytes));
    bar.finish();
    const seconds = Math.round(performance.now() - started) / 1000;
    const { detail: _, ...counts } = summary;
    io.stdout(json ? `${JSON.stringify({ ...counts, seconds })}\n` : summaryLine(summary, seconds));
    return 0;
  } finally {
    bar.finish();
    checkpoint.close();
  }
}

/** Refuse outputs that would replace one of the input's files, unless `inPlace`. */
export function guardOutputs(checkpoint: Checkpoint, outputs: readonly string[], inPlace: boolean | undefined): void {
  if (inPlace) return;
  for (const output of outputs) {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(output);
    } catch {
      continue;
    }
    if (checkpoint.identities.has(identity(stat))) {
      throw new UsageError(`${output} is part of the input; pass --in-place to replace it (atomically)`);
    }
  }
}

/** A tensor-name regular expression from the command line. */
export function regexOption(source: string, option: string): RegExp {
  try {
    return new RegExp(source, "u");
  } catch (error) {
    throw new UsageError(`${option}: invalid regular expression: ${(error as Error).message}`);
  }
}

/** The tensors named by --tensor (each must exist) or matched by --match (searched anywhere in the name). */
export function selectTensors(
  checkpoint: Checkpoint,
  names: readonly string[] | undefined,
  match: string | undefined,
): Set<string> {
  if ((names?.length ?? 0) === 0 && match === undefined) throw new UsageError("give --tensor NAME... or --match REGEX");
  if (names?.length && match !== undefined) throw new UsageError("give --tensor or --match, not both");
  const all = new Set(checkpoint.tensors.map((t) => t.name));
  if (match !== undefined) {
    const regex = regexOption(match, "--match");
    return new Set([...all].filter((name) => regex.test(name)));
  }
  for (const name of names!) {
    if (!all.has(name)) throw tensorNotFound(name, all);
  }
  return new Set(names);
}

export interface FileRewrite {
  tensors: OutputTensor[];
  metadata: MetadataInput;
}

/**
 * Rewrite every file of the input with `transform`: one file → OUT is a file; a sharded checkpoint → OUT is a
 * directory with the same shard names and an index (weight map renamed by `rename`, `total_size` recomputed, the
 * rest of the index's metadata kept).
 */
export function rewriteEach(
  checkpoint: Checkpoint,
  out: string,
  options: { inPlace?: boolean; fsync?: boolean },
  progress: ProgressSink,
  transform: (file: InputFile) => FileRewrite,
  rename: (name: string) => string = (name) => name,
): RunSummary {
  const atomic = { fsync: options.fsync };
  if (!checkpoint.sharded) {
    guardOutputs(checkpoint, [out], options.inPlace);
    const { tensors, metadata } = transform(checkpoint.files[0]!);
    const bytes = writeFileFrom(out, tensors, metadata, atomic, progress);
    return { files: [out], bytes, tensors: tensors.length };
  }
  const rewrites = new Map(checkpoint.files.map((file) => [file.name, transform(file)]));
  const weightMap = new Map<string, string>();
  for (const [name, file] of checkpoint.index!.weightMap) weightMap.set(rename(name), file);
  if (weightMap.size !== checkpoint.index!.weightMap.size) {
    throw new SafetensorError("DuplicateKey", "the new names collide: two tensors would get the same name");
  }
  let totalSize = 0;
  for (const { tensors } of rewrites.values()) {
    for (const t of tensors) totalSize += storedBytes(t.source, t.dtype);
  }
  const plan: ShardPlan = {
    shards: checkpoint.files.map((file) => ({
      file: file.name,
      tensors: rewrites.get(file.name)!.tensors.map((t) => t.name),
    })),
    weightMap,
    totalSize,
    isSharded: true,
  };
  const indexName = checkpoint.indexName!;
  guardOutputs(
    checkpoint,
    [...plan.shards.map((s) => path.join(out, s.file)), path.join(out, indexName)],
    options.inPlace,
  );
  const indexMetadata = [...checkpoint.index!.metadata].filter(([key]) => key !== "total_size") as [
    string,
    JsonValue,
  ][];
  let bytes = 0;
  let tensors = 0;
  const files = commitCheckpoint(
    out,
    plan,
    { ...atomic, indexName, indexMetadata, removeStale: false },
    (target, _names, name) => {
      const rewritten = rewrites.get(name)!;
      bytes += writeFileFrom(target, rewritten.tensors, rewritten.metadata, atomic, progress);
      tensors += rewritten.tensors.length;
    },
  );
  bytes += fs.statSync(files.at(-1)!).size;
  return { files, bytes, tensors };
}

/**
 * Run a long job that reports bytes written out of a total: the progress bar while it runs, and with `json` its
 * summary plus `seconds` on standard output when it is done.
 */
export async function runWithProgress<S extends object>(
  io: Io,
  json: boolean | undefined,
  job: (onProgress: (progress: { bytesWritten: number; bytesTotal: number }) => void) => Promise<S>,
): Promise<number> {
  const started = performance.now();
  const bar = new ProgressBar(0);
  let last = 0;
  try {
    const summary = await job((progress) => {
      bar.total = progress.bytesTotal;
      bar.advance(progress.bytesWritten - last);
      last = progress.bytesWritten;
    });
    bar.finish();
    if (json) {
      const seconds = Math.round(performance.now() - started) / 1000;
      io.stdout(`${JSON.stringify({ ...summary, seconds })}\n`);
    }
  } finally {
    bar.finish();
  }
  return 0;
}

/** A one-line progress bar on standard error: only on a terminal, only once the work has taken a second. */
export class ProgressBar {
  readonly #enabled = process.stderr.isTTY === true;
  readonly #started = performance.now();
  #done = 0;
  #drawnAt = 0;
  #drawn = false;

  constructor(public total: number) {}

  advance(bytes: number): void {
    this.#done += bytes;
    if (!this.#enabled) return;
    const now = performance.now();
    if (now - this.#started < 1000 || now - this.#drawnAt < 100) return;
    this.#drawnAt = now;
    this.#drawn = true;
    const fraction = this.total > 0 ? Math.min(1, this.#done / this.total) : 1;
    const width = 30;
    const filled = Math.round(fraction * width);
    const gib = (n: number) => (n / 2 ** 30).toFixed(2);
    process.stderr.write(
      `\r[${"#".repeat(filled)}${" ".repeat(width - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}% ${gib(this.#done)}/${gib(this.total)} GiB`,
    );
  }

  /** Sets the bytes done so far (for callbacks that report a running total). */
  update(done: number): void {
    this.advance(done - this.#done);
  }

  finish(): void {
    if (!this.#drawn) return;
    this.#drawn = false;
    process.stderr.write("\r\x1b[K");
  }
}

/**
 * An `onProgress(done, total)` callback drawing a bar made at its first call (when the total is known), and the
 * `finish` that clears it.
 */
export function progressCallback(): { onProgress: (done: number, total: number) => void; finish: () => void } {
  let bar: ProgressBar | undefined;
  return {
    onProgress: (done, total) => {
      bar ??= new ProgressBar(total);
      bar.update(done);
    },
    finish: () => bar?.finish(),
  };
}
