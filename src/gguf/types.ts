/**
 * GGUF's fixed tables: the tensor types (ggml_type ids with their block sizes) and the metadata value types.
 * Ids and sizes are the format's (ggml.h, gguf.md); only the types this toolkit reads or writes are listed, and
 * every other id is named as unknown in messages.
 */
import { GGML_TYPES, type GgmlTypeName, type ScalarTypeName, VALUE_TYPES, type ValueTypeName } from "./constants.js";

export { GGML_TYPES, type GgmlTypeName, type ScalarTypeName, VALUE_TYPES, type ValueTypeName };

/**
 * Block sizes of the other ggml types a GGUF may hold (k-quants, i-quants...), so that a reader can check a tensor's
 * byte size and place it even when it cannot decode it. [block size, bytes per block].
 */
const OTHER_TYPES: Readonly<Record<number, readonly [string, number, number]>> = {
  10: ["Q2_K", 256, 84],
  11: ["Q3_K", 256, 110],
  12: ["Q4_K", 256, 144],
  13: ["Q5_K", 256, 176],
  14: ["Q6_K", 256, 210],
  15: ["Q8_K", 256, 292],
  16: ["IQ2_XXS", 256, 66],
  17: ["IQ2_XS", 256, 74],
  18: ["IQ3_XXS", 256, 98],
  19: ["IQ1_S", 256, 50],
  20: ["IQ4_NL", 32, 18],
  21: ["IQ3_S", 256, 110],
  22: ["IQ2_S", 256, 82],
  23: ["IQ4_XS", 256, 136],
  29: ["IQ1_M", 256, 56],
  34: ["TQ1_0", 256, 54],
  35: ["TQ2_0", 256, 66],
  39: ["MXFP4", 32, 17],
};

export interface GgmlTypeInfo {
  readonly id: number;
  readonly name: string;
  readonly blockSize: number;
  readonly typeSize: number;
}

const BY_ID = new Map<number, GgmlTypeInfo>();
for (const [name, t] of Object.entries(GGML_TYPES)) BY_ID.set(t.id, { name, ...t });
for (const [id, [name, blockSize, typeSize]] of Object.entries(OTHER_TYPES)) {
  BY_ID.set(Number(id), { id: Number(id), name, blockSize, typeSize });
}

/** The type with this id, or undefined for ids ggml does not define. */
export function ggmlType(id: number): GgmlTypeInfo | undefined {
  return BY_ID.get(id);
}

export function ggmlTypeByName(name: GgmlTypeName): GgmlTypeInfo {
  return BY_ID.get(GGML_TYPES[name].id)!;
}

/** Bytes of a tensor of `elements` elements whose innermost dimension is `rowLength`, or null when not whole blocks. */
export function tensorBytes(type: GgmlTypeInfo, rowLength: number, elements: number): number | null {
  if (rowLength % type.blockSize !== 0) return null;
  return (elements / type.blockSize) * type.typeSize;
}

export const VALUE_TYPE_NAMES: readonly ValueTypeName[] = Object.keys(VALUE_TYPES) as ValueTypeName[];

/** Byte size of a fixed-size scalar value type (strings are variable). */
export const SCALAR_BYTES: Readonly<Record<Exclude<ScalarTypeName, "STRING">, number>> = {
  UINT8: 1,
  INT8: 1,
  UINT16: 2,
  INT16: 2,
  UINT32: 4,
  INT32: 4,
  FLOAT32: 4,
  BOOL: 1,
  UINT64: 8,
  INT64: 8,
  FLOAT64: 8,
};

/**
 * A metadata value. Scalars keep their GGUF type; 64-bit integers are bigints. Arrays of numbers are typed arrays
 * (compact: a 150 k-token vocabulary's types are one Int32Array), arrays of strings are string arrays.
 */
export type GgufScalar = number | bigint | boolean | string;
export type GgufArray =
  | { readonly itemType: "STRING"; readonly items: readonly string[] }
  | {
      readonly itemType: Exclude<ScalarTypeName, "STRING" | "BOOL">;
      readonly items: ArrayLike<number> | BigInt64Array | BigUint64Array;
    }
  | { readonly itemType: "BOOL"; readonly items: readonly boolean[] }
  | { readonly itemType: "ARRAY"; readonly items: readonly GgufArray[] };

export type GgufValue =
  | { readonly type: ScalarTypeName; readonly value: GgufScalar }
  | { readonly type: "ARRAY"; readonly value: GgufArray };

/** The magic "GGUF" as a little-endian u32. */
export const GGUF_MAGIC = 0x46554747;
export const DEFAULT_ALIGNMENT = 32;
