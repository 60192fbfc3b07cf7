/**
 * A lazily read safetensors file over any asynchronous byte source (HTTP, Blob/File, Node FileHandle, memory): the
 * same header parser, slice planner and gather as the synchronous `SafetensorsFile`. Pure: runs in browsers.
 *
 * Reads are planned first (which byte ranges), then fetched together: ranges closer than `maxGap` merge, ranges
 * longer than `maxReadBytes` split, and at most `concurrency` reads are in flight.
 */
import { SafetensorError } from "../format/errors.js";
import { type Header, type HeaderOptions, parseHeader, readHeaderLength, type TensorInfo } from "../format/header.js";
import { mergeRanges, type Range, withConcurrencyLimit } from "../io/async-decorators.js";
import {
  BlobSource,
  type ByteSource,
  type ByteSourceOpener,
  isOpener,
  MemoryByteSource,
  type ReadOptions,
  readChunks,
  readInto,
  throwIfAborted,
} from "../io/async-source.js";
import { type HfOptions, resolveHfUrl } from "../remote/hf.js";
import { type HttpOptions, HttpSource } from "../remote/http.js";
import { fetchRanges, gather, gatherPieces, type SliceIndex, type SlicePlan } from "../slice/index.js";
import { HeaderView } from "./header-view.js";
import { Tensor } from "./tensor.js";

/** First read for remote sources: one request covers the size prefix and the header of nearly every checkpoint. */
export const DEFAULT_REMOTE_FIRST_READ = 1 << 20;
/** First read for local sources (files, Blobs): a cheap read that covers typical headers. */
export const DEFAULT_LOCAL_FIRST_READ = 64 << 10;
export const DEFAULT_REMOTE_CONCURRENCY = 8;
export const DEFAULT_LOCAL_CONCURRENCY = 4;
/** Largest single read; longer ranges are split into reads of this size, fetched concurrently. */
export const DEFAULT_MAX_READ_BYTES = 64 << 20;
/** Gaps bridged between ranges of one plan: a round trip costs more than this many bytes on typical links. */
export const DEFAULT_REMOTE_MAX_GAP = 64 << 10;
export const DEFAULT_LOCAL_MAX_GAP = 4096;

/** How an async file plans its reads: the first read's size, merging, splitting and concurrency. */
export interface AsyncReadOptions {
  /**
   * Bytes read at open, before the header size is known (default 1 MiB for remote sources, 64 KiB for local ones).
   * A header that does not fit takes exactly one more read, of the rest of it.
   */
  firstReadBytes?: number;
  /** At most this many reads in flight at once (default 8 remote, 4 local). */
  concurrency?: number;
  /** Ranges of one request (a slice, a set of tensors) closer than this are read as one (64 KiB remote, 4 KiB local). */
  maxGap?: number;
  /** Largest single read in bytes (default 64 MiB); longer ranges are split and fetched concurrently. */
  maxReadBytes?: number;
  /** Cancels the open. */
  signal?: AbortSignal;
}

/** Options of `open`: header limits, how reads are planned, HTTP and Hub settings. */
export interface AsyncOpenOptions extends HeaderOptions, AsyncReadOptions, HttpOptions, HfOptions {}

/** What `open` accepts: a source, a Blob/File, bytes in memory, or an http(s):// or hf:// URL. */
export type AsyncInput = ByteSource | ByteSourceOpener | Blob | ArrayBuffer | ArrayBufferView | string | URL;

/** Options of one read of an async file: `signal` cancels it. */
export interface AsyncGetOptions extends ReadOptions {}

/** A tensor to be sliced: `get` reads a numpy basic index of it, touching only the bytes it selects. */
export interface AsyncTensorSlice {
  readonly name: string;
  readonly dtype: TensorInfo["dtype"];
  readonly shape: readonly number[];
  plan(index: string | readonly SliceIndex[]): SlicePlan;
  /** Read `index` as `TensorSlice.get` does: a `Tensor` of the slice's shape, in memory the caller owns. */
  get(index: string | readonly SliceIndex[], options?: AsyncGetOptions): Promise<Tensor>;
}

