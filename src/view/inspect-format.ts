/** `inspect` output: text (a summary that fits a screen, or the metadata or tensors in full), or the stable JSON form. */
import { DTYPES } from "../format/dtypes.js";
import type { Header, TensorInfo } from "../format/header.js";
import type { JsonValue } from "../shards/index-json.js";
import { describeMetadata, parseJsonValue } from "./metadata.js";

/** Exact dims as JSON numbers (dims above 2^53 only occur in zero-element tensors and are kept exact). */
function shapeJson(info: TensorInfo): string {
  return `[${(info.exactShape ?? info.shape).map(String).join(",")}]`;
}

function numel(info: TensorInfo): bigint {
  return (info.exactShape ?? info.shape.map(BigInt)).reduce((a, b) => a * BigInt(b), 1n);
}

export function parameterCount(header: Header): bigint {
  let total = 0n;
  for (const info of header.tensors.values()) total += numel(info);
  return total;
}

/**
 * `{"file_bytes","header_bytes","metadata","parameters","tensors":[{"name","dtype","shape","data_offsets"}]}` with
 * tensors in file-offset order; `header_bytes` is N, the JSON header's size as stored in the first 8 bytes.
 */
export function inspectJson(header: Header): string {
  const metadata = header.metadata
    ? `{${[...header.metadata].map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`
    : "null";
  const tensors = [...header.tensors.values()].map(
    (info) =>
      `{"name":${JSON.stringify(info.name)},"dtype":"${info.dtype}","shape":${shapeJson(info)},"data_offsets":[${info.dataOffsets[0]},${info.dataOffsets[1]}]}`,
  );
  return `{"file_bytes":${header.fileLength},"header_bytes":${header.headerLength},"metadata":${metadata},"parameters":${parameterCount(header)},"tensors":[${tensors.join(",")}]}`;
}

function jsonValue(value: JsonValue): string {
  if (value instanceof Map) return `{${[...value].map(([k, v]) => `${JSON.stringify(k)}:${jsonValue(v)}`).join(",")}}`;
  if (Array.isArray(value)) return `[${value.map(jsonValue).join(",")}]`;
  return typeof value === "bigint" ? String(value) : JSON.stringify(value);
}

export interface ShardedInspectInput {
  /** The index file, or null for a directory holding a single `model.safetensors`. */
  readonly indexPath: string | null;
  readonly metadata: ReadonlyMap<string, JsonValue>;
  /** Shard file -> its header, in the index's order. */
  readonly headers: readonly (readonly [string, Header])[];
  readonly dataBytes: number;
  readonly warnings: readonly string[];
}

/**
 * `inspect --json` of a checkpoint: {"index","metadata","parameters","data_bytes","warnings","shards":[{"file",
 * ...inspect --json of that shard}]}, shards in the index's order.
 */
export function inspectShardedJson(input: ShardedInspectInput): string {
  const parameters = input.headers.reduce((sum, [, header]) => sum + parameterCount(header), 0n);
  const shards = input.headers.map(
    ([file, header]) => `{"file":${JSON.stringify(file)},${inspectJson(header).slice(1)}`,
  );
  return `{"index":${JSON.stringify(input.indexPath)},"metadata":${jsonValue(new Map(input.metadata))},"parameters":${parameters},"data_bytes":${input.dataBytes},"warnings":${JSON.stringify(input.warnings)},"shards":[${shards.join(",")}]}`;
}

export const group = (n: bigint | number) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");

export function humanBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

/** Printable name: control characters and the like escaped, as JSON would. */
function printable(name: string): string {
  return name === "" || /[\p{C}\p{Z}]/u.test(name) ? JSON.stringify(name) : name;
}

/** Widest cell per column. A loop, not `Math.max(...cells)`: spreading ~123k arguments overflows V8's stack. */
function columnWidths(titles: string[], rows: string[][]): number[] {
  const widths = titles.map((title) => title.length);
  for (const row of rows) {
    for (let i = 0; i < widths.length; i++) widths[i] = Math.max(widths[i]!, row[i]!.length);
  }
  return widths;
}

/** The first tensors `inspect` lists before it says how to see the rest. */
export const DEFAULT_TENSOR_ROWS = 20;
/** Up to this many tensors past `maxTensorRows` are listed rather than cut. */
const CUT_SLACK = 5;
/** Metadata keys `inspect` lists by default (more: their count and how to see them). */
export const DEFAULT_METADATA_KEYS = 12;
/** Width a metadata value or fact is cut to on its one line in the default view. */
const VALUE_WIDTH = 100;

