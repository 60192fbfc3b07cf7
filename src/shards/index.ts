/** Sharded checkpoints, the pure parts (no Node APIs): shard sizes and assignment, the index file, checks. */
export { type CheckedShards, checkShards, type ShardLocation } from "./check.js";
export {
  checkShardPath,
  DEFAULT_MAX_INDEX_BYTES,
  type FormatIndexOptions,
  formatIndex,
  INDEX_FILE_NAME,
  type JsonValue,
  parseIndex,
  type ShardIndex,
} from "./index-json.js";
export {
  DEFAULT_FILENAME_PATTERN,
  DEFAULT_MAX_SHARD_SIZE,
  type PlannedShard,
  type PlanShardsOptions,
  planShards,
  type ShardItem,
  type ShardPlan,
  shardFileName,
} from "./plan.js";
export { parseSize } from "./size.js";
