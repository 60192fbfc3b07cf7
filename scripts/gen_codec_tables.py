#!/usr/bin/env python3
"""Generate the codec reference tables in test/fixtures/codecs/ from torch and ml_dtypes.

Run with the reference venv:  .venv-ref/bin/python scripts/gen_codec_tables.py

Every table is a little-endian binary file; manifest.json lists them with element widths and counts.

Decode tables (decode_<DTYPE>.bin, u32 per entry): for every bit pattern of the storage format (all 65536 for
F16/BF16, 256 for the F8 formats, 64 for F6, 16 for F4), the float32 bits the reference produces.

Encode tables: sample sets of float32 inputs (enc_<set>_inputs.bin, u32 each) and, per format, the code the
reference produces for each input (enc_<set>_<DTYPE>.bin; u16 for F16/BF16, u8 otherwise; F4/F6 codes are one
unpacked code per byte, in the low bits). The sets:

  special   ±0, ±inf, NaNs with assorted signs and payloads, f32 extremes; every format
  edge_<D>  per format D: for each pair of adjacent non-negative representable values the exact midpoint and the
            float32 values just below and above it, each representable value and its float32 neighbours (8-bit and
            smaller formats), the overflow threshold (midpoint between the largest finite value and the next value
            the exponent range would give) and neighbours, and the negatives (all of them for 8-bit and smaller
            formats, every 8th for F16/BF16)
  narrow    random float32 with random sign and mantissa and a uniform exponent in [2^-30, 2^20]; every format
  wide      uniformly random 32-bit patterns; F16, BF16 and F8_E8M0 (the formats whose range is that wide)

Numeric decode tables (numeric_<DTYPE>_inputs.bin / numeric_<DTYPE>.bin): random and boundary patterns of
I32, U32, I64, U64 and F64 with torch's conversion to float32 (u32 bits).

Reference per format: torch (tensor.to(dtype) on CPU) for F16, BF16 and all F8 formats; ml_dtypes (astype) for F4
(torch has float4_e2m1fn_x2 but cannot convert it), F6_E2M3 and F6_E3M2.

Generate on an x86 machine with AVX2 or AVX-512 (torch.backends.cpu.get_cpu_capability(), recorded in the manifest):
torch's scalar fallback encodes every BF16 NaN as 0x7FC0 instead of the vectorized kernels' 0xFFFF, and the codecs
follow the vectorized kernels. The output is deterministic (fixed seed) and identical under AVX2 and AVX-512.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test" / "fixtures" / "codecs"
SEED = 20240611

TORCH = {
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "F8_E8M0": torch.float8_e8m0fnu,
}
ML = {
    "F4": ml_dtypes.float4_e2m1fn,
    "F6_E2M3": ml_dtypes.float6_e2m3fn,
    "F6_E3M2": ml_dtypes.float6_e3m2fn,
}
BITS = {"F16": 16, "BF16": 16, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
FORMATS = list(TORCH) + list(ML)


def bits_of(dtype: str) -> int:
    return BITS.get(dtype, 8)


def decode(dtype: str, codes: np.ndarray) -> np.ndarray:
    """float32 bits (u32) of the reference's decoding of the given codes."""
    if dtype in TORCH:
        if bits_of(dtype) == 16:
            raw = torch.from_numpy(codes.astype(np.uint16).view(np.int16).copy()).view(TORCH[dtype])
        else:
            raw = torch.from_numpy(codes.astype(np.uint8).copy()).view(TORCH[dtype])
        return raw.to(torch.float32).view(torch.int32).numpy().view(np.uint32).copy()
    raw = codes.astype(np.uint8).view(ML[dtype])
    return raw.astype(np.float32).view(np.uint32).copy()


def encode(dtype: str, inputs: np.ndarray) -> np.ndarray:
    """The reference's encoding of float32 inputs (given as u32 bits): u16 codes for 16-bit formats, else u8."""
    f32 = inputs.astype(np.uint32).view(np.float32)
    if dtype in TORCH:
        t = torch.from_numpy(f32.copy()).to(TORCH[dtype])
        if bits_of(dtype) == 16:
            return t.view(torch.int16).numpy().view(np.uint16).copy()
        return t.view(torch.uint8).numpy().copy()
    with np.errstate(all="ignore"):
        return f32.astype(ML[dtype]).view(np.uint8).copy()


def f32_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def next_up(bits: np.ndarray) -> np.ndarray:
    """Next float32 towards +inf for non-negative finite inputs given as bits."""
    return (bits.astype(np.uint64) + 1).astype(np.uint32)


