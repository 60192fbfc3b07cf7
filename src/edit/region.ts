/**
 * In-place region writes: `openForEdit(path)` → `write(name, slice, values)` overwrites only the bytes of one slice of
 * one tensor, with positional writes, after saving their old bytes to the undo journal (journal.ts). `commit()`
 * makes the edits final (fsync, journal removed); `rollback()` (or `close()` before a commit) puts the old bytes
 * back. A journal left by a crash is rolled back when the file is next opened for editing. Node-only.
 *
 * The byte runs of a slice come from the slice planner (`fetchRanges`): runs closer than its `maxGap` are merged,
 * and the bytes between them are read and written back unchanged (one write per range rather than one per run;
 * they are journaled like the rest, so a crash cannot alter them either).
 */
import * as fs from "node:fs";
import { canEncode, encodedByteLength, fromFloat32 } from "../codecs/index.js";
import { SafetensorError } from "../format/errors.js";
import type { HeaderOptions, TensorInfo } from "../format/header.js";
import { ioError, preadInto } from "../io/node-file.js";
import { writeAllAt } from "../io/node-write.js";
import { openFile } from "../node-files.js";
import { type ByteRange, fetchRanges, parseSliceSpec, planSlice, type SliceIndex } from "../slice/index.js";
import { checkSliceBounds } from "./bounds.js";
import { type JournalRecord, readRegion, recoverFile, removeJournal, undoRecords, writeJournal } from "./journal.js";

export interface EditOptions extends HeaderOptions {
  /**
   * fsync the journal before overwriting anything, and the file at `commit()`/`rollback()` (default false: a process
   * crash is then still safe, a power loss may not be).
   */
  readonly fsync?: boolean;
  /** Refuse (`TooLarge`) an uncommitted set of edits whose old bytes exceed this (default 1 GiB; held in memory). */
  readonly maxJournalBytes?: number;
}

/** What `write` accepts: values in the slice's row-major order, one value for every element, or raw bytes. */
export type EditValues = readonly number[] | Float32Array | Uint8Array | { readonly fill: number };

export interface EditResult {
  readonly tensor: string;
  /** Elements written. */
  readonly elements: number;
  /** Absolute file ranges written (sorted, disjoint): the slice's runs, with small gaps between them bridged. */
  readonly ranges: readonly ByteRange[];
}

export const DEFAULT_MAX_JOURNAL_BYTES = 2 ** 30;

/** Encode `values` as the slice's bytes in `info.dtype`, refusing a count or byte length that does not fit. */
function encodeValues(info: TensorInfo, elements: number, byteLength: number, values: EditValues): Uint8Array {
  if (values instanceof Uint8Array) {
    if (values.length !== byteLength) {
      throw new SafetensorError(
        "InvalidTensor",
        `the slice of ${info.dtype} holds ${byteLength} bytes, ${values.length} raw bytes were given`,
        { tensor: info.name },
      );
    }
    return values;
  }
  if (!canEncode(info.dtype)) {
    throw new SafetensorError(
      "UnsupportedDtype",
      `cannot encode numbers as ${info.dtype}: only float dtypes take numbers; give raw bytes instead`,
      { tensor: info.name },
    );
  }
  if (!(values instanceof Float32Array) && !Array.isArray(values)) {
    return fromFloat32(info.dtype, new Float32Array(elements).fill((values as { fill: number }).fill));
  }
  const list = values as readonly number[] | Float32Array;
  if (list.length !== elements) {
    throw new SafetensorError("InvalidTensor", `the slice has ${elements} elements, ${list.length} values were given`, {
      tensor: info.name,
    });
  }
  const encoded = fromFloat32(info.dtype, list);
  // Guaranteed by planSlice (byte-aligned runs); checked so that a codec change cannot write a wrong length.
  if (encoded.length !== encodedByteLength(info.dtype, elements) || encoded.length !== byteLength) {
    throw new SafetensorError("InvalidTensor", `encoded ${encoded.length} bytes, the slice holds ${byteLength}`);
  }
  return encoded;
}

/** Index of the range holding `offset` (ranges sorted and disjoint; the last hit is tried first). */
function rangeOf(ranges: readonly ByteRange[], offset: number, hint: number): number {
  const at = ranges[hint]!;
  if (offset >= at.start && offset < at.end) return hint;
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ranges[mid]!.start <= offset) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

export class EditHandle {
  readonly path: string;
  readonly #file: ReturnType<typeof openFile>;
  readonly #fd: number;
  readonly #size: number;
  readonly #fsync: boolean;
  readonly #maxJournalBytes: number;
  #records: JournalRecord[] = [];
  #journalBytes = 0;
  #closed = false;

