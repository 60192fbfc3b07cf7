/**
 * numpy basic indexing, normalized: for every input axis, the (start, step, count) it selects, exactly as numpy
 * computes them (CPython's `PySlice_Unpack` + `PySlice_AdjustIndices` for slices), with numpy's error messages.
 *
 * Arithmetic is done in `number` when the dimension is a safe integer (every value involved is then bounded by it),
 * and in `bigint` for the rare dimensions beyond 2^53 - 1 (which only zero-size tensors can have).
 */
import { SafetensorError } from "../format/errors.js";
import { type Dim, ELLIPSIS, type IndexInteger, type Slice, type SliceIndex } from "./spec.js";

/** What one input axis contributes to the result. */
export interface AxisSelection {
  /** The input axis. */
  readonly axis: number;
  /** The input dimension. */
  readonly size: Dim;
  /** First selected index (0 when `count` is 0). */
  readonly start: Dim;
  /** Distance between selected indices; negative steps walk backwards. Clamped to ±(2^53 - 1) like numpy clamps to ±(2^63 - 1). */
  readonly step: number | bigint;
  /** Number of selected indices. */
  readonly count: Dim;
  /** False for an integer index: the axis is dropped from the output (its count is 1). */
  readonly keep: boolean;
}

export interface NormalizedIndex {
  /** One entry per input axis, in order (axes the index does not mention select everything). */
  readonly axes: readonly AxisSelection[];
  /** The output shape: the counts of the kept axes. */
  readonly shape: readonly Dim[];
  /** True when the output has no elements (some count is 0). */
  readonly empty: boolean;
}

const MAX = Number.MAX_SAFE_INTEGER;
const BIG_MAX = BigInt(MAX);

function fail(message: string): never {
  throw new SafetensorError("InvalidSlice", message);
}

const NOT_AN_INDEX =
  "only integers, slices (`:`) and ellipsis (`...`) are valid indices (numpy.newaxis/None and arrays are not supported)";

function isInteger(value: unknown): value is IndexInteger {
  return typeof value === "bigint" || (typeof value === "number" && Number.isInteger(value));
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (typeof value === "bigint") return `${value}n`;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (typeof value === "string") return JSON.stringify(value);
  return typeof value;
}

function checkSliceObject(item: object, position: number): asserts item is Slice {
  for (const key of Object.keys(item)) {
    if (key !== "start" && key !== "stop" && key !== "step") {
      fail(`index item ${position} is not a slice: unexpected property ${JSON.stringify(key)}`);
    }
  }
  for (const key of ["start", "stop", "step"] as const) {
    const part = (item as Record<string, unknown>)[key];
    if (part !== null && part !== undefined && !isInteger(part)) {
      fail(`slice ${key} must be an integer or null, got ${describe(part)} (index item ${position})`);
    }
  }
}

/** Normalize one shape entry: a non-negative integer, as a `number` whenever it is safe. */
export function normalizeDim(dim: unknown, axis: number): Dim {
  if (typeof dim === "number" && Number.isSafeInteger(dim) && dim >= 0) return dim;
  if (typeof dim === "bigint" && dim >= 0n) return dim <= BIG_MAX ? Number(dim) : dim;
  throw new SafetensorError("InvalidTensor", `invalid shape: dimension ${axis} is ${describe(dim)}`);
}

function toDim(value: bigint): Dim {
  return value <= BIG_MAX && value >= -BIG_MAX ? Number(value) : value;
}

function clampNumber(value: IndexInteger): number {
  if (typeof value === "bigint") return value > BIG_MAX ? MAX : value < -BIG_MAX ? -MAX : Number(value);
  return value > MAX ? MAX : value < -MAX ? -MAX : value;
}

function selectInteger(axis: number, size: Dim, value: IndexInteger): AxisSelection {
  // Mixed number/bigint comparisons are exact in JS.
  if (value < -size || value >= size) {
    fail(`index ${value} is out of bounds for axis ${axis} with size ${size}`);
  }
  let start: Dim;
  if (typeof size === "number") {
    const i = Number(value);
    start = i < 0 ? i + size : i;
  } else {
    const i = BigInt(value);
    start = toDim(i < 0n ? i + size : i);
  }
  return { axis, size, start, step: 1, count: 1, keep: false };
}

