/**
 * Node.js entry point (`safetensors-ts` in Node, and `safetensors-ts/node`): everything from the core plus files,
 * in-place edits, masks, sharded checkpoints, integrity and PyTorch conversion.
 *
 * @module safetensors-ts/node
 */
import { loadNative } from "./io/native.js";

export { type RecoverOptions, type RecoverResult, recoverFile } from "./edit/journal.js";
export {
  type ApplyMaskOptions,
  type ApplyMaskResult,
  applyMask,
  type BitOrder,
  type MaskedTensor,
  type MaskLayout,
  type MaskMode,
} from "./edit/mask.js";
export { openForEdit } from "./edit/open.js";
export {
  DEFAULT_MAX_JOURNAL_BYTES,
  EditHandle,
  type EditOptions,
  type Editor,
  type EditResult,
  type EditValues,
  type LocalityProof,
  type VerifyLevel,
  type WriteOptions,
} from "./edit/region.js";
export { type CheckpointRecoverResult, recoverCheckpoint, ShardedEditHandle } from "./edit/sharded-edit.js";
export { planToGguf, type ToGgufOptions, type ToGgufResult, toGguf } from "./gguf/node-convert.js";
export {
  FROM_GGUF_DTYPES,
  type FromGgufDtype,
  type FromGgufOptions,
  type FromGgufResult,
  fromGguf,
} from "./gguf/node-from-gguf.js";
export { type NodeGgufOptions, openGguf, openGgufSync } from "./gguf/node-gguf.js";
// The Node entry is the whole core (an explicit list in index.ts) plus the file API below.
export * from "./index.js";
export {
  type CheckpointDiff,
  type DiffOptions,
  diffCheckpoints,
  type MetadataDiff,
  type TensorDiff,
  type TensorDiffStatus,
  type TensorSide,
} from "./integrity/diff.js";
export type { EcosystemDigests, FileDigests } from "./integrity/digests.js";
export {
  type DsseEnvelope,
  preAuthEncoding,
  type SignedResource,
  type SignedStatement,
  type SigstoreBundle,
  signedKind,
  signManifest,
  statementOf,
  verifyEnvelope,
  verifySignedStatement,
} from "./integrity/dsse.js";
export {
  createManifest,
  type FileCheck,
  type SignedFiles,
  type TensorCheck,
  type TensorCheckStatus,
  type VerifyReport,
  verifyManifest,
  verifySignedFiles,
} from "./integrity/manifest.js";
export { type Manifest, type ManifestFile, type ManifestTensor, parseManifest } from "./integrity/manifest-format.js";
export { type ApplyPatchOptions, type ApplyPatchResult, applyPatch, readPatchPlan } from "./integrity/patch-apply.js";
export { type CreatePatchOptions, type CreatePatchResult, createPatch } from "./integrity/patch-create.js";
export type { PatchFileRef, PatchOp, PatchPlan, PatchSummary, PatchTarget } from "./integrity/patch-format.js";
export { digestFile } from "./integrity/stored-file.js";
// `open` here also takes local paths (read through a FileHandle); it shadows the core's URL/Blob/bytes `open`.
export { FileHandleSource } from "./io/node-file-handle.js";
export { journalPathFor } from "./io/node-journal-path.js";
export {
  type ChunkSource,
  createWriter,
  type RegionOptions,
  type SafetensorsWriter,
  type WriterOptions,
} from "./io/stream-writer.js";
export {
  type ExtractedModule,
  type ExtractLoraOptions,
  type ExtractProgress,
  type ExtractSummary,
  extractLora,
} from "./merge/node-extract.js";
export {
  type AdapterSpec,
  type BakeLoraOptions,
  type BakeProgress,
  type BakeSummary,
  bakeLora,
} from "./merge/node-lora.js";
export {
  type MergeModelsOptions,
  type MergeProgress,
  type MergeSummary,
  mergeModels,
  parseMergeYaml,
} from "./merge/node-merge.js";
export {
  type ConversionReport,
  convertPickleFile,
  convertToTorchFile,
  type NodeConvertOptions,
  planPickleFile,
  scanPickleFile,
  type TorchWriteReport,
} from "./pickle/node-pickle.js";
export {
  convertPickleDirectory,
  type DirectoryConversionReport,
  type DirectoryConvertOptions,
} from "./pickle/node-pickle-dir.js";
export { loadFileAsync, type NodeOpenOptions, openAsync as open } from "./read/node-async.js";
export {
  type Backend,
  defaultBackend,
  type LoadFileOptions,
  loadFile,
  type OpenFileOptions,
  openFile,
  type SaveFileOptions,
  saveFile,
} from "./read/node-files.js";
export type { S3Options } from "./remote/s3.js";
export {
  isShardedTarget,
  type OpenShardedOptions,
  openSharded,
  type SavedShards,
  type SaveShardedOptions,
  ShardedFile,
  saveSharded,
} from "./shards/node.js";

// Load the optional native addon with the module (like a Python extension at import), not inside the first open.
loadNative();