def next_down(bits: np.ndarray) -> np.ndarray:
    """Next float32 towards zero for positive inputs given as bits (0 stays 0)."""
    b = bits.astype(np.int64)
    return np.where(b > 0, b - 1, 0).astype(np.uint32)


def specials() -> np.ndarray:
    pos = [
        0x00000000,  # +0
        0x7F800000,  # +inf
        0x7FC00000,  # canonical quiet NaN
        0x7F800001,  # signaling NaN, payload 1
        0x7FA00000,  # signaling NaN, high payload
        0x7FC00001,  # quiet NaN, payload 1
        0x7FFFFFFF,  # NaN, all payload bits
        0x7F802000,  # signaling NaN, payload at the f16 boundary
        0x7F801FFF,  # signaling NaN, payload that f16 truncation drops
        0x7FE00000,
        0x00000001,  # smallest subnormal
        0x007FFFFF,  # largest subnormal
        0x00400000,  # 2^-127
        0x00800000,  # smallest normal
        0x7F7FFFFF,  # largest finite
        0x3F800000,  # 1
        0x7F000000,  # 2^127
        0x7F400000,  # 1.5 * 2^127
        0x7EFFFFFF,
    ]
    arr = np.array(pos, dtype=np.uint32)
    return np.concatenate([arr, arr | np.uint32(0x80000000)])


def finite_values(dtype: str) -> np.ndarray:
    """Sorted distinct non-negative finite values of a format, as float64."""
    n = 1 << bits_of(dtype)
    with np.errstate(all="ignore"):
        vals = decode(dtype, np.arange(n, dtype=np.uint32)).view(np.float32).astype(np.float64)
    vals = vals[np.isfinite(vals) & (vals >= 0)]
    return np.unique(vals)


def edge_inputs(dtype: str) -> np.ndarray:
    vals = finite_values(dtype)
    small = bits_of(dtype) <= 8
    parts = []
    lo, hi = vals[:-1], vals[1:]
    mids = f32_bits((lo + hi) / 2)
    # The midpoints must be exact in float32, or they would not be ties.
    assert np.all(mids.view(np.float32).astype(np.float64) == (lo + hi) / 2), dtype
    parts += [mids, next_down(mids), next_up(mids)]
    if small:
        v = f32_bits(vals)
        parts += [v, next_down(v), next_up(v)]
    # Overflow threshold: halfway from the largest finite value to the next value of its binade's spacing.
    vmax = vals[-1]
    vprev = vals[-2]
    ulp = vmax - vprev
    beyond = [vmax + ulp / 2, vmax + ulp, vmax + 1.5 * ulp, 2 * vmax, 4 * vmax]
    for x in beyond:
        if x < float(np.finfo(np.float32).max):
            b = f32_bits([x])
            parts += [b, next_down(b), next_up(b)]
    pos = np.unique(np.concatenate(parts)).astype(np.uint32)
    pos = pos[pos < 0x7F800000]
    neg = pos if small else pos[::8]
    return np.concatenate([pos, neg | np.uint32(0x80000000)])


def narrow_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    sign = rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
    exp = rng.integers(127 - 30, 127 + 21, n, dtype=np.uint32) << np.uint32(23)
    mant = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    return sign | exp | mant


