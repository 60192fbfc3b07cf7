/**
 * Decorators over any `ByteSource`: a concurrency limit, coalescing of nearby reads issued together, and a block
 * cache. Sources stay simple (one read = one request); these add the policies on top. Pure: runs in browsers.
 */
import { SafetensorError } from "../format/errors.js";
import type { ByteSource, ReadOptions } from "./async-source.js";
import { throwIfAborted } from "./async-source.js";

/** A byte range [start, end) of a file. */
export interface Range {
  readonly start: number;
  readonly end: number;
}

/**
 * Sort and merge ranges whose gap is at most `maxGap` bytes, keeping each merged range at most `maxBytes` long (a
 * single range longer than that stays as it is). Returns the merged ranges; `members[i]` are the indices of the
 * input ranges each one covers.
 */
export function mergeRanges(
  ranges: readonly Range[],
  maxGap: number,
  maxBytes = Number.POSITIVE_INFINITY,
): { merged: Range[]; members: number[][] } {
  const order = ranges.map((_, i) => i).sort((a, b) => ranges[a]!.start - ranges[b]!.start);
  const merged: Range[] = [];
  const members: number[][] = [];
  for (const i of order) {
    const range = ranges[i]!;
    const last = merged[merged.length - 1];
    if (
      last !== undefined &&
      range.start - last.end <= maxGap &&
      Math.max(last.end, range.end) - last.start <= maxBytes
    ) {
      merged[merged.length - 1] = { start: last.start, end: Math.max(last.end, range.end) };
      members[members.length - 1]!.push(i);
    } else {
      merged.push({ start: range.start, end: range.end });
      members.push([i]);
    }
  }
  return { merged, members };
}

function positiveInteger(value: number, name: string): number {
  if (!(Number.isSafeInteger(value) && value >= 1)) {
    throw new SafetensorError("InvalidOption", `${name} must be a positive integer, got ${value}`);
  }
  return value;
}

/** Runs at most `limit` tasks at once, the rest in the order they were queued. */
export class Limiter {
  private active = 0;
  private readonly queue: (() => void)[] = [];
  readonly limit: number;

  constructor(limit: number) {
    this.limit = positiveInteger(limit, "concurrency");
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.queue.push(resolve));
    this.active++;
    try {
      return await task();
    } finally {
      this.active--;
      this.queue.shift()?.();
    }
  }
}

