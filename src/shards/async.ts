/**
 * Sharded checkpoints over async sources: an index (`model.safetensors.index.json`) read from a URL or anywhere,
 * every shard's header fetched in parallel (bounded), the index checked against them with the same pure checks as
 * local shards (`src/shards`), and one handle over all shards. Pure: runs in browsers.
 */

import { inFile, SafetensorError } from "../format/errors.js";
import type { Header } from "../format/header.js";
import { Limiter } from "../io/async-decorators.js";
import {
  type AsyncGetOptions,
  type AsyncOpenOptions,
  AsyncSafetensorsFile,
  type AsyncTensorSlice,
  toSource,
} from "../read/async-file.js";
import type { Tensor } from "../read/tensor.js";
import { resolveHfUrl } from "../remote/hf.js";
import { HttpSource } from "../remote/http.js";
import { checkShards, DEFAULT_MAX_INDEX_BYTES, parseIndex } from "./index.js";
import { ShardedView } from "./view.js";

/** Default of `AsyncShardedOptions.shardConcurrency`. */
export const DEFAULT_SHARD_CONCURRENCY = 8;

/**
 * Options of `openShardedAsync`: those of `open` for every shard, plus the index's limit and how many shard headers
 * are fetched at once.
 */
export interface AsyncShardedOptions extends AsyncOpenOptions {
  /** Largest index read (default 64 MiB). */
  maxIndexBytes?: number;
  /** At most this many shard headers fetched at once (default 8). */
  shardConcurrency?: number;
}

/** Where an index and its shards come from: the index's text, and how to open a shard by its relative name. */
export interface ShardedSource {
  readIndex(): Promise<string>;
  openShard(file: string): Promise<AsyncSafetensorsFile>;
}

/**
 * A sharded checkpoint read through async sources (what `openShardedAsync` returns): the index and every shard's
 * header are checked against each other at open; tensors are fetched from their shards on demand. `await close()` it
 * when done.
 */
export class AsyncShardedFile extends ShardedView<AsyncSafetensorsFile> {
  static async open(source: ShardedSource, options: AsyncShardedOptions = {}): Promise<AsyncShardedFile> {
    const index = parseIndex(await source.readIndex());
    const limiter = new Limiter(options.shardConcurrency ?? DEFAULT_SHARD_CONCURRENCY);
    const files = new Map<string, AsyncSafetensorsFile>();
    try {
      const opened = await Promise.allSettled(
        index.files.map((file) =>
          limiter.run(async () => {
            // A shard's errors name it (as openSharded's do).
            const shard = await source.openShard(file).catch((error: unknown) => {
              throw inFile(error, file, true);
            });
            files.set(file, shard);
            return shard;
          }),
        ),
      );
      const failed = opened.find((r) => r.status === "rejected");
      if (failed) throw (failed as PromiseRejectedResult).reason;
      const headers = new Map<string, Header>(index.files.map((file) => [file, files.get(file)!.header]));
      const checked = checkShards(index, headers);
      return new AsyncShardedFile(index, files, checked.locations, checked.warnings);
    } catch (error) {
      await Promise.all([...files.values()].map((f) => f.close().catch(() => {})));
      throw error;
    }
  }

  getTensor(name: string, options?: AsyncGetOptions): Promise<Tensor> {
    return this.shard(this.shardOf(name)).getTensor(name, options);
  }

  getSlice(name: string): AsyncTensorSlice {
    return this.shard(this.shardOf(name)).getSlice(name);
  }

  /** Close every shard's source (idempotent); later reads throw `Closed`. */
  async close(): Promise<void> {
    const files = this.files;
    this.files = null;
    await Promise.all([...(files?.values() ?? [])].map((f) => f.close()));
  }
}

/** An index at an http(s):// or hf:// URL; shards are resolved relative to it. */
export function urlShardedSource(location: string | URL, options: AsyncShardedOptions = {}): ShardedSource {
  let url = String(location);
  let http = options;
  if (/^hf:\/\//i.test(url)) {
    const resolved = resolveHfUrl(url, options);
    new Headers(options.headers).forEach((value, key) => {
      resolved.headers.set(key, value);
    });
    url = resolved.url;
    http = { ...options, headers: resolved.headers };
  }
  const maxIndexBytes = options.maxIndexBytes ?? DEFAULT_MAX_INDEX_BYTES;
  return {
    async readIndex() {
      // One request: the whole index if it is no larger than the limit.
      const { source, head } = await new HttpSource(url, http).openWithHead(maxIndexBytes + 1, options);
      await source.close();
      if (head.length > maxIndexBytes) {
        throw new SafetensorError("InvalidIndex", `the index is larger than ${maxIndexBytes} bytes (maxIndexBytes)`);
      }
      return new TextDecoder("utf-8", { fatal: true }).decode(head);
    },
    openShard: (file) => AsyncSafetensorsFile.open(toSource(new URL(file, url).href, http), options),
  };
}

/** Open a sharded checkpoint from its index's URL (http(s):// or hf://), or from any `ShardedSource`. */
export function openShardedAsync(
  location: string | URL | ShardedSource,
  options: AsyncShardedOptions = {},
): Promise<AsyncShardedFile> {
  const source =
    typeof location === "string" || location instanceof URL ? urlShardedSource(location, options) : location;
  return AsyncShardedFile.open(source, options);
}
