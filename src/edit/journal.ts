/**
 * The undo journal of in-place edits: before any byte of a file is overwritten, its old bytes are saved in
 * `.NAME-journal` next to it (`journalPathFor`). Node-only.
 *
 * Layout (version 3), integers u64 little-endian unless marked:
 *
 *     "STJRNL03" · file size · group length · group (UTF-8) · nonce (u32) · CRC (u32)
 *     (offset · length · CRC (u32) · old bytes · CRC (u32))*
 *
 * Every CRC is the CRC-32C of all the journal's bytes before it except the stored CRCs (each continues the one
 * before), so a record is applied only when it and everything before it check out. The CRC after a record's length
 * tells a damaged length (refused) from a record cut short (dropped: see below); the random nonce starts every
 * journal's chain differently, so a record left on disk by another journal can never continue this one. A journal
 * that does not check out (flipped bytes, records spliced or reordered, written for a file of another size) is
 * refused with `JournalCorrupt` and the file is left as it is.
 *
 * Crash safety without a temporary file. The journal is created at its final name (exclusively: an existing one,
 * another edit's, is never replaced) and written with positional writes; no data byte of the file is written until
 * the write of the records that save it has returned (and, with `fsync`, until the journal and its directory entry
 * are synced). So a journal cut short — shorter than its header, or a last record shorter than its length field
 * says — was cut while it was written, before the data write it protects began, and dropping that part is safe:
 * after a process crash (SIGKILL) the page cache holds a prefix of every write made, never a hole; after a power loss
 * with fsync, only a journal whose sync had not returned can be short. A journal of full length that fails a check
 * is never applied, whatever the cause. This replaces the temporary file + rename of version 2, which cost a
 * directory scan, a rename and ~1 ms of JavaScript in the first edit of a process.
 *
 * Why CRC-32C and not SHA-256 (version 2): the check guards against torn and damaged writes, not against an
 * adversary who could as well rewrite the file itself; CRC-32C (the checksum of ext4 and Btrfs metadata, iSCSI and
 * PostgreSQL's write-ahead log) misses a random corruption with probability 2^-32 per record and every burst of
 * up to 32 bits, and with the CPU's instruction costs 0.04 ms per MiB where node:crypto's SHA-256 took 0.6 ms
 * (plus ~0.5 ms for a process's first createHash). The native addon journals the ranges straight from the file
 * (native/journal.c); without it the same bytes are written from JavaScript.
 *
 * `group` ties the journals of one edit of several shards together (see `sharded-edit.ts`): when the checkpoint's
 * commit marker names the group, the edit was committed and the journal is discarded instead of applied.
 * Version 1 ("STJRNL01", one SHA-256 over everything at the end) and version 2 ("STJRNL02", SHA-256 chained over the
 * header and each record) journals left by earlier versions are still checked and rolled back.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { ioError, preadInto } from "../io/node-file.js";
import { journalPathFor } from "../io/node-journal-path.js";
import { fsyncDirectory, writeAllAt, writeBuffersAt, writeFileAtomic } from "../io/node-write.js";
import { crc32c as crc32cJs } from "./crc32c.js";
import { editFastNative, editNative } from "./edit-native.js";

const MAGIC_V1 = new TextEncoder().encode("STJRNL01");
const MAGIC_V2 = new TextEncoder().encode("STJRNL02");
const MAGIC = new TextEncoder().encode("STJRNL03");
const DIGEST_BYTES = 32;
const CRC_BYTES = 4;
/** A version 3 record before its old bytes: offset, length, their CRC. */
const RECORD_HEAD = 16 + CRC_BYTES;
/** Fixed part of a version 3 header before the group: magic, file size, group length. */
const FIXED_HEADER = MAGIC.length + 16;
/** Longest group name (a header claiming more is damaged). */
const MAX_GROUP_BYTES = 4096;
/** Largest record read back into memory at once when checking or applying a journal (larger ones are refused). */
const MAX_RECORD_BYTES = 2 ** 31;
const COMMIT_MARKER = ".safetensors-edit-commit";

