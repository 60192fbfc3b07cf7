/**
 * A byte source over a read-only memory map of a file (native addon). Reads are zero-copy views valid until
 * `close()`, which detaches them (their length becomes 0) rather than leaving them pointing at unmapped memory.
 */
import { SafetensorError } from "../format/errors.js";
import { allocHuge, loadNative, MAX_WINDOW_LENGTH, Mapping } from "./native.js";
import { type Allocator, defaultAllocator, ioError } from "./node-file.js";
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
  /** Fault in every page at open (MAP_POPULATE): eager loads then never page-fault. */
  populate?: boolean;
}

export class MmapSource implements SyncByteSource {
  readonly kind = "mmap";
  readonly zeroCopy = true;
  readonly byteLength: number;

  constructor(private readonly mapping: Mapping) {
    this.byteLength = mapping.byteLength;
  }

  static open(path: string, options: MmapOptions = {}): MmapSource {
    try {
      return new MmapSource(Mapping.openFile(path, { populate: options.populate ?? false }));
    } catch (error) {
      throw ioError(error, `cannot map ${path}`);
    }
  }

  read(offset: number, length: number): Uint8Array {
    checkRange(this, offset, length);
    if (length > MAX_WINDOW_LENGTH) {
      throw new SafetensorError(
        "TooLarge",
        `a view of ${length} bytes exceeds this runtime's largest ArrayBuffer view (${MAX_WINDOW_LENGTH} bytes); read it in slices`,
      );
    }
    return this.mapping.bytes(offset, length);
  }

  readOwned(offset: number, length: number): Uint8Array {
    const view = this.read(offset, length);
    const owned = ownedAllocator(length);
    owned.set(view);
    return owned;
  }

  /** madvise over the whole file or a range: "willneed", "sequential", "random", "hugepage", … */
  advise(...args: Parameters<Mapping["advise"]>): void {
    this.mapping.advise(...args);
  }

  close(): void {
    this.mapping.close();
  }
}
