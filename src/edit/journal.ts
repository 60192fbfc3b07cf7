/**
 * The undo journal of in-place edits: before any byte of a file is overwritten, its old bytes are saved in
 * `.NAME-journal` next to it (`journalPathFor`). Node-only.
 *
 * The journal is written whole to a temporary file and renamed into place (`writeFileAtomic`), so a journal at its
 * final name is always complete: a crash while writing it leaves only a temporary file (the data writes have not
 * begun), which the next atomic write to the same journal path removes. A journal is applied only when its SHA-256
 * over every record matches; anything else (truncated, flipped bytes, written for a file of another size) is refused
 * with `JournalCorrupt` and the file is left as it is.
 *
 * Layout, integers u64 little-endian:
 *
 *     "STJRNL01" · file size · record count · (offset · length · old bytes)* · SHA-256 of everything before it
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { ioError, preadInto } from "../io/node-file.js";
import { writeAllAt, writeFileAtomic } from "../io/node-write.js";

const MAGIC = new TextEncoder().encode("STJRNL01");
const DIGEST_BYTES = 32;

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
}

/** Where the undo journal of `file` lives: `.NAME-journal` in the same directory. */
export function journalPathFor(file: string): string {
  return path.join(path.dirname(file), `.${path.basename(file)}-journal`);
}

function corrupt(journalPath: string, why: string): never {
  throw new SafetensorError(
    "JournalCorrupt",
    `the edit journal ${journalPath} ${why}: it was not applied and the file was left as it is`,
  );
}

export function encodeJournal(journal: Journal): Uint8Array {
  let size = MAGIC.length + 16 + DIGEST_BYTES;
  for (const record of journal.records) size += 16 + record.bytes.length;
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  out.set(MAGIC, 0);
  let p = MAGIC.length;
  view.setBigUint64(p, BigInt(journal.fileSize), true);
  view.setBigUint64(p + 8, BigInt(journal.records.length), true);
  p += 16;
  for (const record of journal.records) {
    view.setBigUint64(p, BigInt(record.offset), true);
    view.setBigUint64(p + 8, BigInt(record.bytes.length), true);
    out.set(record.bytes, p + 16);
    p += 16 + record.bytes.length;
  }
  out.set(createHash("sha256").update(out.subarray(0, p)).digest(), p);
  return out;
}

/** Parse and check a journal's bytes; `JournalCorrupt` unless it is complete and its checksum matches. */
export function decodeJournal(bytes: Uint8Array, journalPath: string): Journal {
  const minimum = MAGIC.length + 16 + DIGEST_BYTES;
  if (bytes.length < minimum) corrupt(journalPath, `is truncated (${bytes.length} bytes)`);
  if (!MAGIC.every((b, i) => bytes[i] === b)) corrupt(journalPath, "does not start with the journal signature");
  const body = bytes.subarray(0, bytes.length - DIGEST_BYTES);
  const digest = createHash("sha256").update(body).digest();
  if (!digest.equals(bytes.subarray(body.length))) corrupt(journalPath, "fails its SHA-256 check (torn or damaged)");
  const view = new DataView(bytes.buffer, bytes.byteOffset, body.length);
  const u64 = (at: number): number => {
    const value = view.getBigUint64(at, true);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) corrupt(journalPath, "holds an impossible offset or length");
    return Number(value);
  };
  const fileSize = u64(MAGIC.length);
  const count = u64(MAGIC.length + 8);
  const records: JournalRecord[] = [];
  let p = MAGIC.length + 16;
  for (let i = 0; i < count; i++) {
    if (p + 16 > body.length) corrupt(journalPath, "ends inside a record");
    const offset = u64(p);
    const length = u64(p + 8);
    p += 16;
    if (length > body.length - p) corrupt(journalPath, "ends inside a record");
    if (offset + length > fileSize) corrupt(journalPath, "has a record past the end of the file");
    records.push({ offset, bytes: bytes.subarray(p, p + length) });
    p += length;
  }
  if (p !== body.length) corrupt(journalPath, "has bytes after its last record");
  return { fileSize, records };
}

/** Write `journal` for `file` atomically (complete or absent), fsynced when asked. */
export function writeJournal(file: string, journal: Journal, fsync: boolean): void {
  const bytes = encodeJournal(journal);
  writeFileAtomic(journalPathFor(file), (fd) => writeAllAt(fd, bytes, 0), { fsync, mode: 0o600 });
}

/** Remove the journal of `file` (commit point of an edit, or end of a rollback); no error when there is none. */
export function removeJournal(file: string): void {
  try {
    fs.unlinkSync(journalPathFor(file));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw ioError(error, `cannot remove the edit journal`);
  }
}

/** Put the old bytes back through `fd` (last saved first, so overlapping records restore the oldest bytes). */
export function undoRecords(fd: number, records: readonly JournalRecord[]): void {
  for (let i = records.length - 1; i >= 0; i--) writeAllAt(fd, records[i]!.bytes, records[i]!.offset);
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
}

/**
 * Roll back an interrupted edit of `file`: when its journal exists and checks out, restore every saved region byte
 * for byte, fsync, and remove the journal. Safe to repeat after a crash during recovery itself (the journal stays
 * until the file is restored). `JournalCorrupt` for a journal that does not check out or belongs to a file of
 * another size (the file is not touched).
 */
export function recoverFile(file: string, options: RecoverOptions = {}): RecoverResult {
  const journalPath = journalPathFor(file);
  let bytes: Uint8Array;
  try {
    bytes = fs.readFileSync(journalPath);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { recovered: false, records: 0, bytes: 0 };
    throw ioError(error, `cannot read the edit journal ${journalPath}`);
  }
  const journal = decodeJournal(bytes, journalPath);
  let fd: number;
  try {
    fd = fs.openSync(file, "r+");
  } catch (error) {
    throw ioError(error, `cannot open ${file} to recover it`);
  }
  let restored = 0;
  try {
    const size = fs.fstatSync(fd).size;
    if (size !== journal.fileSize) {
      corrupt(journalPath, `was written for a file of ${journal.fileSize} bytes, ${file} has ${size}`);
    }
    undoRecords(fd, journal.records);
    for (const record of journal.records) restored += record.bytes.length;
    if (options.fsync ?? true) fs.fsyncSync(fd);
  } catch (error) {
    throw ioError(error, `cannot restore ${file}`);
  } finally {
    fs.closeSync(fd);
  }
  removeJournal(file);
  return { recovered: true, records: journal.records.length, bytes: restored };
}

/** Read `length` bytes at `offset` of `fd` (the old bytes of a region about to be overwritten). */
export function readRegion(fd: number, offset: number, length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  preadInto(fd, bytes, offset);
  return bytes;
}
