/**
 * numpy basic indexing over row-major tensor bytes: parse (`parseSliceSpec`), normalize (`normalizeIndex`), plan the
 * byte runs (`planSlice`, `fetchRanges`) and copy them out (`gather`, `gatherPieces`). Pure: no IO, runs in browsers.
 */
export { type FetchedPiece, gather, gatherPieces } from "./gather.js";
export { type AxisSelection, type NormalizedIndex, normalizeDim, normalizeIndex } from "./normalize.js";
export {
  type ByteRange,
  DEFAULT_MAX_GAP,
  DEFAULT_MAX_RANGES,
  type FetchOptions,
  fetchRanges,
  type PlanLoop,
  planSlice,
  SlicePlan,
} from "./plan.js";
export {
  type Dim,
  ELLIPSIS,
  type Ellipsis,
  formatSliceSpec,
  type IndexInteger,
  parseSliceSpec,
  type Slice,
  type SliceIndex,
  slice,
} from "./spec.js";