export interface InspectTextOptions {
  /** The read backend to name on the first line. */
  backend?: string;
  /**
   * "keys" (default): the facts (`describeMetadata`), then each key with its value cut to one line, or only their
   * count when there are over `DEFAULT_METADATA_KEYS`; "full": every value whole, JSON in a string pretty-printed;
   * "none".
   */
  metadata?: "keys" | "full" | "none";
  /** "all" (default): every tensor and the totals by dtype; "first": the first `maxTensorRows`; "none". */
  tensors?: "all" | "first" | "none";
  maxTensorRows?: number;
  /** The command that shows a file, for the lines that say how to see what was left out. */
  command?: string;
  /** What the metadata lines call it (default "metadata"). */
  metadataLabel?: string;
}

/** A path as a shell word in the commands the output suggests. */
export const shellWord = (path: string) => (/^[\w./:@+=-]+$/.test(path) ? path : JSON.stringify(path));

export const plural = (n: number | bigint, word: string) => `${group(n)} ${word}${n === 1 || n === 1n ? "" : "s"}`;

/** One line of text, control characters escaped (a value cannot move the cursor or clear the terminal). */
function oneLine(text: string, width = Number.POSITIVE_INFINITY): string {
  const escaped = text.replace(/[\p{Cc}\u2028\u2029]/gu, (c) => JSON.stringify(c).slice(1, -1));
  return escaped.length > width ? `${escaped.slice(0, width - 1)}…` : escaped;
}

/** Containers whose one-line form is at most this wide stay on one line when pretty-printed. */
const INLINE_JSON_WIDTH = 72;

/** JSON pretty-printed two spaces an indent, small arrays and objects kept on one line (`[448, 768]`). */
export function prettyJson(value: unknown, indent = ""): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  const entries: [string | null, unknown][] = Array.isArray(value)
    ? value.map((item) => [null, item])
    : Object.entries(value as Record<string, unknown>);
  const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  if (entries.length === 0) return `${open}${close}`;
  const key = (k: string | null) => (k === null ? "" : `${JSON.stringify(k)}: `);
  const flat = (v: unknown): string | undefined => {
    if (v === null || typeof v !== "object") return JSON.stringify(v) ?? "null";
    const inner = Array.isArray(v) ? v.map((item) => [null, item] as const) : Object.entries(v);
    const parts = inner.map(([k, item]) => {
      const text = flat(item);
      return text === undefined ? undefined : key(k) + text;
    });
    if (parts.some((part) => part === undefined)) return undefined;
    const text = Array.isArray(v) ? `[${parts.join(", ")}]` : `{${parts.join(", ")}}`;
    return text.length <= INLINE_JSON_WIDTH ? text : undefined;
  };
  const oneLine = flat(value);
  if (oneLine !== undefined) return oneLine;
  const inner = `${indent}  `;
  const lines = entries.map(([k, item]) => `${inner}${key(k)}${prettyJson(item, inner)}`);
  return `${open}\n${lines.join(",\n")}\n${indent}${close}`;
}

/** A value in full: JSON in a string pretty-printed, text as it is (control characters but newline escaped). */
function fullValue(value: string, indent: string): string {
  const json = parseJsonValue(value);
  const text = json === undefined ? value : prettyJson(json);
  const lines = text.split("\n").map((line) => oneLine(line));
  return lines.length === 1 ? ` ${lines[0]}` : `\n${lines.map((l) => indent + l).join("\n")}`;
}

export function metadataLines(
  metadata: ReadonlyMap<string, string> | null,
  options: InspectTextOptions,
  shown: string,
): string[] {
  const mode = options.metadata ?? "keys";
  if (!metadata || mode === "none") return [];
  const out: string[] = [];
  const label = options.metadataLabel ?? "metadata";
  const { facts } = describeMetadata(metadata);
  if (facts.length > 0) {
    const width = Math.max(...facts.map((f) => f.label.length));
    out.push("facts:");
    for (const f of facts) out.push(`  ${`${f.label}:`.padEnd(width + 1)} ${oneLine(f.value, VALUE_WIDTH)}`);
  }
  if (mode === "full") {
    out.push(`${label} (${plural(metadata.size, "key")}):`);
    for (const [key, value] of metadata) out.push(`  ${printable(key)}:${fullValue(value, "    ")}`);
    return out;
  }
  if (metadata.size > DEFAULT_METADATA_KEYS) {
    const hint = options.command ? `: '${options.command} ${shown} --metadata' shows them in full` : "";
    out.push(`${label}: ${plural(metadata.size, "key")}${hint}`);
    return out;
  }
  out.push(`${label} (${plural(metadata.size, "key")}):`);
  for (const [key, value] of metadata) out.push(`  ${printable(key)}: ${JSON.stringify(oneLine(value, VALUE_WIDTH))}`);
  return out;
}

