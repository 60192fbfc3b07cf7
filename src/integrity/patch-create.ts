/**
 * `createPatch(OLD, NEW, OUT)`: a delta patch (format: patch-format.ts) holding only what OLD lacks to become NEW.
 * Both sides are hashed in one pass per file (whole file and every tensor); a target tensor whose bytes some base
 * tensor has (same name, or renamed, in any shard) is taken from the base; one of the same name, dtype and shape that
 * changed in part is stored as its changed rows along dim 0; anything else is stored whole. OLD and NEW may be
 * sharded checkpoints (a directory or an index file): then every file is listed (version 2), a shard equal to a base
 * file is a copy, the index is stored whole. The patch is written through the streaming writer (atomic), its tensor
 * bytes copied from NEW without passing through JavaScript where the OS can. Node-only.
 */
import * as fs from "node:fs";
import { identity } from "../edit/checkpoint.js";
import { SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { createWriter, type WriterOptions } from "../io/stream-writer.js";
import { compareTensors } from "./compare.js";
import { digestDescriptor, type FileDigests } from "./digests.js";
import { openPatchSide, type PatchSide, type SideFile, sha256OfSideFile } from "./patch-files.js";
import {
  PATCH_METADATA_KEY,
  PATCH_VERSION,
  type PatchFileRef,
  type PatchOp,
  type PatchPlan,
  type PatchSummary,
  type PatchTarget,
  rowBytesOf,
  SHARDED_PATCH_VERSION,
} from "./patch-format.js";
import type { StoredFile } from "./stored-file.js";

/** Options of `createPatch`. */
export interface CreatePatchOptions extends WriterOptions {
  /**
   * A changed tensor with more changed row ranges than this is stored whole (default 65,536): the plan lists every
   * range, and past this many the list costs more than it saves.
   */
  maxRowRanges?: number;
}

/** What `createPatch` wrote: the plan and the patch's size. */
export interface CreatePatchResult {
  readonly plan: PatchPlan;
  /** The patch file's size in bytes. */
  readonly bytes: number;
}

/** What the patch stores for one target tensor or file, besides its op. */
interface Stored {
  readonly name: string;
  readonly dtype: TensorInfo["dtype"];
  readonly shape: readonly number[];
  /** The target file's descriptor and [offset, length] byte runs in it, in order; or bytes to write as they are. */
  readonly fd: number;
  readonly runs: readonly (readonly [number, number])[];
  readonly bytes?: Uint8Array;
}

/** A side's files with their digests (tensors for safetensors files, the file's SHA-256 for all). */
interface Hashed {
  readonly file: SideFile;
  readonly sha256: string;
  readonly digests: FileDigests | null;
}

function hashSide(side: PatchSide): Hashed[] {
  return side.files.map((file) => {
    if (!file.stored) return { file, sha256: sha256OfSideFile(file), digests: null };
    const digests = digestDescriptor(file.fd, file.stored.header, file.path);
    return { file, sha256: digests.sha256, digests };
  });
}

/**
 * Write a delta patch from OLD to NEW (files, checkpoint directories or index files) at `outPath`: tensors OLD
 * already holds are referenced, tensors changed in part are stored as their changed rows, the rest whole. The patch
 * is itself a safetensors file.
 */
export function createPatch(
  oldPath: string,
  newPath: string,
  outPath: string,
  options: CreatePatchOptions = {},
): CreatePatchResult {
  const maxRowRanges = options.maxRowRanges ?? 65_536;
  if (!Number.isSafeInteger(maxRowRanges) || maxRowRanges < 0) {
    throw new SafetensorError("InvalidOption", `maxRowRanges must be a non-negative integer, got ${maxRowRanges}`);
  }
  const base = openPatchSide(oldPath);
  try {
    const target = openPatchSide(newPath);
    try {
      const out = sideIdentity(outPath);
      const clash = [...base.files, ...target.files].find((file) => file.identity === out);
      if (clash) {
        throw new SafetensorError("InvalidOption", `the patch would replace its own input ${clash.path}`);
      }
      return writePatch(base, target, outPath, options, maxRowRanges);
    } finally {
      target.close();
    }
  } finally {
    base.close();
  }
}

function sideIdentity(file: string): string | undefined {
  try {
    return identity(fs.statSync(file));
  } catch {
    return undefined;
  }
}

/** Summary lists, filled target file by target file. */
class SummaryBuilder {
  same = 0;
  readonly changed: string[] = [];
  readonly rowPatched: string[] = [];
  readonly added: string[] = [];
  readonly renamed: [string, string][] = [];
  readonly usedAsRename = new Set<string>();
}

/** The base's tensors by name and by digest, across its files: [file index, name]. */
interface BaseLookup {
  readonly byName: Map<string, { file: number; digest: string }>;
  readonly byDigest: Map<string, [number, string]>;
  readonly files: readonly Hashed[];
}

function lookupOf(base: readonly Hashed[]): BaseLookup {
  const byName = new Map<string, { file: number; digest: string }>();
  const byDigest = new Map<string, [number, string]>();
  base.forEach((hashed, j) => {
    for (const [name, digest] of hashed.digests?.tensors ?? []) {
      if (!byName.has(name)) byName.set(name, { file: j, digest });
      if (!byDigest.has(digest)) byDigest.set(digest, [j, name]);
    }
  });
  return { byName, byDigest, files: base };
}

/** The ops of one target safetensors file (index `t`) and what the patch stores for it. */
function planTensors(
  t: number,
  target: StoredFile,
  digests: FileDigests,
  base: BaseLookup,
  targetNames: ReadonlySet<string>,
  summary: SummaryBuilder,
  maxRowRanges: number,
): { ops: PatchOp[]; stored: Stored[] } {
  const ops: PatchOp[] = [];
  const stored: Stored[] = [];
  for (const info of target.header.tensors.values()) {
    const { name } = info;
    const digest = digests.tensors.get(name)!;
    const old = base.byName.get(name);
    if (!old) summary.added.push(name);
    if (info.byteLength === 0) {
      ops.push({ name });
      continue;
    }
    if (old && old.digest === digest) {
      summary.same++;
      ops.push({ name, from: [old.file, name] });
      continue;
    }
    const source = base.byDigest.get(digest);
    if (source !== undefined) {
      ops.push({ name, from: source });
      if (old) summary.changed.push(name);
      if (!old && !targetNames.has(source[1]) && !summary.usedAsRename.has(source[1])) {
        summary.usedAsRename.add(source[1]);
        summary.renamed.push([source[1], name]);
        summary.added.pop();
      }
      continue;
    }
    const at = target.header.dataStart + info.dataOffsets[0];
    const rowBytes = rowBytesOf(info);
    const oldFile = old && base.files[old.file]!.file.stored!;
    const oldInfo = oldFile?.header.tensors.get(name);
    if (oldFile && oldInfo?.dtype === info.dtype && oldInfo.shape.join() === info.shape.join() && rowBytes !== null) {
      const change = compareTensors(oldFile.tensor(name), target.tensor(name));
      const rows = change?.rows ?? [];
      const count = rows.reduce((n, [a, b]) => n + b - a, 0);
      if (change && rows.length <= maxRowRanges && count < info.shape[0]!) {
        const data = `rows/${t}/${name}`;
        ops.push({ name, from: [old!.file, name], rows, data });
        stored.push({
          name: data,
          dtype: info.dtype,
          shape: [count, ...info.shape.slice(1)],
          fd: target.fd,
          runs: rows.map(([a, b]) => [at + a * rowBytes, (b - a) * rowBytes] as const),
        });
        summary.rowPatched.push(name);
        continue;
      }
    }
    const data = `data/${t}/${name}`;
    ops.push({ name, data });
    stored.push({ name: data, dtype: info.dtype, shape: info.shape, fd: target.fd, runs: [[at, info.byteLength]] });
    if (old) summary.changed.push(name);
  }
  return { ops, stored };
}

function writePatch(
  baseSide: PatchSide,
  targetSide: PatchSide,
  outPath: string,
  options: WriterOptions,
  maxRowRanges: number,
): CreatePatchResult {
  const sharded = baseSide.sharded || targetSide.sharded;
  const base = hashSide(baseSide);
  const target = hashSide(targetSide);
  const lookup = lookupOf(base);
  const targetNames = new Set(target.flatMap((h) => [...(h.file.stored?.header.tensors.keys() ?? [])]));
  const summary = new SummaryBuilder();
  const stored: Stored[] = [];
  const entries: PatchTarget[] = target.map((hashed, t): PatchTarget => {
    const { file } = hashed;
    const ref: PatchFileRef = { name: file.name, size: file.size, sha256: hashed.sha256 };
    const copy = sharded ? base.findIndex((b) => b.sha256 === hashed.sha256 && b.file.size === file.size) : -1;
    if (copy >= 0) {
      summary.same += file.stored?.header.tensors.size ?? 0;
      for (const name of file.stored?.header.tensors.keys() ?? [])
        if (!lookup.byName.has(name)) summary.added.push(name);
      return { ...ref, copy };
    }
    if (!file.stored) {
      const data = `file/${t}`;
      stored.push({ name: data, dtype: "U8", shape: [file.size], fd: file.fd, runs: [[0, file.size]] });
      return { ...ref, data };
    }
    const header = `header/${t}`;
    stored.push({
      name: header,
      dtype: "U8",
      shape: [file.stored.headerBytes.length],
      fd: file.fd,
      runs: [],
      bytes: file.stored.headerBytes,
    });
    const planned = planTensors(t, file.stored, hashed.digests!, lookup, targetNames, summary, maxRowRanges);
    stored.push(...planned.stored);
    return { ...ref, header, tensors: planned.ops };
  });
  const baseNames = base.flatMap((h) => [...(h.file.stored?.header.tensors.keys() ?? [])]);
  const removed = baseNames.filter((name) => !targetNames.has(name) && !summary.usedAsRename.has(name));
  const headers = (side: readonly Hashed[]) => side.map((h) => h.file.stored?.headerBytes ?? new Uint8Array(0));
  const metadata = (side: readonly Hashed[]) => side.map((h) => h.file.stored?.header.metadata ?? null);
  const planSummary: PatchSummary = {
    same: summary.same,
    changed: summary.changed,
    rowPatched: summary.rowPatched,
    added: summary.added,
    removed,
    renamed: summary.renamed,
    metadataChanged: !sameList(metadata(base), metadata(target), sameMetadata),
    headerChanged: !sameList(headers(base), headers(target), (a, b) => Buffer.compare(a, b) === 0),
  };
  const plan: PatchPlan = {
    version: sharded ? SHARDED_PATCH_VERSION : PATCH_VERSION,
    base: base.map((h) => ({ name: h.file.name, size: h.file.size, sha256: h.sha256 })),
    target: entries,
    summary: planSummary,
  };
  const specs = stored.map((entry) => [entry.name, { dtype: entry.dtype, shape: entry.shape }] as const);
  const writer = createWriter(outPath, specs, { [PATCH_METADATA_KEY]: JSON.stringify(plan) }, options);
  try {
    for (const entry of stored) {
      if (entry.bytes) writer.write(entry.name, entry.bytes);
      for (const [offset, length] of entry.runs) writer.copyFrom(entry.name, entry.fd, offset, length);
    }
    writer.commit();
  } finally {
    writer.abort();
  }
  return { plan, bytes: writer.layout.totalLength };
}

function sameList<T>(a: readonly T[], b: readonly T[], same: (x: T, y: T) => boolean): boolean {
  return a.length === b.length && a.every((x, i) => same(x, b[i]!));
}

function sameMetadata(a: ReadonlyMap<string, string> | null, b: ReadonlyMap<string, string> | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.size !== b.size) return false;
  for (const [key, value] of a) if (b.get(key) !== value) return false;
  return true;
}