function option(value: number | undefined, fallback: number, name: string, min = 1): number {
  const v = value ?? fallback;
  if (!(Number.isSafeInteger(v) && v >= min)) {
    throw new SafetensorError("InvalidOption", `${name} must be an integer ≥ ${min}, got ${value}`);
  }
  return v;
}

/** Turn what `open` accepts into a source or an opener. */
export function toSource(input: AsyncInput, options: HttpOptions & HfOptions = {}): ByteSource | ByteSourceOpener {
  if (typeof input === "string" && /^hf:\/\//i.test(input)) {
    const { url, headers } = resolveHfUrl(input, options);
    // Headers given by the caller win over the token's Authorization.
    new Headers(options.headers).forEach((value, key) => {
      headers.set(key, value);
    });
    return new HttpSource(url, { ...options, headers });
  }
  if (typeof input === "string" || input instanceof URL) return new HttpSource(input, options);
  if (typeof Blob !== "undefined" && input instanceof Blob) return new BlobSource(input);
  if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) return new MemoryByteSource(input);
  if (isOpener(input) || typeof (input as ByteSource).read === "function") return input as ByteSource;
  throw new SafetensorError("InvalidOption", "open() takes a ByteSource, a Blob, bytes or an http(s):// or hf:// URL");
}

/**
 * Open a safetensors file from a URL, a Blob/File, bytes or any `ByteSource`: reads and validates the header (one
 * read for headers that fit in `firstReadBytes`), then tensors on demand. Close it when done.
 */
export async function open(input: AsyncInput, options: AsyncOpenOptions = {}): Promise<AsyncSafetensorsFile> {
  return AsyncSafetensorsFile.open(toSource(input, options), options);
}

/**
 * A safetensors file read through an async `ByteSource` (a URL, a Blob, bytes, a Node FileHandle): the header is read
 * and validated at open, then tensors and slices are fetched on demand with planned, concurrent reads. Made by `open`.
 */
export class AsyncSafetensorsFile extends HeaderView<ByteSource> {
  /** The first bytes of the file, read at open: reads inside them need no further read. */
  private readonly head: Uint8Array;
  private readonly maxGap: number;
  private readonly maxReadBytes: number;

  private constructor(source: ByteSource, header: Header, head: Uint8Array, maxGap: number, maxReadBytes: number) {
    super(source, header);
    this.head = head;
    this.maxGap = maxGap;
    this.maxReadBytes = maxReadBytes;
  }

  /** Read and validate the header. The file owns the source from here on and closes it. */
  static async open(
    input: ByteSource | ByteSourceOpener,
    options: AsyncOpenOptions = {},
  ): Promise<AsyncSafetensorsFile> {
    const remote = input.remote;
    const firstRead = option(
      options.firstReadBytes,
      remote ? DEFAULT_REMOTE_FIRST_READ : DEFAULT_LOCAL_FIRST_READ,
      "firstReadBytes",
      8,
    );
    const concurrency = option(
      options.concurrency,
      remote ? DEFAULT_REMOTE_CONCURRENCY : DEFAULT_LOCAL_CONCURRENCY,
      "concurrency",
    );
    const maxGap = option(options.maxGap, remote ? DEFAULT_REMOTE_MAX_GAP : DEFAULT_LOCAL_MAX_GAP, "maxGap", 0);
    const maxReadBytes = option(options.maxReadBytes, DEFAULT_MAX_READ_BYTES, "maxReadBytes");
    const signal = options.signal;
    let source: ByteSource | null = null;
    try {
      let head: Uint8Array;
      if (isOpener(input)) {
        ({ source, head } = await input.openWithHead(firstRead, { signal }));
      } else {
        source = input;
        head = await source.read(0, Math.min(firstRead, source.byteLength), { signal });
      }
      const size = source.byteLength;
      const n = readHeaderLength(head, size, options);
      let headerBytes: Uint8Array;
      if (8 + n <= head.length) headerBytes = head.subarray(8, 8 + n);
      else {
        // The header is larger than the first read: one more read, of exactly the rest.
        const rest = await source.read(head.length, 8 + n - head.length, { signal });
        headerBytes = new Uint8Array(n);
        headerBytes.set(head.subarray(8));
        headerBytes.set(rest, head.length - 8);
      }
      const header = parseHeader(headerBytes, size, options);
      return new AsyncSafetensorsFile(withConcurrencyLimit(source, concurrency), header, head, maxGap, maxReadBytes);
    } catch (error) {
      await source?.close().catch(() => {});
      throw error;
    }
  }

