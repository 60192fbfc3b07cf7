/**
 * `applyPatch(OLD, PATCH, OUT)`: rebuild the target of a delta patch (format: patch-format.ts) from its base.
 *
 * Order of checks, so that a refusal writes nothing: the plan is read and checked; OLD's size and SHA-256 must be
 * the base's (`PatchBaseMismatch`); the target's header (from the patch) must be valid and list the plan's tensors in
 * order; every source the plan names must exist with the right size (`PatchInvalid`). Only then is OUT started,
 * through the streaming writer laid out with the target's own header bytes; every byte written passes through a
 * SHA-256, and the file is committed (renamed into place) only when that digest is the target's, else the temporary
 * file is removed (`PatchTargetMismatch`). OUT may be OLD itself: OLD is read through its open descriptor and replaced
 * only by the final rename.
 *
 * A version 2 patch (sharded checkpoints) is applied the same way, file by file: every base file the plan lists must
 * be in OLD with its size and SHA-256 (`PatchBaseMismatch`), every target file's sources are checked, then each
 * target file is written under a staging name in OUT (a directory), verified against its SHA-256 while it is written,
 * and one commit of the directory (`shards/save-commit.ts`) switches OUT to the new set: killed at any point, OUT
 * reads as before or as NEW. Node-only.
 */
