/**
 * One value repeated over a slice, in any dtype: the value is encoded once (one aligned group of elements: 1 element,
 * 2 for F4, 4 for F6) and the group's bytes are repeated, instead of encoding every element (encoding 512 Ki F16
 * zeros element by element took 2–6 ms in a fresh process; repeating the pattern takes ~0.1 ms). Pure.
 */
import { canEncode, fromFloat32 } from "../codecs/index.js";
import { encodeScalarLikeNumpy } from "../codecs/numpy.js";
import { type Dtype, dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";

const INTEGER_RANGES: Partial<Record<Dtype, readonly [bigint, bigint]>> = {
  BOOL: [0n, 1n],
  U8: [0n, 255n],
  I8: [-128n, 127n],
  U16: [0n, 65535n],
  I16: [-32768n, 32767n],
  U32: [0n, 4294967295n],
  I32: [-2147483648n, 2147483647n],
  U64: [0n, 18446744073709551615n],
  I64: [-9223372036854775808n, 9223372036854775807n],
};

/**
 * Whether `value` is stored as all zero bits: +0 is, in every dtype but F8_E8M0 (powers of two only: no zero).
 * Zeroing, the usual fill, then needs no codec (whose first use in a process cost ~0.3 ms); test/edit-plan.test.ts
 * checks this against the codecs.
 */
export function isZeroBits(dtype: Dtype, value: number | bigint): boolean {
  return (value === 0 || value === 0n) && !Object.is(value, -0) && dtype !== "F8_E8M0";
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/**
 * The little-endian bytes of one aligned group of `value`s in `dtype`: floats as numpy assigns a Python float
 * (codecs/numpy.ts: rounded once from the double), integers exact and in range (a bigint beyond 2^53).
 */
export function encodeScalarGroup(dtype: Dtype, value: number | bigint, tensor?: string): Uint8Array {
  const bits = dtypeOf(dtype).bits;
  const group = 8 / gcd(bits, 8);
  if (isZeroBits(dtype, value)) return new Uint8Array((bits * group) / 8);
  if (canEncode(dtype)) return encodeScalarLikeNumpy(dtype, Number(value), group);
  if (dtype === "C64") return fromFloat32("F32", [Number(value), 0]);
  const range = INTEGER_RANGES[dtype];
  if (range === undefined) throw new SafetensorError("UnsupportedDtype", `cannot fill a ${dtype} tensor`, { tensor });
  const exact = typeof value === "bigint" || Number.isSafeInteger(value);
  if (!exact || BigInt(value) < range[0] || BigInt(value) > range[1]) {
    throw new SafetensorError(
      "InvalidTensor",
      `${value} is not a ${dtype} value (integers ${range[0]}…${range[1]}${dtype === "BOOL" ? ": 0 or 1" : ""})`,
      { tensor },
    );
  }
  const bytes = new Uint8Array(bits / 8);
  let v = BigInt.asUintN(bits, BigInt(value));
  for (let i = 0; i < bytes.length; i++, v >>= 8n) bytes[i] = Number(v & 0xffn);
  return bytes;
}

/** `byteLength` bytes of `value` repeated (a whole number of aligned groups, as planSlice guarantees). */
export function filledBytes(dtype: Dtype, value: number | bigint, byteLength: number, tensor?: string): Uint8Array {
  const pattern = encodeScalarGroup(dtype, value, tensor);
  const out = new Uint8Array(byteLength);
  if (pattern.every((b) => b === pattern[0])) {
    if (pattern[0] !== 0) out.fill(pattern[0]!);
    return out;
  }
  out.set(pattern.subarray(0, Math.min(pattern.length, byteLength)));
  for (let filled = pattern.length; filled < byteLength; filled *= 2) {
    out.copyWithin(filled, 0, Math.min(filled, byteLength - filled));
  }
  return out;
}

const BLOCK_BYTES = 1 << 16;
/** The block of zeros every zero fill shares (never written to: `fillBlock`'s blocks are read-only). */
let zeroBlock: Uint8Array | null = null;

/**
 * Bytes of one repeated-pattern block: the whole groups of `value` that fit in `maxBytes` (at most 64 KiB; for zeros,
 * any length: zero bytes repeated are zero elements). Read-only: zero fills share one block, so that an edit's fill
 * touches no fresh memory.
 */
export function fillBlock(dtype: Dtype, value: number | bigint, maxBytes: number, tensor?: string): Uint8Array {
  if (isZeroBits(dtype, value)) {
    zeroBlock ??= new Uint8Array(BLOCK_BYTES);
    return zeroBlock.subarray(0, Math.max(1, Math.min(maxBytes, BLOCK_BYTES)));
  }
  const bits = dtypeOf(dtype).bits;
  const groupBytes = (bits * (8 / gcd(bits, 8))) / 8;
  return filledBytes(
    dtype,
    value,
    Math.max(groupBytes, Math.floor(Math.min(maxBytes, BLOCK_BYTES) / groupBytes) * groupBytes),
    tensor,
  );
}
