/**
 * safetensors-ts core: format, dtypes, tensors, codecs, slicing and in-memory reading and writing. No Node APIs:
 * this entry point runs in browsers. Node file IO lives in `safetensors-ts/node`.
 *
 * @module safetensors-ts/core
 */
import { type Header, type HeaderOptions, parseHeaderFromBuffer } from "./format/header.js";
import { Tensor } from "./read/tensor.js";

export type { Float8Dtype } from "./codecs/float8.js";
export {
  canDecode,
  canEncode,
  type EncodableDtype,
  elementCountOf,
  encodedByteLength,
  type FromFloat32Options,
  fromFloat32,
  type ToFloat32Options,
  toFloat32,
} from "./codecs/index.js";
export type { SubByteDtype } from "./codecs/subbyte.js";
export {
  byteSize,
  DTYPES,
  type Dtype,
  type DtypeInfo,
  type DtypeKind,
  dtypeInfo,
  dtypeOf,
  elementCount,
  isDtype,
  type TypedArrayName,
} from "./format/dtypes.js";
export {
  HEADER_ERROR_CODES,
  type HeaderErrorCode,
  isSafetensorError,
  SafetensorError,
  type SafetensorErrorCode,
} from "./format/errors.js";
export {
  DEFAULT_MAX_HEADER_BYTES,
  type Header,
  type HeaderOptions,
  parseHeader,
  parseHeaderFromBuffer,
  readHeaderLength,
  type TensorInfo,
} from "./format/header.js";
export {
  type LayoutPlan,
  type LayoutTensor,
  type MetadataInput,
  type NamedTensors,
  type PlannedTensor,
  planLayout,
  planSerialization,
  type SerializationPlan,
  type SerializeOptions,
  serialize,
  type TensorLike,
  type TensorSpec,
} from "./format/serialize.js";
export { type ArchSpec as GgufArchSpec, SUPPORTED_ARCHITECTURES } from "./gguf/arch.js";
export {
  AsyncGgufFile,
  DEFAULT_GGUF_LOCAL_FIRST_READ,
  DEFAULT_GGUF_REMOTE_FIRST_READ,
  decodeTensor,
  GgufFile,
  type GgufOpenOptions,
} from "./gguf/file.js";
export {
  type ConversionPlan as GgufConversionPlan,
  type ConvertInputs as GgufConvertInputs,
  OUTPUT_TYPES as GGUF_OUTPUT_TYPES,
  type OutputType as GgufOutputType,
  type PlanOptions as GgufPlanOptions,
  planConversion as planGgufConversion,
  type SourceTensor as GgufSourceTensor,
  type TensorJob as GgufTensorJob,
  type TensorType as GgufTensorType,
} from "./gguf/plan.js";
export { blockBytes, dequantize, QUANT_TYPES, type QuantTypeName, quantize } from "./gguf/quants.js";
export {
  DEFAULT_GGUF_LIMITS,
  type GgufHeader,
  type GgufLimits,
  type GgufTensorInfo,
  parseGgufHeader,
} from "./gguf/reader.js";
export type { Json as GgufJson } from "./gguf/special-vocab.js";
export {
  ARRAY_PREVIEW,
  type GgufSummary,
  summarizeGguf,
} from "./gguf/summary.js";
export {
  GGML_TYPES,
  type GgmlTypeInfo,
  type GgufArray,
  type GgufScalar,
  type GgufValue,
  ggmlType,
  type ScalarTypeName as GgufScalarTypeName,
  VALUE_TYPES as GGUF_VALUE_TYPES,
  type ValueTypeName as GgufValueTypeName,
} from "./gguf/types.js";
export type { TokenizerFiles as GgufTokenizerFiles } from "./gguf/vocab.js";
export { type GgufPlan, type PlannedTensor as GgufPlannedTensor, planGguf } from "./gguf/writer.js";
export {
  BufferUsage,
  type CacheEntryInfo,
  type CacheStats,
  DEFAULT_GPU_CHUNK_BYTES,
  type GpuBufferLike,
  type GpuDeviceLike,
  type GpuLoadInput,
  type GpuLoadProgress,
  type GpuTensor,
  type GpuTensorPart,
  type LoadToGpuOptions,
  loadToGPU,
  openWeightCache,
  type SourceCache,
  type TargetDtype,
  WeightCache,
  type WeightCacheOptions,
} from "./gpu/index.js";
export {
  type CacheOptions,
  type CoalesceOptions,
  type Range,
  withCache,
  withCoalescing,
  withConcurrencyLimit,
} from "./io/async-decorators.js";
export {
  BlobSource,
  type ByteSource,
  type ByteSourceOpener,
  MemoryByteSource,
  type OpenedSource,
  type ReadOptions,
  SyncSourceAdapter,
} from "./io/async-source.js";
export { MemorySource, type SyncByteSource } from "./io/source.js";
export {
  type ConditionalSetting as MergeConditionalSetting,
  MERGE_METHODS,
  type MergeConfig,
  type MergeDtype,
  type MergeMethod,
  type OutputSlice as MergeOutputSlice,
  type Parameters as MergeParameters,
  parseMergeConfig,
  type Setting as MergeSetting,
  type SliceSource as MergeSliceSource,
} from "./merge/config.js";
export {
  type ChunkCompute,
  type ExecuteOptions,
  executeJob,
  type MergeReader,
  type MergeSink,
  type SparsifyTask,
} from "./merge/execute.js";
export {
  type AdapterConfigInput as ExtractedAdapterConfigInput,
  type ExtractItem,
  type ExtractPlan,
  type ExtractPlanOptions,
  extractedAdapterConfig,
  type LoraModulePlan,
  loraFactors,
  planExtraction,
  type SavedTensorPlan,
} from "./merge/extract.js";
export {
  isKohyaLora,
  type KohyaAdapterInput,
  type KohyaTarget,
  kohyaTargets,
  ldmUnetToDiffusers,
  planKohya,
} from "./merge/kohya.js";
export {
  type AdapterConfig,
  type AdapterInput,
  type LoraTensorPlan,
  type LoraUpdate,
  parseAdapterConfig,
  planLora,
} from "./merge/lora.js";
export {
  type CatalogTensor,
  type JobInput as MergeJobInput,
  type MergePlan,
  type ModelCatalog,
  planMerge,
  type TensorJob,
} from "./merge/plan.js";
export { type SvdMethod, type SvdOptions, type TruncatedSvd, truncatedSvd } from "./merge/svd.js";

