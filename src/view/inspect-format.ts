/** `inspect` output: a human table, or the stable JSON form. */
import { DTYPES } from "../format/dtypes.js";
import type { Header, TensorInfo } from "../format/header.js";
import type { JsonValue } from "../shards/index-json.js";

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

export function formatInspect(path: string, header: Header, backend?: string): string {
  const rows = [...header.tensors.values()].map((info) => [
    printable(info.name),
    info.dtype,
    `[${(info.exactShape ?? info.shape).join(", ")}]`,
    group(info.byteLength),
  ]);
  const titles = ["name", "dtype", "shape", "bytes"];
  const widths = columnWidths(titles, rows);
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === 3 ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const out: string[] = [];
  out.push(
    `${path}: ${group(header.fileLength)} bytes (${humanBytes(header.fileLength)}), header ${group(header.headerLength)} bytes, ${group(header.tensors.size)} tensors${backend ? `, backend ${backend}` : ""}`,
  );
  if (header.metadata) {
    out.push(`metadata (${header.metadata.size} keys):`);
    for (const [key, value] of header.metadata) {
      const shown = value.length > 100 ? `${value.slice(0, 97)}...` : value;
      out.push(`  ${printable(key)}: ${JSON.stringify(shown)}`);
    }
  }
  out.push("");
  out.push(line(titles));
  for (const row of rows) out.push(line(row));
  out.push("");
  const byDtype = new Map<string, { tensors: number; parameters: bigint; bytes: number }>();
  for (const info of header.tensors.values()) {
    const entry = byDtype.get(info.dtype) ?? { tensors: 0, parameters: 0n, bytes: 0 };
    entry.tensors++;
    entry.parameters += numel(info);
    entry.bytes += info.byteLength;
    byDtype.set(info.dtype, entry);
  }
  const totals = [...byDtype].sort((a, b) => DTYPES.indexOf(b[0] as never) - DTYPES.indexOf(a[0] as never));
  const totalRows = totals.map(([dtype, t]) => [dtype, group(t.tensors), group(t.parameters), group(t.bytes)]);
  totalRows.push(["total", group(header.tensors.size), group(parameterCount(header)), group(header.dataLength)]);
  const tt = ["dtype", "tensors", "parameters", "bytes"];
  const tw = columnWidths(tt, totalRows);
  const tline = (cells: string[]) =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(tw[i]!) : cell.padStart(tw[i]!))).join("  ");
  out.push(tline(tt));
  for (const row of totalRows) out.push(tline(row));
  return `${out.join("\n")}\n`;
}