function selectSliceNumber(axis: number, size: number, slice: Slice): AxisSelection {
  const step = slice.step === null || slice.step === undefined ? 1 : clampNumber(slice.step);
  if (step === 0) fail("slice step cannot be zero");
  let start: number;
  let stop: number;
  if (slice.start === null || slice.start === undefined) start = step < 0 ? size - 1 : 0;
  else {
    start = clampNumber(slice.start);
    if (start < 0) {
      start += size;
      if (start < 0) start = step < 0 ? -1 : 0;
    } else if (start >= size) start = step < 0 ? size - 1 : size;
  }
  if (slice.stop === null || slice.stop === undefined) stop = step < 0 ? -1 : size;
  else {
    stop = clampNumber(slice.stop);
    if (stop < 0) {
      stop += size;
      if (stop < 0) stop = step < 0 ? -1 : 0;
    } else if (stop >= size) stop = step < 0 ? size - 1 : size;
  }
  let count = 0;
  if (step < 0) {
    if (stop < start) count = Math.floor((start - stop - 1) / -step) + 1;
  } else if (start < stop) count = Math.floor((stop - start - 1) / step) + 1;
  return { axis, size, start: count === 0 ? 0 : start, step, count, keep: true };
}

function selectSliceBig(axis: number, size: bigint, slice: Slice): AxisSelection {
  const step = slice.step === null || slice.step === undefined ? 1n : BigInt(slice.step);
  if (step === 0n) fail("slice step cannot be zero");
  const adjust = (value: IndexInteger): bigint => {
    let v = BigInt(value);
    if (v < 0n) {
      v += size;
      if (v < 0n) v = step < 0n ? -1n : 0n;
    } else if (v >= size) v = step < 0n ? size - 1n : size;
    return v;
  };
  const start = slice.start === null || slice.start === undefined ? (step < 0n ? size - 1n : 0n) : adjust(slice.start);
  const stop = slice.stop === null || slice.stop === undefined ? (step < 0n ? -1n : size) : adjust(slice.stop);
  let count = 0n;
  if (step < 0n) {
    if (stop < start) count = (start - stop - 1n) / -step + 1n;
  } else if (start < stop) count = (stop - start - 1n) / step + 1n;
  const clampedStep = step > BIG_MAX ? MAX : step < -BIG_MAX ? -MAX : Number(step);
  return { axis, size, start: count === 0n ? 0 : toDim(start), step: clampedStep, count: toDim(count), keep: true };
}

const FULL: Slice = { start: null, stop: null, step: null };

/**
 * Normalize a basic index against a shape, with numpy's semantics and checks, in numpy's order: item types and the
 * single-ellipsis rule first, then "too many indices", then each axis in order (bounds of integers, zero steps).
 * Every failure is a `SafetensorError` "InvalidSlice" whose message is numpy's where numpy has one.
 */
export function normalizeIndex(shape: readonly Dim[], index: readonly SliceIndex[]): NormalizedIndex {
  const dims = shape.map(normalizeDim);
  let ellipsisAt = -1;
  for (let i = 0; i < index.length; i++) {
    const item: unknown = index[i];
    if (item === ELLIPSIS) {
      if (ellipsisAt >= 0) fail("an index can only have a single ellipsis ('...')");
      ellipsisAt = i;
    } else if (item === null || item === undefined) {
      fail(`None (numpy.newaxis) is not supported as an index (index item ${i})`);
    } else if (typeof item === "object" && !Array.isArray(item)) {
      checkSliceObject(item, i);
    } else if (!isInteger(item)) {
      fail(`${NOT_AN_INDEX}; index item ${i} is ${describe(item)}`);
    }
  }
  const used = index.length - (ellipsisAt >= 0 ? 1 : 0);
  if (used > dims.length) {
    fail(`too many indices for array: array is ${dims.length}-dimensional, but ${used} were indexed`);
  }
  // Map every input axis to its index item (ellipsis and the missing tail are full slices).
  const fill = dims.length - used;
  const axes: AxisSelection[] = new Array(dims.length);
  const out: Dim[] = [];
  let empty = false;
  let axis = 0;
  const take = (item: IndexInteger | Slice): void => {
    const size = dims[axis]!;
    let selection: AxisSelection;
    if (typeof item === "number" || typeof item === "bigint") selection = selectInteger(axis, size, item);
    else if (typeof size === "number") selection = selectSliceNumber(axis, size, item);
    else selection = selectSliceBig(axis, size, item);
    axes[axis] = selection;
    if (selection.keep) out.push(selection.count);
    if (selection.count === 0) empty = true;
    axis++;
  };
  for (const item of index) {
    if (item === ELLIPSIS) for (let k = 0; k < fill; k++) take(FULL);
    else take(item);
  }
  while (axis < dims.length) take(FULL);
  return { axes, shape: out, empty };
}
