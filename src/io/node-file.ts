/**
 * Node byte sources over local files: positional reads (works everywhere, including network file systems where
 * mmap is slow or risky) and, through the optional native addon, read-only memory maps.
 */
import * as fs from "node:fs";
import { SafetensorError, systemErrorText } from "../format/errors.js";
import { nativeHeaderScanner, type OpenedFile, openHead, preadParallel } from "./native.js";
import { checkRange, type SyncByteSource } from "./source.js";

/** Bytes read at open, enough for most headers: the header is then parsed without another read. */
export const HEAD_BYTES = 16 * 1024;

export type { OpenedFile };

/**
 * How many of the first `length` bytes read into `head` to keep: the length prefix and header when they were read whole (a source serves
 * the header from them without another read), else all of them.
 */
function headToKeep(head: Uint8Array, length: number, size: number): number {
  if (length < 8 || head[4]! | head[5]! | head[6]! | head[7]!) return length;
  const claimed = 8 + (head[0]! | (head[1]! << 8) | (head[2]! << 16)) + head[3]! * 2 ** 24;
  return claimed <= length && claimed <= size ? claimed : length;
}

/**
 * Open a regular file read-only and read its first bytes: one native call when the addon is there, which also looks
 * for the file's edit journal when `journal` is set.
 */
export function openWithHead(path: string, journal = false): OpenedFile {
  const native = openHead(path, HEAD_BYTES, headToKeep, journal);
  if (native) return native;
  const fd = openForReading(path);
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new SafetensorError("IoError", `${path} is not a regular file`);
    const read = new Uint8Array(Math.min(HEAD_BYTES, stat.size));
    preadInto(fd, read, 0);
    // What the native call keeps, no more: tensor bytes past the header are read when asked for, so a file rewritten
    // in place after the open reads the same with or without the addon.
    const kept = headToKeep(read, read.length, stat.size);
    const head = kept < read.length ? read.slice(0, kept) : read;
    return { fd, size: stat.size, head, dev: stat.dev, ino: stat.ino, journal: undefined };
  } catch (error) {
    fs.closeSync(fd);
    throw ioError(error, `cannot read ${path}`);
  }
}

/** `fs.openSync(path, "r")`; its failure is an IoError (or the errno's own code) naming the file. */
export function openForReading(path: string): number {
  try {
    return fs.openSync(path, "r");
  } catch (error) {
    throw ioError(error, `cannot open ${path}`);
  }
}

/** fs.readSync reads at most this much per call (libuv caps a read at INT32_MAX bytes). */
const MAX_READ_CHUNK = 1 << 30;

export function ioError(error: unknown, what: string): SafetensorError {
  if (error instanceof SafetensorError) return error;
  return new SafetensorError("IoError", `${what}: ${systemErrorText(error)}`, { cause: error });
}

/** Reads at least this large are split across threads by the native addon (when it is there). */
const PARALLEL_READ_BYTES = 64 << 20;
export const READ_THREADS = 4;

/** Fill `target` with the file's bytes starting at `position`; short reads are retried, EOF is an error. */
export function preadInto(fd: number, target: Uint8Array, position: number): void {
  // Large reads into fresh memory are bound by page faults on the destination, which several threads take in
  // parallel: ~4x faster for a 2.4 GiB read on a 2-core machine.
  if (target.length >= PARALLEL_READ_BYTES && preadParallel(fd, target, position, READ_THREADS)) return;
  let done = 0;
  while (done < target.length) {
    const want = Math.min(target.length - done, MAX_READ_CHUNK);
    const got = fs.readSync(fd, target, done, want, position + done);
    if (got === 0) {
      throw new SafetensorError("IoError", `unexpected end of file at byte ${position + done} (the file shrank?)`);
    }
    done += got;
  }
}

/** Node 20's largest Uint8Array. */
export const MAX_BUFFER_BYTES = 2 ** 32;

/** Reads `length` bytes of `fd` from `position` into fresh memory the caller owns. */
export type OwnedReader = (fd: number, position: number, length: number) => Uint8Array;

/** Zeroed memory filled by {@link preadInto}. */
export const plainOwnedReader: OwnedReader = (fd, position, length) => {
  const target = new Uint8Array(length);
  preadInto(fd, target, position);
  return target;
};

/** Positional reads into fresh memory; every read is owned by the caller. */
export class PreadSource implements SyncByteSource {
  readonly kind = "pread";
  readonly scanHeader = nativeHeaderScanner();
  readonly zeroCopy = false;
  readonly byteLength: number;
  private fd: number | null;

  /**
   * Takes ownership of `fd`; `initial`, if given, holds the file's first bytes (served without a read).
   */
  constructor(
    fd: number,
    byteLength: number,
    private readonly readFresh: OwnedReader = plainOwnedReader,
    private readonly initial: Uint8Array = new Uint8Array(0),
  ) {
    this.fd = fd;
    this.byteLength = byteLength;
  }

  static open(path: string, readFresh?: OwnedReader): PreadSource {
    return PreadSource.opened(openWithHead(path), readFresh);
  }

  /** Over a file {@link openWithHead} opened (takes ownership of its descriptor). */
  static opened(file: OpenedFile, readFresh?: OwnedReader): PreadSource {
    return new PreadSource(file.fd, file.size, readFresh, file.head);
  }

  get descriptor(): number {
    if (this.fd === null) throw new SafetensorError("Closed", "file is closed");
    return this.fd;
  }

  read(offset: number, length: number): Uint8Array {
    checkRange(this, offset, length);
    if (length > MAX_BUFFER_BYTES) {
      throw new SafetensorError(
        "TooLarge",
        `a read of ${length} bytes exceeds this runtime's largest buffer (${MAX_BUFFER_BYTES} bytes); read it in slices`,
      );
    }
    if (offset + length <= this.initial.length) {
      const head = this.head();
      if (head !== null) return head.slice(offset, offset + length);
    }
    const fd = this.descriptor;
    try {
      return length < 64 * 1024 ? plainOwnedReader(fd, offset, length) : this.readFresh(fd, offset, length);
    } catch (error) {
      throw ioError(error, "read failed");
    }
  }

  readOwned(offset: number, length: number): Uint8Array {
    return this.read(offset, length);
  }

  head(): Uint8Array | null {
    return this.fd === null ? null : this.initial;
  }

  /** Read into caller-provided memory (reused buffers avoid first-touch page faults). */
  readInto(offset: number, target: Uint8Array): Uint8Array {
    checkRange(this, offset, target.length);
    preadInto(this.descriptor, target, offset);
    return target;
  }

  close(): void {
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}