  /**
   * Read several absolute byte ranges of the file: merged when closer than `maxGap` (default: the file's), split
   * when longer than `maxReadBytes`, fetched concurrently. Returns one buffer per range, in the order given.
   */
  async readRanges(
    ranges: readonly Range[],
    options: AsyncGetOptions & { maxGap?: number } = {},
  ): Promise<Uint8Array[]> {
    const source = this.live;
    for (const r of ranges) {
      if (!(Number.isSafeInteger(r.start) && r.start >= 0 && r.end >= r.start && r.end <= source.byteLength)) {
        throw new SafetensorError(
          "IoError",
          `range [${r.start}, ${r.end}) is outside the file (${source.byteLength} bytes)`,
        );
      }
    }
    const out = new Array<Uint8Array>(ranges.length);
    const wanted: number[] = [];
    // Ranges inside the first read are served from it (copies, so that callers own what they get); ranges that
    // start inside it are fetched from its end on.
    const headEnd = this.head.length;
    const fetched = ranges.map((r) => ({ start: Math.max(r.start, Math.min(r.end, headEnd)), end: r.end }));
    ranges.forEach((r, i) => {
      if (r.end <= headEnd) out[i] = this.head.slice(r.start, r.end);
      else if (r.end === r.start) out[i] = new Uint8Array(0);
      else wanted.push(i);
    });
    const { merged, members } = mergeRanges(
      wanted.map((i) => fetched[i]!),
      options.maxGap ?? this.maxGap,
      this.maxReadBytes,
    );
    await Promise.all(
      merged.map(async (range, m) => {
        const bytes = await this.readSpan(source, range.start, range.end - range.start, options.signal);
        for (const k of members[m]!) {
          const i = wanted[k]!;
          const [r, f] = [ranges[i]!, fetched[i]!];
          const part = bytes.subarray(f.start - range.start, f.end - range.start);
          if (f.start === r.start) out[i] = part;
          else {
            const whole = new Uint8Array(r.end - r.start);
            whole.set(this.head.subarray(r.start));
            whole.set(part, f.start - r.start);
            out[i] = whole;
          }
        }
      }),
    );
    return out;
  }

  /** One range, as one read or, when longer than `maxReadBytes`, as concurrent reads into one buffer. */
  private async readSpan(
    source: ByteSource,
    offset: number,
    length: number,
    signal?: AbortSignal,
  ): Promise<Uint8Array> {
    if (length <= this.maxReadBytes) return source.read(offset, length, { signal });
    const out = new Uint8Array(length);
    const parts: Promise<void>[] = [];
    for (let done = 0; done < length; done += this.maxReadBytes) {
      const take = Math.min(this.maxReadBytes, length - done);
      parts.push(source.read(offset + done, take, { signal }).then((bytes) => out.set(bytes, done)));
    }
    await Promise.all(parts);
    return out;
  }

  /** Read one tensor, touching only its bytes. The data is memory the caller owns (or a view of the first read). */
  async getTensor(name: string, options: AsyncGetOptions = {}): Promise<Tensor> {
    const info = this.info(name);
    const { offset, length } = this.byteRange(name);
    const [data] = await this.readRanges([{ start: offset, end: offset + length }], options);
    return new Tensor(info.dtype, info.shape, data!);
  }

  /** Read several tensors (default: all) with merged, concurrent reads; in file order. */
  async getTensors(names?: readonly string[], options: AsyncGetOptions = {}): Promise<Map<string, Tensor>> {
    const infos = (names ?? this.offsetKeys()).map((name) => this.info(name));
    infos.sort((a, b) => a.dataOffsets[0] - b.dataOffsets[0]);
    const start = this.header.dataStart;
    const bytes = await this.readRanges(
      infos.map((info) => ({ start: start + info.dataOffsets[0], end: start + info.dataOffsets[1] })),
      { signal: options.signal, maxGap: 0 },
    );
    return new Map(infos.map((info, i) => [info.name, new Tensor(info.dtype, info.shape, bytes[i]!)]));
  }