/** Old bytes of one region: `bytes` were at absolute file offset `offset` before it was overwritten. */
export interface JournalRecord {
  readonly offset: number;
  readonly bytes: Uint8Array;
}

export interface Journal {
  /** The target file's size when the journal was written (an edit never changes it). */
  readonly fileSize: number;
  /** In the order they were saved; undone in reverse. */
  readonly records: readonly JournalRecord[];
  /** The multi-shard edit this journal belongs to ("" for an edit of one file). */
  readonly group?: string;
  /** The header's nonce (random when absent). */
  readonly nonce?: number;
}

function corrupt(journalPath: string, why: string): never {
  throw new SafetensorError(
    "JournalCorrupt",
    `the edit journal ${journalPath} ${why}: it was not applied and the file was left as it is`,
  );
}

/** CRC-32C of `bytes` continuing `crc` (the addon's instruction-based loop, else JavaScript). */
function crc32c(bytes: Uint8Array, crc = 0): number {
  const native = editNative();
  return native ? native.crc32c(bytes, crc) : crc32cJs(bytes, crc);
}

function u32Bytes(value: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value, true);
  return out;
}

/**
 * The header of a journal and its CRC (where the record chain starts). u64s as two u32s and no encoder for the usual
 * empty group: BigInt and TextEncoder cost ~0.1 ms at their first use in a process, in its first edit.
 */
function encodeHeader(fileSize: number, group: string, nonce: number): { head: Uint8Array; crc: number } {
  const groupBytes = group === "" ? EMPTY : new TextEncoder().encode(group);
  const head = new Uint8Array(FIXED_HEADER + groupBytes.length + 4 + CRC_BYTES);
  const view = new DataView(head.buffer);
  head.set(MAGIC, 0);
  setU64(view, MAGIC.length, fileSize);
  setU64(view, MAGIC.length + 8, groupBytes.length);
  head.set(groupBytes, FIXED_HEADER);
  view.setUint32(FIXED_HEADER + groupBytes.length, nonce >>> 0, true);
  const crc = crc32c(head.subarray(0, head.length - CRC_BYTES));
  view.setUint32(head.length - CRC_BYTES, crc, true);
  return { head, crc };
}

/** A safe integer as u64 little-endian. */
function setU64(view: DataView, at: number, value: number): void {
  view.setUint32(at, value % 2 ** 32, true);
  view.setUint32(at + 4, Math.floor(value / 2 ** 32), true);
}

/** A record's pieces as written (fields and their CRC, old bytes, CRC) and the CRC the next record continues. */
function encodeRecord(previous: number, record: JournalRecord): { pieces: Uint8Array[]; crc: number } {
  const fields = new Uint8Array(RECORD_HEAD);
  const view = new DataView(fields.buffer);
  setU64(view, 0, record.offset);
  setU64(view, 8, record.bytes.length);
  const fieldsCrc = crc32c(fields.subarray(0, 16), previous);
  view.setUint32(16, fieldsCrc, true);
  const crc = crc32c(record.bytes, fieldsCrc);
  return { pieces: [fields, record.bytes, u32Bytes(crc)], crc };
}

function randomNonce(): number {
  return Math.floor(Math.random() * 2 ** 32) >>> 0;
}

/** The whole journal as bytes (tests build damaged journals from this). */
export function encodeJournal(journal: Journal): Uint8Array {
  const { head, crc } = encodeHeader(journal.fileSize, journal.group ?? "", journal.nonce ?? randomNonce());
  const pieces: Uint8Array[] = [head];
  let previous = crc;
  for (const record of journal.records) {
    const encoded = encodeRecord(previous, record);
    pieces.push(...encoded.pieces);
    previous = encoded.crc;
  }
  // A plain Uint8Array (a Buffer's slice() would be a view, not a copy).
  return new Uint8Array(Buffer.concat(pieces));
}

