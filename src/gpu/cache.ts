/**
 * A cache of downloaded checkpoints in the origin private file system (OPFS), so that the second visit loads from
 * disk: `openWeightCache()` and pass it as `loadToGPU(..., { cache })`, or wrap any URL with `cache.opener(url)`
 * (a `ByteSourceOpener`, like `HttpSource`, for `open` and `AsyncSafetensorsFile.open`).
 *
 * - Keyed by URL and the validators the server gives (ETag, Last-Modified, size; and the SHA-256 when the caller
 *   passes one from a manifest, or the Hub's ETag is the file's LFS oid). Every open asks the server for 8 bytes to
 *   learn them (past the browser's HTTP cache); an entry whose validators differ is dropped, and so is an entry during whose use the server's answer
 *   changes (`SourceChanged`). A server that sends none of them is not cached (nothing could tell a change).
 * - Stored block by block (`blockBytes`, 4 MiB), each block a file written whole (OPFS writes go to a swap file and
 *   replace the target on close, so a block file is complete or absent): an interrupted download keeps the blocks it
 *   finished, and the next load fetches only the rest.
 * - Each block file ends with the SHA-256 of every 256 KiB of it, computed from the bytes as downloaded. A read
 *   checks the pieces it serves against them; a piece that does not match is dropped and fetched again.
 * - A size budget (`maxBytes`) with least-recently-used eviction of whole entries (never one in use); a block that
 *   does not fit is served without being stored.
 */
import { SafetensorError } from "../format/errors.js";
import {
  type ByteSource,
  type ByteSourceOpener,
  type OpenedSource,
  type ReadOptions,
  throwIfAborted,
} from "../io/async-source.js";
import { type HttpOptions, HttpSource } from "../remote/http.js";
import { bypassHttpCache, type SourceCache } from "./open.js";

export const DEFAULT_CACHE_NAME = "safetensors-ts-cache";
export const DEFAULT_CACHE_BLOCK_BYTES = 4 << 20;
/** The budget when the browser does not report a quota. */
export const DEFAULT_CACHE_MAX_BYTES = 4 * 2 ** 30;
/** Bytes covered by one stored SHA-256. */
export const CACHE_PIECE_BYTES = 256 << 10;
/** Fetched blocks held while they are written (`WeightCacheOptions.pendingBlocks`). */
export const DEFAULT_CACHE_PENDING_BLOCKS = 4;
/** Bytes per `write` to a block file: each write is copied once more on its way out of the page. */
const WRITE_BYTES = 1 << 20;
const HASH = 32;

export interface WeightCacheOptions {
  /** The folder in the origin's private file system (default "safetensors-ts-cache"). */
  name?: string;
  /** At most this many bytes kept (default: half the quota `navigator.storage.estimate()` reports, else 4 GiB). */
  maxBytes?: number;
  /** Bytes per stored block (default 4 MiB; a multiple of 256 KiB). Applies to entries made from now on. */
  blockBytes?: number;
  /** Ask the browser to keep the cache under storage pressure (`navigator.storage.persist()`). */
  persist?: boolean;
  /** A directory to use instead of `navigator.storage.getDirectory()`. */
  directory?: FileSystemDirectoryHandle;
  /**
   * Fetched blocks held in page memory while they are hashed and written (default 4): reads wait for one of them to
   * be written when all are taken. Page memory for filling the cache is this × `blockBytes`, however large the file.
   */
  pendingBlocks?: number;
}

export interface CacheEntryInfo {
  readonly url: string;
  readonly etag: string | null;
  readonly lastModified: string | null;
  readonly sha256: string | null;
  /** The file's size, and how much of it is stored. */
  readonly size: number;
  readonly cachedBytes: number;
  readonly complete: boolean;
  /** When it was last opened (ms since the epoch). */
  readonly lastUsed: number;
}

export interface CacheStats {
  /** Bytes fetched from servers, and bytes served from stored blocks, since the cache was opened. */
  networkBytes: number;
  cacheBytes: number;
  /** Pieces whose bytes did not match their stored SHA-256 (dropped and fetched again). */
  corruptPieces: number;
  /** Bytes served without being stored (over the budget). */
  uncachedBytes: number;
}

