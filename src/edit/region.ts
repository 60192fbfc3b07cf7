/**
 * In-place region writes: `openForEdit(path)` (open.ts) → `write(name, slice, values)` overwrites only the bytes of one
 * slice of one tensor, with positional writes, after saving their old bytes to the undo journal (journal.ts).
 * `commit()` makes the edits final (fsync, journal removed); `rollback()` (or `close()` before a commit) puts the old
 * bytes back. A journal left by a crash is rolled back when the file is next opened for editing. Node-only.
 *
 * The byte runs of a slice come from the slice planner (`fetchRanges`): runs closer than its `maxGap` are merged,
 * and the bytes between them are read and written back unchanged (one write per range rather than one per run;
 * they are journaled like the rest, so a crash cannot alter them either).
 */
import * as fs from "node:fs";
import { canEncode, encodedByteLength } from "../codecs/index.js";
import { encodeLikeNumpy } from "../codecs/numpy.js";
import { SafetensorError } from "../format/errors.js";
import type { HeaderOptions, TensorInfo } from "../format/header.js";
import { ioError, type OpenedFile, openWithHead, PreadSource, preadInto } from "../io/node-file.js";
import { writeAllAt, writeBuffersAt } from "../io/node-write.js";
import { SafetensorsFile } from "../read/file.js";
import type { ByteRange, SliceIndex } from "../slice/index.js";
import { editFastNative, editNative } from "./edit-native.js";
import { encodeScalarGroup, fillBlock, filledBytes, isZeroBits } from "./fill.js";
import {
  dataWriteError,
  JournalWriter,
  type RangeData,
  readRegion,
  removeJournal,
  rollbackFromJournal,
} from "./journal.js";
import { checkSpan, type Overlay, type SpanDigests, spanDigest, spanDigests } from "./proof.js";
import { planWrite, type WritePlan } from "./write-plan.js";

/** Options of `openForEdit`. */
export interface EditOptions extends HeaderOptions {
  /**
   * fsync the journal before overwriting anything, and the file at `commit()`/`rollback()` (default false: a process
   * crash is then still safe, a power loss may not be).
   */
  readonly fsync?: boolean;
  /**
   * Refuse (`TooLarge`) an uncommitted set of edits whose old bytes exceed this (default 1 GiB: the journal's size
   * on disk; one write also holds its slice's old and new bytes in memory).
   */
  readonly maxJournalBytes?: number;
}

/**
 * How much a write proves about what it changed (`write(..., {verify})`):
 * - "none" (default): nothing beyond the write itself (what `np.memmap` gives);
 * - "tensor": SHA-256 of the edited tensor before and after, and a check that the tensor after the write is the
 *   tensor before with only the written ranges replaced (so its bytes outside the slice are unchanged). Costs two
 *   reads and three hashes of the tensor;
 * - "full": also the same check over the whole file (header and every other tensor): three hashes of the file.
 *
 * Bytes outside the written ranges are never written by the edit in any case (positional writes of those ranges
 * only); "tensor" and "full" check it after the fact, against anything else that might write the file meanwhile.
 */
export type VerifyLevel = "none" | "tensor" | "full";

/** Options of one `write`: how much it proves (see `VerifyLevel`). */
export interface WriteOptions {
  readonly verify?: VerifyLevel;
}

/** What a verified write checked (see `VerifyLevel`); every check passed, or the write threw `VerificationFailed`. */
export interface LocalityProof {
  readonly level: "tensor" | "full";
  readonly tensorSha256Before: string;
  readonly tensorSha256After: string;
  /** "full" only: SHA-256 of the whole file before and after (equal to the old file with only the ranges replaced). */
  readonly fileSha256Before?: string;
  readonly fileSha256After?: string;
}

/** What `write` accepts: values in the slice's row-major order, one value for every element, or raw bytes. */
export type EditValues =
  | readonly number[]
  | Float32Array
  | Float64Array
  | Uint8Array
  | { readonly fill: number | bigint };

/** What one `write` changed: where, how many elements and bytes, and the proof when it was verified. */
export interface EditResult {
  /** The file written (a shard's path for a sharded checkpoint). */
  readonly file: string;
  readonly tensor: string;
  /** Elements written. */
  readonly elements: number;
  /** Absolute file ranges written (sorted, disjoint): the slice's runs, with small gaps between them bridged. */
  readonly ranges: readonly ByteRange[];
  /** Bytes of the slice itself (the ranges may also cover small gaps, rewritten unchanged). */
  readonly bytes: number;
  /** Present when the write was verified. */
  readonly proof?: LocalityProof;
}

