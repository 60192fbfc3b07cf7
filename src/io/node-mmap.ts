/**
 * A byte source over a private (copy-on-write) memory map of a file (native addon). Reads are zero-copy views valid
 * until `close()`, which detaches them (their length becomes 0) rather than leaving them pointing at unmapped memory.
 * Writing through a view changes a private copy of the page, never the file.
 *
 * Each view is its own window (external ArrayBuffer). V8 counts their bytes as external memory and starts a GC each
 * time that grows by 64 MB; one window over the whole file would instead force one synchronous full GC (~10 ms) at
 * the first read, which costs more than it saves unless most of a file is touched.
 */
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import { allocHuge, loadNative, MAX_WINDOW_LENGTH, Mapping } from "./native.js";
import { type Allocator, defaultAllocator, ioError, MAX_BUFFER_BYTES, openWithHead, preadInto } from "./node-file.js";
import { checkRange, type SyncByteSource } from "./source.js";

/** Owned buffers at least this large come from hugepage-backed memory when the addon is there. */
export const HUGE_ALLOCATION_THRESHOLD = 2 << 20;

/**
 * Memory for owned copies: hugepage-backed for large buffers when the addon is loaded (first touch of fresh 4 KiB
 * pages is what makes large copies slow), plain zeroed memory otherwise.
 */
export const ownedAllocator: Allocator = (length) => {
  if (length >= HUGE_ALLOCATION_THRESHOLD && length <= MAX_WINDOW_LENGTH && loadNative()) {
    return new Uint8Array(allocHuge(length));
  }
  return defaultAllocator(length);
};

export interface MmapOptions {
  /** Map every page at open (MAP_POPULATE) and touch them all in parallel: eager loads then never page-fault. */
  populate?: boolean;
}

/** Threads touching the pages of an eagerly loaded file (measured: 2.4 GiB in ~0.6 s with 4, ~0.9 s in line). */
const PREFAULT_THREADS = 4;

/** Reads within one page are served by pread into fresh memory: cheaper as a copy than as a tracked window. */
const SMALL_READ = 4096;

export class MmapSource implements SyncByteSource {
  readonly kind = "mmap";
  readonly zeroCopy = true;
  readonly byteLength: number;
  private fd: number | null;
  /** Mapped on first use: opening a file to read its header needs no mapping. */
  private mapped: Mapping | null = null;
  private closed = false;

  /** Takes ownership of `fd` (kept open for owned copies, which are read with pread rather than page faults). */
  private constructor(
    fd: number,
    byteLength: number,
    private readonly head: Uint8Array,
  ) {
    this.byteLength = byteLength;
    this.fd = fd;
  }

  static open(path: string, options: MmapOptions = {}): MmapSource {
    const { fd, size, head } = openWithHead(path);
    const source = new MmapSource(fd, size, head);
    if (options.populate) {
      try {
        source.mapped = Mapping.open(fd, size, { populate: true });
        source.mapped.prefault(PREFAULT_THREADS);
      } catch (error) {
        source.close();
        throw ioError(error, `cannot map ${path}`);
      }
    }
    return source;
  }

  private get mapping(): Mapping {
    if (this.closed) throw new SafetensorError("Closed", "file is closed");
    if (this.mapped === null) {
      if (this.fd === null) throw new SafetensorError("Closed", "file descriptor released");
      this.mapped = Mapping.open(this.fd, this.byteLength);
    }
    return this.mapped;
  }

  read(offset: number, length: number): Uint8Array {
    checkRange(this, offset, length);
    if (length > MAX_WINDOW_LENGTH) {
      throw new SafetensorError(
        "TooLarge",
        `a view of ${length} bytes exceeds this runtime's largest ArrayBuffer view (${MAX_WINDOW_LENGTH} bytes); read it in slices`,
      );
    }
    if (offset + length <= this.head.length) return this.head.slice(offset, offset + length);
    if (length <= SMALL_READ && this.fd !== null) return this.readOwned(offset, length);
    return this.mapping.bytes(offset, length);
  }

  /** Owned copies come from pread into fresh (hugepage-backed) memory: the kernel copies from the page cache. */
  readOwned(offset: number, length: number): Uint8Array {
    checkRange(this, offset, length);
    if (length > MAX_BUFFER_BYTES) {
      throw new SafetensorError("TooLarge", `a read of ${length} bytes exceeds this runtime's largest buffer`);
    }
    if (this.fd === null) throw new SafetensorError("Closed", "file is closed");
    const owned = length <= SMALL_READ ? new Uint8Array(length) : ownedAllocator(length);
    try {
      preadInto(this.fd, owned, offset);
    } catch (error) {
      throw ioError(error, "read failed");
    }
    return owned;
  }

  /** madvise over the whole file or a range: "willneed", "sequential", "random", "hugepage", … */
  advise(...args: Parameters<Mapping["advise"]>): void {
    this.mapping.advise(...args);
  }

  /**
   * Close the file descriptor but keep the mapping: views already handed out stay valid and are unmapped when the
   * last of them is garbage collected. Owned reads are no longer possible.
   */
  releaseDescriptor(): void {
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }

  close(): void {
    this.closed = true;
    this.mapped?.close();
    this.mapped = null;
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}
