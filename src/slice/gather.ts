/**
 * Gathering: copy a plan's chunks, in output order, from fetched tensor bytes into one contiguous output.
 */
import { SafetensorError } from "../format/errors.js";
import { forEachRow, type SlicePlan } from "./plan.js";

/** Bytes of the tensor held in memory: `bytes[i]` is tensor byte `offset + i`. */
export interface FetchedPiece {
  readonly offset: number;
  readonly bytes: Uint8Array;
}

/** Chunks of more than this many words are copied with `TypedArray.set` (memcpy); shorter ones word by word. */
const MAX_LOOP_WORDS = 32;

function output(plan: SlicePlan, out: Uint8Array | undefined): Uint8Array {
  if (out === undefined) return new Uint8Array(plan.byteLength);
  if (out.length < plan.byteLength) {
    throw new SafetensorError(
      "TooLarge",
      `the slice is ${plan.byteLength} bytes but the output buffer holds only ${out.length}`,
    );
  }
  return out.length === plan.byteLength ? out : out.subarray(0, plan.byteLength);
}

function missing(plan: SlicePlan, what: string): never {
  throw new SafetensorError(
    "IoError",
    `gather: ${what}, but the slice reads tensor bytes [${plan.spanStart}, ${plan.spanEnd})`,
  );
}

type Words = Uint8Array | Uint16Array | Uint32Array;

function view(bytes: Uint8Array, width: number): Words {
  if (width === 1) return bytes;
  if (width === 2) return new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length >>> 1);
  return new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >>> 2);
}

/** Copy every chunk into `dst`; tensor byte `x` is `src[x + shift]`. */
function copyChunks(plan: SlicePlan, src: Uint8Array, shift: number, dst: Uint8Array): void {
  const length = plan.chunkLength;
  const m = plan.counts.length;
  const innerCount = m === 0 ? 1 : plan.counts[m - 1]!;
  const innerStride = m === 0 ? 0 : plan.strides[m - 1]!;
  // Word-wise copy with the widest word that every offset, stride and length is a multiple of.
  let width = 4;
  const aligned = (w: number): boolean =>
    length % w === 0 &&
    (plan.offset + shift) % w === 0 &&
    src.byteOffset % w === 0 &&
    dst.byteOffset % w === 0 &&
    plan.strides.every((s) => s % w === 0);
  while (width > 1 && !aligned(width)) width >>= 1;
  if (length > MAX_LOOP_WORDS * width) {
    let o = 0;
    forEachRow(plan, (rowStart) => {
      let p = rowStart + shift;
      for (let i = 0; i < innerCount; i++, p += innerStride, o += length) dst.set(src.subarray(p, p + length), o);
    });
    return;
  }
  const s = view(src, width);
  const d = view(dst, width);
  const words = length / width;
  const step = innerStride / width;
  let o = 0;
  if (words === 1) {
    forEachRow(plan, (rowStart) => {
      let p = (rowStart + shift) / width;
      for (let i = 0; i < innerCount; i++, p += step) d[o++] = s[p]!;
    });
  } else {
    forEachRow(plan, (rowStart) => {
      let p = (rowStart + shift) / width;
      for (let i = 0; i < innerCount; i++, p += step) {
        for (let j = 0; j < words; j++) d[o++] = s[p + j]!;
      }
    });
  }
}

/**
 * Copy the slice described by `plan` out of `fetched`, which holds tensor bytes `[fetchedOffset, fetchedOffset +
 * fetched.length)` (the whole tensor with `fetchedOffset` 0, or at least `plan.span()`; bytes between the ranges of
 * `fetchRanges` are never read, so a span-sized buffer with only those ranges filled is enough).
 *
 * Returns the output bytes (row-major, `plan.shape`): written into `out` (a view of its first `plan.byteLength`
 * bytes) when given, else into a new buffer, except that a contiguous plan (`plan.isContiguous`) without `out`
 * returns a `subarray` of `fetched` (no copy: it shares memory with `fetched`). Throws `SafetensorError` "IoError"
 * when `fetched` does not cover the span, "TooLarge" when `out` is too small.
 */
export function gather(plan: SlicePlan, fetched: Uint8Array, fetchedOffset = 0, out?: Uint8Array): Uint8Array {
  if (plan.chunkCount === 0) return out === undefined ? new Uint8Array(0) : out.subarray(0, 0);
  if (plan.spanStart < fetchedOffset || plan.spanEnd > fetchedOffset + fetched.length) {
    missing(plan, `the buffer holds tensor bytes [${fetchedOffset}, ${fetchedOffset + fetched.length})`);
  }
  if (plan.chunkCount === 1) {
    const start = plan.offset - fetchedOffset;
    const bytes = fetched.subarray(start, start + plan.byteLength);
    if (out === undefined) return bytes;
    const target = output(plan, out);
    target.set(bytes);
    return target;
  }
  const target = output(plan, out);
  copyChunks(plan, fetched, -fetchedOffset, target);
  return target;
}

/**
 * Like `gather`, from separately fetched pieces (e.g. one per `fetchRanges` range, in any order). Every byte the
 * plan reads must be in some piece ("IoError" otherwise). Always copies.
 */
export function gatherPieces(plan: SlicePlan, pieces: readonly FetchedPiece[], out?: Uint8Array): Uint8Array {
  if (plan.chunkCount === 0) return out === undefined ? new Uint8Array(0) : out.subarray(0, 0);
  const only = pieces.length === 1 ? pieces[0]! : undefined;
  if (only !== undefined && only.offset <= plan.spanStart && plan.spanEnd <= only.offset + only.bytes.length) {
    return gather(plan, only.bytes, only.offset, output(plan, out));
  }
  const sorted = pieces.slice().sort((a, b) => a.offset - b.offset);
  const target = output(plan, out);
  const length = plan.chunkLength;
  let current = 0;
  let o = 0;
  const find = (at: number): number => {
    // The last piece starting at or before `at`, or -1.
    let lo = 0;
    let hi = sorted.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid]!.offset <= at) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
  const contains = (index: number, at: number): boolean => {
    const piece = sorted[index];
    return piece !== undefined && piece.offset <= at && at < piece.offset + piece.bytes.length;
  };
  plan.forEachChunk((start) => {
    let at = start;
    const end = start + length;
    while (at < end) {
      if (!contains(current, at)) {
        current = find(at);
        // Pieces may overlap: fall back to any piece containing `at`.
        if (!contains(current, at)) current = sorted.findIndex((_, i) => contains(i, at));
        if (current < 0) missing(plan, `no fetched piece holds tensor byte ${at}`);
      }
      const piece = sorted[current]!;
      const from = at - piece.offset;
      const take = Math.min(end - at, piece.bytes.length - from);
      if (take === 1) target[o] = piece.bytes[from]!;
      else target.set(piece.bytes.subarray(from, from + take), o);
      o += take;
      at += take;
    }
  });
  return target;
}
