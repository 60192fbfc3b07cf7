/**
 * Masks applied in place (Deletion Tuning's W ⊙ 1[G > 0]): `applyMask(target, maskFile)` zeroes, in every weight the
 * mask file names, the elements its mask does not keep. Node-only.
 *
 * Every mask is matched to its weight first (same name; layout below); anything that does not fit is refused
 * (`InvalidMask`, `UnsupportedDtype`) before a byte is written. Then each weight is streamed in chunks (`chunkBytes`,
 * 8 MiB): a chunk that changes has its old bytes appended to the undo journal before its new bytes are written, and
 * the whole mask is one transaction (journal per shard, committed together, as `openForEdit` does), so a crash leaves
 * the old checkpoint or the new one after recovery. Chunks the mask leaves unchanged are neither journaled nor written.
 *
 * Mask layouts for a weight of shape S with n elements (a U8 mask of shape S is element-wise, never packed):
 * - element-wise: any dtype but C64, shape S; kept where G > 0 (BOOL / unsigned: nonzero);
 * - packed: U8 of shape [ceil(n / 8)], numpy's `np.packbits(keep, axis=None)` of the flattened (row-major) weight;
 * - packed rows: U8 of shape S[:-1] + [ceil(S[-1] / 8)], `np.packbits(keep, axis=-1)` (each row padded to a byte);
 *   when S[-1] is a multiple of 8 this is the same bytes as packed.
 * Bit order: numpy's default "big" (element 0 in the most significant bit), or "little" (`bitorder="little"`).
 */
