/**
 * Float casts as torch's `Tensor.to(dtype)` does them, bit for bit: every source goes through float32 (exact for
 * F16, BF16 and F8; F64 is rounded to nearest even first, NaNs keep their sign and top payload bits as the
 * `cvtsd2ss` instruction keeps them), then float32 is rounded to nearest even into the target with torch's NaN and
 * overflow rules (the codecs; BF16 NaNs depend on the source dtype, see below). Integer, BOOL, complex and sub-byte float tensors are not cast. Pure (no Node APIs).
 */
import { fromFloat32, toFloat32 } from "../codecs/index.js";
import { type Dtype, dtypeOf } from "../format/dtypes.js";

/** Targets of `cast`. */
export const CAST_TARGETS = ["BF16", "F16", "F32"] as const;
export type CastTarget = (typeof CAST_TARGETS)[number];

/** Does `cast` convert tensors of this dtype (rather than copy them unchanged)? */
export function isCastable(dtype: Dtype): boolean {
  // Float dtypes of whole bytes: F64, F32, F16, BF16 and the five F8 (not C64, F6, F4).
  const info = dtypeOf(dtype);
  return info.kind === "float" && info.bits >= 8;
}

/** Bytes per element of a castable dtype. */
export function castElementBytes(dtype: Dtype): number {
  return dtypeOf(dtype).bits / 8;
}

/** F64 → float32 bits: round to nearest even; a NaN keeps its sign and top 22 payload bits and becomes quiet. */
function f64ToF32(bytes: Uint8Array, count: number, out: Float32Array): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const bits = new Uint32Array(out.buffer, out.byteOffset, count);
  for (let i = 0; i < count; i++) {
    const hi = view.getUint32(i * 8 + 4, true);
    if ((hi & 0x7ff00000) === 0x7ff00000) {
      const lo = view.getUint32(i * 8, true);
      if ((hi & 0xfffff) !== 0 || lo !== 0) {
        bits[i] = ((hi & 0x80000000) | 0x7fc00000 | ((hi & 0xfffff) << 3) | (lo >>> 29)) >>> 0;
        continue;
      }
    }
    out[i] = view.getFloat64(i * 8, true);
  }
}

/**
 * Cast `count` elements of `from` in `bytes` to `to`. `scratch` (≥ count floats) is reused between chunks; the result
 * may be a view of it (F32) or of `out` when given.
 */
export function castElements(
  from: Dtype,
  to: CastTarget,
  bytes: Uint8Array,
  count: number,
  scratch: Float32Array,
  out?: Uint8Array,
): Uint8Array {
  const floats = scratch.subarray(0, count);
  if (from === "F64") f64ToF32(bytes, count, floats);
  else toFloat32(from, bytes, { count, out: floats });
  if (to === "F32") return new Uint8Array(floats.buffer, floats.byteOffset, count * 4);
  const encoded = fromFloat32(to, floats, out ? { out: out.subarray(0, count * 2) } : undefined);
  if (to === "BF16" && from !== "F32" && from !== "F64") {
    // torch 2.13 (CPU) writes every NaN as 0xFFFF when the source is float32 (what fromFloat32 does), but as 0x7FC0
    // from F16 and F8, whose conversion goes through c10::BFloat16's constructor. From F64 its vectorized loop gives
    // 0xFFFF and its scalar remainder (the last n % 16 elements of each thread's range, on AVX-512) 0x7FC0: no
    // per-element rule reproduces that, so F64 NaNs take the vectorized loop's 0xFFFF.
    for (let i = 0; i < count; i++) {
      if (Number.isNaN(floats[i])) {
        encoded[2 * i] = 0xc0;
        encoded[2 * i + 1] = 0x7f;
      }
    }
  }
  return encoded;
}