/** Default of `EditOptions.maxJournalBytes`: 1 GiB of old bytes per uncommitted transaction. */
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
  if (isFillOf(values)) {
    return filledBytes(info.dtype, (values as { fill: number }).fill, byteLength, info.name);
  }
  if (!canEncode(info.dtype)) {
    throw new SafetensorError(
      "UnsupportedDtype",
      `cannot encode numbers as ${info.dtype}: only float dtypes take numbers; give raw bytes (or a fill) instead`,
      { tensor: info.name },
    );
  }
  const list = values as readonly number[] | Float32Array | Float64Array;
  if (list.length !== elements) {
    throw new SafetensorError("InvalidTensor", `the slice has ${elements} elements, ${list.length} values were given`, {
      tensor: info.name,
    });
  }
  const encoded = encodeLikeNumpy(info.dtype, list);
  // Guaranteed by planSlice (byte-aligned runs); checked so that a codec change cannot write a wrong length.
  if (encoded.length !== encodedByteLength(info.dtype, elements) || encoded.length !== byteLength) {
    throw new SafetensorError("InvalidTensor", `encoded ${encoded.length} bytes, the slice holds ${byteLength}`);
  }
  return encoded;
}

/** A write of no bytes (an empty slice): a fill value is still checked, as numpy checks it (`w[5:5] = 300` of U8). */
function emptyWrite(info: TensorInfo, values: EditValues, result: EditResult): EditResult {
  if (isFillOf(values)) encodeScalarGroup(info.dtype, values.fill, info.name);
  return result;
}

