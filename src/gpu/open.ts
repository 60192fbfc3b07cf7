/**
 * What `loadToGPU` reads from: a URL or hf:// location (a file, or an index of a sharded checkpoint), a Blob/File,
 * any byte source, or a handle the caller opened. Opened here means closed here; a caller's handle stays open.
 */

import { SafetensorError } from "../format/errors.js";
import type { ByteSource, ByteSourceOpener } from "../io/async-source.js";
import { AsyncSafetensorsFile, toSource } from "../read/async-file.js";
import { resolveHfUrl } from "../remote/hf.js";
import type { HttpOptions } from "../remote/http.js";
import { AsyncShardedFile, type AsyncShardedOptions, urlShardedSource } from "../shards/async.js";

/** Where downloaded bytes can be kept (the OPFS cache, `openWeightCache`): a caching source for a URL. */
export interface SourceCache {
  opener(url: string, options?: HttpOptions): ByteSourceOpener;
}

export type GpuLoadInput =
  | string
  | URL
  | Blob
  | ByteSource
  | ByteSourceOpener
  | AsyncSafetensorsFile
  | AsyncShardedFile;

export interface OpenedInput {
  readonly files: readonly AsyncSafetensorsFile[];
  close(): Promise<void>;
}

/** True for a location whose path ends in .json: the index of a sharded checkpoint. */
export function isIndexLocation(location: string): boolean {
  const path = location.replace(/[?#].*$/, "");
  return /\.json$/i.test(path);
}

/**
 * Requests past the browser's HTTP cache. With it, Chromium stored each range as a sparse cache entry and cut
 * ranged requests short to fill them from there: 385 MiB more sent by nginx for the 2.37 GiB bench checkpoint
 * (106 of 260 requests ended after ~4 of 16 MiB), and no second visit served from it. The OPFS cache is the one
 * that makes a second visit local.
 */
export function bypassHttpCache(fetchFn: HttpOptions["fetch"]): NonNullable<HttpOptions["fetch"]> {
  const inner = fetchFn ?? ((input, init) => globalThis.fetch(input, init));
  return (input, init) => inner(input, { ...init, cache: "no-store" });
}

/** An http(s) URL and the request options for an http(s):// or hf:// location. */
function resolve(location: string, options: AsyncShardedOptions): { url: string; http: HttpOptions } {
  const fetch = bypassHttpCache(options.fetch);
  if (!/^hf:\/\//i.test(location)) return { url: new URL(location).href, http: { ...options, fetch } };
  const { url, headers } = resolveHfUrl(location, options);
  new Headers(options.headers).forEach((value, key) => {
    headers.set(key, value);
  });
  return { url, http: { ...options, headers, fetch } };
}

export async function openInput(
  input: GpuLoadInput,
  options: AsyncShardedOptions & { cache?: SourceCache | undefined },
): Promise<OpenedInput> {
  const keep = async () => {};
  if (input instanceof AsyncSafetensorsFile) return { files: [input], close: keep };
  if (input instanceof AsyncShardedFile) return { files: input.shards.map((f) => input.shard(f)), close: keep };
  const cache = options.cache;
  if (typeof input === "string" || input instanceof URL) {
    const { url, http } = resolve(String(input), options);
    const sourceOf = (fileUrl: string) => (cache ? cache.opener(fileUrl, http) : toSource(fileUrl, http));
    if (isIndexLocation(url)) {
      const index = urlShardedSource(url, http);
      const sharded = await AsyncShardedFile.open(
        {
          readIndex: () => index.readIndex(),
          openShard: (file) => AsyncSafetensorsFile.open(sourceOf(new URL(file, url).href), options),
        },
        options,
      );
      return { files: sharded.shards.map((f) => sharded.shard(f)), close: () => sharded.close() };
    }
    const file = await AsyncSafetensorsFile.open(sourceOf(url), options);
    return { files: [file], close: () => file.close() };
  }
  if (cache) {
    throw new SafetensorError("InvalidOption", "cache applies to URLs only (a Blob or a source is already local)");
  }
  const file = await AsyncSafetensorsFile.open(toSource(input), options);
  return { files: [file], close: () => file.close() };
}
