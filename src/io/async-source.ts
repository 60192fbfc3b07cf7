/**
 * Asynchronous byte sources: the twin of `SyncByteSource` for bytes that arrive later (HTTP, Blob/File, Node's
 * FileHandle). Pure: no Node APIs, runs in browsers.
 */
import { SafetensorError } from "../format/errors.js";
import { checkRange, MemorySource, type SyncByteSource } from "./source.js";

/** Options of one read: `signal` cancels it. */
export interface ReadOptions {
  readonly signal?: AbortSignal | undefined;
}

/** A random-access byte source whose reads complete later. */
export interface ByteSource {
  readonly byteLength: number;
  /** A short name for diagnostics and defaults: "memory", "blob", "file", "http". */
  readonly kind: string;
  /** True when a read costs a round trip (HTTP): the reader then reads more at once. */
  readonly remote: boolean;
  /** Bytes [offset, offset + length), in memory the caller owns unless the source documents otherwise. */
  read(offset: number, length: number, options?: ReadOptions): Promise<Uint8Array>;
  /**
   * Optional: bytes [offset, offset + length) handed to `sink` in order, as consecutive chunks, each before the next
   * is read (a chunk is valid only during its call). For readers that copy bytes onward (into a GPU buffer): no
   * buffer of the whole range is made. `readChunks` below falls back to one `read`.
   */
  readChunks?(
    offset: number,
    length: number,
    sink: (chunk: Uint8Array) => void | Promise<void>,
    options?: ReadOptions,
  ): Promise<void>;
  /**
   * Optional: bytes [offset, offset + length) written into `target` (at least `length` long) with no buffer of the
   * source's own. Like a BYOB stream reader, the source may transfer `target`'s ArrayBuffer: the result is a view of
   * the same memory, which the caller uses (and reuses) from then on. `readInto` below falls back to chunks or a read.
   */
  readInto?(offset: number, length: number, target: Uint8Array, options?: ReadOptions): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** `source.readInto` when it has one; else its chunks, or one read, copied into `target`. */
export async function readInto(
  source: ByteSource,
  offset: number,
  length: number,
  target: Uint8Array,
  options: ReadOptions = {},
): Promise<Uint8Array> {
  if (target.length < length)
    throw new SafetensorError("InvalidOption", `target holds ${target.length} < ${length} bytes`);
  if (source.readInto) return source.readInto(offset, length, target, options);
  let at = 0;
  await readChunks(
    source,
    offset,
    length,
    (chunk) => {
      target.set(chunk, at);
      at += chunk.length;
    },
    options,
  );
  return target.subarray(0, length);
}

/** Bytes [offset, offset + length) of `source` to `sink` in chunks: the source's own `readChunks`, else one read. */
export async function readChunks(
  source: ByteSource,
  offset: number,
  length: number,
  sink: (chunk: Uint8Array) => void | Promise<void>,
  options: ReadOptions = {},
): Promise<void> {
  if (source.readChunks) return source.readChunks(offset, length, sink, options);
  await sink(await source.read(offset, length, options));
}

/** What the first read returns: the source, now of known size, and bytes [0, min(headLength, byteLength)). */
export interface OpenedSource {
  readonly source: ByteSource;
  readonly head: Uint8Array;
}

/**
 * A source that learns its size from its first read (HTTP: `Content-Range` of the first range request, no HEAD).
 * The reader, not the source, chooses how long that first read is.
 */
export interface ByteSourceOpener {
  readonly kind: string;
  readonly remote: boolean;
  openWithHead(headLength: number, options?: ReadOptions): Promise<OpenedSource>;
}

export function isOpener(value: unknown): value is ByteSourceOpener {
  return typeof (value as ByteSourceOpener | null)?.openWithHead === "function";
}

/** Throw the signal's reason when it is aborted (what `fetch` does). */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
}

function closedError(): SafetensorError {
  return new SafetensorError("Closed", "source is closed");
}

/**
 * Any synchronous source (memory, pread, mmap) as an async one: reads complete at once. Reads are whatever the sync
 * source's `read` returns (views for in-memory and mapped sources).
 */
export class SyncSourceAdapter implements ByteSource {
  readonly remote = false;
  private sync: SyncByteSource | null;
  readonly kind: string;
  readonly byteLength: number;

  constructor(sync: SyncByteSource) {
    this.sync = sync;
    this.kind = sync.kind;
    this.byteLength = sync.byteLength;
  }

  async read(offset: number, length: number, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    if (!this.sync) throw closedError();
    return this.sync.read(offset, length);
  }

  async close(): Promise<void> {
    this.sync?.close();
    this.sync = null;
  }
}

/** Bytes already in memory (a plain ArrayBuffer or any view). Reads are views of it: no copy. */
export class MemoryByteSource extends SyncSourceAdapter {
  constructor(data: ArrayBuffer | ArrayBufferView) {
    super(new MemorySource(data));
  }
}

/** Chunks of `readChunks` over a Blob: one slice each. */
const BLOB_CHUNK_BYTES = 4 << 20;

/** A Blob or File (browser `<input type=file>`, drag and drop; also Node's Blob). Each read slices the Blob. */
export class BlobSource implements ByteSource {
  readonly kind = "blob";
  readonly remote = false;
  readonly byteLength: number;
  private blob: Blob | null;

  constructor(blob: Blob) {
    this.blob = blob;
    this.byteLength = blob.size;
  }

  async read(offset: number, length: number, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    if (!this.blob) throw closedError();
    checkRange(this, offset, length);
    let buffer: ArrayBuffer;
    try {
      buffer = await this.blob.slice(offset, offset + length).arrayBuffer();
    } catch (cause) {
      // Browsers fail with NotReadableError when the file behind a File changed after it was picked.
      throw new SafetensorError("SourceChanged", `the file could not be read (changed since it was opened?)`, {
        cause,
      });
    }
    throwIfAborted(options.signal);
    if (buffer.byteLength !== length) {
      throw new SafetensorError("SourceChanged", `read ${buffer.byteLength} of ${length} bytes at ${offset}`);
    }
    return new Uint8Array(buffer);
  }

  async readChunks(
    offset: number,
    length: number,
    sink: (chunk: Uint8Array) => void | Promise<void>,
    options: ReadOptions = {},
  ): Promise<void> {
    checkRange(this, offset, length);
    for (let at = 0; at < length; at += BLOB_CHUNK_BYTES) {
      await sink(await this.read(offset + at, Math.min(BLOB_CHUNK_BYTES, length - at), options));
    }
  }

  async close(): Promise<void> {
    this.blob = null;
  }
}
