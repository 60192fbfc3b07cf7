/**
 * The streaming writer: a file laid out from a plan (names, dtypes, shapes, metadata) before any tensor byte exists,
 * then filled region by region, in any order and in chunks, straight to disk. Memory stays bounded by the chunk the
 * caller hands over. The header and offsets are those of `serialize` / `saveFile` for the same tensors, so the file
 * is byte-identical to theirs.
 *
 * Every byte of every tensor must be written exactly once: a chunk overlapping bytes already written is refused
 * (`WriteConflict`), one reaching past its tensor's end too (`WriteOutOfRange`), and `commit()` refuses a file with
 * bytes never written (`IncompleteWrite`). The file appears at its path only on `commit()`, atomically (temporary file
 * in the same directory + rename, see `node-write.ts`). The first error of any kind aborts the writer: the temporary
 * file is removed, the target is left as it was, and later calls throw `Closed`.
 */
import * as fs from "node:fs";
import { quoteName, SafetensorError } from "../format/errors.js";
import {
  type LayoutPlan,
  type LayoutTensor,
  type MetadataInput,
  type NamedTensors,
  planLayout,
  type SerializeOptions,
  type TensorSpec,
} from "../format/serialize.js";
import { COPY_BUFFER_BYTES, copyRange, preallocate } from "./node-copy.js";
import { AtomicFile, type AtomicWriteOptions, writeAllAt, writeError } from "./node-write.js";

/** Options of `createWriter`: header limits, `fsync` and `mode`. */
export interface WriterOptions extends SerializeOptions, AtomicWriteOptions {}

/** Where a region write goes inside its tensor. */
export interface RegionOptions {
  /** Byte offset inside the tensor (default: where the previous write to this tensor ended, 0 at first). */
  offset?: number;
  /** Bytes the source must give (default: from `offset` to the tensor's end). */
  length?: number;
}

/** Chunks of a tensor's bytes: an async iterable (a Node `Readable`, a web `ReadableStream`) or a plain iterable. */
export type ChunkSource = AsyncIterable<unknown> | Iterable<unknown>;

/** One tensor's region and which of its bytes are written: sorted, disjoint, non-touching [start, end) pairs. */
class Region {
  readonly filled: number[] = [];
  filledBytes = 0;
  /** Where the last write ended: the default offset of the next one. */
  cursor = 0;
  constructor(readonly tensor: LayoutTensor) {}

  get size(): number {
    return this.tensor.end - this.tensor.begin;
  }

  /** Index of the first interval ending after `at`. */
  #after(at: number): number {
    let lo = 0;
    let hi = this.filled.length / 2;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.filled[2 * mid + 1]! > at) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  /** Bytes of [start, end) already written, as a range for messages, or null when the range is free. */
  overlap(start: number, end: number): [number, number] | null {
    const i = this.#after(start);
    if (2 * i >= this.filled.length || this.filled[2 * i]! >= end) return null;
    return [Math.max(start, this.filled[2 * i]!), Math.min(end, this.filled[2 * i + 1]!)];
  }

  /** Record [start, end) as written (the caller checked `overlap`). */
  add(start: number, end: number): void {
    if (end === start) return;
    const i = this.#after(start);
    const f = this.filled;
    const joinsPrevious = i > 0 && f[2 * i - 1] === start;
    const joinsNext = 2 * i < f.length && f[2 * i] === end;
    if (joinsPrevious && joinsNext) f.splice(2 * i - 1, 2);
    else if (joinsPrevious) f[2 * i - 1] = end;
    else if (joinsNext) f[2 * i] = start;
    else f.splice(2 * i, 0, start, end);
    this.filledBytes += end - start;
    this.cursor = end;
  }

  /** The first byte not written, or null when the region is complete. */
  firstGap(): number | null {
    if (this.filledBytes === this.size) return null;
    return this.filled[0] === 0 ? this.filled[1]! : 0;
  }
}

function asBytes(chunk: unknown, name: string): Uint8Array {
  if (chunk instanceof Uint8Array) return chunk;
  if (ArrayBuffer.isView(chunk)) return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (chunk instanceof ArrayBuffer) return new Uint8Array(chunk);
  const what = typeof chunk === "string" ? "a string (a stream with an encoding set?)" : typeof chunk;
  throw new SafetensorError("InvalidTensor", `tensor ${quoteName(name)}: a chunk must be bytes, got ${what}`, {
    tensor: name,
  });
}

/**
 * A safetensors file being written. Made by {@link createWriter}; fill every tensor with `write`, `writeFrom`
 * or `copyFrom`; then `commit()`. `abort()` (or `using`) drops everything.
 */
class SafetensorsWriter {
  /** The target path as given. */
  readonly path: string;
  /** Header bytes and every tensor's [begin, end) in the data region, as `planLayout` computes them. */
  readonly layout: LayoutPlan;
  readonly #file: AtomicFile;
  readonly #regions = new Map<string, Region>();
  #state: "open" | "committed" | "aborted" = "open";
  #scratch: Uint8Array | null = null;
  #sized = false;

