/**
 * Writing tensors that may be views of a file: runs of views that are unmodified windows of one file, back to back
 * in it, are copied file to file (`copy_file_range`, what `cp` does: the bytes stay in the page cache, no fresh
 * memory is written from this process); everything else goes out with vectored writes from memory. Node-only.
 */
import * as fs from "node:fs";
import { fileRangeOf, type MappedFile } from "./file-views.js";
import { copyRange, DIRECT_MIN_BYTES, maybeModified, preallocate, writeDirect } from "./node-copy.js";
import { writeBuffersAt } from "./node-write.js";

/**
 * Smallest run copied file to file. Below it the pagemap check and the open cost about what writing from memory
 * does (a 1 MiB write from memory is ~0.1 ms).
 */
const MIN_FILE_COPY = 1 << 20;

export interface SaveOptions {
  /**
   * Writes of tensor bytes from memory at least this long go to the device with direct I/O (O_DIRECT, Linux, with
   * the addon), skipping the page cache: the saved file is then not cached (a read of it right after the save reads
   * the disk). Default 16 MiB; `Infinity` always writes through the page cache, 0 makes every write from memory
   * direct. Views of a mapped file are copied file to file in any case.
   */
  directMinBytes?: number;
}

interface FileRun {
  file: MappedFile;
  offset: number;
  length: number;
  /** Index after the run's last buffer. */
  end: number;
}

/** The longest run from `buffers[i]` of windows of one file, each following the previous one in that file. */
function fileRunAt(buffers: readonly Uint8Array[], i: number): FileRun | null {
  const first = fileRangeOf(buffers[i]!);
  if (first === null) return null;
  let length = buffers[i]!.length;
  let end = i + 1;
  for (; end < buffers.length; end++) {
    const next = fileRangeOf(buffers[end]!);
    if (next === null || next.file !== first.file || next.offset !== first.offset + length) break;
    length += buffers[end]!.length;
  }
  return { file: first.file, offset: first.offset, length, end };
}

/** `file` opened again by its path, or null when the path now names another file (replaced) or cannot be read. */
function reopen(file: MappedFile): number | null {
  let fd: number;
  try {
    fd = fs.openSync(file.path, "r");
  } catch {
    return null;
  }
  const stat = fs.fstatSync(fd);
  if (stat.dev === file.dev && stat.ino === file.ino) return fd;
  fs.closeSync(fd);
  return null;
}

/**
 * `buffers` from memory, back to back from `position`: by the addon's writer threads when they are many bytes and it
 * is possible, each piece directly or through the page cache, whichever cost less lately (writeDirect's `adaptive`).
 * Measured on the host of 2026-12-03 (`npm run bench -- --runs 3 --only save_all`, load 5.3-5.8, medians): direct
 * writes only, ours 4314 ms against the reference's save_file 3483 ms and `cp` 1035 ms; adaptive, ours 3077 ms against
 * 2752 and 1064 ms (and `cp` while holding as many touched bytes as ours, 3090 ms).
 */
function writeMemoryAt(fd: number, buffers: readonly Uint8Array[], position: number, directMin: number): void {
  let total = 0;
  for (const buffer of buffers) total += buffer.length;
  if (total > 0 && total >= directMin) {
    // Blocks first where the file system can: the rename over an earlier file then has nothing to flush (node-copy.ts).
    preallocate(fd, position + total);
    if (writeDirect(fd, buffers, position, true)) return;
  }
  writeBuffersAt(fd, buffers, position);
}

/** Write `buffers` back to back from `position` of `fd`: file to file where they are unmodified views of a file. */
export function writeViewsAt(
  fd: number,
  buffers: readonly Uint8Array[],
  position: number,
  options: SaveOptions = {},
): void {
  const directMin = options.directMinBytes ?? DIRECT_MIN_BYTES;
  const sources = new Map<MappedFile, number | null>();
  let pending: Uint8Array[] = [];
  let pendingAt = position;
  let at = position;
  try {
    for (let i = 0; i < buffers.length; ) {
      const run = fileRunAt(buffers, i);
      if (run !== null && run.length >= MIN_FILE_COPY) {
        if (!sources.has(run.file)) sources.set(run.file, reopen(run.file));
        const source = sources.get(run.file)!;
        if (source !== null && !buffers.slice(i, run.end).some(maybeModified)) {
          writeMemoryAt(fd, pending, pendingAt, directMin);
          // copy_file_range, not direct writes: for 2.37 GiB of views it measured 1.1-1.4 s, direct writes 1.7-1.8 s
          // through bounce buffers and 1.4 s straight from the mapping (its 40k page faults, then the device's pace).
          copyRange(source, run.offset, fd, at, run.length, { directMinBytes: Number.POSITIVE_INFINITY });
          at += run.length;
          pending = [];
          pendingAt = at;
          i = run.end;
          continue;
        }
      }
      const end = run?.end ?? i + 1;
      for (; i < end; i++) {
        pending.push(buffers[i]!);
        at += buffers[i]!.length;
      }
    }
    writeMemoryAt(fd, pending, pendingAt, directMin);
  } finally {
    for (const source of sources.values()) if (source !== null) fs.closeSync(source);
  }
}