import * as fs from "node:fs";
import type { Dtype } from "../format/dtypes.js";
import { dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { openForReading, preadInto } from "../io/node-file.js";
import { openFile } from "../read/node-files.js";
import { type BitOrder, checkMaskable, keepOf, keepOfPacked, type MaskMode, maskElements } from "./mask-kernel.js";
import { openForEdit } from "./open.js";
import type { EditHandle, EditOptions } from "./region.js";
import { ShardedEditHandle } from "./sharded-edit.js";

export type { BitOrder, MaskMode };

/** Options of `applyMask`: the edit options (fsync, journal limit) plus how masks are read and applied. */
export interface ApplyMaskOptions extends EditOptions {
  /** Bit order of packed masks (default "big", numpy's default). */
  readonly bitOrder?: BitOrder;
  /** "multiply" (default): numpy's `w * (g > 0)`, signed zeros; "zero": `np.where(g > 0, w, 0)`, +0 (mask-kernel.ts). */
  readonly mode?: MaskMode;
  /** Weight bytes per chunk (default 8 MiB). */
  readonly chunkBytes?: number;
}

/**
 * How a mask was read: one value per weight element, bits packed over the flattened weight (`np.packbits(keep,
 * axis=None)`), or bits packed per row (`np.packbits(keep, axis=-1)`).
 */
export type MaskLayout = "elementwise" | "packed" | "packed-rows";

/** One weight a mask was applied to. */
export interface MaskedTensor {
  readonly tensor: string;
  /** The file holding the weight (a shard's path for a sharded checkpoint). */
  readonly file: string;
  readonly maskDtype: Dtype;
  readonly layout: MaskLayout;
  readonly elements: number;
  /** Elements the mask does not keep (set to zero; counted also when they were zero already). */
  readonly zeroed: number;
}

/** What `applyMask` did. */
export interface ApplyMaskResult {
  /** In the mask file's order. */
  readonly tensors: readonly MaskedTensor[];
  /** Bytes of the chunks that changed (journaled and rewritten). */
  readonly bytesWritten: number;
}

const DEFAULT_CHUNK_BYTES = 8 << 20;
/** Masks journal up to every byte of the weights they cover, on disk: the default limit is the disk's (checked). */
const DEFAULT_MASK_JOURNAL_BYTES = Number.MAX_SAFE_INTEGER;

interface Plan {
  readonly name: string;
  readonly weight: TensorInfo;
  readonly mask: TensorInfo;
  readonly layout: MaskLayout;
  readonly elements: number;
  /** Elements per row (packed rows), else 1. */
  readonly rowLength: number;
}

const shapeText = (shape: readonly (number | bigint)[]) => `[${shape.join(", ")}]`;

function invalid(name: string, why: string): never {
  throw new SafetensorError("InvalidMask", `mask ${JSON.stringify(name)}: ${why}`, { tensor: name });
}

function planOne(name: string, weight: TensorInfo, mask: TensorInfo): Plan {
  checkMaskable(weight.dtype, name);
  const shape = weight.shape.map(Number);
  const maskShape = mask.shape.map(Number);
  const elements = shape.reduce((a, b) => a * b, 1);
  const same = shape.length === maskShape.length && shape.every((d, i) => d === maskShape[i]);
  if (mask.dtype === "C64") invalid(name, "a C64 mask has no order (G > 0)");
  if (same) return { name, weight, mask, layout: "elementwise", elements, rowLength: 1 };
  const expected = [
    `${mask.dtype === "U8" ? "" : "U8 packed bits or "}an element-wise mask of shape ${shapeText(shape)}`,
  ];
  if (mask.dtype === "U8") {
    const packed = Math.ceil(elements / 8);
    if (maskShape.length === 1 && maskShape[0] === packed) {
      return { name, weight, mask, layout: "packed", elements, rowLength: 1 };
    }
    const last = shape[shape.length - 1];
    if (shape.length >= 2 && last !== undefined) {
      const rows = [...shape.slice(0, -1), Math.ceil(last / 8)];
      if (rows.length === maskShape.length && rows.every((d, i) => d === maskShape[i])) {
        return { name, weight, mask, layout: "packed-rows", elements, rowLength: last };
      }
      expected.push(`packed rows ${shapeText(rows)}`);
    }
    expected.push(`packed ${shapeText([packed])}`);
  }
  invalid(
    name,
    `a ${mask.dtype} mask of shape ${shapeText(maskShape)} does not fit the ${weight.dtype} weight of shape ` +
      `${shapeText(shape)} (expected ${expected.join(", or ")})`,
  );
}

function readAt(fd: number, offset: number, length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  preadInto(fd, bytes, offset);
  return bytes;
}

/**
 * Apply every mask of `maskPath` (a .safetensors file) to the weights of the same names in `target` (a file, or a
 * sharded checkpoint's directory or index), in place and crash-safe (see the module comment).
 */
export function applyMask(target: string, maskPath: string, options: ApplyMaskOptions = {}): ApplyMaskResult {
  const bitOrder = options.bitOrder ?? "big";
  const mode = options.mode ?? "multiply";
  const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  if (bitOrder !== "big" && bitOrder !== "little") {
    throw new SafetensorError("InvalidOption", `bitOrder must be "big" or "little", got ${String(bitOrder)}`);
  }
  if (mode !== "multiply" && mode !== "zero") {
    throw new SafetensorError("InvalidOption", `mode must be "multiply" or "zero", got ${String(mode)}`);
  }
  if (!Number.isSafeInteger(chunkBytes) || chunkBytes < 64) {
    throw new SafetensorError("InvalidOption", `chunkBytes must be an integer ≥ 64, got ${chunkBytes}`);
  }
  using masks = openFile(maskPath, { ...options, backend: "pread" });
  using editor = openForEdit(target, {
    ...options,
    maxJournalBytes: options.maxJournalBytes ?? DEFAULT_MASK_JOURNAL_BYTES,
  });
  // Every mask is checked against its weight before anything is written.
  const plans = masks.offsetKeys().map((name) => {
    let weight: TensorInfo;
    try {
      weight = editor.info(name);
    } catch (error) {
      if (error instanceof SafetensorError && error.code === "TensorNotFound") {
        invalid(name, `${target} has no tensor of that name`);
      }
      throw error;
    }
    return planOne(name, weight, masks.info(name));
  });
  checkDiskSpace(editor, plans);
  const maskFd = openForReading(maskPath);
  const results: MaskedTensor[] = [];
  let bytesWritten = 0;
  try {
    for (const plan of plans) {
      const handle = editor instanceof ShardedEditHandle ? editor.handleOf(plan.name) : (editor as EditHandle);
      const done = applyOne(handle, plan, maskFd, masks.byteRange(plan.name).offset, { bitOrder, mode, chunkBytes });
      bytesWritten += done.bytes;
      results.push({
        tensor: plan.name,
        file: editor.fileOf(plan.name),
        maskDtype: plan.mask.dtype,
        layout: plan.layout,
        elements: plan.elements,
        zeroed: done.zeroed,
      });
    }
    editor.commit();
  } finally {
    fs.closeSync(maskFd);
  }
  return { tensors: results, bytesWritten };
}

/** `DiskFull` before anything is written when the journal could outgrow the free space next to a weight's file. */
function checkDiskSpace(editor: ReturnType<typeof openForEdit>, plans: readonly Plan[]): void {
  const need = new Map<string, number>();
  for (const plan of plans) {
    const file = editor.fileOf(plan.name);
    need.set(file, (need.get(file) ?? 0) + plan.weight.byteLength);
  }
  let total = 0;
  let directory = "";
  for (const [file, bytes] of need) {
    total += bytes;
    directory = file.slice(0, Math.max(file.lastIndexOf("/"), 0)) || ".";
  }
  if (total === 0) return;
  let free: number;
  try {
    const stat = fs.statfsSync(directory);
    free = stat.bavail * stat.bsize;
  } catch {
    return; // no statfs: the journal's own writes report a full disk (DiskFull)
  }
  if (free < total) {
    throw new SafetensorError(
      "DiskFull",
      `the undo journal may need up to ${total} bytes (the masked weights' size) and ${directory} has ${free} free`,
    );
  }
}

function applyOne(
  handle: EditHandle,
  plan: Plan,
  maskFd: number,
  maskBase: number,
  options: { bitOrder: BitOrder; mode: MaskMode; chunkBytes: number },
): { zeroed: number; bytes: number } {
  const width = dtypeOf(plan.weight.dtype).bits / 8;
  const maskBits = dtypeOf(plan.mask.dtype).bits;
  const base = handle.byteRange(plan.name).offset;
  // Elements per chunk: a multiple of 8 (whole packed bytes, whole F4/F6 mask groups), or of whole rows.
  let per = Math.max(8, Math.floor(options.chunkBytes / width / 8) * 8);
  if (plan.layout === "packed-rows")
    per = Math.max(1, Math.floor(options.chunkBytes / width / plan.rowLength)) * plan.rowLength;
  const rowBytes = Math.ceil(plan.rowLength / 8);
  let zeroed = 0;
  let bytes = 0;
  for (let first = 0; first < plan.elements; first += per) {
    const count = Math.min(per, plan.elements - first);
    let keep: Uint8Array;
    if (plan.layout === "elementwise") {
      const start = (first * maskBits) / 8;
      const length = Math.ceil((count * maskBits) / 8);
      keep = keepOf(plan.mask.dtype, readAt(maskFd, maskBase + start, length), count);
    } else if (plan.layout === "packed") {
      const packed = readAt(maskFd, maskBase + first / 8, Math.ceil(count / 8));
      keep = keepOfPacked(packed, 0, count, options.bitOrder);
    } else {
      const rows = count / plan.rowLength;
      const packed = readAt(maskFd, maskBase + (first / plan.rowLength) * rowBytes, rows * rowBytes);
      keep = new Uint8Array(count);
      for (let r = 0; r < rows; r++) {
        keep.set(keepOfPacked(packed, r * rowBytes * 8, plan.rowLength, options.bitOrder), r * plan.rowLength);
      }
    }
    const old = handle.read(base + first * width, count * width);
    const next = old.slice();
    const masked = maskElements(plan.weight.dtype, next, keep, options.mode);
    zeroed += masked;
    // A chunk can change with nothing masked (a kept NaN numpy's product rewrites) or stay as it was.
    if (Buffer.compare(old, next) === 0) continue;
    handle.replaceBytes(base + first * width, old, next);
    bytes += next.length;
  }
  return { zeroed, bytes };
}
