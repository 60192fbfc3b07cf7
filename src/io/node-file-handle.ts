/**
 * A local file as an async byte source: reads through an `fs/promises` FileHandle run on libuv's thread pool, so
 * awaiting them never blocks the event loop.
 */
import * as fsp from "node:fs/promises";
import { SafetensorError } from "../format/errors.js";
import { type ByteSource, type ReadOptions, throwIfAborted } from "./async-source.js";
import { ioError } from "./node-file.js";
import { checkRange } from "./source.js";

/** One FileHandle read moves at most this much (libuv caps a read at INT32_MAX bytes). */
const MAX_READ_CHUNK = 1 << 30;

export class FileHandleSource implements ByteSource {
  readonly kind = "file";
  readonly remote = false;
  readonly byteLength: number;
  private handle: fsp.FileHandle | null;
  private readonly path: string;

  private constructor(handle: fsp.FileHandle, size: number, path: string) {
    this.handle = handle;
    this.byteLength = size;
    this.path = path;
  }

  static async open(path: string): Promise<FileHandleSource> {
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(path, "r");
    } catch (error) {
      throw ioError(error, `cannot open ${path}`);
    }
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) throw new SafetensorError("IoError", `${path} is not a regular file`);
      return new FileHandleSource(handle, stat.size, path);
    } catch (error) {
      await handle.close();
      throw ioError(error, `cannot read ${path}`);
    }
  }

  async read(offset: number, length: number, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal);
    const handle = this.handle;
    if (!handle) throw new SafetensorError("Closed", "source is closed");
    checkRange(this, offset, length);
    const out = new Uint8Array(length);
    for (let done = 0; done < length; ) {
      let bytesRead: number;
      try {
        ({ bytesRead } = await handle.read(out, done, Math.min(MAX_READ_CHUNK, length - done), offset + done));
      } catch (error) {
        throw ioError(error, `cannot read ${this.path}`);
      }
      if (bytesRead === 0) {
        throw new SafetensorError("SourceChanged", `${this.path} is shorter than when it was opened`);
      }
      done += bytesRead;
      throwIfAborted(options.signal);
    }
    return out;
  }

  async close(): Promise<void> {
    const handle = this.handle;
    this.handle = null;
    await handle?.close();
  }
}