/** The tensors of one file or of every shard, for the table and the totals. */
interface TensorSet {
  readonly tensors: Iterable<TensorInfo>;
  readonly size: number;
  readonly dataLength: number;
}

export function tensorLines(set: TensorSet, options: InspectTextOptions, shown: string): string[] {
  const mode = options.tensors ?? "all";
  if (mode === "none") return [];
  const limit = options.maxTensorRows ?? DEFAULT_TENSOR_ROWS;
  // A few more than the limit are shown rather than cut ("... and 2 more" would save no room).
  const count = mode === "first" && set.size > limit + CUT_SLACK ? limit : set.size;
  const rows: string[][] = [];
  for (const info of set.tensors) {
    if (rows.length === count) break;
    rows.push([
      printable(info.name),
      info.dtype,
      `[${(info.exactShape ?? info.shape).join(", ")}]`,
      group(info.byteLength),
    ]);
  }
  const titles = ["name", "dtype", "shape", "bytes"];
  const widths = columnWidths(titles, rows);
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === 3 ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const out = [line(titles), ...rows.map(line)];
  const left = set.size - count;
  if (left > 0) {
    const hint = options.command ? `: '${options.command} ${shown} --tensors' lists them all` : "";
    out.push(`... and ${plural(left, "more tensor")} (${group(set.size)} in all)${hint}`);
  }
  out.push("");
  const byDtype = new Map<string, { tensors: number; parameters: bigint; bytes: number }>();
  let parameters = 0n;
  for (const info of set.tensors) {
    const entry = byDtype.get(info.dtype) ?? { tensors: 0, parameters: 0n, bytes: 0 };
    entry.tensors++;
    entry.parameters += numel(info);
    parameters += numel(info);
    entry.bytes += info.byteLength;
    byDtype.set(info.dtype, entry);
  }
  const totals = [...byDtype].sort((a, b) => DTYPES.indexOf(b[0] as never) - DTYPES.indexOf(a[0] as never));
  const totalRows = totals.map(([dtype, t]) => [dtype, group(t.tensors), group(t.parameters), group(t.bytes)]);
  totalRows.push(["total", group(set.size), group(parameters), group(set.dataLength)]);
  const tt = ["dtype", "tensors", "parameters", "bytes"];
  const tw = columnWidths(tt, totalRows);
  const tline = (cells: string[]) =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(tw[i]!) : cell.padStart(tw[i]!))).join("  ");
  out.push(tline(tt));
  for (const row of totalRows) out.push(tline(row));
  return out;
}

/**
 * `inspect`'s text: a line about the file, its metadata (`options.metadata`), its tensors and totals by dtype
 * (`options.tensors`). The defaults print everything, values cut to a line; the CLI's default fits a screen.
 */
export function formatInspect(path: string, header: Header, options: InspectTextOptions = {}): string {
  const shown = shellWord(path);
  const out = [
    `${path}: ${group(header.fileLength)} bytes (${humanBytes(header.fileLength)}), header ${group(header.headerLength)} bytes, ${plural(header.tensors.size, "tensor")}, ${plural(parameterCount(header), "parameter")}${options.backend ? `, backend ${options.backend}` : ""}`,
  ];
  const metadata = metadataLines(header.metadata, options, shown);
  const set = {
    tensors: { [Symbol.iterator]: () => header.tensors.values() },
    size: header.tensors.size,
    dataLength: header.dataLength,
  };
  const tensors = tensorLines(set, options, shown);
  // concat, not push(...rows): spreading 200k rows as arguments overflows V8's stack.
  const lines = out.concat(metadata, tensors.length > 0 ? [""] : [], tensors);
  return `${lines.join("\n")}\n`;
}
