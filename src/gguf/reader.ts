/**
 * The GGUF header reader: magic, version (2 or 3), metadata key/values, tensor infos, alignment and the data
 * section's start, checked as strictly as our safetensors header. Every count, length and size is checked against
 * the bytes that are left before anything is allocated for it, and against a named limit, so a hostile file gets a
 * coded error (`InvalidGguf`, `GgufLimit`), never a crash or a huge allocation.
 *
 * Pure: it parses bytes it is given. When the header runs past them (the caller read only the file's start), it
 * says how many bytes it needs (`GgufNeedBytes`), and the caller reads more and parses again.
 */
import { SafetensorError } from "../format/errors.js";
import { DEFAULT_GGUF_LIMITS, type GgufLimits } from "./constants.js";
import {
  DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  type GgmlTypeInfo,
  type GgufArray,
  type GgufValue,
  ggmlType,
  SCALAR_BYTES,
  type ScalarTypeName,
  VALUE_TYPE_NAMES,
} from "./types.js";

export { DEFAULT_GGUF_LIMITS, type GgufLimits };

/** ggml's GGML_MAX_DIMS. */
export const GGUF_MAX_DIMS = 4;

export interface GgufTensorInfo {
  readonly name: string;
  /** Dimensions in GGUF order: innermost (ne[0], the row length) first; the reverse of numpy/torch order. */
  readonly dims: readonly number[];
  readonly type: GgmlTypeInfo;
  /** Offset in the data section, as the file states it. */
  readonly offset: number;
  /** Absolute offset in the file. */
  readonly fileOffset: number;
  readonly byteLength: number;
  readonly elements: number;
}

export interface GgufHeader {
  readonly version: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;
  readonly tensors: readonly GgufTensorInfo[];
  readonly alignment: number;
  /** Bytes of magic, counts, metadata and tensor infos. */
  readonly headerBytes: number;
  /** Where the data section starts: `headerBytes` rounded up to `alignment`. */
  readonly dataOffset: number;
  readonly fileSize: number;
}

/** Thrown (and caught by the async reader) when the header continues past the bytes given. */
export class GgufNeedBytes extends Error {
  constructor(readonly needed: number) {
    super(`the GGUF header needs ${needed} bytes`);
  }
}

function invalid(message: string): SafetensorError {
  return new SafetensorError("InvalidGguf", message);
}

