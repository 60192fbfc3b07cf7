/**
 * `createPatch(OLD, NEW, OUT)`: a delta patch (format: patch-format.ts) holding only what OLD lacks to become NEW.
 * Both files are hashed in one pass each (whole file and every tensor); a target tensor whose bytes some base
 * tensor has (same name, or renamed) is taken from the base; one of the same name, dtype and shape that changed in
 * part is stored as its changed rows along dim 0; anything else is stored whole. The patch is written through the
 * streaming writer (atomic), its tensor bytes copied from NEW without passing through JavaScript where the OS can.
 * Node-only.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { createWriter, type WriterOptions } from "../io/stream-writer.js";
import { compareTensors } from "./compare.js";
import { digestDescriptor } from "./digests.js";
import {
  PATCH_METADATA_KEY,
  PATCH_VERSION,
  type PatchOp,
  type PatchPlan,
  type PatchSummary,
  type PatchTarget,
  rowBytesOf,
} from "./patch-format.js";
import { openStoredFile, type StoredFile } from "./stored-file.js";

export interface CreatePatchOptions extends WriterOptions {
  /**
   * A changed tensor with more changed row ranges than this is stored whole (default 65,536): the plan lists every
   * range, and past this many the list costs more than it saves.
   */
  maxRowRanges?: number;
}

export interface CreatePatchResult {
  readonly plan: PatchPlan;
  /** The patch file's size in bytes. */
  readonly bytes: number;
}

function sameFile(out: string, inputs: readonly StoredFile[]): StoredFile | undefined {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(out);
  } catch {
    return undefined;
  }
  return inputs.find((input) => input.identity === `${stat.dev}:${stat.ino}`);
}

/** What the patch stores for one target tensor, besides its op. */
interface Stored {
  readonly name: string;
  readonly dtype: TensorInfo["dtype"];
  readonly shape: readonly number[];
  /** [offset in NEW, length] byte runs, in order. */
  readonly runs: readonly (readonly [number, number])[];
}

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
  const base = openStoredFile(oldPath);
  try {
    const target = openStoredFile(newPath);
    try {
      const clash = sameFile(outPath, [base, target]);
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

function writePatch(
  base: StoredFile,
  target: StoredFile,
  outPath: string,
  options: WriterOptions,
  maxRowRanges: number,
): CreatePatchResult {
  const baseDigests = digestDescriptor(base.fd, base.header, base.path);
  const targetDigests = digestDescriptor(target.fd, target.header, target.path);
  const oldByDigest = new Map<string, string>();
  for (const [name, digest] of baseDigests.tensors) if (!oldByDigest.has(digest)) oldByDigest.set(digest, name);

  const ops: PatchOp[] = [];
  const stored: Stored[] = [];
  const changed: string[] = [];
  const rowPatched: string[] = [];
  const added: string[] = [];
  const renamed: [string, string][] = [];
  let same = 0;
  const usedAsRename = new Set<string>();
  for (const info of target.header.tensors.values()) {
    const { name } = info;
    const digest = targetDigests.tensors.get(name)!;
    const old = base.header.tensors.get(name);
    if (!old) added.push(name);
    if (info.byteLength === 0) {
      ops.push({ name });
      continue;
    }
    if (old && baseDigests.tensors.get(name) === digest) {
      same++;
      ops.push({ name, from: [0, name] });
      continue;
    }
    const source = oldByDigest.get(digest);
    if (source !== undefined) {
      ops.push({ name, from: [0, source] });
      if (old) changed.push(name);
      if (!old && !target.header.tensors.has(source) && !usedAsRename.has(source)) {
        usedAsRename.add(source);
        renamed.push([source, name]);
        added.pop();
      }
      continue;
    }
    const at = target.header.dataStart + info.dataOffsets[0];
    const rowBytes = rowBytesOf(info);
    if (old && old.dtype === info.dtype && old.shape.join() === info.shape.join() && rowBytes !== null) {
      const change = compareTensors(base.tensor(name), target.tensor(name));
      const rows = change?.rows ?? [];
      const count = rows.reduce((n, [a, b]) => n + b - a, 0);
      if (change && rows.length <= maxRowRanges && count < info.shape[0]!) {
        const data = `rows/0/${name}`;
        ops.push({ name, from: [0, name], rows, data });
        stored.push({
          name: data,
          dtype: info.dtype,
          shape: [count, ...info.shape.slice(1)],
          runs: rows.map(([a, b]) => [at + a * rowBytes, (b - a) * rowBytes] as const),
        });
        rowPatched.push(name);
        continue;
      }
    }
    const data = `data/0/${name}`;
    ops.push({ name, data });
    stored.push({ name: data, dtype: info.dtype, shape: info.shape, runs: [[at, info.byteLength]] });
    if (old) changed.push(name);
  }
  const removed = [...base.header.tensors.keys()].filter(
    (name) => !target.header.tensors.has(name) && !usedAsRename.has(name),
  );
  const summary: PatchSummary = {
    same,
    changed,
    rowPatched,
    added,
    removed,
    renamed,
    metadataChanged: !sameMetadata(base.header.metadata, target.header.metadata),
    headerChanged: Buffer.compare(base.headerBytes, target.headerBytes) !== 0,
  };
  const headerTensor = "header/0";
  const targetEntry: PatchTarget = {
    name: path.basename(target.path),
    size: targetDigests.size,
    sha256: targetDigests.sha256,
    header: headerTensor,
    tensors: ops,
  };
  const plan: PatchPlan = {
    version: PATCH_VERSION,
    base: [{ name: path.basename(base.path), size: baseDigests.size, sha256: baseDigests.sha256 }],
    target: [targetEntry],
    summary,
  };
  const specs = [
    [headerTensor, { dtype: "U8", shape: [target.headerBytes.length] }] as const,
    ...stored.map((entry) => [entry.name, { dtype: entry.dtype, shape: entry.shape }] as const),
  ];
  const writer = createWriter(outPath, specs, { [PATCH_METADATA_KEY]: JSON.stringify(plan) }, options);
  try {
    writer.write(headerTensor, target.headerBytes);
    for (const entry of stored) {
      for (const [offset, length] of entry.runs) writer.copyFrom(entry.name, target.fd, offset, length);
    }
    writer.commit();
  } finally {
    writer.abort();
  }
  return { plan, bytes: writer.layout.totalLength };
}

function sameMetadata(a: ReadonlyMap<string, string> | null, b: ReadonlyMap<string, string> | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.size !== b.size) return false;
  for (const [key, value] of a) if (b.get(key) !== value) return false;
  return true;
}
