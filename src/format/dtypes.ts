/**
 * The dtype table. `rank` is the dtype's position in the reference's `Dtype` enum; its writer orders tensors by
 * rank descending (then by name), so matching byte-for-byte output depends on it. Verified against safetensors 0.8.0
 * output for every dtype its Python API can write (F6_* cannot be written there; their rank follows the enum).
 */

export const DTYPES = [
  "BOOL",
  "F4",
  "F6_E2M3",
  "F6_E3M2",
  "U8",
  "I8",
  "F8_E5M2",
  "F8_E4M3",
  "F8_E8M0",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "I16",
  "U16",
  "F16",
  "BF16",
  "I32",
  "U32",
  "F32",
  "C64",
  "F64",
  "I64",
  "U64",
] as const;

/** One of the 22 safetensors dtype names (`"F32"`, `"BF16"`, `"F8_E4M3"`, `"I64"`, ...). */
export type Dtype = (typeof DTYPES)[number];

/** The TypedArray a dtype's elements are stored in (see `Tensor.typed`). */
export type TypedArrayName =
  | "Uint8Array"
  | "Int8Array"
  | "Uint16Array"
  | "Int16Array"
  | "Uint32Array"
  | "Int32Array"
  | "Float32Array"
  | "Float64Array"
  | "BigInt64Array"
  | "BigUint64Array";

/** The family of a dtype. */
export type DtypeKind = "bool" | "int" | "uint" | "float" | "complex";

/** What a dtype is: its bits per element, kind, and the TypedArray that stores it. */
export interface DtypeInfo {
  readonly name: Dtype;
  /** Bits per element: 4, 6, 8, 16, 32 or 64. */
  readonly bits: number;
  /** Position in the reference's enum (ascending); the writer sorts by this, descending. */
  readonly rank: number;
  readonly kind: DtypeKind;
  /**
   * The TypedArray that views this dtype's raw little-endian storage. Packed sub-byte and 8-bit float formats use
   * Uint8Array (raw bytes), F16/BF16 use Uint16Array (raw bits), C64 uses Float32Array (interleaved re, im).
   */
  readonly typedArray: TypedArrayName;
  /** Byte alignment the typed view needs: its BYTES_PER_ELEMENT. */
  readonly viewAlignment: number;
  /** True when the elements are floating-point values that `toFloat32` decodes. */
  readonly isFloat: boolean;
}

function info(
  name: Dtype,
  bits: number,
  kind: DtypeKind,
  typedArray: TypedArrayName,
  viewAlignment: number,
): DtypeInfo {
  return {
    name,
    bits,
    rank: DTYPES.indexOf(name),
    kind,
    typedArray,
    viewAlignment,
    isFloat: kind === "float",
  };
}

const TABLE: ReadonlyMap<string, DtypeInfo> = new Map<string, DtypeInfo>(
  [
    info("BOOL", 8, "bool", "Uint8Array", 1),
    info("F4", 4, "float", "Uint8Array", 1),
    info("F6_E2M3", 6, "float", "Uint8Array", 1),
    info("F6_E3M2", 6, "float", "Uint8Array", 1),
    info("U8", 8, "uint", "Uint8Array", 1),
    info("I8", 8, "int", "Int8Array", 1),
    info("F8_E5M2", 8, "float", "Uint8Array", 1),
    info("F8_E4M3", 8, "float", "Uint8Array", 1),
    info("F8_E8M0", 8, "float", "Uint8Array", 1),
    info("F8_E4M3FNUZ", 8, "float", "Uint8Array", 1),
    info("F8_E5M2FNUZ", 8, "float", "Uint8Array", 1),
    info("I16", 16, "int", "Int16Array", 2),
    info("U16", 16, "uint", "Uint16Array", 2),
    info("F16", 16, "float", "Uint16Array", 2),
    info("BF16", 16, "float", "Uint16Array", 2),
    info("I32", 32, "int", "Int32Array", 4),
    info("U32", 32, "uint", "Uint32Array", 4),
    info("F32", 32, "float", "Float32Array", 4),
    info("C64", 64, "complex", "Float32Array", 4),
    info("F64", 64, "float", "Float64Array", 8),
    info("I64", 64, "int", "BigInt64Array", 8),
    info("U64", 64, "uint", "BigUint64Array", 8),
  ].map((entry) => [entry.name, entry]),
);

/** Whether `name` is one of the 22 dtype names. */
export function isDtype(name: unknown): name is Dtype {
  return typeof name === "string" && TABLE.has(name);
}

/** The table entry for a dtype name; undefined for anything else (names are case-sensitive). */
export function dtypeInfo(name: string): DtypeInfo | undefined {
  return TABLE.get(name);
}

/** Like `dtypeInfo` for a name already known to be a dtype. */
export function dtypeOf(name: Dtype): DtypeInfo {
  return TABLE.get(name) as DtypeInfo;
}

/** Exact element count of a shape (empty shape = scalar = 1). */
export function elementCount(shape: readonly (number | bigint)[]): bigint {
  let count = 1n;
  for (const dim of shape) count *= BigInt(dim);
  return count;
}

/**
 * Exact byte size of a tensor, or null when elements × bits is not a whole number of bytes (the reference's
 * MisalignedSlice).
 */
export function byteSize(dtype: Dtype, shape: readonly (number | bigint)[]): bigint | null {
  const bits = elementCount(shape) * BigInt(dtypeOf(dtype).bits);
  return bits % 8n === 0n ? bits / 8n : null;
}

/**
 * `byteSize` as a number when every intermediate product is exact in a double (every real tensor), else undefined
 * (use `byteSize`). Avoids BigInt arithmetic on the per-tensor hot path (~1 µs a tensor before V8 optimizes it).
 */
export function byteSizeNumber(dtype: Dtype, shape: readonly (number | bigint)[]): number | null | undefined {
  let bits = dtypeOf(dtype).bits;
  for (const dim of shape) {
    if (typeof dim !== "number") return undefined;
    bits *= dim;
    if (bits > Number.MAX_SAFE_INTEGER) return undefined;
  }
  return bits % 8 === 0 ? bits / 8 : null;
}
