/**
 * Converting a directory of PyTorch checkpoint shards (`pytorch_model-0000k-of-0000N.bin` + its index, a single
 * `pytorch_model.bin`, any `*.bin` / `*.pt` set with an `*.index.json`) into safetensors shards named as
 * huggingface_hub names them, with `model.safetensors.index.json`. Every shard is opened, scanned and planned before
 * anything is written, so a dangerous or unknown global in any shard refuses the whole directory and writes nothing.
 * The directory changes atomically (src/shards' staged save): killed at any point, OUTDIR holds the earlier conversion
 * or the new one, never a mix.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { quoteName, SafetensorError } from "../format/errors.js";
import { compareCodePoints } from "../format/serialize.js";
import { ioError } from "../io/node-file.js";
import type { AtomicWriteOptions } from "../io/node-write.js";
import { DEFAULT_FILENAME_PATTERN, DEFAULT_MAX_INDEX_BYTES, type ShardPlan, shardFileName } from "../shards/index.js";
import { commitCheckpoint, readIndex, realpath, shardPath } from "../shards/node.js";
import {
  type ConversionReport,
  type NodeConvertOptions,
  openPlanned,
  type PlannedCheckpoint,
  writePlanned,
} from "./node-pickle.js";

/** Options of `convertPickleDirectory`. */
export interface DirectoryConvertOptions extends NodeConvertOptions, AtomicWriteOptions {
  /** Largest index file read (default 64 MiB). */
  maxIndexBytes?: number;
}

/** What `convertPickleDirectory` wrote. */
export interface DirectoryConversionReport {
  readonly input: string;
  readonly output: string;
  /** The input's index file, or null for a single checkpoint file. */
  readonly index: string | null;
  /** The index written, or null when one file holds everything (`model.safetensors`). */
  readonly outputIndex: string | null;
  readonly shards: readonly { readonly input: string; readonly output: string; readonly report: ConversionReport }[];
  /** The index's `total_size`: bytes of the tensors written. */
  readonly totalSize: number;
  readonly bytesWritten: number;
  /** The input index and the shards disagree in ways that do not stop the conversion. */
  readonly warnings: readonly string[];
}

const CHECKPOINT_FILE = /\.(bin|pt|pth|ckpt)$/i;

/** Is `target` a directory of PyTorch checkpoints, or the index of one (`*.bin.index.json`, `*.pt.index.json`)? */
export function isPickleDirectoryTarget(target: string): boolean {
  try {
    const stat = fs.statSync(target);
    if (stat.isDirectory()) return true;
    return stat.isFile() && /\.index\.json$/i.test(target) && !/\.safetensors\.index\.json$/i.test(target);
  } catch {
    return false;
  }
}

/** The input's index (or its single checkpoint file) and the shard files, in name order. */
function locate(
  input: string,
  maxIndexBytes: number,
): { directory: string; index: string | null; files: string[]; listed: ReadonlyMap<string, string> | null } {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(input);
  } catch (error) {
    throw ioError(error, `cannot open ${input}`);
  }
  let indexPath: string | null = stat.isDirectory() ? null : input;
  const directory = stat.isDirectory() ? input : path.dirname(input);
  if (indexPath === null) {
    let entries: string[];
    try {
      entries = fs.readdirSync(directory).sort(compareCodePoints);
    } catch (error) {
      throw ioError(error, `cannot list ${directory}`);
    }
    const indexes = entries.filter((e) => /\.index\.json$/i.test(e) && !/\.safetensors\.index\.json$/i.test(e));
    const preferred = indexes.find((e) => e === "pytorch_model.bin.index.json");
    if (preferred || indexes.length === 1) indexPath = path.join(directory, preferred ?? indexes[0]!);
    else if (indexes.length > 1) {
      throw new SafetensorError("InvalidIndex", `${directory} holds several indexes (${indexes.join(", ")}): name one`);
    } else {
      const files = entries.filter((e) => CHECKPOINT_FILE.test(e) && fs.statSync(path.join(directory, e)).isFile());
      if (files.length !== 1) {
        throw new SafetensorError(
          "InvalidIndex",
          files.length === 0
            ? `${directory} holds no PyTorch checkpoint (*.bin, *.pt, *.pth, *.ckpt)`
            : `${directory} holds several checkpoint files (${files.join(", ")}) and no index: convert them one by one`,
        );
      }
      return { directory, index: null, files: [path.join(directory, files[0]!)], listed: null };
    }
  }
  const index = readIndex(indexPath, maxIndexBytes);
  const realDirectory = realpath(directory);
  const files = [...index.files].sort(compareCodePoints).map((f) => shardPath(directory, realDirectory, f));
  return { directory, index: indexPath, files, listed: index.weightMap };
}

