/**
 * A byte source over a private (copy-on-write) memory map of a file (native addon). Reads are zero-copy views valid
 * until `close()`, which detaches them (their length becomes 0) rather than leaving them pointing at unmapped memory.
 * Writing through a view changes a private copy of the page, never the file.
 *
 * Where the addon makes windows V8 does not count as external memory (`uncountedWindows`), every view is a
 * `Uint8Array` over one shared window per 4 GiB of the file: a view costs what a `subarray` costs and never triggers
 * a GC (measured: 48 views of a 2.4 GiB file, each read at both ends, ~1 ms in all with the open, against 16–45 ms
 * when each view was its own counted window). Otherwise each view is its own window, and reads within one page are
 * served by pread: counted windows make V8 start a full GC each time their total grows by ~64 MB.
 */
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import { type MappedFile, mappedFile, registerBuffer, registerWindow } from "./file-views.js";
import { MAX_WINDOW_LENGTH, Mapping, nativeHeaderScanner, uncountedWindows } from "./native.js";
import { ioError, type OpenedFile, openWithHead } from "./node-file.js";
import { readOwnedFrom } from "./node-owned.js";
import { checkRange, type SyncByteSource } from "./source.js";

export interface MmapOptions {
  /** Make every page resident at open: every page of the mapping is touched by several threads. */
  populate?: boolean;
}

/**
 * Threads touching every page of a populated file. Page faults proceed in parallel; MAP_POPULATE is one kernel thread.
 * Measured on 2.37 GiB (2 vCPUs, page cache warm, median of 3): MAP_POPULATE 194 ms and a lazy touch 185 ms, while
 * a 4-thread touch took 100-115 ms; on another VM, where first accesses stayed slow even after MAP_POPULATE, the
 * parallel touch took 2.4 GiB from 1.1 s to 0.75 s.
 */
const PREFAULT_THREADS = 4;

/** Counted windows only: reads within one page are served by pread, cheaper as a copy than as a window. */
const SMALL_READ = 4096;

export class MmapSource implements SyncByteSource {
  readonly kind = "mmap";
  readonly scanHeader = nativeHeaderScanner();
  readonly zeroCopy = true;
  readonly byteLength: number;
  private fd: number | null;
  /** Mapped on first use: opening a file to read its header needs no mapping. */
  private mapped: Mapping | null = null;
  /**
   * The file as windows of it name it (file-views.ts: saves of views copy file to file), its identity taken at open
   * on the descriptor that is mapped.
   */
  private readonly file: MappedFile;
  /** Shared windows, one per MAX_WINDOW_LENGTH bytes of the file (uncounted windows only), made on first use. */
  private readonly chunks: ArrayBuffer[] = [];
  private readonly shared = uncountedWindows();
  private closed = false;
  /** The first bytes read at open. */
  private readonly initial: Uint8Array;

  /** Takes ownership of the descriptor (kept open for owned copies, read with pread rather than page faults). */
  private constructor(opened: OpenedFile, path: string) {
    this.initial = opened.head;
    this.byteLength = opened.size;
    this.fd = opened.fd;
    this.file = mappedFile(path, opened.dev, opened.ino);
  }

  static open(path: string, options: MmapOptions = {}): MmapSource {
    return MmapSource.opened(path, openWithHead(path), options);
  }

  /** Over the file at `path` that {@link openWithHead} opened (takes ownership of its descriptor). */
  static opened(path: string, opened: OpenedFile, options: MmapOptions = {}): MmapSource {
    const source = new MmapSource(opened, path);
    if (options.populate) {
      try {
        source.mapped = Mapping.open(opened.fd, opened.size);
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

  private chunk(index: number): ArrayBuffer {
    let window = this.chunks[index];
    if (window === undefined || window.byteLength === 0) {
      const start = index * MAX_WINDOW_LENGTH;
      window = this.mapping.window(start, Math.min(MAX_WINDOW_LENGTH, this.byteLength - start));
      registerBuffer(window, this.file, start);
      this.chunks[index] = window;
    }
    return window;
  }

  read(offset: number, length: number): Uint8Array {
    // The common case first, in as few steps as possible: a view in the first shared window, past the head.
    const first = this.chunks[0];
    if (
      first !== undefined &&
      offset >= this.initial.length &&
      length >= 0 &&
      offset + length <= first.byteLength &&
      offset + length <= this.byteLength
    ) {
      return new Uint8Array(first, offset, length);
    }
    checkRange(this, offset, length);
    if (length > MAX_WINDOW_LENGTH) {
      throw new SafetensorError(
        "TooLarge",
        `a view of ${length} bytes exceeds this runtime's largest ArrayBuffer view (${MAX_WINDOW_LENGTH} bytes); read it in slices`,
      );
    }
    if (offset + length <= this.initial.length) {
      const head = this.head();
      if (head !== null) return head.slice(offset, offset + length);
    }
    if (this.shared) {
      const index = Math.floor(offset / MAX_WINDOW_LENGTH);
      const start = index * MAX_WINDOW_LENGTH;
      // A view crossing a 4 GiB boundary gets a window of its own.
      if (offset + length <= start + MAX_WINDOW_LENGTH)
        return new Uint8Array(this.chunk(index), offset - start, length);
      return this.#window(offset, length);
    }
    if (length <= SMALL_READ && this.fd !== null) return this.readOwned(offset, length);
    return this.#window(offset, length);
  }

  /** A window of its own for one view. */
  #window(offset: number, length: number): Uint8Array {
    const view = this.mapping.bytes(offset, length);
    registerWindow(view, this.file, offset);
    return view;
  }

  head(): Uint8Array | null {
    return this.closed ? null : this.initial;
  }

  /** Owned copies are read with pread into fresh memory (node-owned.ts), never served from the mapping. */
  readOwned(offset: number, length: number): Uint8Array {
    checkRange(this, offset, length);
    if (this.fd === null) throw new SafetensorError("Closed", "file is closed");
    return readOwnedFrom(this.fd, offset, length);
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
    this.chunks.length = 0;
    this.mapped?.close();
    this.mapped = null;
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}