  /** @internal use `openForEdit`. */
  constructor(path: string, options: EditOptions) {
    this.path = path;
    this.#fsync = options.fsync ?? false;
    this.#maxJournalBytes = options.maxJournalBytes ?? DEFAULT_MAX_JOURNAL_BYTES;
    if (!(this.#maxJournalBytes >= 0)) {
      throw new SafetensorError("InvalidOption", `maxJournalBytes must be ≥ 0, got ${this.#maxJournalBytes}`);
    }
    // The header is validated before anything is opened for writing.
    this.#file = openFile(path, { ...options, backend: "pread" });
    try {
      this.#fd = fs.openSync(path, "r+");
      this.#size = fs.fstatSync(this.#fd).size;
    } catch (error) {
      this.#file.close();
      throw ioError(error, `cannot open ${path} for editing`);
    }
  }

  #live(): void {
    if (this.#closed) throw new SafetensorError("Closed", `${this.path} is closed for editing`);
  }

  /** The tensor's header entry. */
  info(name: string): TensorInfo {
    this.#live();
    return this.#file.info(name);
  }

  /** Tensor names in file-offset order. */
  keys(): string[] {
    this.#live();
    return this.#file.offsetKeys();
  }

  /** Absolute file offset and length of a tensor's bytes. */
  byteRange(name: string): { offset: number; length: number } {
    this.#live();
    return this.#file.byteRange(name);
  }

  /**
   * Overwrite `tensor[slice]` (numpy basic indexing, as a string like `"1024:1152"` or parsed) with `values` in the
   * tensor's dtype: numbers / Float32Array (rounded to nearest even for F16, BF16, F8), `{fill}`, or raw bytes of
   * exactly the slice's length. Slices reaching outside the tensor are refused (`InvalidSlice`) rather than clamped.
   */
  write(name: string, slice: string | readonly SliceIndex[], values: EditValues): EditResult {
    this.#live();
    const info = this.#file.info(name);
    const shape = info.exactShape ?? info.shape;
    const index = typeof slice === "string" ? parseSliceSpec(slice) : slice;
    checkSliceBounds(shape, index);
    const plan = planSlice(info.dtype, shape, index);
    const encoded = encodeValues(info, plan.elementCount, plan.byteLength, values);
    const base = this.#file.byteRange(name).offset;
    const ranges = fetchRanges(plan);
    let total = 0;
    for (const range of ranges) total += range.end - range.start;
    if (this.#journalBytes + total > this.#maxJournalBytes) {
      throw new SafetensorError(
        "TooLarge",
        `uncommitted edits would journal ${this.#journalBytes + total} bytes, more than maxJournalBytes ` +
          `(${this.#maxJournalBytes}): commit first or raise the limit`,
        { tensor: name },
      );
    }
    // Old bytes of every range, then the new content of each range: the old with the slice's chunks laid over it.
    const old = ranges.map((range) => readRegion(this.#fd, base + range.start, range.end - range.start));
    const next = old.map((bytes) => bytes.slice());
    const length = plan.chunkLength;
    let k = 0;
    let hint = 0;
    plan.forEachChunk((start) => {
      hint = rangeOf(ranges, start, hint);
      next[hint]!.set(encoded.subarray(k, k + length), start - ranges[hint]!.start);
      k += length;
    });
    const records = ranges.map((range, i) => ({ offset: base + range.start, bytes: old[i]! }));
    // The journal (all uncommitted edits so far) is in place before the first data byte changes.
    writeJournal(this.path, { fileSize: this.#size, records: [...this.#records, ...records] }, this.#fsync);
    this.#records.push(...records);
    this.#journalBytes += total;
    try {
      for (let i = 0; i < ranges.length; i++) writeAllAt(this.#fd, next[i]!, base + ranges[i]!.start);
    } catch (error) {
      throw ioError(error, `cannot write to ${this.path} (the journal can restore it: rollback() or recover)`);
    }
    return {
      tensor: name,
      elements: plan.elementCount,
      ranges: ranges.map((r) => ({ start: base + r.start, end: base + r.end })),
    };
  }

  /** Read `length` bytes at absolute `offset` (as the file is now). */
  read(offset: number, length: number): Uint8Array {
    this.#live();
    const bytes = new Uint8Array(length);
    preadInto(this.#fd, bytes, offset);
    return bytes;
  }

  /** Make the edits so far final: fsync the file (when asked), then remove the journal. */
  commit(): void {
    this.#live();
    if (this.#records.length === 0) return;
    try {
      if (this.#fsync) fs.fsyncSync(this.#fd);
    } catch (error) {
      throw ioError(error, `cannot fsync ${this.path}`);
    }
    removeJournal(this.path);
    this.#records = [];
    this.#journalBytes = 0;
  }

  /** Undo every edit since the last commit, byte for byte, and remove the journal. */
  rollback(): void {
    this.#live();
    if (this.#records.length === 0) return;
    try {
      undoRecords(this.#fd, this.#records);
      if (this.#fsync) fs.fsyncSync(this.#fd);
    } catch (error) {
      throw ioError(error, `cannot roll back ${this.path} (the journal is kept: run recover)`);
    }
    removeJournal(this.path);
    this.#records = [];
    this.#journalBytes = 0;
  }

  /** Close; uncommitted edits are rolled back. */
  close(): void {
    if (this.#closed) return;
    try {
      this.rollback();
    } finally {
      this.#closed = true;
      fs.closeSync(this.#fd);
      this.#file.close();
    }
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * Open a safetensors file for in-place edits. A journal left by an interrupted edit is rolled back first (or
 * refused with `JournalCorrupt` when it does not check out: nothing is then touched); the header is validated.
 */
export function openForEdit(path: string, options: EditOptions = {}): EditHandle {
  recoverFile(path, { fsync: options.fsync ?? false });
  return new EditHandle(path, options);
}
