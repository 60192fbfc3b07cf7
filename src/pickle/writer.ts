/**
 * The way back, for tools that still want `.bin`: the bytes of a torch zip checkpoint (what `torch.save` writes),
 * pure. The pickle is protocol 2 and names only globals torch's `weights_only` loader allows; records are stored
 * (not deflated) with their data aligned to 64 bytes through an extra field, as torch does.
 */
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { contiguousStrides } from "./torch.js";

/** safetensors dtype → [storage class or null (UntypedStorage + _rebuild_tensor_v3), torch dtype name]. */
const TORCH_TYPES: ReadonlyMap<Dtype, readonly [string | null, string]> = new Map<
  Dtype,
  readonly [string | null, string]
>([
  ["BOOL", ["BoolStorage", "bool"]],
  ["U8", ["ByteStorage", "uint8"]],
  ["I8", ["CharStorage", "int8"]],
  ["I16", ["ShortStorage", "int16"]],
  ["U16", [null, "uint16"]],
  ["F16", ["HalfStorage", "float16"]],
  ["BF16", ["BFloat16Storage", "bfloat16"]],
  ["I32", ["IntStorage", "int32"]],
  ["U32", [null, "uint32"]],
  ["F32", ["FloatStorage", "float32"]],
  ["C64", ["ComplexFloatStorage", "complex64"]],
  ["F64", ["DoubleStorage", "float64"]],
  ["I64", ["LongStorage", "int64"]],
  ["U64", [null, "uint64"]],
  ["F8_E5M2", [null, "float8_e5m2"]],
  ["F8_E4M3", [null, "float8_e4m3fn"]],
  ["F8_E8M0", [null, "float8_e8m0fnu"]],
  ["F8_E4M3FNUZ", [null, "float8_e4m3fnuz"]],
  ["F8_E5M2FNUZ", [null, "float8_e5m2fnuz"]],
]);

export interface TorchTensorSpec {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly byteLength: number;
  readonly elementSize: number;
}

