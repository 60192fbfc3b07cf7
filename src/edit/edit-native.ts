/**
 * The addon's functions for in-place edits (native/journal.c), typed; null when the addon is absent, disabled, or a
 * build from before them (every caller then runs its JavaScript path). Node-only.
 */
import { nativeWith } from "../io/native.js";

export interface EditNative {
  crc32c(bytes: Uint8Array, crc: number): number;
  journalRanges(
    journalFd: number,
    at: number,
    crc: number,
    prefix: Uint8Array,
    fd: number,
    offsets: Float64Array,
    lengths: Float64Array,
    sync: boolean,
  ): number;
  writeRepeated(fd: number, block: Uint8Array, offset: number, length: number): void;
}

/** What journalBegin and journalFill start with: the journal's path, its header's fields, the file's descriptor. */
type JournalHead = [journalPath: string, fileSize: number, group: Uint8Array, nonce: number, sync: boolean, fd: number];

/** The one-call edit path (a later build than EditNative's functions; each caller checks for it). */
export interface EditFastNative extends EditNative {
  /**
   * Create the journal (exclusively: EEXIST), write its header and the records of the ranges (old bytes read from
   * `fd`), sync when asked, then write `data` over the ranges through `writeFd` (repeated from each range's start
   * when `repeat`; null: no data write). `out`: journal fd (-1 when no journal was left), journal end, last CRC,
   * 1 once the data is written.
   */
  journalBegin(
    ...args: [
      ...JournalHead,
      offsets: Float64Array,
      lengths: Float64Array,
      writeFd: number,
      data: Uint8Array | null,
      repeat: boolean,
      out: Float64Array,
    ]
  ): void;
  /**
   * `journalBegin` for the one range `[offset, offset + length)` of `fd`, its new bytes `block` repeated (null:
   * zeros), written through `fd`: an edit's first fill, with no arrays to make for the range.
   */
  journalFill(
    ...args: [...JournalHead, offset: number, length: number, block: Uint8Array | null, out: Float64Array]
  ): void;
  /** Close the journal's descriptor (when ≥ 0) and remove it (no error when it is gone). */
  journalEnd(journalFd: number, journalPath: string): void;
  /** The file opened read-write; ESTALE unless it still has the identity `dev`, `ino`. */
  openWritable(path: string, dev: number, ino: number): number;
}

let cached: EditNative | null | undefined;
let fast: EditFastNative | null | undefined;

export function editNative(): EditNative | null {
  if (cached === undefined) cached = nativeWith<EditNative>(["journalRanges", "crc32c", "writeRepeated"]);
  return cached;
}

/** The addon when it has the one-call edit path, else null. */
export function editFastNative(): EditFastNative | null {
  if (fast === undefined) {
    // One lookup of every function (not editNative's first): this runs in the first edit of a process.
    fast = nativeWith<EditFastNative>([
      "journalRanges",
      "crc32c",
      "writeRepeated",
      "journalBegin",
      "journalFill",
      "journalEnd",
      "openWritable",
    ]);
  }
  return fast;
}
