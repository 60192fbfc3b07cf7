/**
 * Node adapter for the async reader: `open`/`loadFileAsync` that accept paths (read through a FileHandle, on libuv's
 * thread pool) as well as URLs, with Hub and AWS settings from the environment.
 */
import { FileHandleSource } from "../io/node-file-handle.js";
import { resolveS3, type S3Options } from "../remote/s3.js";
import { type AsyncInput, type AsyncOpenOptions, AsyncSafetensorsFile, toSource } from "./async-file.js";
import type { Tensor } from "./tensor.js";

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