function limit(message: string): SafetensorError {
  return new SafetensorError("GgufLimit", message);
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const utf8Lenient = new TextDecoder("utf-8");

class Cursor {
  pos = 0;
  private readonly view: DataView;
  constructor(
    readonly bytes: Uint8Array,
    readonly fileSize: number,
    readonly limits: Required<GgufLimits>,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Bytes left in the file after the cursor. */
  get left(): number {
    return this.fileSize - this.pos;
  }

  need(n: number, what: string): void {
    const end = this.pos + n;
    if (end > this.fileSize) throw invalid(`truncated: ${what} at byte ${this.pos} runs past the end of the file`);
    if (end > this.limits.maxHeaderBytes) {
      throw limit(`the header is larger than maxHeaderBytes (${this.limits.maxHeaderBytes})`);
    }
    if (end > this.bytes.length) throw new GgufNeedBytes(end);
  }

  u8(what: string): number {
    this.need(1, what);
    return this.view.getUint8(this.pos++);
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  /** A u64 that must fit a safe integer (counts, lengths, offsets, dimensions). */
  u64(what: string): number {
    this.need(8, what);
    const lo = this.view.getUint32(this.pos, true);
    const hi = this.view.getUint32(this.pos + 4, true);
    this.pos += 8;
    if (hi >= 0x200000) throw invalid(`${what} is too large (${(BigInt(hi) << 32n) | BigInt(lo)})`);
    return hi * 0x1_0000_0000 + lo;
  }
  string(what: string, strict: boolean): string {
    const n = this.u64(`${what}'s length`);
    if (n > this.limits.maxStringBytes)
      throw limit(`${what} is ${n} bytes, over maxStringBytes (${this.limits.maxStringBytes})`);
    this.need(n, what);
    const raw = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    if (!strict) return utf8Lenient.decode(raw);
    try {
      return utf8.decode(raw);
    } catch {
      throw invalid(`${what} is not valid UTF-8`);
    }
  }
}

function scalarType(code: number, what: string): ScalarTypeName | "ARRAY" {
  const name = VALUE_TYPE_NAMES[code];
  if (name === undefined) throw invalid(`${what} has unknown value type ${code}`);
  return name;
}

function readScalar(c: Cursor, type: ScalarTypeName, what: string): number | bigint | boolean | string {
  if (type === "STRING") return c.string(what, false);
  const size = SCALAR_BYTES[type];
  c.need(size, what);
  const v = new DataView(c.bytes.buffer, c.bytes.byteOffset + c.pos, size);
  c.pos += size;
  switch (type) {
    case "UINT8":
      return v.getUint8(0);
    case "INT8":
      return v.getInt8(0);
    case "UINT16":
      return v.getUint16(0, true);
    case "INT16":
      return v.getInt16(0, true);
    case "UINT32":
      return v.getUint32(0, true);
    case "INT32":
      return v.getInt32(0, true);
    case "FLOAT32":
      return v.getFloat32(0, true);
    case "FLOAT64":
      return v.getFloat64(0, true);
    case "UINT64":
      return v.getBigUint64(0, true);
    case "INT64":
      return v.getBigInt64(0, true);
    case "BOOL": {
      const b = v.getUint8(0);
      if (b > 1) throw invalid(`${what} is a bool of value ${b}`);
      return b === 1;
    }
  }
}

function readArray(c: Cursor, what: string, depth: number): GgufArray {
  if (depth > c.limits.maxArrayDepth)
    throw limit(`${what} nests arrays deeper than maxArrayDepth (${c.limits.maxArrayDepth})`);
  const itemType = scalarType(c.u32(`${what}'s item type`), what);
  const n = c.u64(`${what}'s length`);
  if (n > c.limits.maxArrayLength)
    throw limit(`${what} has ${n} items, over maxArrayLength (${c.limits.maxArrayLength})`);
  // Every item takes at least one byte (strings 8, arrays 12): a count the file cannot hold is refused before
  // anything is allocated for it.
  const least = itemType === "STRING" ? 8 : itemType === "ARRAY" ? 12 : SCALAR_BYTES[itemType];
  if (n * least > c.left) throw invalid(`${what} claims ${n} items, more than the ${c.left} bytes left in the file`);
  if (itemType === "ARRAY") {
    const items: GgufArray[] = [];
    for (let i = 0; i < n; i++) items.push(readArray(c, `${what}[${i}]`, depth + 1));
    return { itemType, items };
  }
  if (itemType === "STRING") {
    const items = new Array<string>(n);
    for (let i = 0; i < n; i++) items[i] = c.string(`${what}[${i}]`, false);
    return { itemType, items };
  }
  if (itemType === "BOOL") {
    const items = new Array<boolean>(n);
    for (let i = 0; i < n; i++) items[i] = readScalar(c, "BOOL", `${what}[${i}]`) as boolean;
    return { itemType, items };
  }
  const size = SCALAR_BYTES[itemType];
  c.need(n * size, what);
  // A copy into an aligned buffer: the file's bytes are not aligned for typed-array views.
  const raw = c.bytes.slice(c.pos, c.pos + n * size);
  c.pos += n * size;
  const items = typedArray(itemType, raw.buffer, n);
  return { itemType, items } as GgufArray;
}

function typedArray(type: Exclude<ScalarTypeName, "STRING" | "BOOL">, buffer: ArrayBuffer, n: number) {
  switch (type) {
    case "UINT8":
      return new Uint8Array(buffer, 0, n);
    case "INT8":
      return new Int8Array(buffer, 0, n);
    case "UINT16":
      return new Uint16Array(buffer, 0, n);
    case "INT16":
      return new Int16Array(buffer, 0, n);
    case "UINT32":
      return new Uint32Array(buffer, 0, n);
    case "INT32":
      return new Int32Array(buffer, 0, n);
    case "FLOAT32":
      return new Float32Array(buffer, 0, n);
    case "FLOAT64":
      return new Float64Array(buffer, 0, n);
    case "UINT64":
      return new BigUint64Array(buffer, 0, n);
    case "INT64":
      return new BigInt64Array(buffer, 0, n);
  }
}

/**
 * Parse a GGUF header from the file's first bytes. `fileSize` is the whole file's size (tensor bounds are checked
 * against it). Throws `GgufNeedBytes` when `bytes` ends before the header does.
 */
export function parseGgufHeader(bytes: Uint8Array, fileSize: number, limits: GgufLimits = {}): GgufHeader {
  const lim = { ...DEFAULT_GGUF_LIMITS, ...limits };
  const c = new Cursor(bytes, fileSize, lim);
  if (c.u32("magic") !== GGUF_MAGIC) throw invalid("not a GGUF file (no GGUF magic)");
  const version = c.u32("version");
  if (version === 1) throw invalid("GGUF version 1 is not supported (versions 2 and 3 are)");
  if (version !== 2 && version !== 3) {
    if (version === 0x02000000 || version === 0x03000000) throw invalid("big-endian GGUF files are not supported");
    throw invalid(`unknown GGUF version ${version} (versions 2 and 3 are supported)`);
  }
  const tensorCount = c.u64("tensor count");
  if (tensorCount > lim.maxTensors) throw limit(`${tensorCount} tensors, over maxTensors (${lim.maxTensors})`);
  const kvCount = c.u64("metadata count");
  if (kvCount > lim.maxKeyValues) throw limit(`${kvCount} metadata entries, over maxKeyValues (${lim.maxKeyValues})`);
  // A key/value takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
  if (kvCount * 13 + tensorCount * 32 > c.left) {
    throw invalid(`${kvCount} metadata entries and ${tensorCount} tensors cannot fit in the ${c.left} bytes left`);
  }
  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = c.string(`metadata key #${i}`, true);
    if (metadata.has(key)) throw invalid(`duplicate metadata key ${JSON.stringify(key)}`);
    const type = scalarType(c.u32(`type of ${key}`), key);
    if (type === "ARRAY") metadata.set(key, { type, value: readArray(c, key, 1) });
    else metadata.set(key, { type, value: readScalar(c, type, key) });
  }
  let alignment = DEFAULT_ALIGNMENT;
  const align = metadata.get("general.alignment");
  if (align !== undefined) {
    if (align.type !== "UINT32") throw invalid(`general.alignment must be a UINT32, not ${align.type}`);
    alignment = align.value as number;
    if (alignment === 0 || (alignment & (alignment - 1)) !== 0) {
      throw invalid(`general.alignment ${alignment} is not a power of two`);
    }
  }
  const raw: { name: string; dims: number[]; type: GgmlTypeInfo; offset: number; elements: number; size: number }[] =
    [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = c.string(`tensor name #${i}`, true);
    if (names.has(name)) throw invalid(`duplicate tensor name ${JSON.stringify(name)}`);
    names.add(name);
    const nDims = c.u32(`${name}'s dimension count`);
    if (nDims < 1 || nDims > GGUF_MAX_DIMS) throw invalid(`tensor ${name} has ${nDims} dimensions (1 to 4 allowed)`);
    const dims: number[] = [];
    let elements = 1;
    for (let d = 0; d < nDims; d++) {
      const n = c.u64(`${name}'s dimension ${d}`);
      dims.push(n);
      elements *= n;
      if (!Number.isSafeInteger(elements)) throw invalid(`tensor ${name} has too many elements`);
    }
    const typeId = c.u32(`${name}'s type`);
    const type = ggmlType(typeId);
    if (type === undefined) throw invalid(`tensor ${name} has unknown ggml type ${typeId}`);
    if (dims[0]! % type.blockSize !== 0) {
      throw invalid(
        `tensor ${name}: row length ${dims[0]} is not a multiple of ${type.name}'s block (${type.blockSize})`,
      );
    }
    const offset = c.u64(`${name}'s offset`);
    if (offset % alignment !== 0) throw invalid(`tensor ${name}'s offset ${offset} is not aligned to ${alignment}`);
    raw.push({ name, dims, type, offset, elements, size: (elements / type.blockSize) * type.typeSize });
  }
  const headerBytes = c.pos;
  const dataOffset = Math.ceil(headerBytes / alignment) * alignment;
  const dataSize = fileSize - dataOffset;
  if (dataSize < 0 && raw.length > 0) throw invalid("the file ends before its data section");
  const tensors: GgufTensorInfo[] = raw.map((t) => {
    if (t.offset + t.size > dataSize) {
      throw invalid(
        `tensor ${t.name} ([${t.offset}, ${t.offset + t.size}) of the data section) runs past the end of the file`,
      );
    }
    return {
      name: t.name,
      dims: t.dims,
      type: t.type,
      offset: t.offset,
      fileOffset: dataOffset + t.offset,
      byteLength: t.size,
      elements: t.elements,
    };
  });
  const byOffset = [...tensors].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1]!;
    const cur = byOffset[i]!;
    if (prev.offset + prev.byteLength > cur.offset && cur.byteLength > 0 && prev.byteLength > 0) {
      throw invalid(`tensors ${prev.name} and ${cur.name} overlap`);
    }
  }
  return { version, metadata, tensors, alignment, headerBytes, dataOffset, fileSize };
}