class PickleBuilder {
  private readonly parts: number[] = [];
  private memo = 0;
  op(...bytes: number[]): this {
    for (const b of bytes) this.parts.push(b);
    return this;
  }
  raw(bytes: Uint8Array): this {
    for (const b of bytes) this.parts.push(b);
    return this;
  }
  u32(n: number): this {
    return this.op(n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff);
  }
  str(text: string): this {
    const bytes = new TextEncoder().encode(text);
    return this.op(0x58).u32(bytes.length).raw(bytes); // BINUNICODE
  }
  global(module: string, name: string): this {
    return this.op(0x63).raw(new TextEncoder().encode(`${module}\n${name}\n`)); // GLOBAL
  }
  int(n: number): this {
    if (n >= 0 && n < 256) return this.op(0x4b, n); // BININT1
    if (n >= 0 && n < 65536) return this.op(0x4d, n & 0xff, n >> 8); // BININT2
    if (n >= -(2 ** 31) && n < 2 ** 31) return this.op(0x4a).u32(n >>> 0); // BININT
    // LONG1 with 8 bytes, little-endian two's complement.
    const bytes = new Uint8Array(8);
    new DataView(bytes.buffer).setBigInt64(0, BigInt(n), true);
    return this.op(0x8a, 8).raw(bytes);
  }
  tuple(items: readonly number[]): this {
    if (items.length === 0) return this.op(0x29); // EMPTY_TUPLE
    this.op(0x28); // MARK
    for (const v of items) this.int(v);
    return this.op(0x74); // TUPLE
  }
  put(): number {
    const key = this.memo++;
    if (key < 256)
      this.op(0x71, key); // BINPUT
    else this.op(0x72).u32(key); // LONG_BINPUT
    return key;
  }
  get(key: number): this {
    return key < 256 ? this.op(0x68, key) : this.op(0x6a).u32(key);
  }
  bytes(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

/** The torch dtype a safetensors dtype becomes, or an UnsupportedDtype error (F4, F6: torch has no equivalent). */
export function torchTypeOf(dtype: Dtype): readonly [string | null, string] {
  const t = TORCH_TYPES.get(dtype);
  if (!t) {
    throw new SafetensorError(
      "UnsupportedDtype",
      `${dtype} has no torch dtype a checkpoint can hold (torch has no F6, and packs F4 two per element)`,
    );
  }
  return t;
}

/**
 * data.pkl of a state dict: `{name: _rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict())}` with
 * storage keys "0", "1", … in `tensors` order; `aliases` (name → name in `tensors`) reuse the same tensor object,
 * as tied weights are pickled.
 */
export function stateDictPickle(tensors: readonly TorchTensorSpec[], aliases: ReadonlyMap<string, string>): Uint8Array {
  const p = new PickleBuilder();
  p.op(0x80, 2).op(0x7d); // PROTO 2, EMPTY_DICT
  p.put();
  const memoOf = new Map<string, number>();
  const entries: [string, () => void][] = [];
  tensors.forEach((t, i) => {
    entries.push([
      t.name,
      () => {
        const [storageClass, torchDtype] = torchTypeOf(t.dtype);
        const v3 = storageClass === null;
        p.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
        p.op(0x28); // MARK (args)
        p.op(0x28).str("storage"); // MARK (persistent id)
        if (v3) p.global("torch.storage", "UntypedStorage");
        else p.global("torch", storageClass);
        const numel = t.byteLength / t.elementSize;
        p.str(String(i))
          .str("cpu")
          .int(v3 ? t.byteLength : numel)
          .op(0x74); // TUPLE
        p.op(0x51); // BINPERSID
        p.int(0).tuple(t.shape).tuple(contiguousStrides(t.shape)).op(0x89); // offset, size, stride, requires_grad
        p.global("collections", "OrderedDict").op(0x29, 0x52); // OrderedDict() hooks
        if (v3) p.global("torch", torchDtype);
        p.op(0x74, 0x52); // TUPLE, REDUCE
        memoOf.set(t.name, p.put());
      },
    ]);
  });
  for (const [name, target] of aliases) {
    entries.push([name, () => p.get(memoOf.get(target)!)]);
  }
  p.op(0x28); // MARK
  for (const [name, emit] of entries) {
    p.str(name);
    emit();
  }
  p.op(0x75, 0x2e); // SETITEMS, STOP
  return p.bytes();
}

// ------------------------------------------------------------------------------------------------------- zip

export interface ZipRecord {
  readonly name: string;
  readonly size: number;
  readonly crc32: number;
}

export interface PlannedRecord extends ZipRecord {
  /** Offset of the local header, and of the data it precedes. */
  readonly headerOffset: number;
  readonly dataOffset: number;
  readonly localHeader: Uint8Array;
}

const ALIGNMENT = 64;
const U32_MAX = 0xffffffff;

function le(bytes: Uint8Array, at: number, value: number, width: 2 | 4 | 8): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (width === 2) view.setUint16(at, value, true);
  else if (width === 4) view.setUint32(at, value, true);
  else view.setBigUint64(at, BigInt(value), true);
}

/** Local headers (with a ZIP64 field when needed and padding to 64-byte aligned data) and where each record goes. */
export function planZip(records: readonly ZipRecord[]): { records: PlannedRecord[]; end: number } {
  const out: PlannedRecord[] = [];
  let at = 0;
  for (const r of records) {
    const name = new TextEncoder().encode(r.name);
    const zip64 = r.size >= U32_MAX || at >= U32_MAX;
    const zip64Length = zip64 ? 4 + 16 : 0;
    const base = at + 30 + name.length + zip64Length;
    // Padding field: id "FB" (as torch), 4-byte header plus the pad bytes.
    const pad = (ALIGNMENT - ((base + 4) % ALIGNMENT)) % ALIGNMENT;
    const extraLength = zip64Length + 4 + pad;
    const header = new Uint8Array(30 + name.length + extraLength);
    le(header, 0, 0x04034b50, 4);
    le(header, 4, zip64 ? 45 : 20, 2); // version needed
    le(header, 6, 0x0800, 2); // UTF-8 names
    le(header, 8, 0, 2); // stored
    le(header, 14, r.crc32, 4);
    le(header, 18, zip64 ? U32_MAX : r.size, 4);
    le(header, 22, zip64 ? U32_MAX : r.size, 4);
    le(header, 26, name.length, 2);
    le(header, 28, extraLength, 2);
    header.set(name, 30);
    let e = 30 + name.length;
    if (zip64) {
      le(header, e, 0x0001, 2);
      le(header, e + 2, 16, 2);
      le(header, e + 4, r.size, 8);
      le(header, e + 12, r.size, 8);
      e += 20;
    }
    le(header, e, 0x4246, 2);
    le(header, e + 2, pad, 2);
    out.push({ ...r, headerOffset: at, dataOffset: at + header.length, localHeader: header });
    at += header.length + r.size;
  }
  return { records: out, end: at };
}

/** The central directory, ZIP64 end records and end record that follow the last record at `start`. */
export function zipDirectory(records: readonly PlannedRecord[], start: number): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const r of records) {
    const name = new TextEncoder().encode(r.name);
    const zip64 = r.size >= U32_MAX || r.headerOffset >= U32_MAX;
    const extra = zip64 ? 4 + 24 : 0;
    const h = new Uint8Array(46 + name.length + extra);
    le(h, 0, 0x02014b50, 4);
    le(h, 4, 0x031e, 2); // made by: unix, 3.0
    le(h, 6, zip64 ? 45 : 20, 2);
    le(h, 8, 0x0800, 2);
    le(h, 16, r.crc32, 4);
    le(h, 20, zip64 ? U32_MAX : r.size, 4);
    le(h, 24, zip64 ? U32_MAX : r.size, 4);
    le(h, 28, name.length, 2);
    le(h, 30, extra, 2);
    le(h, 38, 0o100644 * 65536, 4);
    le(h, 42, zip64 ? U32_MAX : r.headerOffset, 4);
    h.set(name, 46);
    if (zip64) {
      const e = 46 + name.length;
      le(h, e, 0x0001, 2);
      le(h, e + 2, 24, 2);
      le(h, e + 4, r.size, 8);
      le(h, e + 12, r.size, 8);
      le(h, e + 20, r.headerOffset, 8);
    }
    parts.push(h);
  }
  const dirSize = parts.reduce((n, p) => n + p.length, 0);
  const zip64End = new Uint8Array(56 + 20);
  le(zip64End, 0, 0x06064b50, 4);
  le(zip64End, 4, 44, 8);
  le(zip64End, 12, 45, 2);
  le(zip64End, 14, 45, 2);
  le(zip64End, 24, records.length, 8);
  le(zip64End, 32, records.length, 8);
  le(zip64End, 40, dirSize, 8);
  le(zip64End, 48, start, 8);
  le(zip64End, 56, 0x07064b50, 4);
  le(zip64End, 64, start + dirSize, 8);
  le(zip64End, 72, 1, 4);
  const end = new Uint8Array(22);
  const big = records.length >= 0xffff || start >= U32_MAX || dirSize >= U32_MAX;
  le(end, 0, 0x06054b50, 4);
  le(end, 8, big ? 0xffff : records.length, 2);
  le(end, 10, big ? 0xffff : records.length, 2);
  le(end, 12, big ? U32_MAX : dirSize, 4);
  le(end, 16, big ? U32_MAX : start, 4);
  parts.push(zip64End, end);
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
