/**
 * Byte sources. The reader plans which byte ranges it needs, then asks a source for them; the source decides how
 * (memory view, positional read, mapped memory, HTTP range request).
 */
import { SafetensorError } from "../format/errors.js";

/** A random-access byte source whose reads complete synchronously (memory, local files, mapped files). */
export interface SyncByteSource {
  readonly byteLength: number;
  /**
   * True when `read` returns views of memory the source owns (valid until `close()`), false when every read is a
   * fresh copy the caller owns.
   */
  readonly zeroCopy: boolean;
  /** Bytes [offset, offset + length). */
  read(offset: number, length: number): Uint8Array;
  /** Bytes [offset, offset + length) in memory the caller owns, whatever `zeroCopy` says. */
  readOwned(offset: number, length: number): Uint8Array;
  /** A short name for diagnostics: "memory", "pread", "mmap". */
  readonly kind: string;
  /**
   * Optional accelerator: a native scan of header bytes read from this source, as records for `headerFromScan`, or
   * null when the scanner cannot settle them and the JavaScript reader must.
   */
  scanHeader?(headerBytes: Uint8Array): Float64Array | null;
  /**
   * Optional: the source's first bytes as read when it was opened, while it still has them (a view, never to be
   * written, valid until the next file is opened), so that the header is read from them without a copy; null or
   * undefined when they are gone (the header is then read with `read`).
   */
  head?(): Uint8Array | null;
  close(): void;
}

export function checkRange(source: { byteLength: number }, offset: number, length: number): void {
  if (!(offset >= 0 && length >= 0 && offset + length <= source.byteLength)) {
    throw new SafetensorError(
      "IoError",
      `read of ${length} bytes at ${offset} is outside the source (${source.byteLength} bytes)`,
    );
  }
}

/** A source over bytes already in memory: reads are views. A plain ArrayBuffer or any TypedArray works. */
export class MemorySource implements SyncByteSource {
  readonly kind = "memory";
  readonly zeroCopy = true;
  readonly byteLength: number;
  private bytes: Uint8Array | null;

  constructor(data: ArrayBuffer | ArrayBufferView) {
    this.bytes = ArrayBuffer.isView(data)
      ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
      : new Uint8Array(data);
    this.byteLength = this.bytes.byteLength;
  }

  private get open(): Uint8Array {
    if (!this.bytes) throw new SafetensorError("Closed", "source is closed");
    return this.bytes;
  }

  read(offset: number, length: number): Uint8Array {
    checkRange(this, offset, length);
    return this.open.subarray(offset, offset + length);
  }

  readOwned(offset: number, length: number): Uint8Array {
    return this.read(offset, length).slice();
  }

  close(): void {
    this.bytes = null;
  }
}
