/**
 * The delta patch format. A patch is itself a valid safetensors file:
 *
 * - `__metadata__["safetensors_patch"]`: the plan, JSON (below).
 * - `header/0`: U8 [N], the target file's N header bytes exactly as stored (padding and key order included); its
 *   8-byte size prefix is N itself.
 * - `data/0/NAME`: the whole bytes of target tensor NAME (same dtype and shape as in the target).
 * - `rows/0/NAME`: the changed rows of target tensor NAME, concatenated in order (dtype of the target tensor, shape
 *   [changed rows, ...the target's dims after the first]).
 *
 * The plan: `{"version":1, "base":[{name,size,sha256}], "target":[{name,size,sha256,header,tensors:[OP...]}],
 * "summary":{...}}`, one OP per target tensor in the target's file order:
 *
 * - `{"name":N,"from":[0,OLD]}`: the bytes of base tensor OLD (the same name when unchanged, another when renamed).
 * - `{"name":N,"data":"data/0/N"}`: the patch tensor's bytes.
 * - `{"name":N,"from":[0,OLD],"rows":[[a,b],...],"data":"rows/0/N"}`: base tensor OLD's bytes with rows [a, b) along
 *   dim 0 replaced, in order, by the patch tensor's rows.
 * - `{"name":N}`: an empty tensor (no bytes).
 *
 * Tensors tile the data region in offset order, so the target is its size prefix, its header and its tensors' bytes
 * one after the other: nothing else is needed to rebuild it byte for byte. `summary` (added, removed, renamed,
 * changed tensors, metadata changed) is for people; applying ignores it. Indices (`0`) name the base and target
 * files.
 *
 * Version 2 patches sharded checkpoints (a directory or an index on either side): `base` lists every file of OLD
 * (shards and index), all checked before anything is written; `target` every file of NEW, each one of
 *
 * - `{name,size,sha256,header:"header/T",tensors:[OP...]}`: a safetensors file rebuilt as above, OPs' `from` naming
 *   any base file (`[J, OLD]`: a tensor that moved between shards comes from its old shard), data in `data/T/NAME`
 *   and `rows/T/NAME`;
 * - `{name,size,sha256,copy:J}`: a byte copy of base file J (a shard that did not change);
 * - `{name,size,sha256,data:"file/T"}`: the bytes of patch tensor `file/T` (U8 [size]; the index).
 *
 * File names are plain names in the checkpoint's directory.
 */
import { dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { HEX64, isCount, isRecord } from "./json-checks.js";

export const PATCH_METADATA_KEY = "safetensors_patch";
export const PATCH_VERSION = 1;
/** Patches between sharded checkpoints (several base and target files, whole-file copies, raw files). */
export const SHARDED_PATCH_VERSION = 2;

/** A file a patch names, with the size and SHA-256 it must have. */
export interface PatchFileRef {
  readonly name: string;
  readonly size: number;
  readonly sha256: string;
}

/**
 * How one target tensor is rebuilt: from a base tensor, from the patch's bytes, or a base tensor with rows replaced.
 */
export interface PatchOp {
  readonly name: string;
  readonly from?: readonly [number, string];
  readonly rows?: readonly (readonly [number, number])[];
  readonly data?: string;
}

/** A target file of a patch: rebuilt from its ops, a copy of a base file, or stored whole. */
export interface PatchTarget extends PatchFileRef {
  /** The patch tensor holding the target's header bytes (a safetensors target). */
  readonly header?: string;
  readonly tensors?: readonly PatchOp[];
  /** Version 2: the target is a byte copy of this base file... */
  readonly copy?: number;
  /** ...or the bytes of this patch tensor (U8 [size]). */
  readonly data?: string;
}

/** What a patch changes, by tensor name. */
export interface PatchSummary {
  /** Tensors whose bytes are taken from the base tensor of the same name. */
  readonly same: number;
  /** Target tensors stored whole in the patch, and those stored as changed rows. */
  readonly changed: readonly string[];
  readonly rowPatched: readonly string[];
  readonly added: readonly string[];
  readonly removed: readonly string[];
  /** [base name, target name] of tensors whose bytes moved to a new name. */
  readonly renamed: readonly (readonly [string, string])[];
  readonly metadataChanged: boolean;
  readonly headerChanged: boolean;
}

/** A patch's plan (its `__metadata__["safetensors_patch"]`): the base files, the target files and a summary. */
export interface PatchPlan {
  readonly version: number;
  readonly base: readonly PatchFileRef[];
  readonly target: readonly PatchTarget[];
  readonly summary: PatchSummary;
}

function invalid(message: string): never {
  throw new SafetensorError("PatchInvalid", `not a valid patch: ${message}`);
}

function fileRef(value: unknown, what: string): PatchFileRef {
  if (!isRecord(value)) invalid(`${what} must be an object`);
  const { name, size, sha256 } = value;
  if (typeof name !== "string") invalid(`${what}.name must be a string`);
  if (!isCount(size)) invalid(`${what}.size must be a byte count`);
  if (typeof sha256 !== "string" || !HEX64.test(sha256)) invalid(`${what}.sha256 must be 64 lowercase hex digits`);
  return { name, size, sha256 };
}

function op(value: unknown, what: string, baseFiles: number): PatchOp {
  if (!isRecord(value) || typeof value.name !== "string") invalid(`${what} must be an object with a name`);
  const result: { name: string; from?: [number, string]; rows?: [number, number][]; data?: string } = {
    name: value.name,
  };
  if (value.from !== undefined) {
    const from = value.from;
    if (!Array.isArray(from) || from.length !== 2 || !isCount(from[0]) || typeof from[1] !== "string") {
      invalid(`${what}.from must be [file index, tensor name]`);
    }
    if (from[0] >= baseFiles) invalid(`${what}.from names base file ${from[0]}, which the patch does not list`);
    result.from = [from[0], from[1]];
  }
  if (value.data !== undefined) {
    if (typeof value.data !== "string") invalid(`${what}.data must be a tensor name`);
    result.data = value.data;
  }
  if (value.rows !== undefined) {
    if (!Array.isArray(value.rows) || result.from === undefined || result.data === undefined) {
      invalid(`${what}.rows must be a list, with from and data`);
    }
    let end = -1;
    result.rows = value.rows.map((pair: unknown) => {
      if (!Array.isArray(pair) || pair.length !== 2 || !isCount(pair[0]) || !isCount(pair[1]) || pair[0] >= pair[1]) {
        invalid(`${what}.rows must hold [start, end) pairs`);
      }
      if (pair[0] <= end) invalid(`${what}.rows must be sorted and apart`);
      end = pair[1];
      return [pair[0], pair[1]] as [number, number];
    });
  } else if (result.from !== undefined && result.data !== undefined) {
    invalid(`${what} has both from and data but no rows`);
  }
  return result;
}

/** Read and check a patch's plan (its metadata entry). */
export function parsePatchPlan(metadata: ReadonlyMap<string, string> | null): PatchPlan {
  const text = metadata?.get(PATCH_METADATA_KEY);
  if (text === undefined) invalid(`no "${PATCH_METADATA_KEY}" metadata entry`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    invalid(`the plan is not JSON (${(error as Error).message})`);
  }
  if (!isRecord(value)) invalid("the plan must be an object");
  if (value.version !== PATCH_VERSION && value.version !== SHARDED_PATCH_VERSION)
    invalid(`version ${String(value.version)} is not supported (${PATCH_VERSION} and ${SHARDED_PATCH_VERSION} are)`);
  const version = value.version;
  if (!Array.isArray(value.base) || !Array.isArray(value.target)) invalid("base and target must be lists");
  const base = value.base.map((entry, i) => fileRef(entry, `base[${i}]`));
  const target = value.target.map((entry, i): PatchTarget => {
    const ref = fileRef(entry, `target[${i}]`);
    if (version === SHARDED_PATCH_VERSION && isRecord(entry) && entry.copy !== undefined) {
      if (!isCount(entry.copy) || entry.copy >= base.length) invalid(`target[${i}].copy must name a base file`);
      return { ...ref, copy: entry.copy };
    }
    if (version === SHARDED_PATCH_VERSION && isRecord(entry) && entry.data !== undefined) {
      if (typeof entry.data !== "string") invalid(`target[${i}].data must be a tensor name`);
      return { ...ref, data: entry.data };
    }
    if (!isRecord(entry) || typeof entry.header !== "string" || !Array.isArray(entry.tensors)) {
      invalid(`target[${i}] needs a header tensor name and a tensors list`);
    }
    const tensors = entry.tensors.map((item, k) => op(item, `target[${i}].tensors[${k}]`, base.length));
    return { ...ref, header: entry.header, tensors };
  });
  if (version === PATCH_VERSION && (base.length !== 1 || target.length !== 1)) {
    invalid(`a version ${PATCH_VERSION} patch has one base and one target file`);
  }
  return { version, base, target, summary: (value.summary ?? {}) as PatchSummary };
}

/** Bytes of one row along dim 0, or null when rows are not whole bytes (or the tensor is a scalar). */
export function rowBytesOf(info: Pick<TensorInfo, "dtype" | "shape">): number | null {
  if (info.shape.length === 0) return null;
  const bits = info.shape.slice(1).reduce((n, d) => n * d, dtypeOf(info.dtype).bits);
  return bits % 8 === 0 ? bits / 8 : null;
}
