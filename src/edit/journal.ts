/**
 * The undo journal of in-place edits: before any byte of a file is overwritten, its old bytes are saved in
 * `.NAME-journal` next to it (`journalPathFor`). Node-only.
 *
 * The journal is created whole (its header and first record) in a temporary file renamed into place
 * (`writeFileAtomic`): a crash while creating it leaves only a temporary file (no data write has begun), which the
 * next atomic write to the same journal path removes. Later records are appended, each one complete (and fsynced,
 * when asked) before the data it saves is overwritten. Every record carries a SHA-256 chained over the header and all
 * records before it, so a record is applied only when it and everything before it check out. A journal that does not
 * check out (flipped bytes, records spliced or reordered, written for a file of another size) is refused with
 * `JournalCorrupt` and the file is left as it is — with one exception that is safe by construction: a last record
 * cut short (fewer bytes left than its length field says: a crash while appending it) is dropped, because its data
 * write had not begun.
 *
 * Layout, integers u64 little-endian:
 *
 *     "STJRNL02" · file size · group length · group (UTF-8) · SHA-256 of the header
 *     (offset · length · old bytes · SHA-256 of (previous digest · offset · length · old bytes))*
 *
 * `group` ties the journals of one edit of several shards together (see `sharded-edit.ts`): when the checkpoint's
 * commit marker names the group, the edit was committed and the journal is discarded instead of applied.
 * Version 1 journals ("STJRNL01", one SHA-256 over everything at the end) are still read.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { ioError, preadInto } from "../io/node-file.js";
import { writeAllAt, writeBuffersAt, writeFileAtomic } from "../io/node-write.js";

const MAGIC_V1 = new TextEncoder().encode("STJRNL01");
const MAGIC = new TextEncoder().encode("STJRNL02");
const DIGEST_BYTES = 32;
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
}

/** Where the undo journal of `file` lives: `.NAME-journal` in the same directory. */
export function journalPathFor(file: string): string {
  return path.join(path.dirname(file), `.${path.basename(file)}-journal`);
}

/** Whether `file` has an undo journal next to it (an edit in progress, or one interrupted by a crash). */
export function hasJournal(file: string): boolean {
  return fs.statSync(journalPathFor(file), { throwIfNoEntry: false }) !== undefined;
}

function corrupt(journalPath: string, why: string): never {
  throw new SafetensorError(
    "JournalCorrupt",
    `the edit journal ${journalPath} ${why}: it was not applied and the file was left as it is`,
  );
}

function u64Bytes(...values: number[]): Uint8Array {
  const out = new Uint8Array(values.length * 8);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) view.setBigUint64(i * 8, BigInt(values[i]!), true);
  return out;
}

/** The header of a journal and its digest (the first link of the record chain). */
function encodeHeader(fileSize: number, group: string): { head: Uint8Array; digest: Uint8Array } {
  const groupBytes = new TextEncoder().encode(group);
  const body = new Uint8Array(MAGIC.length + 16 + groupBytes.length);
  body.set(MAGIC, 0);
  body.set(u64Bytes(fileSize, groupBytes.length), MAGIC.length);
  body.set(groupBytes, MAGIC.length + 16);
  const digest = createHash("sha256").update(body).digest();
  const head = new Uint8Array(body.length + DIGEST_BYTES);
  head.set(body, 0);
  head.set(digest, body.length);
  return { head, digest };
}

/** A record's pieces as written (fields, bytes, chained digest) and the digest the next record chains from. */
function encodeRecord(previous: Uint8Array, record: JournalRecord): Uint8Array[] {
  const fields = u64Bytes(record.offset, record.bytes.length);
  const digest = createHash("sha256").update(previous).update(fields).update(record.bytes).digest();
  return [fields, record.bytes, digest];
}

/** The whole journal as bytes (tests build damaged journals from this). */
export function encodeJournal(journal: Journal): Uint8Array {
  const { head, digest } = encodeHeader(journal.fileSize, journal.group ?? "");
  const pieces: Uint8Array[] = [head];
  let previous = digest;
  for (const record of journal.records) {
    const encoded = encodeRecord(previous, record);
    pieces.push(...encoded);
    previous = encoded[2]!;
  }
  // A plain Uint8Array (a Buffer's slice() would be a view, not a copy).
  return new Uint8Array(Buffer.concat(pieces));
}