def numeric_inputs(rng: np.random.Generator, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(inputs as their own numpy dtype, float32 bits torch converts them to)."""
    n = 2048
    if dtype in ("I32", "U32"):
        npdt = np.int32 if dtype == "I32" else np.uint32
        rand = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(npdt)
        edges = []
        for k in range(23, 32):
            for d in (-1, 0, 1, 2, 3):
                edges.append((1 << k) + d)
                edges.append((1 << k) + (1 << max(k - 24, 0)) + d)
        base = np.array([x & 0xFFFFFFFF for x in edges + [0, 1, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF]], dtype=np.uint64)
        base = np.concatenate([base, (-base.astype(np.int64)).astype(np.uint64) & np.uint64(0xFFFFFFFF)])
        values = np.concatenate([base.astype(np.uint32).view(npdt), rand])
    elif dtype in ("I64", "U64"):
        npdt = np.int64 if dtype == "I64" else np.uint64
        rand = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
        # Random magnitudes too, so every exponent gets ties and sticky bits.
        shifts = rng.integers(0, 64, n, dtype=np.uint64)
        rand2 = rand >> shifts
        edges = []
        for k in range(23, 64):
            for extra in (0, 1 << max(k - 24, 0), 1 << max(k - 25, 0)):
                for d in (-1, 0, 1, 2):
                    edges.append(((1 << k) + extra + d) & ((1 << 64) - 1))
        edges += [0, 1, (1 << 64) - 1, 1 << 63, (1 << 63) - 1, (1 << 63) + 1]
        base = np.array(edges, dtype=np.uint64)
        with np.errstate(over="ignore"):
            negbase = (~base) + np.uint64(1)
        values = np.concatenate([base, negbase, rand, rand2]).view(npdt)
    elif dtype == "F64":
        npdt = np.float64
        rand = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
        sign = rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63)
        exp = rng.integers(1023 - 160, 1023 + 140, n, dtype=np.uint64) << np.uint64(52)
        mant = rng.integers(0, 1 << 52, n, dtype=np.uint64)
        narrow = sign | exp | mant
        # Ties and near-ties at float32 precision, in the normal and subnormal float32 ranges and at overflow.
        f32s = f32_bits(np.array([1.0, 3.0, 1e-40, 1e-45, 3e38, np.finfo(np.float32).max, 1e-38], dtype=np.float32))
        f = f32s.view(np.float32).astype(np.float64)
        nxt = next_up(f32s).view(np.float32).astype(np.float64)
        mid = (f + nxt) / 2
        midb = mid.view(np.uint64)
        extra = np.concatenate([midb, midb - np.uint64(1), midb + np.uint64(1), f.view(np.uint64)])
        spec = np.array(
            [0, 0x7FF0000000000000, 0x7FF8000000000000, 0x7FF0000000000001, 0x47EFFFFFF0000000, 0x47EFFFFFEFFFFFFF],
            dtype=np.uint64,
        )
        allb = np.concatenate([spec, extra, rand, narrow])
        allb = np.concatenate([allb, allb | np.uint64(1 << 63)])
        values = allb.view(np.float64)
    else:
        raise ValueError(dtype)
    values = np.ascontiguousarray(values, dtype=npdt)
    out = torch.from_numpy(values.copy()).to(torch.float32).view(torch.int32).numpy().view(np.uint32).copy()
    return values, out


def write(name: str, arr: np.ndarray) -> dict:
    arr = np.ascontiguousarray(arr)
    data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
    (OUT / name).write_bytes(data)
    return {"file": name, "bytes": len(data), "count": int(arr.size), "width": int(arr.dtype.itemsize)}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.bin"):
        old.unlink()
    rng = np.random.default_rng(SEED)
    manifest: dict = {
        "generator": "scripts/gen_codec_tables.py",
        "versions": {"torch": torch.__version__, "ml_dtypes": ml_dtypes.__version__, "numpy": np.__version__},
        # Only BF16's NaN encoding depends on it: 0xFFFF from the AVX2/AVX-512 kernels, 0x7FC0 from the scalar path.
        "cpuCapability": torch.backends.cpu.get_cpu_capability(),
        "seed": SEED,
        "reference": {d: ("torch " + str(TORCH[d]) if d in TORCH else "ml_dtypes." + ML[d].__name__) for d in FORMATS},
        "decode": {},
        "encode": {},
        "numeric": {},
    }

    for dtype in FORMATS:
        n = 1 << bits_of(dtype)
        manifest["decode"][dtype] = write(f"decode_{dtype}.bin", decode(dtype, np.arange(n, dtype=np.uint32)))

    def encode_set(name: str, inputs: np.ndarray, dtypes: list[str]) -> None:
        entry = {"inputs": write(f"enc_{name}_inputs.bin", inputs.astype(np.uint32)), "outputs": {}}
        for d in dtypes:
            entry["outputs"][d] = write(f"enc_{name}_{d}.bin", encode(d, inputs))
        manifest["encode"][name] = entry

    encode_set("special", specials(), FORMATS)
    for dtype in FORMATS:
        encode_set(f"edge_{dtype}", edge_inputs(dtype), [dtype])
    encode_set("narrow", narrow_inputs(rng, 65536), FORMATS)
    wide = rng.integers(0, 1 << 32, 131072, dtype=np.uint64).astype(np.uint32)
    encode_set("wide", wide, ["F16", "BF16", "F8_E8M0"])

    for dtype in ("I32", "U32", "I64", "U64", "F64"):
        values, out = numeric_inputs(rng, dtype)
        manifest["numeric"][dtype] = {
            "inputs": write(f"numeric_{dtype}_inputs.bin", values),
            "outputs": write(f"numeric_{dtype}.bin", out),
        }

    total = sum(p.stat().st_size for p in OUT.glob("*.bin"))
    manifest["totalBytes"] = total
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(list(OUT.glob('*.bin')))} tables, {total} bytes, to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