abstract class Decorator implements ByteSource {
  constructor(protected readonly inner: ByteSource) {}
  get byteLength(): number {
    return this.inner.byteLength;
  }
  get kind(): string {
    return this.inner.kind;
  }
  get remote(): boolean {
    return this.inner.remote;
  }
  abstract read(offset: number, length: number, options?: ReadOptions): Promise<Uint8Array>;
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** At most `concurrency` reads of `inner` in flight; the others wait their turn. */
export function withConcurrencyLimit(inner: ByteSource, concurrency: number): ByteSource {
  const limiter = new Limiter(concurrency);
  const limited = new (class extends Decorator {
    read(offset: number, length: number, options?: ReadOptions): Promise<Uint8Array> {
      return limiter.run(() => {
        throwIfAborted(options?.signal);
        return inner.read(offset, length, options);
      });
    }
  })(inner) as ByteSource;
  if (inner.readChunks) {
    // A chunked read holds its slot until its last chunk is handed on.
    limited.readChunks = (offset, length, sink, options) =>
      limiter.run(() => {
        throwIfAborted(options?.signal);
        return inner.readChunks!(offset, length, sink, options);
      });
  }
  if (inner.readInto) {
    limited.readInto = (offset, length, target, options) =>
      limiter.run(() => {
        throwIfAborted(options?.signal);
        return inner.readInto!(offset, length, target, options);
      });
  }
  return limited;
}

/** Options of `withCoalescing`. */
export interface CoalesceOptions {
  /** Reads issued in the same turn whose gap is at most this many bytes become one read. */
  readonly maxGap: number;
  /** A merged read is at most this long (default 64 MiB), so that one huge read does not serialize the rest. */
  readonly maxBytes?: number;
}

interface Pending {
  readonly range: Range;
  readonly signal: AbortSignal | undefined;
  resolve(bytes: Uint8Array): void;
  reject(error: unknown): void;
}

export const DEFAULT_COALESCE_MAX_BYTES = 64 << 20;

/**
 * Reads issued in the same JavaScript turn (e.g. every range of a plan, started together) are sorted and merged when
 * their gap is at most `maxGap`; each caller gets its own part of the merged read.
 */
export function withCoalescing(inner: ByteSource, options: CoalesceOptions): ByteSource {
  const maxGap = options.maxGap;
  if (!(maxGap >= 0)) throw new SafetensorError("InvalidOption", `maxGap must be ≥ 0, got ${maxGap}`);
  const maxBytes = positiveInteger(options.maxBytes ?? DEFAULT_COALESCE_MAX_BYTES, "maxBytes");
  let batch: Pending[] = [];
  const flush = () => {
    const pending = batch;
    batch = [];
    const { merged, members } = mergeRanges(
      pending.map((p) => p.range),
      maxGap,
      maxBytes,
    );
    merged.forEach((range, m) => {
      const group = members[m]!.map((i) => pending[i]!);
      // One signal for the merged read only when every member shares it; otherwise each member stops waiting alone.
      const signal = group.every((p) => p.signal === group[0]!.signal) ? group[0]!.signal : undefined;
      inner.read(range.start, range.end - range.start, { signal }).then(
        (bytes) => {
          for (const p of group) {
            if (p.signal?.aborted) p.reject(p.signal.reason);
            else p.resolve(bytes.subarray(p.range.start - range.start, p.range.end - range.start));
          }
        },
        (error) => {
          for (const p of group) p.reject(error);
        },
      );
    });
  };
  return new (class extends Decorator {
    read(offset: number, length: number, options?: ReadOptions): Promise<Uint8Array> {
      throwIfAborted(options?.signal);
      return new Promise((resolve, reject) => {
        if (batch.length === 0) queueMicrotask(flush);
        batch.push({ range: { start: offset, end: offset + length }, signal: options?.signal, resolve, reject });
      });
    }
  })(inner);
}

/** Options of `withCache`. */
export interface CacheOptions {
  /** Bytes are cached in aligned blocks of this size (default 64 KiB). */
  readonly blockSize?: number;
  /** At most this many bytes cached (default 32 MiB); least recently used blocks are dropped first. */
  readonly maxBytes?: number;
}

/**
 * An LRU block cache: repeated or overlapping small reads (slices, metadata probes) are served from memory. Reads
 * longer than a quarter of the cache go straight to `inner` and are not cached. Returned bytes are copies the caller
 * owns.
 */
export function withCache(inner: ByteSource, options: CacheOptions = {}): ByteSource {
  const blockSize = positiveInteger(options.blockSize ?? 64 << 10, "blockSize");
  const maxBlocks = Math.max(1, Math.floor(positiveInteger(options.maxBytes ?? 32 << 20, "maxBytes") / blockSize));
  // Map iteration order is insertion order: re-inserting on use makes the first key the least recently used.
  const blocks = new Map<number, Promise<Uint8Array>>();
  // Block reads carry no caller's signal: other callers may be waiting for the same block.
  const block = (index: number): Promise<Uint8Array> => {
    let found = blocks.get(index);
    if (found) blocks.delete(index);
    else {
      const start = index * blockSize;
      found = inner.read(start, Math.min(blockSize, inner.byteLength - start));
      // A failed read is not remembered.
      found.catch(() => blocks.get(index) === found && blocks.delete(index));
      while (blocks.size >= maxBlocks) blocks.delete(blocks.keys().next().value!);
    }
    blocks.set(index, found);
    return found;
  };
  return new (class extends Decorator {
    async read(offset: number, length: number, options?: ReadOptions): Promise<Uint8Array> {
      throwIfAborted(options?.signal);
      if (length * 4 > maxBlocks * blockSize) return inner.read(offset, length, options);
      if (!(offset >= 0 && length >= 0 && offset + length <= inner.byteLength)) {
        return inner.read(offset, length, options); // let the source report the bad range
      }
      const out = new Uint8Array(length);
      if (length === 0) return out;
      const first = Math.floor(offset / blockSize);
      const last = Math.floor((offset + length - 1) / blockSize);
      const parts: Promise<Uint8Array>[] = [];
      for (let b = first; b <= last; b++) parts.push(block(b));
      const fetched = await Promise.all(parts);
      throwIfAborted(options?.signal);
      fetched.forEach((bytes, k) => {
        const blockStart = (first + k) * blockSize;
        const from = Math.max(offset, blockStart);
        const to = Math.min(offset + length, blockStart + bytes.length);
        out.set(bytes.subarray(from - blockStart, to - blockStart), from - offset);
      });
      return out;
    }
  })(inner);
}
