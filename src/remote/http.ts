/**
 * HTTP(S) byte source over `fetch` (browsers and Node). One range request per read; the file's size comes from the
 * first response's `Content-Range` (no HEAD); its validators (ETag, Last-Modified, size) are pinned then, and any
 * later response that disagrees is a `SourceChanged` error instead of bytes of two versions mixed together.
 *
 * Servers that ignore `Range` and answer 200 with the whole file are read only as far as needed, then the body is
 * cancelled. 5xx, 408, 429 and network failures are retried with exponential backoff, a bounded number of times.
 * No `If-Match`: in browsers it forces a CORS preflight per request and disables the HTTP cache; the response's own
 * validators are compared instead.
 */
import { SafetensorError } from "../format/errors.js";
import type { ByteSource, ByteSourceOpener, OpenedSource, ReadOptions } from "../io/async-source.js";
import { throwIfAborted } from "../io/async-source.js";

/** How HTTP requests are made: the `fetch`, extra headers, and retries. */
export interface HttpOptions {
  /** The `fetch` to use (default: the global one). A signing `fetch` (e.g. SigV4) goes here. */
  fetch?: (input: string | URL | Request, init?: RequestInit) => Promise<Response>;
  /** Extra headers for every request (e.g. `Authorization`). */
  headers?: HeadersInit;
  /** Retries after a 5xx/408/429 answer or a network failure (default 3). */
  retries?: number;
  /** Delay before the first retry in ms (default 200), doubled for each next one. */
  retryDelayMs?: number;
  /** Longest delay between retries in ms (default 5000). */
  maxRetryDelayMs?: number;
}

export const DEFAULT_RETRIES = 3;
export const DEFAULT_RETRY_DELAY_MS = 200;
export const DEFAULT_MAX_RETRY_DELAY_MS = 5000;