interface Meta {
  version: 1;
  url: string;
  etag: string | null;
  lastModified: string | null;
  sha256: string | null;
  size: number;
  blockBytes: number;
  lastUsed: number;
}

interface Entry {
  readonly dir: FileSystemDirectoryHandle;
  readonly dirName: string;
  meta: Meta;
  readonly blocks: Set<number>;
  users: number;
}

const META = "meta.json";
const BLOCK = /^b(\d+)$/;

async function sha256(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>));
}

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The Hub serves an LFS file's SHA-256 as its ETag. */
function oidOf(etag: string | null): string | null {
  const match = etag === null ? null : /^(?:W\/)?"?([0-9a-f]{64})"?$/.exec(etag);
  return match ? match[1]! : null;
}

async function entries(dir: FileSystemDirectoryHandle): Promise<[string, FileSystemHandle][]> {
  const out: [string, FileSystemHandle][] = [];
  const iterable = dir as unknown as AsyncIterable<[string, FileSystemHandle]> & {
    entries(): AsyncIterable<[string, FileSystemHandle]>;
  };
  for await (const pair of iterable.entries()) out.push(pair);
  return out;
}

function positive(value: number | undefined, fallback: number, name: string): number {
  const v = value ?? fallback;
  if (!(Number.isSafeInteger(v) && v > 0)) {
    throw new SafetensorError("InvalidOption", `${name} must be a positive integer, got ${value}`);
  }
  return v;
}

/** Open (creating it if needed) the cache in the origin private file system. */
export async function openWeightCache(options: WeightCacheOptions = {}): Promise<WeightCache> {
  const storage = (globalThis as { navigator?: Navigator }).navigator?.storage;
  let root = options.directory;
  if (root === undefined) {
    if (typeof storage?.getDirectory !== "function") {
      throw new SafetensorError("BackendUnavailable", "no origin private file system here (navigator.storage)");
    }
    root = await storage.getDirectory();
  }
  const dir = await root.getDirectoryHandle(options.name ?? DEFAULT_CACHE_NAME, { create: true });
  let maxBytes = options.maxBytes;
  if (maxBytes === undefined) {
    const quota = (await storage?.estimate?.().catch(() => undefined))?.quota;
    maxBytes = quota ? Math.floor(quota / 2) : DEFAULT_CACHE_MAX_BYTES;
  }
  const blockBytes = positive(options.blockBytes, DEFAULT_CACHE_BLOCK_BYTES, "blockBytes");
  if (blockBytes % CACHE_PIECE_BYTES !== 0) {
    throw new SafetensorError("InvalidOption", `blockBytes must be a multiple of ${CACHE_PIECE_BYTES}`);
  }
  const pendingBlocks = positive(options.pendingBlocks, DEFAULT_CACHE_PENDING_BLOCKS, "pendingBlocks");
  const cache = new WeightCache(dir, positive(maxBytes, maxBytes, "maxBytes"), blockBytes, pendingBlocks);
  await cache.load();
  if (options.persist) await cache.persist();
  return cache;
}

export class WeightCache implements SourceCache {
  readonly stats: CacheStats = { networkBytes: 0, cacheBytes: 0, corruptPieces: 0, uncachedBytes: 0 };
  private readonly entries = new Map<string, Entry>();
  /** Block buffers not in use, and how many exist; reads waiting for one. */
  private readonly free: ArrayBuffer[] = [];
  private allocated = 0;
  private readonly waiting: (() => void)[] = [];
  /** Bytes of blocks being written (counted against maxBytes with the stored ones). */
  private reserved = 0;
  private openSources = 0;

  /** @internal Use `openWeightCache`. */
  constructor(
    private readonly dir: FileSystemDirectoryHandle,
    readonly maxBytes: number,
    readonly blockBytes: number,
    readonly pendingBlocks: number = DEFAULT_CACHE_PENDING_BLOCKS,
  ) {}