  /** Not exported as a value: {@link createWriter} makes writers. */
  constructor(path: string, layout: LayoutPlan, file: AtomicFile) {
    this.path = path;
    this.layout = layout;
    this.#file = file;
    for (const tensor of layout.tensors) this.#regions.set(tensor.name, new Region(tensor));
  }

  /** "open" until `commit()` succeeds ("committed") or the writer is aborted by `abort()` or an error ("aborted"). */
  get state(): "open" | "committed" | "aborted" {
    return this.#state;
  }

  /** Bytes not written yet, of one tensor or of all. */
  remaining(name?: string): number {
    if (name !== undefined) {
      const region = this.#region(name);
      return region.size - region.filledBytes;
    }
    let left = 0;
    for (const region of this.#regions.values()) left += region.size - region.filledBytes;
    return left;
  }

  /** Write `chunk` into tensor `name` at byte `offset` of the tensor (default: where its previous write ended). */
  write(name: string, chunk: ArrayBufferView, offset?: number): void {
    this.#guard(() => {
      const region = this.#region(name);
      const bytes = asBytes(chunk, name);
      const at = this.#reserve(region, offset, bytes.length);
      writeAllAt(this.#file.fd, bytes, this.layout.header.length + region.tensor.begin + at);
      region.add(at, at + bytes.length);
    });
  }

  /**
   * Write tensor `name` from a source of chunks (a Node `Readable`, any async or sync iterable of byte chunks), each
   * written as it arrives. The source must give exactly `length` bytes (default: from `offset` to the tensor's end):
   * more is `WriteOutOfRange` (the extra chunk is not written), fewer is `IncompleteWrite`.
   */
  async writeFrom(name: string, source: ChunkSource, options: RegionOptions = {}): Promise<void> {
    const region = this.#guard(() => this.#region(name));
    const start = this.#guard(() => this.#checkOffset(region, options.offset));
    const length = options.length ?? region.size - start;
    this.#guard(() => this.#checkRange(region, start, length));
    let at = start;
    try {
      for await (const chunk of source as AsyncIterable<unknown>) {
        const bytes = this.#guard(() => asBytes(chunk, name));
        if (at + bytes.length > start + length) {
          this.#fail(
            new SafetensorError(
              "WriteOutOfRange",
              `tensor ${quoteName(name)}: the source gives more than the ${length} bytes expected from offset ${start}`,
              { tensor: name },
            ),
          );
        }
        this.write(name, bytes, at);
        at += bytes.length;
      }
    } catch (error) {
      // Our own errors (the writer is aborted already) and the source's SafetensorErrors pass as they are.
      if (error instanceof SafetensorError) this.#fail(error);
      this.#fail(
        new SafetensorError("IoError", `tensor ${quoteName(name)}: reading the source failed: ${String(error)}`, {
          tensor: name,
          cause: error,
        }),
      );
    }
    if (at < start + length) {
      this.#fail(
        new SafetensorError(
          "IncompleteWrite",
          `tensor ${quoteName(name)}: the source ended after ${at - start} of the ${length} bytes expected`,
          { tensor: name },
        ),
      );
    }
  }

  /**
   * Copy `length` bytes of another open file (`fd`, from byte `position`) into tensor `name` at `offset` (default:
   * where its previous write ended), without passing them through JS memory where the OS can (`copy_file_range`).
   */
  copyFrom(name: string, fd: number, position: number, length: number, offset?: number): void {
    this.#guard(() => {
      const region = this.#region(name);
      const at = this.#reserve(region, offset, length);
      copyRange(fd, position, this.#file.fd, this.layout.header.length + region.tensor.begin + at, length, {
        scratch: () => {
          this.#scratch ??= new Uint8Array(COPY_BUFFER_BYTES);
          return this.#scratch;
        },
      });
      region.add(at, at + length);
    });
  }

  /**
   * Reserve `length` bytes of tensor `name` at `offset` (inside the tensor) for a writer elsewhere: the caller writes
   * them at byte `position` of the temporary file at `path`, through a descriptor of its own (another thread's), and
   * must have written them before `commit()`; if it cannot, it must `abort()`. They count as written now. The file
   * is sized to its full length at the first claim: writes past the end from several threads would serialize (ext4
   * takes the inode's lock to extend a file) and extend it under each other.
   */
  claim(name: string, offset: number, length: number): { path: string; position: number } {
    return this.#guard(() => {
      const region = this.#region(name);
      const at = this.#reserve(region, offset, length);
      if (!this.#sized) {
        // Blocks first where the file system can (the rename at commit then has nothing to flush: node-copy.ts).
        preallocate(this.#file.fd, this.layout.totalLength);
        fs.ftruncateSync(this.#file.fd, this.layout.totalLength);
        this.#sized = true;
      }
      region.add(at, at + length);
      return { path: this.#file.temp, position: this.layout.header.length + region.tensor.begin + at };
    });
  }

  /** Check every byte was written, then put the file in place atomically. */
  commit(): void {
    this.#guard(() => {
      for (const region of this.#regions.values()) {
        const gap = region.firstGap();
        if (gap !== null) {
          const name = region.tensor.name;
          throw new SafetensorError(
            "IncompleteWrite",
            `tensor ${quoteName(name)}: ${region.filledBytes} of ${region.size} bytes written (first missing byte: ${gap})`,
            { tensor: name },
          );
        }
      }
      this.#scratch = null;
      this.#file.commit();
      this.#state = "committed";
    });
  }

  /** Remove the temporary file; the target is untouched. Idempotent; a no-op after `commit()`. */
  abort(): void {
    if (this.#state !== "open") return;
    this.#state = "aborted";
    this.#scratch = null;
    this.#file.abort();
  }

  [Symbol.dispose](): void {
    this.abort();
  }

  #region(name: string): Region {
    const region = this.#regions.get(name);
    if (!region) {
      throw new SafetensorError("TensorNotFound", `tensor ${quoteName(name)} is not in this writer's plan`, {
        tensor: name,
      });
    }
    return region;
  }

  #checkOffset(region: Region, offset: number | undefined): number {
    const at = offset ?? region.cursor;
    if (!Number.isSafeInteger(at) || at < 0) {
      throw new SafetensorError("InvalidOption", `offset must be a non-negative integer, got ${offset}`, {
        tensor: region.tensor.name,
      });
    }
    return at;
  }

  #checkRange(region: Region, at: number, length: number): void {
    const name = region.tensor.name;
    if (!Number.isSafeInteger(length) || length < 0) {
      throw new SafetensorError("InvalidOption", `length must be a non-negative integer, got ${length}`, {
        tensor: name,
      });
    }
    if (at + length > region.size) {
      throw new SafetensorError(
        "WriteOutOfRange",
        `tensor ${quoteName(name)}: bytes [${at}, ${at + length}) are past its end (${region.size} bytes)`,
        { tensor: name },
      );
    }
    const overlap = region.overlap(at, at + length);
    if (overlap) {
      throw new SafetensorError(
        "WriteConflict",
        `tensor ${quoteName(name)}: bytes [${overlap[0]}, ${overlap[1]}) are already written`,
        { tensor: name },
      );
    }
  }

  /** Validate a write of `length` bytes at `offset` (or the cursor); returns the offset inside the tensor. */
  #reserve(region: Region, offset: number | undefined, length: number): number {
    const at = this.#checkOffset(region, offset);
    this.#checkRange(region, at, length);
    return at;
  }

  /** Run `body` on an open writer; any error aborts the writer and is rethrown (IO errors coded). */
  #guard<T>(body: () => T): T {
    if (this.#state !== "open") {
      throw new SafetensorError("Closed", `the writer of ${this.path} is ${this.#state}`);
    }
    try {
      return body();
    } catch (error) {
      this.#fail(writeError(error, `cannot write ${this.path}`));
    }
  }

  #fail(error: SafetensorError): never {
    this.abort();
    throw error;
  }
}