/** The URL without its query and fragment: signed URLs carry credentials there, which must not reach messages. */
export function redactUrl(url: string | URL): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}${u.search ? "?…" : ""}`;
  } catch {
    return "(invalid URL)";
  }
}

/**
 * What identifies the version of a remote file, pinned at its first response: a later response that disagrees is
 * `SourceChanged`.
 */
export interface HttpValidators {
  readonly etag: string | null;
  readonly lastModified: string | null;
  readonly size: number;
}

/** A failure worth another attempt (network error, 5xx, cut-off body). */
class Retryable extends Error {}

const CONTENT_RANGE = /^bytes\s+(\d+)-(\d+)\/(\d+|\*)$/i;
const UNSATISFIED_RANGE = /^bytes\s+\*\/(\d+)$/i;

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function integerOption(value: number | undefined, fallback: number, name: string): number {
  const v = value ?? fallback;
  if (!(Number.isSafeInteger(v) && v >= 0)) {
    throw new SafetensorError("InvalidOption", `${name} must be a non-negative integer, got ${value}`);
  }
  return v;
}

/**
 * A file served over HTTP(S). `open()` (or `AsyncSafetensorsFile.open`) makes the first request; reads before that
 * are refused. Reads return memory the caller owns.
 */
export class HttpSource implements ByteSource, ByteSourceOpener {
  readonly kind = "http";
  readonly remote = true;
  readonly url: string;
  private readonly fetchFn: NonNullable<HttpOptions["fetch"]>;
  private readonly headers: Headers;
  private readonly retries: number;
  private readonly retryDelayMs: number;
  private readonly maxRetryDelayMs: number;
  private pinned: HttpValidators | null = null;
  /** False once the server answered a Range request with 200 (the whole file). */
  private rangesHonoured = true;
  private closed = false;

  constructor(url: string | URL, options: HttpOptions = {}) {
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new SafetensorError("InvalidOption", `not an http(s) URL: ${redactUrl(parsed)}`);
    }
    this.url = parsed.href;
    if (options.fetch === undefined && typeof globalThis.fetch !== "function") {
      throw new SafetensorError("BackendUnavailable", "no fetch() in this runtime");
    }
    // Called unbound: browsers refuse a `fetch` whose `this` is not the window ("Illegal invocation").
    this.fetchFn = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.headers = new Headers(options.headers);
    this.retries = integerOption(options.retries, DEFAULT_RETRIES, "retries");
    this.retryDelayMs = integerOption(options.retryDelayMs, DEFAULT_RETRY_DELAY_MS, "retryDelayMs");
    this.maxRetryDelayMs = integerOption(options.maxRetryDelayMs, DEFAULT_MAX_RETRY_DELAY_MS, "maxRetryDelayMs");
  }

  get byteLength(): number {
    if (!this.pinned) throw new SafetensorError("IoError", "HTTP source not opened yet: its size is not known");
    return this.pinned.size;
  }

  /** The validators pinned at open (ETag, Last-Modified, size). */
  get validators(): HttpValidators | null {
    return this.pinned;
  }

  async openWithHead(headLength: number, options: ReadOptions = {}): Promise<OpenedSource> {
    if (this.pinned) throw new SafetensorError("InvalidOption", "HTTP source is already open");
    const head = await this.request(0, headLength, options.signal);
    return { source: this, head };
  }

  async read(offset: number, length: number, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    if (this.closed) throw new SafetensorError("Closed", "source is closed");
    const size = this.byteLength;
    if (!(Number.isSafeInteger(offset) && offset >= 0 && length >= 0 && offset + length <= size)) {
      throw new SafetensorError("IoError", `read of ${length} bytes at ${offset} is outside the file (${size} bytes)`);
    }
    if (length === 0) return new Uint8Array(0);
    return this.request(offset, length, options.signal);
  }

  /**
   * Bytes [offset, offset + length) to `sink` as the response body delivers them (no buffer of the whole range). A
   * body cut off midway is requested again from where it stopped (the pinned validators keep the versions apart),
   * within the same retry budget as `read`.
   */
  async readChunks(
    offset: number,
    length: number,
    sink: (chunk: Uint8Array) => void | Promise<void>,
    options: ReadOptions = {},
  ): Promise<void> {
    const signal = options.signal;
    await this.resumable(offset, length, signal, async (from, count, progress) => {
      const response = await this.rangeResponse(from, count, signal);
      if (response === null) {
        const bytes = await this.request(from, count, signal);
        await sink(bytes);
        progress.done += bytes.length;
        return;
      }
      await pump(response.body!.getReader(), count, signal, async (chunk) => {
        await sink(chunk);
        progress.done += chunk.length;
      });
    });
  }

  /**
   * Bytes [offset, offset + length) read straight into `target`'s memory (a BYOB reader where the body is a byte
   * stream, as in browsers: no buffer per chunk, nothing for the collector). The ArrayBuffer is transferred on the
   * way: use the returned view (same memory) from then on. Cut-off bodies resume as in `readChunks`.
   */
  async readInto(offset: number, length: number, target: Uint8Array, options: ReadOptions = {}): Promise<Uint8Array> {
    const signal = options.signal;
    const state = { buffer: target.buffer as ArrayBuffer, base: target.byteOffset };
    const at = (progress: { done: number }, count: number) =>
      new Uint8Array(state.buffer, state.base + progress.done, count);
    await this.resumable(offset, length, signal, async (from, count, progress) => {
      if (state.buffer.byteLength === 0) {
        // A failed BYOB read kept the buffer it was given: start over in a new one.
        state.buffer = new ArrayBuffer(state.base + length);
        progress.done = 0;
        throw new Retryable("the read buffer was lost with a failed read");
      }
      const response = await this.rangeResponse(from, count, signal);
      if (response === null) {
        const bytes = await this.request(from, count, signal);
        at(progress, count).set(bytes);
        progress.done += count;
        return;
      }
      let reader: ReadableStreamBYOBReader;
      try {
        reader = response.body!.getReader({ mode: "byob" });
      } catch {
        // Not a byte stream here: chunks, copied.
        await pump(response.body!.getReader(), count, signal, (chunk) => {
          at(progress, chunk.length).set(chunk);
          progress.done += chunk.length;
        });
        return;
      }
      let got = 0;
      try {
        while (got < count) {
          let next: ReadableStreamReadResult<Uint8Array>;
          try {
            next = await reader.read(at(progress, count - got) as Uint8Array<ArrayBuffer>);
          } catch (cause) {
            if (signal?.aborted) throw signal.reason;
            throw new Retryable(`response body failed: ${(cause as Error)?.message ?? cause}`, { cause });
          }
          if (next.value) state.buffer = next.value.buffer as ArrayBuffer;
          if (next.done) throw new Retryable(`response body ended after ${got} of ${count} bytes`);
          got += next.value.length;
          progress.done += next.value.length;
        }
      } finally {
        reader.cancel().catch(() => {});
      }
    });
    return new Uint8Array(state.buffer, state.base, length);
  }

  /** The retry loop of chunked reads: `step` goes on from `progress.done`; failures in a row use the budget. */
  private async resumable(
    offset: number,
    length: number,
    signal: AbortSignal | undefined,
    step: (offset: number, length: number, progress: { done: number }) => Promise<void>,
  ): Promise<void> {
    throwIfAborted(signal);
    if (this.closed) throw new SafetensorError("Closed", "source is closed");
    const size = this.byteLength;
    if (!(Number.isSafeInteger(offset) && offset >= 0 && length >= 0 && offset + length <= size)) {
      throw new SafetensorError("IoError", `read of ${length} bytes at ${offset} is outside the file (${size} bytes)`);
    }
    const progress = { done: 0 };
    for (let attempt = 0; progress.done < length; ) {
      const before = progress.done;
      try {
        await step(offset + before, length - before, progress);
      } catch (error) {
        if (!(error instanceof Retryable) || signal?.aborted) throw signal?.aborted ? signal.reason : unwrap(error);
        if (progress.done > before) attempt = 0; // it moved on: the budget is for failures in a row
        if (attempt >= this.retries) {
          throw new SafetensorError(
            "HttpError",
            `${error.message} (${redactUrl(this.url)}, gave up after ${attempt + 1} attempts)`,
            { cause: error.cause },
          );
        }
        await sleep(Math.min(this.maxRetryDelayMs, this.retryDelayMs * 2 ** attempt), signal);
        attempt++;
      }
    }
  }

  /** A checked 206 response for exactly the range, or null for any other answer (left to `request`). */
  private async rangeResponse(
    offset: number,
    length: number,
    signal: AbortSignal | undefined,
  ): Promise<Response | null> {
    const headers = new Headers(this.headers);
    headers.set("Range", `bytes=${offset}-${offset + length - 1}`);
    headers.set("Accept-Encoding", "identity");
    let response: Response;
    try {
      const fetchFn = this.fetchFn;
      response = await fetchFn(this.url, { headers, signal, redirect: "follow" });
    } catch (cause) {
      if (signal?.aborted) throw signal.reason;
      throw new Retryable(`request failed: ${(cause as Error)?.message ?? cause}`, { cause });
    }
    if (response.status !== 206 || !response.body) {
      await response.body?.cancel().catch(() => {});
      return null;
    }
    const match = CONTENT_RANGE.exec(response.headers.get("Content-Range")?.trim() ?? "");
    if (!match || match[3] === "*" || Number(match[1]) !== offset || Number(match[2]) !== offset + length - 1) {
      await response.body.cancel().catch(() => {});
      throw new SafetensorError(
        "HttpError",
        `asked for bytes ${offset}-${offset + length - 1}, got ${response.headers.get("Content-Range")} from ${redactUrl(this.url)}`,
      );
    }
    this.check(response, Number(match[3]));
    this.checkEncoding(response);
    return response;
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** Bytes [offset, offset + length), clamped to the file's end while the size is not known yet (the first read). */
  private async request(offset: number, length: number, signal: AbortSignal | undefined): Promise<Uint8Array> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.attempt(offset, length, signal);
      } catch (error) {
        if (!(error instanceof Retryable) || signal?.aborted) throw signal?.aborted ? signal.reason : unwrap(error);
        if (attempt >= this.retries) {
          throw new SafetensorError(
            "HttpError",
            `${error.message} (${redactUrl(this.url)}, gave up after ${attempt + 1} attempts)`,
            { cause: error.cause },
          );
        }
        await sleep(Math.min(this.maxRetryDelayMs, this.retryDelayMs * 2 ** attempt), signal);
      }
    }
  }

  private async attempt(offset: number, length: number, signal: AbortSignal | undefined): Promise<Uint8Array> {
    const headers = new Headers(this.headers);
    headers.set("Range", `bytes=${offset}-${offset + length - 1}`);
    // Ask for the bytes as stored: a compressed body has no byte offsets (browsers ignore this header, harmlessly).
    headers.set("Accept-Encoding", "identity");
    let response: Response;
    try {
      const fetchFn = this.fetchFn; // called unbound, so that a passed `window.fetch` works too
      response = await fetchFn(this.url, { headers, signal, redirect: "follow" });
    } catch (cause) {
      if (signal?.aborted) throw signal.reason;
      throw new Retryable(`request failed: ${(cause as Error)?.message ?? cause}`, { cause });
    }
    const status = response.status;
    if (status === 206) return this.partial(response, offset, length);
    if (status === 200) return this.whole(response, offset, length, signal);
    await response.body?.cancel().catch(() => {});
    if (status === 416) return this.unsatisfiable(response, offset, length, signal);
    if (status >= 500 || status === 408 || status === 429) throw new Retryable(`HTTP ${status} ${response.statusText}`);
    throw new SafetensorError("HttpError", `HTTP ${status} ${response.statusText} for ${redactUrl(this.url)}`);
  }

  private async partial(response: Response, offset: number, length: number): Promise<Uint8Array> {
    const match = CONTENT_RANGE.exec(response.headers.get("Content-Range")?.trim() ?? "");
    if (!match || match[3] === "*") {
      await response.body?.cancel().catch(() => {});
      throw new SafetensorError(
        "HttpError",
        `206 response without a usable Content-Range (${response.headers.get("Content-Range")}) from ${redactUrl(this.url)}`,
      );
    }
    const [first, last, size] = [Number(match[1]), Number(match[2]), Number(match[3])];
    this.check(response, size);
    const want = Math.min(length, size - offset);
    if (first !== offset || last !== offset + want - 1) {
      await response.body?.cancel().catch(() => {});
      throw new SafetensorError(
        "HttpError",
        `asked for bytes ${offset}-${offset + want - 1}, got ${first}-${last} from ${redactUrl(this.url)}`,
      );
    }
    this.checkEncoding(response);
    return readBody(response, 0, want, true);
  }

  private async whole(response: Response, offset: number, length: number, signal?: AbortSignal): Promise<Uint8Array> {
    this.checkEncoding(response);
    const declared = response.headers.get("Content-Length");
    const size = declared === null ? Number.NaN : Number(declared);
    if (!Number.isSafeInteger(size)) {
      await response.body?.cancel().catch(() => {});
      throw new SafetensorError(
        "HttpError",
        `${redactUrl(this.url)} ignores Range requests and sends no Content-Length: its size cannot be known without downloading it all`,
      );
    }
    this.check(response, size);
    this.rangesHonoured = false;
    throwIfAborted(signal);
    // Read up to the end of the wanted bytes, then cancel the rest of the body.
    return readBody(response, offset, Math.min(length, size - offset), false);
  }

  private async unsatisfiable(
    response: Response,
    offset: number,
    length: number,
    signal?: AbortSignal,
  ): Promise<Uint8Array> {
    const match = UNSATISFIED_RANGE.exec(response.headers.get("Content-Range")?.trim() ?? "");
    const size = match ? Number(match[1]) : null;
    if (size !== null && this.pinned === null && offset === 0) {
      // The first read of an empty file (bytes=0-… cannot be satisfied), or of a server refusing a range past the end.
      if (size === 0) {
        this.check(response, 0);
        return new Uint8Array(0);
      }
      if (size < length) return this.attempt(0, size, signal);
    }
    if (this.pinned !== null && size !== null && size !== this.pinned.size) {
      throw new SafetensorError(
        "SourceChanged",
        `${redactUrl(this.url)} changed while being read: ${this.pinned.size} bytes at open, now ${size}`,
      );
    }
    throw new SafetensorError(
      "HttpError",
      `HTTP 416 for bytes ${offset}-${offset + length - 1} of ${redactUrl(this.url)}`,
    );
  }

  private checkEncoding(response: Response): void {
    const encoding = response.headers.get("Content-Encoding");
    if (encoding && encoding.toLowerCase() !== "identity") {
      response.body?.cancel().catch(() => {});
      throw new SafetensorError(
        "HttpError",
        `${redactUrl(this.url)} sent a ${encoding}-encoded body: byte ranges need the bytes as stored`,
      );
    }
  }

  /** Pin the validators on the first response; afterwards any disagreement is SourceChanged. */
  private check(response: Response, size: number): void {
    const etag = response.headers.get("ETag");
    const lastModified = response.headers.get("Last-Modified");
    const pinned = this.pinned;
    if (pinned === null) {
      this.pinned = { etag, lastModified, size };
      return;
    }
    const changed =
      size !== pinned.size
        ? `${pinned.size} bytes at open, now ${size}`
        : etag !== null && pinned.etag !== null && etag !== pinned.etag
          ? `ETag ${pinned.etag} at open, now ${etag}`
          : lastModified !== null && pinned.lastModified !== null && lastModified !== pinned.lastModified
            ? `Last-Modified ${pinned.lastModified} at open, now ${lastModified}`
            : null;
    if (changed !== null) {
      response.body?.cancel().catch(() => {});
      throw new SafetensorError("SourceChanged", `${redactUrl(this.url)} changed while being read: ${changed}`);
    }
  }

  /** Whether the server honours Range requests (known after the first request). */
  get supportsRanges(): boolean {
    return this.rangesHonoured;
  }
}

/** `count` bytes of a body to `take`, chunk by chunk; a body that ends early or fails is Retryable. */
async function pump(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  count: number,
  signal: AbortSignal | undefined,
  take: (chunk: Uint8Array) => void | Promise<void>,
): Promise<void> {
  let got = 0;
  try {
    while (got < count) {
      let next: ReadableStreamReadResult<Uint8Array>;
      try {
        next = await reader.read();
      } catch (cause) {
        if (signal?.aborted) throw signal.reason;
        throw new Retryable(`response body failed: ${(cause as Error)?.message ?? cause}`, { cause });
      }
      if (next.done) throw new Retryable(`response body ended after ${got} of ${count} bytes`);
      if (got + next.value.length > count) {
        throw new SafetensorError("HttpError", "response body is longer than its Content-Range");
      }
      got += next.value.length;
      await take(next.value);
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function unwrap(error: unknown): unknown {
  return error instanceof Retryable ? new SafetensorError("HttpError", error.message, { cause: error.cause }) : error;
}

/**
 * Bytes [skip, skip + length) of a response body. `exact`: the body must be exactly `length` bytes (a 206); else the
 * rest of the body is cancelled once the bytes are in (a 200 with the whole file).
 */
async function readBody(response: Response, skip: number, length: number, exact: boolean): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  if (!response.body) {
    if (length === 0) return out;
    throw new Retryable("response has no body");
  }
  const reader = response.body.getReader();
  let got = 0;
  let skipped = 0;
  let more = false;
  try {
    while (got < length || (exact && !more)) {
      let chunk: Uint8Array;
      try {
        const next = await reader.read();
        if (next.done) break;
        chunk = next.value;
      } catch (cause) {
        throw new Retryable(`response body failed: ${(cause as Error)?.message ?? cause}`, { cause });
      }
      if (skipped < skip) {
        const s = Math.min(skip - skipped, chunk.length);
        skipped += s;
        chunk = chunk.subarray(s);
      }
      const take = Math.min(chunk.length, length - got);
      out.set(chunk.subarray(0, take), got);
      got += take;
      if (take < chunk.length) more = true;
      if (got === length && !exact) break;
    }
  } finally {
    if (got < length || more || !exact) reader.cancel().catch(() => {});
    else reader.releaseLock();
  }
  if (got < length) throw new Retryable(`response body ended after ${got} of ${length} bytes`);
  if (exact && more) throw new SafetensorError("HttpError", `response body is longer than its Content-Range`);
  return out;
}