export {
  type Container,
  type ContainerFormat,
  type ContainerOptions,
  type ConversionPlan,
  type ConvertOptions,
  DEFAULT_PICKLE_LIMITS,
  type GlobalFinding,
  type GlobalUse,
  openContainer,
  openContainerAsync,
  type PickleLimits,
  type PlannedTensor as PlannedPickleTensor,
  planConversion,
  type ScanReport,
  scanSource,
  scanSourceAsync,
  type Verdict,
} from "./pickle/index.js";
export {
  DEFAULT_RANK_CONCURRENCY,
  loadRank,
  type RankReadOptions,
  type RankSource,
  readRankParts,
} from "./rank/load.js";
export {
  LLAMA_RULES,
  parseRankRules,
  planRankLoad,
  type RankOptions,
  type RankPlan,
  type RankRule,
  type RankTensor,
  type TensorCatalog,
} from "./rank/plan.js";
// The public API, listed name by name: helpers the modules share (message quoting, sort order, range checks, the
// slice planner's internals, the header reader's fast path) stay importable by path inside the repo but are not
// part of the package. `test/package.test.ts` checks what a consumer sees.
export {
  type AsyncGetOptions,
  type AsyncInput,
  type AsyncOpenOptions,
  type AsyncReadOptions,
  AsyncSafetensorsFile,
  type AsyncTensorSlice,
  open,
} from "./read/async-file.js";
export { type GetTensorOptions, SafetensorsFile, type TensorSlice } from "./read/file.js";
export { Tensor, type TypedArray } from "./read/tensor.js";
export {
  DEFAULT_MAX_ARRAY_ELEMENTS,
  type Element as TensorElement,
  type Nested as NestedElements,
} from "./read/tensor-values.js";
export { DEFAULT_HF_ENDPOINT, type HfLocation, type HfOptions, parseHfUrl, resolveHfUrl } from "./remote/hf.js";
export { type HttpOptions, HttpSource, type HttpValidators } from "./remote/http.js";
export {
  AsyncShardedFile,
  type AsyncShardedOptions,
  DEFAULT_SHARD_CONCURRENCY,
  openShardedAsync,
  type ShardedSource,
  urlShardedSource,
} from "./shards/async.js";
export {
  type CheckedShards,
  checkShardPath,
  checkShards,
  DEFAULT_FILENAME_PATTERN,
  DEFAULT_MAX_INDEX_BYTES,
  DEFAULT_MAX_SHARD_SIZE,
  type FormatIndexOptions,
  formatIndex,
  INDEX_FILE_NAME,
  type JsonValue,
  type PlannedShard,
  type PlanShardsOptions,
  parseIndex,
  parseSize,
  planShards,
  type ShardIndex,
  type ShardItem,
  type ShardLocation,
  type ShardPlan,
  shardFileName,
} from "./shards/index.js";
export {
  type ByteRange,
  type Dim,
  ELLIPSIS,
  type Ellipsis,
  formatSliceSpec,
  type IndexInteger,
  type PlanLoop,
  parseSliceSpec,
  type Slice,
  type SliceIndex,
  type SlicePlan,
  slice,
} from "./slice/index.js";

declare global {
  // `SafetensorsFile` is Disposable (`using file = openFile(...)`). Declaring the well-known symbol here, the way
  // @types/node does, lets the published types compile under `lib: ["ES2022", "DOM"]` without `ESNext.Disposable`;
  // the declaration merges with those libs when they are present. Node ≥ 20 defines it at run time; in a browser that
  // does not, the method is simply never called by the runtime.
  interface SymbolConstructor {
    readonly dispose: unique symbol;
    readonly asyncDispose: unique symbol;
  }
}

/** What `deserialize` returns. */
export interface Deserialized {
  readonly header: Header;
  readonly metadata: ReadonlyMap<string, string> | null;
  /** Tensors in file-offset order; their `data` are views into the input (no copy). */
  readonly tensors: Map<string, Tensor>;
}

/** Parse a whole safetensors file held in memory. Tensor data are zero-copy views into `bytes`. */
export function deserialize(bytes: Uint8Array | ArrayBuffer, options: HeaderOptions = {}): Deserialized {
  // A plain Uint8Array over the same memory (a Node Buffer's subarrays would be Buffers).
  const buffer = ArrayBuffer.isView(bytes)
    ? new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    : new Uint8Array(bytes);
  const header = parseHeaderFromBuffer(buffer, options);
  const tensors = new Map<string, Tensor>();
  for (const info of header.tensors.values()) {
    const begin = header.dataStart + info.dataOffsets[0];
    tensors.set(info.name, new Tensor(info.dtype, info.shape, buffer.subarray(begin, begin + info.byteLength)));
  }
  return { header, metadata: header.metadata, tensors };
}