/**
 * An open journal being appended to. `create` writes the header and the first records atomically; `append` adds
 * records in place; each is complete (fsynced when asked) when the call returns.
 */
export class JournalWriter {
  #fd: number | null = null;
  #end: number;
  #digest: Uint8Array;
  #records = 0;

  private constructor(
    readonly file: string,
    readonly fsync: boolean,
    end: number,
    digest: Uint8Array,
  ) {
    this.#end = end;
    this.#digest = digest;
  }

  /** Create the journal of `file` holding `records` (complete or absent: temporary file + rename). */
  static create(
    file: string,
    fileSize: number,
    group: string,
    records: readonly JournalRecord[],
    fsync: boolean,
  ): JournalWriter {
    const { head, digest } = encodeHeader(fileSize, group);
    const pieces: Uint8Array[] = [head];
    let previous = digest;
    let end = head.length;
    for (const record of records) {
      const encoded = encodeRecord(previous, record);
      pieces.push(...encoded);
      previous = encoded[2]!;
      end += 16 + record.bytes.length + DIGEST_BYTES;
    }
    writeFileAtomic(journalPathFor(file), (fd) => writeBuffersAt(fd, pieces, 0), { fsync, mode: 0o600 });
    const writer = new JournalWriter(file, fsync, end, previous);
    writer.#records = records.length;
    return writer;
  }

  get records(): number {
    return this.#records;
  }

  /** Append `records`, complete (and synced, when asked) before this returns. */
  append(records: readonly JournalRecord[]): void {
    if (records.length === 0) return;
    const journalPath = journalPathFor(this.file);
    try {
      this.#fd ??= fs.openSync(journalPath, "r+");
      const pieces: Uint8Array[] = [];
      let previous = this.#digest;
      let length = 0;
      for (const record of records) {
        const encoded = encodeRecord(previous, record);
        pieces.push(...encoded);
        previous = encoded[2]!;
        length += 16 + record.bytes.length + DIGEST_BYTES;
      }
      writeBuffersAt(this.#fd, pieces, this.#end);
      if (this.fsync) fs.fdatasyncSync(this.#fd);
      this.#end += length;
      this.#digest = previous;
      this.#records += records.length;
    } catch (error) {
      throw ioError(error, `cannot append to the edit journal ${journalPath}`);
    }
  }

  close(): void {
    if (this.#fd !== null) fs.closeSync(this.#fd);
    this.#fd = null;
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
  readonly fileSize: number;
  readonly group: string;
  readonly records: readonly RecordPlace[];
  /** A last record cut short by a crash was dropped. */
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

/** Check every record's chained digest; only a last record cut short is tolerated (and dropped). */
function checkJournal(fd: number, journalPath: string): CheckedJournal {
  const size = fs.fstatSync(fd).size;
  if (size < MAGIC.length) corrupt(journalPath, `is truncated (${size} bytes)`);
  const magic = readAt(fd, 0, MAGIC.length);
  if (MAGIC_V1.every((b, i) => magic[i] === b)) return checkV1(fd, size, journalPath);
  if (!MAGIC.every((b, i) => magic[i] === b)) corrupt(journalPath, "does not start with the journal signature");
  if (size < MAGIC.length + 16 + DIGEST_BYTES) corrupt(journalPath, `is truncated (${size} bytes)`);
  const fixed = readAt(fd, 0, MAGIC.length + 16);
  const fileSize = u64At(fixed, MAGIC.length, journalPath);
  const groupLength = u64At(fixed, MAGIC.length + 8, journalPath);
  if (groupLength > 4096 || MAGIC.length + 16 + groupLength + DIGEST_BYTES > size) {
    corrupt(journalPath, "has a damaged header");
  }
  const headerBody = readAt(fd, 0, MAGIC.length + 16 + groupLength);
  const stored = readAt(fd, headerBody.length, DIGEST_BYTES);
  let previous: Uint8Array = createHash("sha256").update(headerBody).digest();
  if (!Buffer.from(previous).equals(stored)) corrupt(journalPath, "fails its header's SHA-256 check");
  const group = new TextDecoder().decode(headerBody.subarray(MAGIC.length + 16));
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

export interface RecoverOptions {
  /** fsync the restored file before the journal is removed (default true). */
  readonly fsync?: boolean;
}

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
