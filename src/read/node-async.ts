/**
 * Node adapter for the async reader: local files through `fs/promises` FileHandle (reads run on libuv's thread pool,
 * so awaiting them never blocks the event loop), and `open`/`loadFileAsync` that accept paths as well as URLs.
 */
import * as fsp from "node:fs/promises";
import { SafetensorError } from "../format/errors.js";
import { type ByteSource, type ReadOptions, throwIfAborted } from "../io/async-source.js";
import { ioError } from "../io/node-file.js";
import { checkRange } from "../io/source.js";
import { resolveS3, type S3Options } from "../remote/s3.js";
import { type AsyncInput, type AsyncOpenOptions, AsyncSafetensorsFile, toSource } from "./async-file.js";
import type { Tensor } from "./tensor.js";

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

const URL_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

/** Options of Node's `open`: the core's options plus S3 settings. */
export interface NodeOpenOptions extends AsyncOpenOptions, S3Options {}

/**
 * Options filled from the environment where not given: HF_ENDPOINT, HF_TOKEN; AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION), and the endpoint from
 * AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or S3_ENDPOINT.
 */
export function withEnvironment(
  options: NodeOpenOptions,
  // Not NodeJS.ProcessEnv: the published types must compile without @types/node.
  env: Readonly<Record<string, string | undefined>> = process.env,
): NodeOpenOptions {
  return {
    ...options,
    hfEndpoint: options.hfEndpoint ?? env.HF_ENDPOINT,
    hfToken: options.hfToken ?? env.HF_TOKEN,
    s3Endpoint: options.s3Endpoint ?? env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL ?? env.S3_ENDPOINT,
    s3Region: options.s3Region ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION,
    s3AccessKeyId: options.s3AccessKeyId ?? env.AWS_ACCESS_KEY_ID,
    s3SecretAccessKey: options.s3SecretAccessKey ?? env.AWS_SECRET_ACCESS_KEY,
    s3SessionToken: options.s3SessionToken ?? env.AWS_SESSION_TOKEN,
  };
}

/**
 * `open` for Node: a path opens a local file with a FileHandle; `s3://BUCKET/KEY` reads an object store (SigV4 when
 * credentials are set); http(s)://, hf://, Blobs, bytes and sources as in the core's `open`. Hub and AWS settings
 * come from the environment unless given.
 */
export async function openAsync(input: AsyncInput, options: NodeOpenOptions = {}): Promise<AsyncSafetensorsFile> {
  if (typeof input === "string" && !URL_SCHEME.test(input)) {
    return AsyncSafetensorsFile.open(await FileHandleSource.open(input), options);
  }
  const resolved = withEnvironment(options);
  if (typeof input === "string" && /^s3:\/\//i.test(input)) {
    const { url, http } = resolveS3(input, resolved);
    return AsyncSafetensorsFile.open(toSource(url, http), resolved);
  }
  return AsyncSafetensorsFile.open(toSource(input, resolved), resolved);
}

/**
 * Read every tensor of a file (path or URL) without blocking the event loop: the data region is read in
 * `maxReadBytes` pieces, concurrently. Tensors are in file order and own their memory.
 */
export async function loadFileAsync(input: AsyncInput, options: NodeOpenOptions = {}): Promise<Map<string, Tensor>> {
  const file = await openAsync(input, options);
  try {
    return await file.getTensors(undefined, { signal: options.signal });
  } finally {
    await file.close();
  }
}