/** The new bytes a journaled write puts over its ranges once their old bytes are saved. */
export interface RangeData {
  /** The descriptor the data is written through. */
  readonly fd: number;
  /** A block repeated from each range's start (`repeat`), else the ranges' new bytes back to back. */
  readonly bytes: Uint8Array;
  readonly repeat: boolean;
}

/** The error of a data write that failed after its journal was complete. */
export function dataWriteError(error: unknown, file: string): SafetensorError {
  return ioError(error, `cannot write to ${file} (the journal can restore it: rollback() or recover)`);
}

/**
 * The journal of one edit, written as it goes: nothing exists on disk until the first records, which create it
 * (exclusively) together with its header; each later call appends. Every call's records are complete (and synced,
 * when asked) when it returns, before the caller overwrites the bytes they save.
 */
export class JournalWriter {
  #fd: number | null = null;
  #end = 0;
  #crc = 0;
  #records = 0;
  readonly #path: string;

  private constructor(
    readonly file: string,
    readonly fsync: boolean,
    private readonly fileSize: number,
    private readonly group: string,
    private readonly nonce: number,
  ) {
    this.#path = journalPathFor(file);
  }

  /** The journal of `file` (of `fileSize` bytes) for an edit in `group`; created on disk by its first records. */
  static create(file: string, fileSize: number, group: string, fsync: boolean): JournalWriter {
    return new JournalWriter(file, fsync, fileSize, group, randomNonce());
  }