  /**
   * @internal A buffer of at least `bytes` to fetch a block into, reused from blocks already written: at most
   * `pendingBlocks` of them exist (waits for one while all are taken). A fresh buffer per fetched block was garbage
   * the renderer's memory peaked on until the collector ran.
   */
  async takeBuffer(bytes: number, signal: AbortSignal | undefined): Promise<ArrayBuffer> {
    for (;;) {
      throwIfAborted(signal);
      const index = this.free.findIndex((b) => b.byteLength >= bytes);
      if (index >= 0) return this.free.splice(index, 1)[0]!;
      if (this.allocated < this.pendingBlocks) {
        this.allocated++;
        return new ArrayBuffer(Math.max(bytes, this.blockBytes));
      }
      if (this.free.length > 0) {
        this.free.shift(); // too small (an entry with other blocks): make room for one that fits
        this.allocated--;
        continue;
      }
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
  }

  /** @internal A buffer from `takeBuffer` back (a failed BYOB read may have detached it: then it is made anew). */
  giveBuffer(buffer: ArrayBuffer): void {
    if (buffer.byteLength === 0) this.allocated--;
    else this.free.push(buffer);
    this.waiting.shift()?.();
  }

  /** @internal Sources reading through the cache: when the last one closes, its block buffers are let go. */
  sourceOpened(): void {
    this.openSources++;
  }

  /** @internal */
  sourceClosed(): void {
    if (--this.openSources > 0) return;
    this.allocated -= this.free.length;
    this.free.length = 0;
  }

  /** @internal Read every entry's meta and block list. Entries that cannot be read are removed. */
  async load(): Promise<void> {
    for (const [name, handle] of await entries(this.dir)) {
      if (handle.kind !== "directory") continue;
      const dir = handle as FileSystemDirectoryHandle;
      try {
        const meta = JSON.parse(await (await (await dir.getFileHandle(META)).getFile()).text()) as Meta;
        if (meta.version !== 1 || typeof meta.url !== "string") throw new Error("unknown meta");
        const blocks = new Set<number>();
        for (const [file] of await entries(dir)) {
          const match = BLOCK.exec(file);
          if (match) blocks.add(Number(match[1]));
          else if (file !== META) await dir.removeEntry(file).catch(() => {}); // a write that never finished
        }
        this.entries.set(meta.url, { dir, dirName: name, meta, blocks, users: 0 });
      } catch {
        await this.dir.removeEntry(name, { recursive: true }).catch(() => {});
      }
    }
  }

  /** Ask the browser to keep this origin's storage under pressure. Resolves to whether it agreed. */
  async persist(): Promise<boolean> {
    const storage = (globalThis as { navigator?: Navigator }).navigator?.storage;
    return typeof storage?.persist === "function" ? storage.persist() : false;
  }

  /** What is stored, most recently used first. */
  async list(): Promise<CacheEntryInfo[]> {
    return [...this.entries.values()]
      .sort((a, b) => b.meta.lastUsed - a.meta.lastUsed)
      .map((e) => ({
        url: e.meta.url,
        etag: e.meta.etag,
        lastModified: e.meta.lastModified,
        sha256: e.meta.sha256,
        size: e.meta.size,
        cachedBytes: this.storedBytes(e),
        complete: e.blocks.size === Math.ceil(e.meta.size / e.meta.blockBytes),
        lastUsed: e.meta.lastUsed,
      }));
  }

  /** Remove one URL's entry. Resolves to whether there was one. */
  async delete(url: string | URL): Promise<boolean> {
    const key = new URL(url).href;
    const entry = this.entries.get(key);
    if (!entry) return false;
    this.entries.delete(key);
    entry.blocks.clear();
    await this.dir.removeEntry(entry.dirName, { recursive: true }).catch(() => {});
    return true;
  }

  /** Remove everything. */
  async clear(): Promise<void> {
    for (const url of [...this.entries.keys()]) await this.delete(url);
    for (const [name] of await entries(this.dir)) await this.dir.removeEntry(name, { recursive: true }).catch(() => {});
  }

  /** Bytes stored over all entries. */
  get totalBytes(): number {
    let total = 0;
    for (const entry of this.entries.values()) total += this.storedBytes(entry);
    return total;
  }

  /** A caching source for `url`: opening it asks the server for its validators, then reads go through the cache. */
  opener(url: string | URL, options: HttpOptions & { sha256?: string } = {}): ByteSourceOpener {
    const href = new URL(url).href;
    return {
      kind: "http",
      remote: true,
      openWithHead: (headLength, readOptions) => this.open(href, options, headLength, readOptions ?? {}),
    };
  }

  private storedBytes(entry: Entry): number {
    let total = 0;
    for (const b of entry.blocks) total += blockLength(entry.meta, b);
    return total;
  }

  private async open(
    url: string,
    options: HttpOptions & { sha256?: string },
    headLength: number,
    readOptions: ReadOptions,
  ): Promise<OpenedSource> {
    const inner = new HttpSource(url, { ...options, fetch: bypassHttpCache(options.fetch) });
    const probe = await inner.openWithHead(8, readOptions);
    this.stats.networkBytes += probe.head.length;
    const v = inner.validators!;
    const sha = options.sha256?.toLowerCase() ?? oidOf(v.etag);
    let entry: Entry | null = this.entries.get(url) ?? null;
    if (entry) {
      const m = entry.meta;
      const same =
        m.size === v.size &&
        m.etag === v.etag &&
        m.lastModified === v.lastModified &&
        (m.sha256 === null || sha === null || m.sha256 === sha);
      if (!same) {
        await this.delete(url);
        entry = null;
      }
    }
    const cacheable = v.etag !== null || v.lastModified !== null || sha !== null;
    if (cacheable) {
      const meta: Meta = {
        version: 1,
        url,
        etag: v.etag,
        lastModified: v.lastModified,
        sha256: sha ?? entry?.meta.sha256 ?? null,
        size: v.size,
        blockBytes: entry?.meta.blockBytes ?? this.blockBytes,
        lastUsed: Date.now(),
      };
      if (entry === null) {
        const dirName = `e${hex(await sha256(new TextEncoder().encode(url))).slice(0, 40)}`;
        const dir = await this.dir.getDirectoryHandle(dirName, { create: true });
        entry = { dir, dirName, meta, blocks: new Set(), users: 0 };
        this.entries.set(url, entry);
      } else entry.meta = meta;
      await writeFile(entry.dir, META, [new TextEncoder().encode(JSON.stringify(meta))]);
    }
    const source = new CachedSource(this, entry, inner);
    const head = await source.read(0, Math.min(headLength, v.size), readOptions);
    return { source, head };
  }

  /**
   * @internal Reserve room for `bytes` more (give it back with `freeRoom` once written or not), evicting least
   * recently used entries not in use; false if impossible. The check and the reservation happen in one turn: blocks
   * written at the same time cannot all fit in the same room.
   */
  async makeRoom(bytes: number): Promise<boolean> {
    for (;;) {
      if (this.totalBytes + this.reserved + bytes <= this.maxBytes) {
        this.reserved += bytes;
        return true;
      }
      const oldest = [...this.entries.values()]
        .filter((e) => e.users === 0)
        .sort((a, b) => a.meta.lastUsed - b.meta.lastUsed)[0];
      if (oldest === undefined) return false;
      await this.delete(oldest.meta.url);
    }
  }

  /** @internal Room reserved by `makeRoom` back: the block is now stored (and counted) or given up. */
  freeRoom(bytes: number): void {
    this.reserved -= bytes;
  }

  /** @internal An entry dropped because its source changed while in use. */
  async invalidate(entry: Entry): Promise<void> {
    if (this.entries.get(entry.meta.url) === entry) await this.delete(entry.meta.url);
  }

  /** @internal Whether `entry` is still the cache's entry for its URL. */
  holds(entry: Entry): boolean {
    return this.entries.get(entry.meta.url) === entry;
  }
}

function blockLength(meta: Meta, block: number): number {
  return Math.min(meta.blockBytes, meta.size - block * meta.blockBytes);
}

/** A Blob's bytes into `state`'s buffer at `at`: a BYOB read where Blob streams are byte streams, else a copy. */
async function readBlobInto(blob: Blob, state: { buffer: ArrayBuffer; base: number }, at: number): Promise<void> {
  let reader: ReadableStreamBYOBReader;
  try {
    reader = blob.stream().getReader({ mode: "byob" });
  } catch {
    new Uint8Array(state.buffer, state.base + at, blob.size).set(new Uint8Array(await blob.arrayBuffer()));
    return;
  }
  try {
    for (let got = 0; got < blob.size; ) {
      const { value, done } = await reader.read(new Uint8Array(state.buffer, state.base + at + got, blob.size - got));
      if (value) state.buffer = value.buffer as ArrayBuffer;
      if (done) throw new Error("a stored block ended early");
      got += value.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

async function writeFile(dir: FileSystemDirectoryHandle, name: string, parts: Uint8Array[]): Promise<void> {
  const handle = await dir.getFileHandle(name, { create: true });
  const writable = await handle.createWritable();
  try {
    for (const part of parts) await writable.write(part as Uint8Array<ArrayBuffer>);
    await writable.close();
  } catch (error) {
    await writable.abort().catch(() => {});
    throw error;
  }
}

/** A block being fetched or written, and the reads still copying from it. */
interface PendingBlock {
  readonly bytes: Promise<Uint8Array>;
  readers: number;
  /** Give the block's buffer back to the cache once it is written and no read copies from it. */
  release(): void;
}

/**
 * Reads of one URL through the cache: stored blocks from OPFS (checked piece by piece), missing ones fetched from
 * the server whole (and written behind the read, at most `pendingBlocks` held), each block fetched once however
 * many reads ask for it at the same time.
 */
class CachedSource implements ByteSource {
  readonly kind = "http";
  readonly remote = true;
  readonly byteLength: number;
  private readonly pending = new Map<number, PendingBlock>();
  /**
   * Buffers for the partly read 256 KiB pieces at a read's ends (hashed whole), reused: one fresh buffer each was
   * garbage of 2 × 256 KiB per read.
   */
  private readonly scratch: ArrayBuffer[] = [];
  /** Blocks being hashed and written (close waits for them). */
  private readonly writes = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly cache: WeightCache,
    private readonly entry: Entry | null,
    private readonly inner: HttpSource,
  ) {
    this.byteLength = inner.byteLength;
    if (entry) entry.users++;
    cache.sourceOpened();
  }

  async read(offset: number, length: number, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    if (this.closed) throw new SafetensorError("Closed", "source is closed");
    if (!(Number.isSafeInteger(offset) && offset >= 0 && length >= 0 && offset + length <= this.byteLength)) {
      throw new SafetensorError("IoError", `read of ${length} bytes at ${offset} is outside the file`);
    }
    const entry = this.entry;
    if (entry === null || !this.cache.holds(entry)) return this.fetch(offset, length, options);
    const out = new Uint8Array(length);
    if (length === 0) return out;
    const size = entry.meta.blockBytes;
    const first = Math.floor(offset / size);
    const last = Math.floor((offset + length - 1) / size);
    await Promise.all(
      Array.from({ length: last - first + 1 }, async (_, k) => {
        const b = first + k;
        const from = Math.max(offset, b * size);
        const to = Math.min(offset + length, (b + 1) * size);
        const into = () => out.subarray(from - offset, to - offset);
        await this.blockPart(entry, b, from - b * size, to - b * size, into, options);
      }),
    );
    throwIfAborted(options.signal);
    return out;
  }

  /** Block by block (the next one already on its way while `sink` takes one): at most two blocks in memory. */
  async readChunks(
    offset: number,
    length: number,
    sink: (chunk: Uint8Array) => void | Promise<void>,
    options: ReadOptions = {},
  ): Promise<void> {
    const entry = this.entry;
    if (entry === null || !this.cache.holds(entry) || length === 0) {
      await sink(await this.read(offset, length, options));
      return;
    }
    const size = entry.meta.blockBytes;
    const first = Math.floor(offset / size);
    const last = Math.floor((offset + length - 1) / size);
    const part = async (b: number) => {
      const from = Math.max(offset, b * size);
      const to = Math.min(offset + length, (b + 1) * size);
      const chunk = new Uint8Array(to - from); // the sink may keep it: not a cache buffer
      await this.blockPart(entry, b, from - b * size, to - b * size, () => chunk, options);
      return chunk;
    };
    let next = part(first);
    for (let b = first; b <= last; b++) {
      const current = await next;
      if (b < last) {
        next = part(b + 1);
        next.catch(() => {}); // reported when awaited
      }
      throwIfAborted(options.signal);
      await sink(current);
    }
  }

  /**
   * Bytes [offset, offset + length) into `target` (see `ByteSource.readInto`): stored blocks read from their files
   * straight into it (BYOB), checked piece by piece there; only the partly covered 256 KiB pieces at the ends go
   * through a buffer of their own, to be hashed whole. Missing blocks are fetched and stored as by `read`. Reads of
   * stored blocks into a fresh buffer each left garbage the renderer's memory peaked on: a 600 MiB checkpoint from
   * the cache peaked it at 371 MiB, 234 MiB with the garbage collected every 4 reads (headless Chromium, idle 125 MiB).
   */
  async readInto(offset: number, length: number, target: Uint8Array, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    if (this.closed) throw new SafetensorError("Closed", "source is closed");
    if (!(Number.isSafeInteger(offset) && offset >= 0 && length >= 0 && offset + length <= this.byteLength)) {
      throw new SafetensorError("IoError", `read of ${length} bytes at ${offset} is outside the file`);
    }
    const entry = this.entry;
    if (entry === null || !this.cache.holds(entry)) {
      try {
        const bytes = await this.inner.readInto(offset, length, target, options);
        this.cache.stats.networkBytes += length;
        return bytes;
      } catch (error) {
        if ((error as SafetensorError)?.code === "SourceChanged" && entry) await this.cache.invalidate(entry);
        throw error;
      }
    }
    const state = { buffer: target.buffer as ArrayBuffer, base: target.byteOffset };
    const size = entry.meta.blockBytes;
    for (let pos = offset; pos < offset + length; ) {
      const b = Math.floor(pos / size);
      const end = Math.min(offset + length, (b + 1) * size);
      const [from, to] = [pos - b * size, end - b * size];
      const inMemory = this.pending.has(b);
      if (inMemory || !(entry.blocks.has(b) && (await this.readStoredInto(entry, b, from, to, state, pos - offset)))) {
        if (state.buffer.byteLength === 0) {
          // A failed BYOB read kept the buffer it was given: start over in a new one.
          state.buffer = new ArrayBuffer(state.base + length);
          pos = offset;
          continue;
        }
        const at = state.base + pos - offset;
        await this.blockPart(entry, b, from, to, () => new Uint8Array(state.buffer, at, end - pos), options);
      }
      pos = end;
      throwIfAborted(options.signal);
    }
    return new Uint8Array(state.buffer, state.base, length);
  }

  /**
   * Bytes [from, to) of stored block `b` into `state`'s buffer at `at`, checked against their pieces' hashes; false
   * (the block dropped) when missing or damaged.
   */
  private async readStoredInto(
    entry: Entry,
    b: number,
    from: number,
    to: number,
    state: { buffer: ArrayBuffer; base: number },
    at: number,
  ): Promise<boolean> {
    const length = blockLength(entry.meta, b);
    const pieces = Math.ceil(length / CACHE_PIECE_BYTES);
    try {
      const file = await (await entry.dir.getFileHandle(`b${b}`)).getFile();
      if (file.size !== length + pieces * HASH) throw new Error("wrong size");
      const p0 = Math.floor(from / CACHE_PIECE_BYTES);
      const p1 = Math.ceil(to / CACHE_PIECE_BYTES);
      const hashes = new Uint8Array(await file.slice(length + p0 * HASH, length + p1 * HASH).arrayBuffer());
      // Whole pieces inside [from, to): [m0, m1), read straight in.
      const m0 = Math.ceil(from / CACHE_PIECE_BYTES) * CACHE_PIECE_BYTES;
      const m1 = to === length ? to : Math.floor(to / CACHE_PIECE_BYTES) * CACHE_PIECE_BYTES;
      if (m1 > m0) await readBlobInto(file.slice(m0, m1), state, at + m0 - from);
      for (let p = p0; p < p1; p++) {
        const start = p * CACHE_PIECE_BYTES;
        const end = Math.min(length, start + CACHE_PIECE_BYTES);
        const inside = start >= m0 && end <= m1;
        const own = inside ? null : { buffer: this.scratch.pop() ?? new ArrayBuffer(CACHE_PIECE_BYTES), base: 0 };
        try {
          if (own) await readBlobInto(file.slice(start, end), own, 0);
          const piece = own
            ? new Uint8Array(own.buffer, 0, end - start)
            : new Uint8Array(state.buffer, state.base + at + start - from, end - start);
          if (!equalBytes(await sha256(piece), hashes.subarray((p - p0) * HASH, (p - p0 + 1) * HASH))) {
            this.cache.stats.corruptPieces++;
            throw new Error("damaged");
          }
          if (own) {
            const lo = Math.max(start, from);
            const hi = Math.min(end, to);
            new Uint8Array(state.buffer, state.base + at + lo - from, hi - lo).set(
              piece.subarray(lo - start, hi - start),
            );
          }
        } finally {
          if (own && own.buffer.byteLength > 0) this.scratch.push(own.buffer);
        }
      }
      this.cache.stats.cacheBytes += to - from;
      return true;
    } catch {
      entry.blocks.delete(b);
      await entry.dir.removeEntry(`b${b}`).catch(() => {});
      return false;
    }
  }

  /**
   * Bytes [from, to) of block `b` into `into`: from memory while the block is being fetched or written, else stored
   * (and checked), else fetched now, whole, into a buffer of the cache's (`takeBuffer`). The read goes on as soon as
   * its bytes are copied; the block is hashed and written behind it and its buffer reused once written and copied by
   * every read that asked for it. Checking `pending` and setting it happen in one turn, so no block is fetched twice.
   */
  private async blockPart(
    entry: Entry,
    b: number,
    from: number,
    to: number,
    into: () => Uint8Array,
    options: ReadOptions,
  ): Promise<void> {
    let block = this.pending.get(b);
    if (block === undefined && entry.blocks.has(b)) {
      const stored = await this.readStored(entry, b, from, to);
      if (stored) {
        into().set(stored);
        return;
      }
      block = this.pending.get(b);
    }
    if (block === undefined) block = this.fetchBlock(entry, b, options);
    block.readers++;
    try {
      const bytes = await block.bytes;
      into().set(bytes.subarray(from, to));
    } finally {
      block.readers--;
      block.release();
    }
  }

  /** Fetch block `b` into a cache buffer; write it behind the reads that wait for it. */
  private fetchBlock(entry: Entry, b: number, options: ReadOptions): PendingBlock {
    const start = b * entry.meta.blockBytes;
    const count = blockLength(entry.meta, b);
    let buffer: ArrayBuffer | null = null;
    let written = false;
    const block: PendingBlock = {
      readers: 0,
      bytes: (async () => {
        buffer = await this.cache.takeBuffer(count, options.signal);
        const bytes = await this.fetchInto(start, count, new Uint8Array(buffer, 0, count), options);
        buffer = bytes.buffer as ArrayBuffer;
        return bytes;
      })(),
      release: () => {
        if (!(written && block.readers === 0) || buffer === null) return;
        this.cache.giveBuffer(buffer);
        buffer = null;
      },
    };
    this.pending.set(b, block);
    const done = block.bytes.then(
      (bytes) => this.store(entry, b, bytes),
      () => {},
    );
    this.writes.add(done);
    done.then(() => {
      this.writes.delete(done);
      if (this.pending.get(b) === block) this.pending.delete(b);
      written = true;
      block.release();
    });
    return block;
  }

  /**
   * A block from the server, read straight into `target` (BYOB): a 600 MiB checkpoint loaded while filling the
   * cache peaked the renderer at 348 MiB with whole-body reads (`read`), 264 MiB with this (idle 126).
   */
  private async fetchInto(
    offset: number,
    length: number,
    target: Uint8Array,
    options: ReadOptions,
  ): Promise<Uint8Array> {
    try {
      const bytes = await this.inner.readInto(offset, length, target, options);
      this.cache.stats.networkBytes += bytes.length;
      return bytes;
    } catch (error) {
      if ((error as SafetensorError)?.code === "SourceChanged" && this.entry) await this.cache.invalidate(this.entry);
      throw error;
    }
  }

  private async fetch(offset: number, length: number, options: ReadOptions): Promise<Uint8Array> {
    try {
      const bytes = await this.inner.read(offset, length, options);
      this.cache.stats.networkBytes += bytes.length;
      return bytes;
    } catch (error) {
      if ((error as SafetensorError)?.code === "SourceChanged" && this.entry) await this.cache.invalidate(this.entry);
      throw error;
    }
  }

  /** Write a block with its pieces' hashes, unless the budget has no room for it. */
  private async store(entry: Entry, b: number, payload: Uint8Array): Promise<void> {
    if (!this.cache.holds(entry) || entry.blocks.has(b)) return;
    if (!(await this.cache.makeRoom(payload.length))) {
      this.cache.stats.uncachedBytes += payload.length;
      return;
    }
    try {
      const pieces = Math.ceil(payload.length / CACHE_PIECE_BYTES);
      const hashes = new Uint8Array(pieces * HASH);
      for (let p = 0; p < pieces; p++) {
        hashes.set(await sha256(payload.subarray(p * CACHE_PIECE_BYTES, (p + 1) * CACHE_PIECE_BYTES)), p * HASH);
      }
      const parts: Uint8Array[] = [];
      for (let at = 0; at < payload.length; at += WRITE_BYTES) parts.push(payload.subarray(at, at + WRITE_BYTES));
      await writeFile(entry.dir, `b${b}`, [...parts, hashes]);
      if (this.cache.holds(entry)) entry.blocks.add(b);
    } catch {
      // A full disk or a removed entry: the bytes are still served, just not kept.
      this.cache.stats.uncachedBytes += payload.length;
    } finally {
      this.cache.freeRoom(payload.length);
    }
  }

  /** Bytes [from, to) of stored block `b`, checked against their pieces' hashes; null when missing or damaged. */
  private async readStored(entry: Entry, b: number, from: number, to: number): Promise<Uint8Array | null> {
    const length = blockLength(entry.meta, b);
    const pieces = Math.ceil(length / CACHE_PIECE_BYTES);
    try {
      const file = await (await entry.dir.getFileHandle(`b${b}`)).getFile();
      if (file.size !== length + pieces * HASH) throw new Error("wrong size");
      const p0 = Math.floor(from / CACHE_PIECE_BYTES);
      const p1 = Math.ceil(to / CACHE_PIECE_BYTES);
      const [data, hashes] = await Promise.all([
        file.slice(p0 * CACHE_PIECE_BYTES, Math.min(length, p1 * CACHE_PIECE_BYTES)).arrayBuffer(),
        file.slice(length + p0 * HASH, length + p1 * HASH).arrayBuffer(),
      ]);
      const bytes = new Uint8Array(data);
      for (let p = p0; p < p1; p++) {
        const piece = bytes.subarray((p - p0) * CACHE_PIECE_BYTES, (p - p0 + 1) * CACHE_PIECE_BYTES);
        const want = new Uint8Array(hashes, (p - p0) * HASH, HASH);
        if (!equalBytes(await sha256(piece), want)) {
          this.cache.stats.corruptPieces++;
          throw new Error("damaged");
        }
      }
      this.cache.stats.cacheBytes += to - from;
      return bytes.subarray(from - p0 * CACHE_PIECE_BYTES, to - p0 * CACHE_PIECE_BYTES);
    } catch {
      entry.blocks.delete(b);
      await entry.dir.removeEntry(`b${b}`).catch(() => {});
      return null;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.pending.values()].map((p) => p.bytes));
    await Promise.allSettled([...this.writes]);
    if (this.entry) this.entry.users--;
    this.cache.sourceClosed();
    await this.inner.close();
  }
}
