/**
 * What a sharded checkpoint answers from its index and shard headers alone, for local (sync) and remote (async)
 * handles alike: names, metadata, which shard holds a tensor, tensor infos, the open shard files.
 */
import { quoteName, SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { compareCodePoints } from "../format/serialize.js";
import { tensorNotFound } from "../format/suggest.js";
import type { ShardLocation } from "./check.js";
import type { JsonValue, ShardIndex } from "./index-json.js";

export class ShardedView<F> {
  protected files: Map<string, F> | null;
  private sortedKeys: string[] | null = null;

  protected constructor(
    readonly index: ShardIndex,
    files: Map<string, F>,
    private readonly locations: ReadonlyMap<string, ShardLocation>,
    /** Problems that do not stop loading: unlisted tensors, a `total_size` that disagrees, unknown index keys. */
    readonly warnings: readonly string[],
  ) {
    this.files = files;
  }

  protected get live(): Map<string, F> {
    if (!this.files) throw new SafetensorError("Closed", "sharded checkpoint is closed");
    return this.files;
  }

  /** Tensor names sorted by code point. */
  keys(): string[] {
    this.sortedKeys ??= [...this.locations.keys()].sort(compareCodePoints);
    return [...this.sortedKeys];
  }

  /** Tensor names in the index's order. */
  indexKeys(): string[] {
    return [...this.locations.keys()];
  }

  has(name: string): boolean {
    return this.locations.has(name);
  }

  /** The index's `metadata` object. */
  metadata(): ReadonlyMap<string, JsonValue> {
    return this.index.metadata;
  }

  /** The shard files, in the index's order. */
  get shards(): readonly string[] {
    return this.index.files;
  }

  /** The open file of one shard (owned by this handle). */
  shard(file: string): F {
    const shard = this.live.get(file);
    if (!shard) throw new SafetensorError("InvalidOption", `no shard named ${quoteName(file)}`);
    return shard;
  }

  /** Which shard holds a tensor. */
  shardOf(name: string): string {
    return this.locate(name).file;
  }

  protected locate(name: string): ShardLocation {
    const location = this.locations.get(name);
    if (!location) throw tensorNotFound(name, this.locations.keys());
    return location;
  }

  info(name: string): TensorInfo {
    return this.locate(name).info;
  }

  /** Sum of the tensors' bytes. */
  get dataBytes(): number {
    let total = 0;
    for (const location of this.locations.values()) total += location.info.byteLength;
    return total;
  }

  get closed(): boolean {
    return this.files === null;
  }
}