/**
 * Start writing a safetensors file at `path` for these tensors (dtype and shape each; no data yet) and metadata.
 * The header is computed and written now; the file appears at `path` only on `commit()`.
 */
export function createWriter(
  path: string,
  tensors: NamedTensors<TensorSpec>,
  metadata?: MetadataInput,
  options: WriterOptions = {},
): SafetensorsWriter {
  return createWriterForLayout(path, planLayout(tensors, metadata, options), options);
}

/**
 * Start writing a file laid out already: `layout.header` (the size prefix and header bytes, any padding or key
 * order) and the tensors' [begin, end) in the data region, which must tile it in order. Rebuilding a file to the
 * byte (delta patches) needs its own header, not the one `planLayout` would make.
 */
export function createWriterForLayout(
  path: string,
  layout: LayoutPlan,
  options: AtomicWriteOptions = {},
): SafetensorsWriter {
  let end = 0;
  for (const tensor of layout.tensors) {
    if (tensor.begin !== end || tensor.end < tensor.begin) {
      throw new SafetensorError(
        "InvalidOffset",
        `tensor ${quoteName(tensor.name)}: its bytes do not follow the previous tensor's`,
        {
          tensor: tensor.name,
        },
      );
    }
    end = tensor.end;
  }
  if (end !== layout.dataLength || layout.header.length + end !== layout.totalLength) {
    throw new SafetensorError("InvalidOffset", "the layout's tensors do not cover its data region exactly");
  }
  const file = AtomicFile.create(path, options);
  try {
    writeAllAt(file.fd, layout.header, 0);
  } catch (error) {
    file.abort();
    throw writeError(error, `cannot write ${path}`);
  }
  return new SafetensorsWriter(path, layout, file);
}

export type { SafetensorsWriter };