  /**
   * An edit's first write in one native call, where the addon has it: the journal created with the records of the
   * ranges (`total` bytes), then `data` written over them; for `data` "zeros" or a block (a fill's, repeated), the
   * one range `[offsets, offsets + lengths)` given as two numbers (journalFill: no arrays made for it, in a process's
   * first edit). Null when not taken (no addon path, or a range longer than a record: `create` and `appendRanges`
   * then). Throws as `appendRanges` when no journal was left; a data write that failed after the journal was
   * complete is the returned writer's `dataError`.
   */
  static begin(
    file: string,
    fileSize: number,
    group: string,
    fsync: boolean,
    fd: number,
    offsets: Float64Array | number,
    lengths: Float64Array | number,
    total: number,
    data: RangeData | "zeros" | Uint8Array,
  ): JournalWriter | null {
    const native = total <= MAX_RECORD_BYTES ? editFastNative() : null;
    if (native === null) return null;
    const journal = new JournalWriter(file, fsync, fileSize, group, randomNonce());
    const groupBytes = group === "" ? EMPTY : new TextEncoder().encode(group);
    const out = new Float64Array(4);
    out[0] = -1;
    let failure: unknown;
    try {
      const at = journal.#path;
      const nonce = journal.nonce;
      if (typeof offsets === "number") {
        const block = data === "zeros" ? null : (data as Uint8Array);
        native.journalFill(at, fileSize, groupBytes, nonce, fsync, fd, offsets, lengths as number, block, out);
      } else {
        const { fd: writeFd, bytes, repeat } = data as RangeData;
        const sizes = lengths as Float64Array;
        native.journalBegin(at, fileSize, groupBytes, nonce, fsync, fd, offsets, sizes, writeFd, bytes, repeat, out);
      }
    } catch (error) {
      failure = error;
    }
    // No journal left: nothing was written to the file either.
    if (out[0]! < 0) throw journalWriteError(failure, journal.#path);
    journal.#fd = out[0]!;
    journal.#end = out[1]!;
    journal.#crc = out[2]!;
    journal.#records = typeof offsets === "number" ? 1 : offsets.length;
    if (failure !== undefined) journal.dataError = dataWriteError(failure, file);
    return journal;
  }

  /** Set by `begin` when its data write failed after the journal was complete. */
  dataError: SafetensorError | undefined;

  get records(): number {
    return this.#records;
  }

  /**
   * Journal the bytes now at the absolute ranges `[offsets[i], offsets[i] + lengths[i])` of `fd` (sorted,
   * disjoint, non-empty), read from the file itself: with the addon straight from the page cache to the journal.
   */
  appendRanges(fd: number, offsets: Float64Array, lengths: Float64Array): void {
    [offsets, lengths] = splitRanges(offsets, lengths);
    const native = editNative();
    if (native === null) {
      const records: JournalRecord[] = [];
      for (let i = 0; i < offsets.length; i++) {
        records.push({ offset: offsets[i]!, bytes: readAt(fd, offsets[i]!, lengths[i]!) });
      }
      this.append(records);
      return;
    }
    if (offsets.length === 0) return;
    let length = 0;
    for (let i = 0; i < lengths.length; i++) length += RECORD_HEAD + lengths[i]! + CRC_BYTES;
    this.#write(length, offsets.length, (journalFd, at, prefix) =>
      native.journalRanges(journalFd, at, this.#crc, prefix, fd, offsets, lengths, this.fsync),
    );
  }

  /** Append `records` (their old bytes given), complete (and synced, when asked) before this returns. */
  append(records: readonly JournalRecord[]): void {
    if (records.length === 0) return;
    this.#write(0, records.length, (journalFd, at, prefix) => {
      const pieces: Uint8Array[] = prefix.length > 0 ? [prefix] : [];
      let crc = this.#crc;
      for (const record of records) {
        const encoded = encodeRecord(crc, record);
        pieces.push(...encoded.pieces);
        crc = encoded.crc;
      }
      writeBuffersAt(journalFd, pieces, at);
      if (this.fsync) fs.fdatasyncSync(journalFd);
      return crc;
    });
  }

  /**
   * Run `write(fd, at, prefix)` (which writes `prefix` then the records at `at`, syncs when asked, and returns the
   * last CRC). The first call creates the journal and writes the header as the prefix; when it fails, the journal
   * is removed again (no data was written for it). `length`: the records' bytes (0: measured from the file).
   */
  #write(length: number, count: number, write: (fd: number, at: number, prefix: Uint8Array) => number): void {
    const journalPath = this.#path;
    const creating = this.#fd === null;
    let crcBefore = this.#crc;
    try {
      let prefix: Uint8Array = EMPTY;
      if (creating) {
        const header = encodeHeader(this.fileSize, this.group, this.nonce);
        prefix = header.head;
        crcBefore = header.crc;
        this.#fd = openExclusive(journalPath);
      }
      this.#crc = crcBefore;
      const crc = write(this.#fd!, this.#end, prefix);
      if (creating && this.fsync) fsyncDirectory(path.dirname(journalPath));
      this.#end = length > 0 ? this.#end + prefix.length + length : fs.fstatSync(this.#fd!).size;
      this.#crc = crc;
      this.#records += count;
    } catch (error) {
      if (creating && this.#fd !== null) {
        fs.closeSync(this.#fd);
        this.#fd = null;
        try {
          fs.unlinkSync(journalPath);
        } catch {}
      }
      throw journalWriteError(error, journalPath);
    }
  }

  close(): void {
    if (this.#fd !== null) fs.closeSync(this.#fd);
    this.#fd = null;
  }

  /** Close and remove the journal: the commit point of the edit it saves. */
  remove(): void {
    const native = editFastNative();
    if (native === null) {
      this.close();
      removeJournal(this.file);
      return;
    }
    const fd = this.#fd ?? -1;
    this.#fd = null;
    try {
      native.journalEnd(fd, this.#path);
    } catch (error) {
      throw ioError(error, "cannot remove the edit journal");
    }
  }
}

/** A journal write's failure: `InterruptedEdit` when another journal is in the way. */
function journalWriteError(error: unknown, journalPath: string): SafetensorError {
  if ((error as NodeJS.ErrnoException)?.code === "EEXIST") return interruptedEdit(journalPath);
  return ioError(error, `cannot write the edit journal ${journalPath}`);
}

function interruptedEdit(journalPath: string): SafetensorError {
  return new SafetensorError(
    "InterruptedEdit",
    `the edit journal ${journalPath} already exists: another edit of the file is in progress or was ` +
      "interrupted (recover it first: recoverFile or `safetensors recover`)",
  );
}

const EMPTY = new Uint8Array(0);

/**
 * The ranges with every one longer than `max` cut into records of at most `max` bytes (recovery reads a record into
 * memory at once and refuses longer ones, so a journal never holds one). The same arrays when none is.
 */
export function splitRanges(
  offsets: Float64Array,
  lengths: Float64Array,
  max = MAX_RECORD_BYTES,
): [Float64Array, Float64Array] {
  let count = 0;
  for (let i = 0; i < lengths.length; i++) count += Math.ceil(lengths[i]! / max);
  if (count === lengths.length) return [offsets, lengths];
  const cutOffsets = new Float64Array(count);
  const cutLengths = new Float64Array(count);
  let k = 0;
  for (let i = 0; i < lengths.length; i++) {
    for (let done = 0; done < lengths[i]!; done += max, k++) {
      cutOffsets[k] = offsets[i]! + done;
      cutLengths[k] = Math.min(max, lengths[i]! - done);
    }
  }
  return [cutOffsets, cutLengths];
}
const EXCLUSIVE = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL;

/** Create the journal, refusing to replace one that exists (another edit's, in progress or interrupted). */
function openExclusive(journalPath: string): number {
  try {
    return fs.openSync(journalPath, EXCLUSIVE, 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") throw interruptedEdit(journalPath);
    throw error;
  }
}

/** Where one checked record's old bytes are in the journal. */
interface RecordPlace {
  readonly offset: number;
  readonly length: number;
  /** Position of the old bytes in the journal file. */
  readonly at: number;
}

interface CheckedJournal {
  /** Null when the journal's creation was cut short (its header incomplete): nothing to undo. */
  readonly fileSize: number | null;
  readonly group: string;
  readonly records: readonly RecordPlace[];
  /** A last record (or the header) cut short by a crash was dropped. */
  readonly tornTail: boolean;
}

function readAt(fd: number, position: number, length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  preadInto(fd, bytes, position);
  return bytes;
}

function u64At(bytes: Uint8Array, at: number, journalPath: string): number {
  const value = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(at, true);
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) corrupt(journalPath, "holds an impossible offset or length");
  return Number(value);
}

function startsWith(bytes: Uint8Array, magic: Uint8Array): boolean {
  return bytes.length >= magic.length && magic.every((b, i) => bytes[i] === b);
}

/** Version 1: the whole journal is one unit under one SHA-256 at its end. */
function checkV1(fd: number, size: number, journalPath: string): CheckedJournal {
  const minimum = MAGIC_V1.length + 16 + DIGEST_BYTES;
  if (size < minimum) corrupt(journalPath, `is truncated (${size} bytes)`);
  if (size > MAX_RECORD_BYTES) corrupt(journalPath, `is too large for a version 1 journal (${size} bytes)`);
  const bytes = readAt(fd, 0, size);
  const body = bytes.subarray(0, size - DIGEST_BYTES);
  const digest = createHash("sha256").update(body).digest();
  if (!digest.equals(bytes.subarray(body.length))) corrupt(journalPath, "fails its SHA-256 check (torn or damaged)");
  const fileSize = u64At(bytes, MAGIC_V1.length, journalPath);
  const count = u64At(bytes, MAGIC_V1.length + 8, journalPath);
  const records: RecordPlace[] = [];
  let p = MAGIC_V1.length + 16;
  for (let i = 0; i < count; i++) {
    if (p + 16 > body.length) corrupt(journalPath, "ends inside a record");
    const offset = u64At(bytes, p, journalPath);
    const length = u64At(bytes, p + 8, journalPath);
    p += 16;
    if (length > body.length - p) corrupt(journalPath, "ends inside a record");
    if (offset + length > fileSize) corrupt(journalPath, "has a record past the end of the file");
    records.push({ offset, length, at: p });
    p += length;
  }
  if (p !== body.length) corrupt(journalPath, "has bytes after its last record");
  return { fileSize, group: "", records, tornTail: false };
}

/** The header fields of versions 2 and 3 after the magic: file size, group length. */
function fixedHeader(fd: number, journalPath: string): { fileSize: number; groupLength: number } {
  const fixed = readAt(fd, 0, FIXED_HEADER);
  const fileSize = u64At(fixed, MAGIC.length, journalPath);
  const groupLength = u64At(fixed, MAGIC.length + 8, journalPath);
  if (groupLength > MAX_GROUP_BYTES) corrupt(journalPath, "has a damaged header");
  return { fileSize, groupLength };
}

/** Version 2: SHA-256 chained over the header and every record; a last record cut short is dropped. */
function checkV2(fd: number, size: number, journalPath: string): CheckedJournal {
  if (size < FIXED_HEADER + DIGEST_BYTES) corrupt(journalPath, `is truncated (${size} bytes)`);
  const { fileSize, groupLength } = fixedHeader(fd, journalPath);
  if (FIXED_HEADER + groupLength + DIGEST_BYTES > size) corrupt(journalPath, "has a damaged header");
  const headerBody = readAt(fd, 0, FIXED_HEADER + groupLength);
  const stored = readAt(fd, headerBody.length, DIGEST_BYTES);
  let previous: Uint8Array = createHash("sha256").update(headerBody).digest();
  if (!Buffer.from(previous).equals(stored)) corrupt(journalPath, "fails its header's SHA-256 check");
  const group = new TextDecoder().decode(headerBody.subarray(FIXED_HEADER));
  const records: RecordPlace[] = [];
  let p = headerBody.length + DIGEST_BYTES;
  while (p < size) {
    // A record that does not fit in what is left can only be the last one, cut short while it was appended.
    if (p + 16 > size) return { fileSize, group, records, tornTail: true };
    const fields = readAt(fd, p, 16);
    const offset = u64At(fields, 0, journalPath);
    const length = u64At(fields, 8, journalPath);
    if (length > MAX_RECORD_BYTES) corrupt(journalPath, `has a record of ${length} bytes`);
    if (p + 16 + length + DIGEST_BYTES > size) return { fileSize, group, records, tornTail: true };
    const bytes = readAt(fd, p + 16, length + DIGEST_BYTES);
    const digest = createHash("sha256").update(previous).update(fields).update(bytes.subarray(0, length)).digest();
    if (!digest.equals(bytes.subarray(length))) {
      corrupt(journalPath, `fails the SHA-256 check of record ${records.length} (damaged)`);
    }
    if (offset + length > fileSize) corrupt(journalPath, "has a record past the end of the file");
    records.push({ offset, length, at: p + 16 });
    previous = digest;
    p += 16 + length + DIGEST_BYTES;
  }
  return { fileSize, group, records, tornTail: false };
}

/** A journal whose creation was cut short before its header was complete: no data write had begun. */
const UNBORN: CheckedJournal = { fileSize: null, group: "", records: [], tornTail: true };

/** Version 3: CRC-32C running over the journal; a header or last record cut short is dropped (see the top). */
function checkV3(fd: number, size: number, journalPath: string): CheckedJournal {
  if (size < FIXED_HEADER) return UNBORN;
  const { fileSize, groupLength } = fixedHeader(fd, journalPath);
  const headerLength = FIXED_HEADER + groupLength + 4 + CRC_BYTES;
  if (size < headerLength) return UNBORN;
  const header = readAt(fd, 0, headerLength);
  let crc = crc32c(header.subarray(0, headerLength - CRC_BYTES));
  const view = (bytes: Uint8Array) => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view(header).getUint32(headerLength - CRC_BYTES, true) !== crc) {
    corrupt(journalPath, "fails its header's CRC-32C check");
  }
  const group = new TextDecoder().decode(header.subarray(FIXED_HEADER, FIXED_HEADER + groupLength));
  const records: RecordPlace[] = [];
  let p = headerLength;
  while (p < size) {
    // A record that does not fit in what is left can only be the last one, cut short while it was written.
    if (p + RECORD_HEAD > size) return { fileSize, group, records, tornTail: true };
    const fields = readAt(fd, p, RECORD_HEAD);
    crc = crc32c(fields.subarray(0, 16), crc);
    if (view(fields).getUint32(16, true) !== crc) {
      corrupt(journalPath, `fails the CRC-32C check of record ${records.length}'s offset and length (damaged)`);
    }
    const offset = u64At(fields, 0, journalPath);
    const length = u64At(fields, 8, journalPath);
    if (length > MAX_RECORD_BYTES) corrupt(journalPath, `has a record of ${length} bytes`);
    if (p + RECORD_HEAD + length + CRC_BYTES > size) return { fileSize, group, records, tornTail: true };
    const bytes = readAt(fd, p + RECORD_HEAD, length + CRC_BYTES);
    crc = crc32c(bytes.subarray(0, length), crc);
    if (view(bytes).getUint32(length, true) !== crc) {
      corrupt(journalPath, `fails the CRC-32C check of record ${records.length} (damaged)`);
    }
    if (offset + length > fileSize) corrupt(journalPath, "has a record past the end of the file");
    records.push({ offset, length, at: p + RECORD_HEAD });
    p += RECORD_HEAD + length + CRC_BYTES;
  }
  return { fileSize, group, records, tornTail: false };
}

/** Check a journal of any version; only a part cut short while it was written is tolerated (and dropped). */
function checkJournal(fd: number, journalPath: string): CheckedJournal {
  const size = fs.fstatSync(fd).size;
  const start = readAt(fd, 0, Math.min(size, MAGIC.length));
  // Shorter than a signature and the start of this version's: its creation was cut short (version 1 and 2
  // journals were renamed into place complete, so only a damaged one could be that short).
  if (size < MAGIC.length && start.every((b, i) => b === MAGIC[i])) return UNBORN;
  if (startsWith(start, MAGIC)) return checkV3(fd, size, journalPath);
  if (startsWith(start, MAGIC_V2)) return checkV2(fd, size, journalPath);
  if (startsWith(start, MAGIC_V1)) return checkV1(fd, size, journalPath);
  return corrupt(
    journalPath,
    size < MAGIC.length ? `is truncated (${size} bytes)` : "does not start with the journal signature",
  );
}

/** Remove the journal of `file` (commit point of an edit, or end of a rollback); no error when there is none. */
export function removeJournal(file: string): void {
  try {
    fs.unlinkSync(journalPathFor(file));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw ioError(error, `cannot remove the edit journal`);
  }
}

/** Put back the old bytes a checked journal holds (read from it one record at a time, last first). */
function undoFromJournal(journalFd: number, fd: number, records: readonly RecordPlace[]): void {
  for (let i = records.length - 1; i >= 0; i--) {
    const record = records[i]!;
    writeAllAt(fd, readAt(journalFd, record.at, record.length), record.offset);
  }
}

/** Undo, from its journal on disk, an edit this process made (the in-process `rollback()`). */
export function rollbackFromJournal(file: string, fd: number): void {
  const journalPath = journalPathFor(file);
  const journalFd = fs.openSync(journalPath, "r");
  try {
    undoFromJournal(journalFd, fd, checkJournal(journalFd, journalPath).records);
  } finally {
    fs.closeSync(journalFd);
  }
}

/** Options of `recoverFile`. */
export interface RecoverOptions {
  /** fsync the restored file before the journal is removed (default true). */
  readonly fsync?: boolean;
}

/** What `recoverFile` did: whether there was a journal to roll back, and how much it restored. */
export interface RecoverResult {
  /** False when there was no journal (nothing to do). */
  readonly recovered: boolean;
  readonly records: number;
  readonly bytes: number;
  /** The journal belonged to a multi-shard edit that had committed: it was discarded, the edit kept. */
  readonly committed?: boolean;
}

/** The commit marker of multi-shard edits in `directory`. */
export function commitMarkerPath(directory: string): string {
  return path.join(directory, COMMIT_MARKER);
}

/** Write the commit marker of `group` (atomic; its last line is the SHA-256 of the lines before it). */
export function writeCommitMarker(directory: string, group: string, fsync: boolean): void {
  const body = `${group}\n`;
  const text = `${body}${createHash("sha256").update(body).digest("hex")}\n`;
  const bytes = new TextEncoder().encode(text);
  writeFileAtomic(commitMarkerPath(directory), (fd) => writeAllAt(fd, bytes, 0), { fsync, mode: 0o600 });
}

/** The group a directory's commit marker names, or null when there is none. */
export function readCommitMarker(directory: string): string | null {
  const marker = commitMarkerPath(directory);
  let text: string;
  try {
    text = fs.readFileSync(marker, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw ioError(error, `cannot read ${marker}`);
  }
  const match = /^([^\n]+)\n([0-9a-f]{64})\n$/.exec(text);
  if (!match || createHash("sha256").update(`${match[1]}\n`).digest("hex") !== match[2]) {
    throw new SafetensorError("JournalCorrupt", `the commit marker ${marker} is damaged: nothing was applied`);
  }
  return match[1]!;
}

export function removeCommitMarker(directory: string): void {
  try {
    fs.unlinkSync(commitMarkerPath(directory));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw ioError(error, "cannot remove the commit marker");
  }
}

/**
 * Roll back an interrupted edit of `file`: when its journal exists and checks out, restore every saved region byte
 * for byte, fsync, and remove the journal. Safe to repeat after a crash during recovery itself (the journal stays
 * until the file is restored). `JournalCorrupt` for a journal that does not check out or belongs to a file of
 * another size (the file is not touched). A journal of a multi-shard edit whose commit marker is in place is the
 * exception: that edit committed, so the journal is removed and the file kept as it is.
 */
export function recoverFile(file: string, options: RecoverOptions = {}): RecoverResult {
  const journalPath = journalPathFor(file);
  // The usual case, no journal, without the exception a failed open costs (~0.1 ms in a fresh process).
  if (fs.statSync(journalPath, { throwIfNoEntry: false }) === undefined) {
    return { recovered: false, records: 0, bytes: 0 };
  }
  let journalFd: number;
  try {
    journalFd = fs.openSync(journalPath, "r");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { recovered: false, records: 0, bytes: 0 };
    throw ioError(error, `cannot read the edit journal ${journalPath}`);
  }
  let restored = 0;
  let count = 0;
  try {
    const journal = checkJournal(journalFd, journalPath);
    // Cut short while it was created: no data write had begun, the file is as it was.
    if (journal.fileSize === null) {
      fs.closeSync(journalFd);
      journalFd = -1;
      removeJournal(file);
      return { recovered: true, records: 0, bytes: 0 };
    }
    if (journal.group !== "" && readCommitMarker(path.dirname(file)) === journal.group) {
      fs.closeSync(journalFd);
      journalFd = -1;
      removeJournal(file);
      return { recovered: true, records: 0, bytes: 0, committed: true };
    }
    let fd: number;
    try {
      fd = fs.openSync(file, "r+");
    } catch (error) {
      throw ioError(error, `cannot open ${file} to recover it`);
    }
    try {
      const size = fs.fstatSync(fd).size;
      if (size !== journal.fileSize) {
        corrupt(journalPath, `was written for a file of ${journal.fileSize} bytes, ${file} has ${size}`);
      }
      undoFromJournal(journalFd, fd, journal.records);
      for (const record of journal.records) restored += record.length;
      count = journal.records.length;
      if (options.fsync ?? true) fs.fsyncSync(fd);
    } catch (error) {
      throw ioError(error, `cannot restore ${file}`);
    } finally {
      fs.closeSync(fd);
    }
  } finally {
    if (journalFd >= 0) fs.closeSync(journalFd);
  }
  removeJournal(file);
  return { recovered: true, records: count, bytes: restored };
}

/** Read `length` bytes at `offset` of `fd` (the old bytes of a region about to be overwritten). */
export function readRegion(fd: number, offset: number, length: number): Uint8Array {
  return readAt(fd, offset, length);
}