  /**
   * Raw bytes [offset, offset + length) of the file to `sink` in consecutive chunks, each valid only during its call
   * (the source's own chunks when it has `readChunks`: an HTTP body as it arrives; else one read).
   */
  async readChunks(
    offset: number,
    length: number,
    sink: (chunk: Uint8Array) => void | Promise<void>,
    options: AsyncGetOptions = {},
  ): Promise<void> {
    const source = this.live;
    if (!(Number.isSafeInteger(offset) && offset >= 0 && length >= 0 && offset + length <= source.byteLength)) {
      throw new SafetensorError("IoError", `range [${offset}, ${offset + length}) is outside the file`);
    }
    const fromHead = Math.max(0, Math.min(offset + length, this.head.length) - offset);
    if (fromHead > 0) await sink(this.head.subarray(offset, offset + fromHead));
    if (fromHead < length) await readChunks(source, offset + fromHead, length - fromHead, sink, options);
  }

  /**
   * Raw bytes [offset, offset + length) of the file written into `target` (see `ByteSource.readInto`: use the
   * returned view, over the same memory, from then on).
   */
  async readInto(
    offset: number,
    length: number,
    target: Uint8Array,
    options: AsyncGetOptions = {},
  ): Promise<Uint8Array> {
    const source = this.live;
    if (!(Number.isSafeInteger(offset) && offset >= 0 && length >= 0 && offset + length <= source.byteLength)) {
      throw new SafetensorError("IoError", `range [${offset}, ${offset + length}) is outside the file`);
    }
    const fromHead = Math.max(0, Math.min(offset + length, this.head.length) - offset);
    if (fromHead === length) {
      target.set(this.head.subarray(offset, offset + length));
      return target.subarray(0, length);
    }
    const rest = await readInto(source, offset + fromHead, length - fromHead, target.subarray(fromHead), options);
    const out = new Uint8Array(rest.buffer, rest.byteOffset - fromHead, length);
    out.set(this.head.subarray(offset, offset + fromHead));
    return out;
  }

  /** Raw bytes [offset, offset + length) of the file. */
  async readRange(offset: number, length: number, options: AsyncGetOptions = {}): Promise<Uint8Array> {
    const [bytes] = await this.readRanges([{ start: offset, end: offset + length }], options);
    return bytes!;
  }

  /** A lazily read slice of a tensor. */
  getSlice(name: string): AsyncTensorSlice {
    const info = this.info(name);
    const plan = (index: string | readonly SliceIndex[]) => this.slicePlan(name, index);
    return {
      name,
      dtype: info.dtype,
      shape: info.shape,
      plan,
      get: async (index, options = {}) => {
        const slicePlan = plan(index);
        const data = await this.readPlan(name, slicePlan, options);
        return new Tensor(info.dtype, slicePlan.shape.map(Number), data);
      },
    };
  }

  /**
   * Fetch and gather the bytes a slice plan of tensor `name` selects. `maxGap` (default: the file's) decides which
   * gaps between the plan's runs are read rather than skipped.
   */
  async readPlan(
    name: string,
    plan: SlicePlan,
    options: AsyncGetOptions & { maxGap?: number } = {},
  ): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    if (plan.byteLength === 0) return new Uint8Array(0);
    const base = this.byteRange(name).offset;
    const ranges = fetchRanges(plan, { maxGap: options.maxGap ?? this.maxGap });
    const bytes = await this.readRanges(
      ranges.map((r) => ({ start: base + r.start, end: base + r.end })),
      { signal: options.signal, maxGap: 0 },
    );
    const pieces = ranges.map((r, i) => ({ offset: r.start, bytes: bytes[i]! }));
    return pieces.length === 1 ? gather(plan, pieces[0]!.bytes, pieces[0]!.offset) : gatherPieces(plan, pieces);
  }

  async close(): Promise<void> {
    const source = this.source;
    this.source = null;
    await source?.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
