/**
 * Index values (numpy basic indexing) and the CLI's string form of them.
 *
 * Integers are `number` when they are safe integers and `bigint` beyond that (a spec string may hold any integer;
 * numpy clamps huge slice bounds, so they must survive parsing exactly).
 */
import { SafetensorError } from "../format/errors.js";

/** The ellipsis index item (`...`): stands for as many full slices as needed. */
export const ELLIPSIS = "..." as const;
/** The type of `ELLIPSIS`. */
export type Ellipsis = typeof ELLIPSIS;

/** An integer index value: any integer `number`, or a `bigint`. */
export type IndexInteger = number | bigint;

/** A python slice `start:stop:step`; `null`/`undefined` parts take numpy's defaults. */
export interface Slice {
  readonly start?: IndexInteger | null;
  readonly stop?: IndexInteger | null;
  readonly step?: IndexInteger | null;
}

/**
 * One item of a basic index: an integer (drops the dimension, negative counts from the end), a slice, or the
 * ellipsis. numpy's `None`/`newaxis` is not supported (neither is it by the reference implementation).
 */
export type SliceIndex = IndexInteger | Slice | Ellipsis;

/** A dimension size: a `number` whenever it is a safe integer; a `bigint` only beyond 2^53 - 1 (zero-size tensors). */
export type Dim = number | bigint;

/** `slice(start, stop, step)` with python's argument conventions left to the caller: all parts optional. */
export function slice(start?: IndexInteger | null, stop?: IndexInteger | null, step?: IndexInteger | null): Slice {
  return { start: start ?? null, stop: stop ?? null, step: step ?? null };
}

const INTEGER = /^[+-]?[0-9]+$/;
const WHITESPACE = /^[ \t\r\n]*$/;

function invalid(item: string, spec: string, why: string): never {
  throw new SafetensorError(
    "InvalidSlice",
    `invalid slice item ${JSON.stringify(item)} in ${JSON.stringify(spec)}: ${why}`,
  );
}

function parseInteger(text: string): IndexInteger {
  const value = BigInt(text);
  return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
}

/**
 * Parse the CLI form of an index: comma-separated items, each an integer (`3`, `-1`), a python slice with any part
 * omitted (`:`, `::2`, `-3:`, `::-1`, `5:1:-2`) or `...`. Whitespace around items and slice parts is ignored; an empty
 * (or all-whitespace) spec is the empty index (the whole tensor). Integers keep their exact value (`bigint` beyond
 * 2^53). Throws `SafetensorError` "InvalidSlice" quoting the offending item.
 */
export function parseSliceSpec(spec: string): SliceIndex[] {
  if (WHITESPACE.test(spec)) return [];
  const items = spec.split(",");
  const out: SliceIndex[] = [];
  for (const raw of items) {
    const item = raw.trim();
    if (item === "") invalid(raw, spec, "empty item");
    if (item === "...") {
      out.push(ELLIPSIS);
      continue;
    }
    if (item === "None" || item === "newaxis" || item === "np.newaxis") {
      invalid(item, spec, "None (numpy.newaxis) is not supported");
    }
    if (!item.includes(":")) {
      if (!INTEGER.test(item)) invalid(item, spec, "expected an integer, a slice start:stop:step or ...");
      out.push(parseInteger(item));
      continue;
    }
    const parts = item.split(":");
    if (parts.length > 3) invalid(item, spec, "a slice has at most 3 parts (start:stop:step)");
    const values: (IndexInteger | null)[] = [];
    for (const part of parts) {
      const text = part.trim();
      if (text === "") values.push(null);
      else if (INTEGER.test(text)) values.push(parseInteger(text));
      else invalid(item, spec, `slice part ${JSON.stringify(text)} is not an integer`);
    }
    out.push({ start: values[0] ?? null, stop: values[1] ?? null, step: values[2] ?? null });
  }
  return out;
}

function formatPart(value: IndexInteger | null | undefined): string {
  return value === null || value === undefined ? "" : String(value);
}

/** The inverse of `parseSliceSpec` (canonical form: `a:b:c` with empty parts, `...`, comma-separated). */
export function formatSliceSpec(index: readonly SliceIndex[]): string {
  return index
    .map((item) => {
      if (item === ELLIPSIS) return "...";
      if (typeof item === "number" || typeof item === "bigint") return String(item);
      const head = `${formatPart(item.start)}:${formatPart(item.stop)}`;
      return item.step === null || item.step === undefined ? head : `${head}:${formatPart(item.step)}`;
    })
    .join(",");
}