/** Open and plan every shard; any refusal refuses the directory, naming each shard and why. */
function planAll(files: readonly string[], options: DirectoryConvertOptions): PlannedCheckpoint[] {
  const planned: PlannedCheckpoint[] = [];
  const failures: { file: string; error: SafetensorError }[] = [];
  for (const file of files) {
    try {
      planned.push(openPlanned(file, options));
    } catch (error) {
      if (!(error instanceof SafetensorError)) {
        for (const p of planned) p.source.close();
        throw error;
      }
      failures.push({ file: path.basename(file), error });
    }
  }
  if (failures.length) {
    for (const p of planned) p.source.close();
    // The worst code leads: a refused global over a damaged file over anything else.
    const first = failures.find((f) => f.error.code === "UnsafePickle") ?? failures[0]!;
    const detail = failures.map((f) => `${f.file}: error[${f.error.code}] ${f.error.message}`).join("; ");
    throw new SafetensorError(
      first.error.code,
      `refused: ${failures.length} of ${files.length} shard(s) cannot be converted, nothing written: ${detail}`,
    );
  }
  return planned;
}

/** Names across shards: each once; the input index agreeing with where they are. */
function crossCheck(planned: readonly PlannedCheckpoint[], listed: ReadonlyMap<string, string> | null): string[] {
  const warnings: string[] = [];
  const holder = new Map<string, string>();
  const dropped = new Set<string>();
  for (const p of planned) {
    const file = path.basename(p.input);
    const names = [...p.plan.tensors.map((t) => t.name), ...p.plan.aliases.keys()];
    for (const name of names) {
      const other = holder.get(name);
      if (other !== undefined) {
        throw new SafetensorError("InvalidIndex", `tensor ${quoteName(name)} is in two shards: ${other} and ${file}`);
      }
      holder.set(name, file);
    }
    for (const d of p.plan.dropped) dropped.add(d.name);
  }
  if (listed === null) return warnings;
  for (const [name, file] of listed) {
    const actual = holder.get(name);
    if (actual === file) continue;
    if (actual === undefined && dropped.has(name)) {
      warnings.push(`${quoteName(name)} (listed in the index) was dropped: built from globals not allowlisted`);
      continue;
    }
    throw new SafetensorError(
      "InvalidIndex",
      actual === undefined
        ? `the index lists ${quoteName(name)} in ${file}, which does not hold it`
        : `the index lists ${quoteName(name)} in ${file}, but ${actual} holds it`,
    );
  }
  for (const [name, file] of holder) {
    if (!listed.has(name)) warnings.push(`${file} holds ${quoteName(name)}, which the index does not list`);
  }
  return warnings;
}

/**
 * Convert a checkpoint directory (or its index) into safetensors shards in `output` (which may be the input
 * directory: only `model*.safetensors` files and `model.safetensors.index.json` are written or removed there).
 */
export function convertPickleDirectory(
  input: string,
  output: string,
  options: DirectoryConvertOptions = {},
): DirectoryConversionReport {
  const found = locate(input, options.maxIndexBytes ?? DEFAULT_MAX_INDEX_BYTES);
  const planned = planAll(found.files, options);
  try {
    const warnings = crossCheck(planned, found.listed);
    const count = planned.length;
    const outputs = planned.map((_, i) => shardFileName(i, count, DEFAULT_FILENAME_PATTERN));
    const weightMap = new Map<string, string>();
    let totalSize = 0;
    planned.forEach((p, i) => {
      for (const t of p.plan.tensors) {
        weightMap.set(t.name, outputs[i]!);
        totalSize += t.byteLength;
      }
    });
    const plan: ShardPlan = {
      shards: planned.map((p, i) => ({ file: outputs[i]!, tensors: p.plan.tensors.map((t) => t.name) })),
      weightMap,
      totalSize,
      isSharded: count > 1,
    };
    // One atomic change of OUTDIR (src/shards' staged save): every file staged, then one commit switches to them and
    // removes the model*.safetensors files of an earlier save that this one does not replace.
    const byFile = new Map(outputs.map((file, i) => [file, planned[i]!]));
    const reports = new Map<string, ConversionReport>();
    commitCheckpoint(output, plan, { indexStyle: "transformers", fsync: options.fsync }, (target, _names, name) => {
      reports.set(name, writePlanned(byFile.get(name)!, target, options));
    });
    const shards = planned.map((p, i) => ({
      input: p.input,
      output: path.join(output, outputs[i]!),
      report: reports.get(outputs[i]!)!,
    }));
    return {
      input,
      output,
      index: found.index,
      outputIndex: plan.isSharded ? path.join(output, "model.safetensors.index.json") : null,
      shards,
      totalSize,
      bytesWritten: shards.reduce((n, s) => n + s.report.bytesWritten, 0),
      warnings,
    };
  } finally {
    for (const p of planned) p.source.close();
  }
}
