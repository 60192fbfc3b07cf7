/**
 * `applyPatch(OLD, PATCH, OUT)`: rebuild the target of a delta patch (format: patch-format.ts) from its base.
 *
 * Order of checks, so that a refusal writes nothing: the plan is read and checked; OLD's size and SHA-256 must be
 * the base's (`PatchBaseMismatch`); the target's header (from the patch) must be valid and list the plan's tensors in
 * order; every source the plan names must exist with the right size (`PatchInvalid`). Only then is OUT started,
 * through the streaming writer laid out with the target's own header bytes; every byte written passes through a
 * SHA-256, and the file is committed (renamed into place) only when that digest is the target's, else the temporary
 * file is removed (`PatchTargetMismatch`). OUT may be OLD itself: OLD is read through its open descriptor and replaced
 * only by the final rename. Node-only.
 */
import { createHash, type Hash } from "node:crypto";
import { quoteName, SafetensorError } from "../format/errors.js";
import { type Header, parseHeader, type TensorInfo } from "../format/header.js";
import type { LayoutPlan } from "../format/serialize.js";
import { preadInto } from "../io/node-file.js";
import type { AtomicWriteOptions } from "../io/node-write.js";
import { createWriterForLayout } from "../io/stream-writer.js";
import type { StoredTensor } from "./compare.js";
import { sha256OfDescriptor, sizePrefix } from "./digests.js";
import { type PatchOp, type PatchPlan, parsePatchPlan, rowBytesOf } from "./patch-format.js";
import { openStoredFile, type StoredFile } from "./stored-file.js";

export interface ApplyPatchOptions extends AtomicWriteOptions {}

export interface ApplyPatchResult {
  readonly plan: PatchPlan;
  /** The target's size and SHA-256, verified. */
  readonly size: number;
  readonly sha256: string;
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

export function applyPatch(
  oldPath: string,
  patchPath: string,
  outPath: string,
  options: ApplyPatchOptions = {},
): ApplyPatchResult {
  const patch = openStoredFile(patchPath);
  try {
    const plan = parsePatchPlan(patch.header.metadata);
    if (plan.base.length !== 1 || plan.target.length !== 1) {
      invalid(`it has ${plan.base.length} base and ${plan.target.length} target files; this version applies one`);
    }
    const base = openStoredFile(oldPath);
    try {
      checkBase(base, plan);
      rebuild(base, patch, plan, outPath, options);
      const target = plan.target[0]!;
      return { plan, size: target.size, sha256: target.sha256 };
    } finally {
      base.close();
    }
  } finally {
    patch.close();
  }
}

function checkBase(base: StoredFile, plan: PatchPlan): void {
  const want = plan.base[0]!;
  const size = base.header.fileLength;
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

/** A byte run of the target tensor: from the base file or from the patch file. */
type Run = { fd: number; offset: number; length: number };

function patchTensor(patch: StoredFile, name: string, target: string): StoredTensor {
  if (!patch.header.tensors.has(name)) invalid(`it has no tensor ${quoteName(name)}`, target);
  return patch.tensor(name);
}

function baseTensor(base: StoredFile, from: readonly [number, string], info: TensorInfo): StoredTensor {
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
function runsOf(op: PatchOp, info: TensorInfo, base: StoredFile, patch: StoredFile): Run[] {
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

function targetHeader(patch: StoredFile, plan: PatchPlan): { header: Header; bytes: Uint8Array } {
  const target = plan.target[0]!;
  const stored = patchTensor(patch, target.header, target.name);
  if (stored.dtype !== "U8" || stored.shape.length !== 1) invalid(`${quoteName(target.header)} must be U8 [N]`);
  const bytes = new Uint8Array(stored.byteLength);
  preadInto(stored.fd, bytes, stored.offset);
  let header: Header;
  try {
    header = parseHeader(bytes, target.size);
  } catch (error) {
    invalid(`the target's header does not parse (${(error as Error).message})`);
  }
  const names = [...header.tensors.keys()];
  if (names.length !== target.tensors.length || target.tensors.some((op, i) => op.name !== names[i])) {
    invalid("the plan's tensors are not the target header's, in its order");
  }
  return { header, bytes };
}

const CHUNK = 8 << 20;

function rebuild(base: StoredFile, patch: StoredFile, plan: PatchPlan, outPath: string, options: ApplyPatchOptions) {
  const target = plan.target[0]!;
  const { header, bytes } = targetHeader(patch, plan);
  const infos = [...header.tensors.values()];
  // Every source is checked before the output file exists.
  const runs = infos.map((info, i) => runsOf(target.tensors[i]!, info, base, patch));
  const prefixed = new Uint8Array(8 + bytes.length);
  prefixed.set(sizePrefix(bytes.length));
  prefixed.set(bytes, 8);
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
    const chunk = new Uint8Array(Math.min(CHUNK, Math.max(header.dataLength, 1)));
    infos.forEach((info, i) => {
      for (const run of runs[i]!) {
        for (let done = 0; done < run.length; ) {
          const piece = chunk.subarray(0, Math.min(chunk.length, run.length - done));
          preadInto(run.fd, piece, run.offset + done);
          hash.update(piece);
          writer.write(info.name, piece);
          done += piece.length;
        }
      }
    });
    const sha256 = hash.digest("hex");
    if (sha256 !== target.sha256) {
      throw new SafetensorError(
        "PatchTargetMismatch",
        `the rebuilt file's sha256 is ${sha256}, the patch promises ${target.sha256}: nothing was written`,
      );
    }
    writer.commit();
  } finally {
    writer.abort();
  }
}