/** Whether `values` is a `{fill}` (anything but numbers, a Float32Array / Float64Array or raw bytes). */
function isFillOf(values: EditValues): values is { readonly fill: number | bigint } {
  return !(
    values instanceof Uint8Array ||
    values instanceof Float32Array ||
    values instanceof Float64Array ||
    Array.isArray(values)
  );
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

/** `path` opened read-write: with the addon, refused unless it is still the file `opened` (whose header was read). */
function openWritable(path: string, opened: OpenedFile): number {
  const native = editFastNative();
  return native ? native.openWritable(path, opened.dev, opened.ino) : fs.openSync(path, "r+");
}

export class EditHandle implements Editor {
  readonly path: string;
  readonly #file: SafetensorsFile;
  readonly #fd: number;
  readonly #size: number;
  readonly #fsync: boolean;
  readonly #maxJournalBytes: number;
  readonly #group: string;
  #journal: JournalWriter | null = null;
  #journalBytes = 0;
  #closed = false;

  /**
   * @internal use `openForEdit`. `group` ties the journals of one multi-shard edit together (sharded-edit.ts);
   * `opened`: the file as `openWithHead` opened it (taken over), else opened here.
   */
  constructor(path: string, options: EditOptions, group = "", opened?: OpenedFile) {
    this.path = path;
    this.#fsync = options.fsync ?? false;
    this.#group = group;
    this.#maxJournalBytes = options.maxJournalBytes ?? DEFAULT_MAX_JOURNAL_BYTES;
    if (!(this.#maxJournalBytes >= 0)) {
      if (opened) fs.closeSync(opened.fd);
      throw new SafetensorError("InvalidOption", `maxJournalBytes must be ≥ 0, got ${this.#maxJournalBytes}`);
    }
    // The header is validated before anything is opened for writing. Positional reads: the edit reads nothing
    // but the header through this source (old bytes a write needs in memory are read from the writable descriptor).
    const head = opened ?? openWithHead(path);
    this.#file = SafetensorsFile.open(PreadSource.opened(head), options);
    try {
      this.#fd = openWritable(path, head);
      // The size the header was validated against (no fstat: a process's first Stats object cost ~0.1 ms).
      this.#size = this.#file.header.fileLength;
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

  /** The file holding tensor `name` (this file; a sharded handle answers with the shard). */
  fileOf(name: string): string {
    this.#live();
    this.#file.info(name);
    return this.path;
  }

  /** Whether there are uncommitted edits. */
  get pending(): boolean {
    return this.#journal !== null;
  }

  /**
   * Overwrite `tensor[slice]` (numpy basic indexing, as a string like `"1024:1152"` or parsed) with `values` in the
   * tensor's dtype: numbers / Float32Array (rounded to nearest even for F16, BF16, F8), `{fill}` (any dtype; integers
   * must be exact and in range, BOOL 0 or 1), or raw bytes of exactly the slice's length. Slices reaching outside the
   * tensor are refused (`InvalidSlice`) rather than clamped. `verify` (default "none"): see `VerifyLevel`.
   */
  write(name: string, slice: string | readonly SliceIndex[], values: EditValues, options?: WriteOptions): EditResult {
    if (this.#closed) this.#live();
    const info = this.#file.info(name);
    const plan = planWrite(info.dtype, info.exactShape ?? info.shape, slice);
    const verify = options?.verify ?? "none";
    // A process's first edit compiles every function it runs (~5 µs a function and ~30 µs a KiB of source here):
    // a fill of one range as the first write of an edit (`w[1024:1152] = 0`) runs only these lines, #fillFirst and
    // the journal's one native call.
    if (verify === "none" && this.#journal === null && plan.ranges.length === 1 && plan.exact && isFillOf(values)) {
      const result = this.#fillFirst(name, info, plan, values.fill);
      if (result !== null) return result;
    }
    if (verify !== "none" || !plan.exact) return this.#writeChecked(name, info, plan, values, verify);
    return this.#writeExact(name, info, plan, values);
  }

  /** An unverified write of an exact plan: the new bytes written as given (or a fill's block repeated). */
  #writeExact(name: string, info: TensorInfo, plan: WritePlan, values: EditValues): EditResult {
    const encoded = isFillOf(values) ? null : encodeValues(info, plan.elementCount, plan.byteLength, values);
    const { offsets, lengths, total, result } = this.#placed(name, plan);
    if (total === 0) return emptyWrite(info, values, result);
    // The new bytes as given, or one ≤ 64 KiB block of the fill's pattern repeated: journaled and written in one
    // native call when the addon has it.
    const bytes = encoded ?? fillBlock(info.dtype, (values as { fill: number }).fill, total, name);
    this.#journalAndWrite(offsets, lengths, total, { fd: this.#fd, bytes, repeat: encoded === null });
    return result;
  }

  /**
   * The first write of an edit as a fill of one range (`plan` exact, one range): the journal created with the
   * range's old bytes and the fill written, in one native call (journalFill; zeros from the addon's own page, else
   * the fill's block repeated). Null when that is not taken (no addon with it, or over the journal's room: the
   * general path then decides).
   */
  #fillFirst(name: string, info: TensorInfo, plan: WritePlan, fill: number | bigint): EditResult | null {
    const range = plan.ranges[0]!;
    const length = range.end - range.start;
    if (length > this.#maxJournalBytes) return null;
    const block = isZeroBits(info.dtype, fill) ? "zeros" : fillBlock(info.dtype, fill, length, name);
    const offset = this.#file.byteRange(name).offset + range.start;
    const { path } = this;
    const journal = JournalWriter.begin(
      path,
      this.#size,
      this.#group,
      this.#fsync,
      this.#fd,
      offset,
      length,
      length,
      block,
    );
    if (journal === null) return null;
    this.#journal = journal;
    this.#journalBytes = length;
    if (journal.dataError) throw journal.dataError;
    const ranges = [{ start: offset, end: offset + length }];
    return { file: path, tensor: name, elements: plan.elementCount, ranges, bytes: plan.byteLength };
  }

  /** Absolute offsets and lengths of a plan's ranges (room checked in the journal) and the write's result. */
  #placed(name: string, plan: WritePlan) {
    const base = this.#file.byteRange(name).offset;
    const { ranges } = plan;
    const offsets = new Float64Array(ranges.length);
    const lengths = new Float64Array(ranges.length);
    let total = 0;
    for (let i = 0; i < ranges.length; i++) {
      offsets[i] = base + ranges[i]!.start;
      lengths[i] = ranges[i]!.end - ranges[i]!.start;
      total += lengths[i]!;
    }
    this.#checkJournalRoom(total, name);
    const result: EditResult = {
      file: this.path,
      tensor: name,
      elements: plan.elementCount,
      bytes: plan.byteLength,
      ranges: ranges.map((r) => ({ start: base + r.start, end: base + r.end })),
    };
    return { base, offsets, lengths, total, result };
  }

  /** A write that bridges gaps (old bytes read and laid under the new ones) or is verified. */
  #writeChecked(name: string, info: TensorInfo, plan: WritePlan, values: EditValues, verify: VerifyLevel): EditResult {
    if (verify !== "none" && verify !== "tensor" && verify !== "full") {
      throw new SafetensorError("InvalidOption", `verify must be "none", "tensor" or "full", got ${String(verify)}`);
    }
    const encoded = isFillOf(values) ? null : encodeValues(info, plan.elementCount, plan.byteLength, values);
    const { base, offsets, lengths, total, result } = this.#placed(name, plan);
    if (total === 0) return emptyWrite(info, values, result);
    const { ranges } = plan;
    const next = newContent(
      plan,
      () => ranges.map((range) => readRegion(this.#fd, base + range.start, range.end - range.start)),
      encoded ?? filledBytes(info.dtype, (values as { fill: number }).fill, plan.byteLength, name),
    );
    const overlays: Overlay[] = ranges.map((range, i) => ({ offset: base + range.start, bytes: next[i]! }));
    const end = base + this.#file.byteRange(name).length;
    let tensorDigests: SpanDigests | undefined;
    let fileDigests: SpanDigests | undefined;
    if (verify !== "none") tensorDigests = spanDigests(this.#fd, base, end, overlays);
    if (verify === "full") fileDigests = spanDigests(this.#fd, 0, this.#size, overlays);
    this.#journalAndWrite(offsets, lengths, total, null);
    try {
      for (const overlay of overlays) writeAllAt(this.#fd, overlay.bytes, overlay.offset);
    } catch (error) {
      throw dataWriteError(error, this.path);
    }
    if (tensorDigests === undefined) return result;
    return { ...result, proof: this.#prove(name, base, end, tensorDigests, fileDigests) };
  }

  /**
   * Journal the old bytes of the ranges (the journal holds them before the first data byte changes), then write
   * `data` over them when given (in the same native call where the addon can).
   */
  #journalAndWrite(offsets: Float64Array, lengths: Float64Array, total: number, data: RangeData | null): void {
    const first = this.#journal === null && data !== null;
    const begun = first
      ? JournalWriter.begin(this.path, this.#size, this.#group, this.#fsync, this.#fd, offsets, lengths, total, data)
      : null;
    if (begun !== null) {
      this.#journal = begun;
      this.#journalBytes += total;
      if (begun.dataError) throw begun.dataError;
      return;
    }
    const journal = this.#journal ?? JournalWriter.create(this.path, this.#size, this.#group, this.#fsync);
    const before = journal.records;
    try {
      journal.appendRanges(this.#fd, offsets, lengths);
    } finally {
      if (journal.records > before) {
        this.#journal = journal;
        this.#journalBytes += total;
      }
    }
    if (data !== null) writeData(this.path, data, offsets, lengths);
  }

  /** `TooLarge` when journaling `bytes` more would pass `maxJournalBytes`. */
  #checkJournalRoom(bytes: number, name?: string): void {
    if (this.#journalBytes + bytes <= this.#maxJournalBytes) return;
    throw new SafetensorError(
      "TooLarge",
      `uncommitted edits would journal ${this.#journalBytes + bytes} bytes, more than maxJournalBytes ` +
        `(${this.#maxJournalBytes}): commit first or raise the limit`,
      name === undefined ? undefined : { tensor: name },
    );
  }

  /** The after-digests of a verified write, checked against what the write should have made. */
  #prove(name: string, base: number, end: number, tensor: SpanDigests, file?: SpanDigests): LocalityProof {
    const tensorAfter = spanDigest(this.#fd, base, end);
    checkSpan(`tensor ${name}`, tensor, tensorAfter, name);
    let fileAfter: string | undefined;
    if (file !== undefined) {
      fileAfter = spanDigest(this.#fd, 0, this.#size);
      checkSpan(`the file ${this.path}`, file, fileAfter, name);
    }
    return {
      level: file ? "full" : "tensor",
      tensorSha256Before: tensor.before,
      tensorSha256After: tensorAfter,
      ...(file ? { fileSha256Before: file.before, fileSha256After: fileAfter } : {}),
    };
  }

  /**
   * @internal Journal `old` (the bytes now at absolute `offset`) and write `next` (same length) there: the raw write
   * of streaming edits (masks), which compute each chunk's new bytes from its old ones.
   */
  replaceBytes(offset: number, old: Uint8Array, next: Uint8Array): void {
    this.#live();
    if (old.length !== next.length || offset < 0 || offset + old.length > this.#size) {
      throw new SafetensorError("WriteOutOfRange", `replaceBytes(${offset}, ${old.length}) outside ${this.path}`);
    }
    this.#checkJournalRoom(old.length);
    const journal = this.#journal ?? JournalWriter.create(this.path, this.#size, this.#group, this.#fsync);
    journal.append([{ offset, bytes: old }]);
    this.#journal = journal;
    this.#journalBytes += old.length;
    try {
      writeAllAt(this.#fd, next, offset);
    } catch (error) {
      throw dataWriteError(error, this.path);
    }
  }

  /** Read `length` bytes at absolute `offset` (as the file is now). */
  read(offset: number, length: number): Uint8Array {
    this.#live();
    const bytes = new Uint8Array(length);
    preadInto(this.#fd, bytes, offset);
    return bytes;
  }

  /** @internal First half of a commit: the file's edits made durable (when fsync was asked). */
  syncData(): void {
    try {
      if (this.#fsync && this.#journal !== null) fs.fsyncSync(this.#fd);
    } catch (error) {
      throw ioError(error, `cannot fsync ${this.path}`);
    }
  }

  /** @internal Second half of a commit: the journal removed, the edits final. */
  dropJournal(): void {
    if (this.#journal === null) return;
    this.#journal.remove();
    this.#journal = null;
    this.#journalBytes = 0;
  }

  /** Make the edits so far final: fsync the file (when asked), then remove the journal. */
  commit(): void {
    if (this.#closed) this.#live();
    if (this.#fsync) this.syncData();
    this.dropJournal();
  }

  /** Undo every edit since the last commit, byte for byte (from the journal), and remove the journal. */
  rollback(): void {
    this.#live();
    if (this.#journal === null) return;
    try {
      this.#journal.close();
      rollbackFromJournal(this.path, this.#fd);
      if (this.#fsync) fs.fsyncSync(this.#fd);
    } catch (error) {
      throw ioError(error, `cannot roll back ${this.path} (the journal is kept: run recover)`);
    }
    removeJournal(this.path);
    this.#journal = null;
    this.#journalBytes = 0;
  }

  /** Close; uncommitted edits are rolled back. */
  close(): void {
    if (this.#closed) return;
    try {
      if (this.#journal !== null) this.rollback();
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

/** Write `data` over the ranges (the addon's one-call path did not). */
function writeData(file: string, data: RangeData, offsets: Float64Array, lengths: Float64Array): void {
  try {
    for (let i = 0, at = 0; i < offsets.length; at += lengths[i]!, i++) {
      if (data.repeat) writeRepeated(data.fd, data.bytes, offsets[i]!, lengths[i]!);
      else writeAllAt(data.fd, data.bytes.subarray(at, at + lengths[i]!), offsets[i]!);
    }
  } catch (error) {
    throw dataWriteError(error, file);
  }
}

/** Write `length` bytes at `offset`: `block` repeated (vectored writes of the same buffer), cut to length. */
function writeRepeated(fd: number, block: Uint8Array, offset: number, length: number): void {
  const native = editNative();
  if (native) {
    native.writeRepeated(fd, block, offset, length);
    return;
  }
  const buffers: Uint8Array[] = [];
  for (let at = 0; at < length; at += block.length)
    buffers.push(block.subarray(0, Math.min(block.length, length - at)));
  writeBuffersAt(fd, buffers, offset);
}

/**
 * The new content of each range: the slice's bytes, laid over the old bytes (`oldBytes`: fresh copies, overwritten
 * here) where the ranges also cover gaps. When
 * the plan is exact (the ranges hold the slice in memory order: `1024:1152`), they are views of `encoded` and nothing
 * is copied or read.
 */
function newContent(plan: WritePlan, oldBytes: () => Uint8Array[], encoded: Uint8Array): Uint8Array[] {
  const { ranges } = plan;
  if (plan.exact || plan.plan === undefined) {
    let at = 0;
    return ranges.map((range) => {
      const view = encoded.subarray(at, at + range.end - range.start);
      at += range.end - range.start;
      return view;
    });
  }
  const next = oldBytes();
  const length = plan.plan.chunkLength;
  let k = 0;
  let hint = 0;
  plan.plan.forEachChunk((start) => {
    hint = rangeOf(ranges, start, hint);
    next[hint]!.set(encoded.subarray(k, k + length), start - ranges[hint]!.start);
    k += length;
  });
  return next;
}

/** What `openForEdit` (open.ts) gives for a file (`EditHandle`) and for a sharded checkpoint (`ShardedEditHandle`). */
export interface Editor {
  readonly path: string;
  /** Whether there are uncommitted edits. */
  readonly pending: boolean;
  keys(): string[];
  info(name: string): TensorInfo;
  /** The file holding tensor `name` (a shard of a checkpoint). */
  fileOf(name: string): string;
  write(name: string, slice: string | readonly SliceIndex[], values: EditValues, options?: WriteOptions): EditResult;
  commit(): void;
  rollback(): void;
  close(): void;
  [Symbol.dispose](): void;
}