import { createHash, type Hash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { quoteName, SafetensorError } from "../format/errors.js";
import { type Header, parseHeader, type TensorInfo } from "../format/header.js";
import type { LayoutPlan } from "../format/serialize.js";
import { preadInto } from "../io/node-file.js";
import { type AtomicWriteOptions, writeAllAt, writeError, writeFileAtomic } from "../io/node-write.js";
import { createWriterForLayout } from "../io/stream-writer.js";
import { realpath } from "../shards/node.js";
import { beginStagedSave } from "../shards/save-commit.js";
import type { StoredTensor } from "./compare.js";
import { sha256OfDescriptor, sizePrefix } from "./digests.js";
import { checkPatchFileName, openPatchSide } from "./patch-files.js";
import {
  type PatchFileRef,
  type PatchOp,
  type PatchPlan,
  type PatchTarget,
  parsePatchPlan,
  rowBytesOf,
  SHARDED_PATCH_VERSION,
} from "./patch-format.js";
import { openStoredFile, type StoredFile } from "./stored-file.js";

/** Options of `applyPatch` (`fsync`, `mode` of new files). */
export interface ApplyPatchOptions extends AtomicWriteOptions {}

/** What `applyPatch` wrote, verified. */
export interface ApplyPatchResult {
  readonly plan: PatchPlan;
  /** The target's size and SHA-256, verified (a sharded target: its total size and its index's SHA-256). */
  readonly size: number;
  readonly sha256: string;
  /** Every file written, verified. */
  readonly files: readonly PatchFileRef[];
}

function invalid(message: string, tensor?: string): never {
  throw new SafetensorError("PatchInvalid", `not a valid patch: ${message}`, { tensor });
}

/** Read and check a patch file's plan without applying it. */
export function readPatchPlan(patchPath: string): PatchPlan {
  const patch = openStoredFile(patchPath);
  try {
    return parsePatchPlan(patch.header.metadata);
  } finally {
    patch.close();
  }
}

/**
 * Rebuild NEW from OLD and a patch made by `createPatch`, byte for byte, into `outPath` (a file, or a directory
 * for a sharded target). OLD is checked against the patch's base first (`PatchBaseMismatch`), every source before
 * anything is written (`PatchInvalid`), and the output is renamed into place only when its SHA-256 is NEW's
 * (`PatchTargetMismatch`). `outPath` may be OLD itself.
 */
export function applyPatch(
  oldPath: string,
  patchPath: string,
  outPath: string,
  options: ApplyPatchOptions = {},
): ApplyPatchResult {
  const patch = openStoredFile(patchPath);
  try {
    const plan = parsePatchPlan(patch.header.metadata);
    if (plan.version === SHARDED_PATCH_VERSION) return applySharded(oldPath, patch, plan, outPath, options);
    const base = openStoredFile(oldPath);
    try {
      checkBase({ path: base.path, fd: base.fd, size: base.header.fileLength }, plan.base[0]!);
      const target = plan.target[0]!;
      rebuild([base], patch, target, outPath, options);
      return { plan, size: target.size, sha256: target.sha256, files: [target] };
    } finally {
      base.close();
    }
  } finally {
    patch.close();
  }
}

function checkBase(base: { path: string; fd: number; size: number }, want: PatchFileRef): void {
  const { size } = base;
  if (size !== want.size) {
    throw new SafetensorError(
      "PatchBaseMismatch",
      `${base.path} is not this patch's base: ${size} bytes, the base has ${want.size} (sha256 ${want.sha256})`,
    );
  }
  const sha256 = sha256OfDescriptor(base.fd, size, base.path);
  if (sha256 !== want.sha256) {
    throw new SafetensorError(
      "PatchBaseMismatch",
      `${base.path} is not this patch's base: its sha256 is ${sha256}, the base's ${want.sha256}`,
    );
  }
}

/** OUT of a sharded patch: a directory (or an index file in it). */
function outputDirectory(outPath: string): string {
  return outPath.endsWith(".index.json") ? path.dirname(outPath) : outPath;
}

function applySharded(
  oldPath: string,
  patch: StoredFile,
  plan: PatchPlan,
  outPath: string,
  options: ApplyPatchOptions,
): ApplyPatchResult {
  for (const file of [...plan.base, ...plan.target]) checkPatchFileName(file.name);
  if (new Set(plan.target.map((t) => t.name)).size !== plan.target.length) invalid("a target file is listed twice");
  const side = openPatchSide(oldPath);
  try {
    const byName = new Map(side.files.map((file) => [file.name, file]));
    // Every base file is checked before anything is written.
    const bases = plan.base.map((want) => {
      const file = byName.get(want.name);
      if (!file) {
        throw new SafetensorError(
          "PatchBaseMismatch",
          `${oldPath} is not this patch's base: it has no ${quoteName(want.name)}`,
        );
      }
      checkBase(file, want);
      return file;
    });
    const stores = bases.map((file) => file.stored);
    // Every target's sources are checked before the directory is touched.
    const writes = plan.target.map((target) => prepareTarget(target, stores, bases, patch, options));
    const dir = outputDirectory(outPath);
    try {
      fs.mkdirSync(dir, { recursive: true });
    } catch (error) {
      throw writeError(error, `cannot create ${dir}`);
    }
    const index = plan.target.find((t) => t.name.endsWith(".index.json")) ?? plan.target[0]!;
    const save = beginStagedSave(dir, index.name, options);
    try {
      for (const [i, target] of plan.target.entries()) save.stage(target.name, writes[i]!);
      // Updating a sharded OLD in place: its files that NEW no longer has go with the commit. (A single OLD file
      // next to OUT's files is the user's to remove.)
      const inPlace = side.sharded && realpath(dir) === realpath(side.directory);
      const kept = new Set(plan.target.map((t) => t.name));
      save.commit(inPlace ? plan.base.map((b) => b.name).filter((name) => !kept.has(name)) : []);
    } finally {
      save.abort();
    }
    const size = plan.target.reduce((n, t) => n + t.size, 0);
    return { plan, size, sha256: index.sha256, files: plan.target };
  } finally {
    side.close();
  }
}

/** Check one target file's sources and return what writes it (atomically, verified) at a given path. */
function prepareTarget(
  target: PatchTarget,
  stores: readonly (StoredFile | null)[],
  bases: readonly { fd: number; size: number }[],
  patch: StoredFile,
  options: ApplyPatchOptions,
): (out: string) => void {
  if (target.copy !== undefined) {
    const base = bases[target.copy]!;
    if (base.size !== target.size) invalid(`${quoteName(target.name)} is a copy of a base file of another size`);
    return (out) => writeVerified(out, target, [{ fd: base.fd, offset: 0, length: base.size }], options);
  }
  if (target.data !== undefined) {
    const data = patchTensor(patch, target.data, target.name);
    if (data.dtype !== "U8" || data.byteLength !== target.size) invalid(`${quoteName(target.data)} must be U8 [size]`);
    return (out) =>
      writeVerified(out, target, [{ fd: data.fd, offset: data.offset, length: data.byteLength }], options);
  }
  const prepared = prepareRebuild(stores, patch, target);
  return (out) => writeRebuilt(prepared, target, out, options);
}

function mismatch(sha256: string, target: PatchTarget): never {
  throw new SafetensorError(
    "PatchTargetMismatch",
    `the rebuilt ${quoteName(target.name)}'s sha256 is ${sha256}, the patch promises ${target.sha256}: nothing was written`,
  );
}

/** Write runs of bytes to `out` atomically, committed only when their SHA-256 is the target's. */
function writeVerified(out: string, target: PatchTarget, runs: readonly Run[], options: AtomicWriteOptions): void {
  writeFileAtomic(
    out,
    (fd) => {
      const hash = createHash("sha256");
      let at = 0;
      copyRuns(runs, (piece) => {
        hash.update(piece);
        writeAllAt(fd, piece, at);
        at += piece.length;
      });
      const sha256 = hash.digest("hex");
      if (sha256 !== target.sha256) mismatch(sha256, target);
    },
    options,
  );
}

/** A byte run of the target tensor: from the base file or from the patch file. */
type Run = { fd: number; offset: number; length: number };

function patchTensor(patch: StoredFile, name: string, target: string): StoredTensor {
  if (!patch.header.tensors.has(name)) invalid(`it has no tensor ${quoteName(name)}`, target);
  return patch.tensor(name);
}

function baseTensor(
  bases: readonly (StoredFile | null)[],
  from: readonly [number, string],
  info: TensorInfo,
): StoredTensor {
  const base = bases[from[0]];
  if (!base)
    invalid(`tensor ${quoteName(info.name)} comes from base file ${from[0]}, not a safetensors file`, info.name);
  const source = base.header.tensors.get(from[1]);
  if (!source || source.byteLength !== info.byteLength) {
    invalid(
      `tensor ${quoteName(info.name)} comes from base tensor ${quoteName(from[1])}, which the base lacks or is of another size`,
      info.name,
    );
  }
  return base.tensor(from[1]);
}

/** Where each byte of target tensor `info` comes from, in order. */
function runsOf(op: PatchOp, info: TensorInfo, base: readonly (StoredFile | null)[], patch: StoredFile): Run[] {
  const { name } = info;
  if (op.rows !== undefined) {
    const from = baseTensor(base, op.from!, info);
    const data = patchTensor(patch, op.data!, name);
    const rowBytes = rowBytesOf(info);
    const rows = info.shape[0] ?? 0;
    if (rowBytes === null || op.rows.some(([, end]) => end > rows))
      invalid(`the rows of ${quoteName(name)} do not fit it`, name);
    const count = op.rows.reduce((n, [a, b]) => n + b - a, 0);
    if (data.dtype !== info.dtype || data.byteLength !== count * rowBytes) {
      invalid(`${quoteName(op.data!)} does not hold the ${count} changed rows of ${quoteName(name)}`, name);
    }
    const runs: Run[] = [];
    let row = 0;
    let taken = 0;
    for (const [a, b] of op.rows) {
      runs.push({ fd: from.fd, offset: from.offset + row * rowBytes, length: (a - row) * rowBytes });
      runs.push({ fd: data.fd, offset: data.offset + taken, length: (b - a) * rowBytes });
      taken += (b - a) * rowBytes;
      row = b;
    }
    runs.push({ fd: from.fd, offset: from.offset + row * rowBytes, length: (rows - row) * rowBytes });
    return runs.filter((run) => run.length > 0);
  }
  if (op.from !== undefined) {
    const from = baseTensor(base, op.from, info);
    return [{ fd: from.fd, offset: from.offset, length: from.byteLength }];
  }
  if (op.data !== undefined) {
    const data = patchTensor(patch, op.data, name);
    if (data.dtype !== info.dtype || data.shape.join() !== info.shape.join()) {
      invalid(`${quoteName(op.data)} is not of the dtype and shape of ${quoteName(name)}`, name);
    }
    return [{ fd: data.fd, offset: data.offset, length: data.byteLength }];
  }
  if (info.byteLength !== 0) invalid(`tensor ${quoteName(name)} has no source`, name);
  return [];
}

function targetHeader(patch: StoredFile, target: PatchTarget): { header: Header; bytes: Uint8Array } {
  const name = target.header ?? invalid(`target ${quoteName(target.name)} has no header tensor`);
  const ops = target.tensors ?? [];
  const stored = patchTensor(patch, name, target.name);
  if (stored.dtype !== "U8" || stored.shape.length !== 1) invalid(`${quoteName(name)} must be U8 [N]`);
  const bytes = new Uint8Array(stored.byteLength);
  preadInto(stored.fd, bytes, stored.offset);
  let header: Header;
  try {
    header = parseHeader(bytes, target.size);
  } catch (error) {
    invalid(`the target's header does not parse (${(error as Error).message})`);
  }
  const names = [...header.tensors.keys()];
  if (names.length !== ops.length || ops.some((op, i) => op.name !== names[i])) {
    invalid("the plan's tensors are not the target header's, in its order");
  }
  return { header, bytes };
}

const CHUNK = 8 << 20;

/** Every byte of `runs`, in order, in pieces of at most 8 MiB (one buffer). */
function copyRuns(runs: readonly Run[], sink: (piece: Uint8Array) => void): void {
  const total = runs.reduce((n, run) => Math.max(n, run.length), 1);
  const chunk = new Uint8Array(Math.min(CHUNK, total));
  for (const run of runs) {
    for (let done = 0; done < run.length; ) {
      const piece = chunk.subarray(0, Math.min(chunk.length, run.length - done));
      preadInto(run.fd, piece, run.offset + done);
      sink(piece);
      done += piece.length;
    }
  }
}

interface PreparedRebuild {
  readonly header: Header;
  readonly prefixed: Uint8Array;
  readonly infos: readonly TensorInfo[];
  readonly runs: readonly Run[][];
}

function prepareRebuild(
  bases: readonly (StoredFile | null)[],
  patch: StoredFile,
  target: PatchTarget,
): PreparedRebuild {
  const { header, bytes } = targetHeader(patch, target);
  const infos = [...header.tensors.values()];
  // Every source is checked before the output file exists.
  const runs = infos.map((info, i) => runsOf(target.tensors![i]!, info, bases, patch));
  const prefixed = new Uint8Array(8 + bytes.length);
  prefixed.set(sizePrefix(bytes.length));
  prefixed.set(bytes, 8);
  return { header, prefixed, infos, runs };
}

function rebuild(
  bases: readonly (StoredFile | null)[],
  patch: StoredFile,
  target: PatchTarget,
  outPath: string,
  options: ApplyPatchOptions,
) {
  writeRebuilt(prepareRebuild(bases, patch, target), target, outPath, options);
}

function writeRebuilt(prepared: PreparedRebuild, target: PatchTarget, outPath: string, options: ApplyPatchOptions) {
  const { header, prefixed, infos, runs } = prepared;
  const layout: LayoutPlan = {
    header: prefixed,
    tensors: infos.map((info) => ({
      name: info.name,
      dtype: info.dtype,
      shape: info.shape,
      begin: info.dataOffsets[0],
      end: info.dataOffsets[1],
    })),
    dataLength: header.dataLength,
    totalLength: header.fileLength,
  };
  const writer = createWriterForLayout(outPath, layout, options);
  try {
    const hash: Hash = createHash("sha256");
    hash.update(prefixed);
    infos.forEach((info, i) => {
      copyRuns(runs[i]!, (piece) => {
        hash.update(piece);
        writer.write(info.name, piece);
      });
    });
    const sha256 = hash.digest("hex");
    if (sha256 !== target.sha256) mismatch(sha256, target);
    writer.commit();
  } finally {
    writer.abort();
  }
}
