/** WebGPU loading: checkpoints into device buffers, converted on the device, cached in OPFS. Pure: runs in browsers. */
export {
  CACHE_PIECE_BYTES,
  type CacheEntryInfo,
  type CacheStats,
  DEFAULT_CACHE_BLOCK_BYTES,
  DEFAULT_CACHE_MAX_BYTES,
  DEFAULT_CACHE_NAME,
  DEFAULT_CACHE_PENDING_BLOCKS,
  openWeightCache,
  WeightCache,
  type WeightCacheOptions,
} from "./cache.js";
export { CONVERT_WGSL } from "./convert.js";
export {
  DEFAULT_GPU_CHUNK_BYTES,
  DEFAULT_GPU_LOCAL_CONCURRENCY,
  DEFAULT_GPU_MAX_GAP,
  DEFAULT_GPU_REMOTE_CONCURRENCY,
  type GpuLoadProgress,
  type GpuTensor,
  type GpuTensorPart,
  type LoadToGpuOptions,
  loadToGPU,
} from "./load.js";
export { type GpuLoadInput, isIndexLocation, type SourceCache } from "./open.js";
export { type Conversion, conversionOf, type LoadPlan, planLoad, type TargetDtype } from "./plan.js";
export { BufferUsage, type GpuBufferLike, type GpuDeviceLike } from "./webgpu.js";
