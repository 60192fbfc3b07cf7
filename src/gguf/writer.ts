/**
 * The GGUF header writer: metadata key/values and tensor infos encoded as version 3, tensors placed at offsets
 * aligned to `general.alignment` (32 unless the metadata says otherwise), as gguf-py's writer places them. Pure:
 * the plan and the header bytes; the tensor bytes are the caller's (see node-convert.ts).
 */
import { SafetensorError } from "../format/errors.js";
import {
  DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  type GgmlTypeInfo,
  type GgufArray,
  type GgufValue,
  SCALAR_BYTES,
  type ScalarTypeName,
  VALUE_TYPES,
} from "./types.js";

export interface PlannedTensor {
  readonly name: string;
  /** GGUF order: row length first. */
  readonly dims: readonly number[];
  readonly type: GgmlTypeInfo;
}

export interface GgufPlan {
  readonly header: Uint8Array;
  /** Absolute offset of each tensor's bytes in the file, in the order given. */
  readonly offsets: readonly number[];
  readonly sizes: readonly number[];
  readonly dataOffset: number;
  readonly fileSize: number;
  readonly alignment: number;
}

const encoder = new TextEncoder();

class Out {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private grow(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v: number): void {
    this.grow(1);
    this.buf[this.length++] = v;
  }
  u32(v: number): void {
    this.grow(4);
    this.view.setUint32(this.length, v, true);
    this.length += 4;
  }
  u64(v: number | bigint): void {
    this.grow(8);
    this.view.setBigUint64(this.length, BigInt(v), true);
    this.length += 8;
  }
  bytes(b: Uint8Array): void {
    this.grow(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }
  string(s: string): void {
    const b = encoder.encode(s);
    this.u64(b.length);
    this.bytes(b);
  }
  scalar(type: Exclude<ScalarTypeName, "STRING">, v: number | bigint | boolean): void {
    const size = SCALAR_BYTES[type];
    this.grow(size);
    const at = this.length;
    const d = this.view;
    switch (type) {
      case "UINT8":
        d.setUint8(at, v as number);
        break;
      case "INT8":
        d.setInt8(at, v as number);
        break;
      case "UINT16":
        d.setUint16(at, v as number, true);
        break;
      case "INT16":
        d.setInt16(at, v as number, true);
        break;
      case "UINT32":
        d.setUint32(at, v as number, true);
        break;
      case "INT32":
        d.setInt32(at, v as number, true);
        break;
      case "FLOAT32":
        d.setFloat32(at, v as number, true);
        break;
      case "FLOAT64":
        d.setFloat64(at, v as number, true);
        break;
      case "UINT64":
        d.setBigUint64(at, BigInt(v), true);
        break;
      case "INT64":
        d.setBigInt64(at, BigInt(v), true);
        break;
      case "BOOL":
        d.setUint8(at, v ? 1 : 0);
        break;
    }
    this.length += size;
  }
  array(a: GgufArray): void {
    this.u32(VALUE_TYPES[a.itemType]);
    this.u64(a.items.length);
    if (a.itemType === "STRING") for (const s of a.items) this.string(s);
    else if (a.itemType === "ARRAY") for (const inner of a.items) this.array(inner);
    else if (a.itemType === "BOOL") for (const b of a.items) this.scalar("BOOL", b);
    else {
      const t = a.itemType;
      for (let i = 0; i < a.items.length; i++) this.scalar(t, (a.items as ArrayLike<number | bigint>)[i]!);
    }
  }
  value(v: GgufValue): void {
    this.u32(VALUE_TYPES[v.type]);
    if (v.type === "ARRAY") this.array(v.value);
    else if (v.type === "STRING") this.string(v.value as string);
    else this.scalar(v.type, v.value as number | bigint | boolean);
  }
  take(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

/** An array value as GGUF encodes it after its type tag: item type, count, items. */
export function encodeArray(value: GgufArray): Uint8Array {
  const out = new Out();
  out.array(value);
  return out.take();
}

/** Bytes of a tensor of this type and GGUF dims (rows must be whole blocks). */
export function plannedBytes(t: PlannedTensor): number {
  const elements = t.dims.reduce((a, b) => a * b, 1);
  if (t.dims[0]! % t.type.blockSize !== 0) {
    throw new SafetensorError("InvalidTensor", `${t.name}: rows of ${t.dims[0]} are not whole ${t.type.name} blocks`);
  }
  return (elements / t.type.blockSize) * t.type.typeSize;
}

/**
 * Encode the header (version 3) and place the tensors: each at the next multiple of the alignment after the
 * previous one, the data section starting at the header's end rounded up to the alignment.
 */
export function planGguf(metadata: ReadonlyMap<string, GgufValue>, tensors: readonly PlannedTensor[]): GgufPlan {
  const alignValue = metadata.get("general.alignment");
  const alignment = alignValue === undefined ? DEFAULT_ALIGNMENT : (alignValue.value as number);
  const out = new Out();
  out.u32(GGUF_MAGIC);
  out.u32(3);
  out.u64(tensors.length);
  out.u64(metadata.size);
  for (const [key, value] of metadata) {
    out.string(key);
    out.value(value);
  }
  const sizes = tensors.map(plannedBytes);
  const relative: number[] = [];
  let at = 0;
  tensors.forEach((t, i) => {
    out.string(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.type.id);
    out.u64(at);
    relative.push(at);
    at += Math.ceil(sizes[i]! / alignment) * alignment;
  });
  const headerLength = out.length;
  const dataOffset = Math.ceil(headerLength / alignment) * alignment;
  const header = new Uint8Array(dataOffset);
  header.set(out.take());
  // gguf-py pads the last tensor too: the file ends at a multiple of the alignment.
  return {
    header,
    offsets: relative.map((r) => dataOffset + r),
    sizes,
    dataOffset,
    fileSize: dataOffset + at,
    alignment,
  };
}
