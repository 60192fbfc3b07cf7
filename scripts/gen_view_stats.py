"""Golden statistics and histograms for src/view/stats.ts, computed with numpy.

Each case is a small tensor (raw little-endian bytes, base64) with what numpy says about its values as float64:
`np.histogram(finite, bins=N)` (edges and counts) and min / max / mean / std over the finite values, NaN, inf and
zero counts. Random and adversarial data: values on bin edges, a constant tensor, a few-ulp range, denormals,
NaN/inf mixed in, integers.

Usage: .venv-ref/bin/python scripts/gen_view_stats.py > test/fixtures/view/stats.json
"""

import base64
import json
import sys

import ml_dtypes
import numpy as np

rng = np.random.default_rng(20261201)
DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "I8": np.int8,
    "U8": np.uint8,
    "I16": np.int16,
    "I32": np.int32,
    "U32": np.uint32,
    "I64": np.int64,
    "BOOL": np.bool_,
}


def case(name, dtype, values, bins, shape=None):
    arr = np.asarray(values).astype(DTYPES[dtype])
    if shape is not None:
        arr = arr.reshape(shape)
    x = arr.astype(np.float64).ravel()
    finite = x[np.isfinite(x)]
    counts, edges = np.histogram(finite, bins=bins)
    return {
        "name": name,
        "dtype": dtype,
        "shape": list(arr.shape),
        "data": base64.b64encode(arr.tobytes()).decode(),
        "bins": bins,
        "expected": {
            "edges": [float(e) for e in edges],
            "counts": [int(c) for c in counts],
            "min": float(finite.min()) if finite.size else None,
            "max": float(finite.max()) if finite.size else None,
            "mean": float(finite.mean()) if finite.size else None,
            "std": float(finite.std()) if finite.size else None,
            "nan": int(np.isnan(x).sum()),
            "inf": int(np.isinf(x).sum()),
            "zeros": int((x == 0).sum()),
        },
    }


cases = []
for dtype in ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"]:
    cases.append(case(f"normal {dtype}", dtype, rng.normal(0, 0.02, 1000), 64))
cases.append(case("uniform F32 2-D", "F32", rng.uniform(-3, 7, 1200), 37, shape=(30, 40)))
edges = np.linspace(-1.0, 1.0, 11)
cases.append(case("values on every edge F64", "F64", np.concatenate([edges, edges, [0.3, -0.7]]), 10))
cases.append(case("values on every edge F32", "F32", np.repeat(np.linspace(-2.5, 5.0, 31), 3), 30))
cases.append(case("constant", "F32", np.full(100, 1.25), 16))
cases.append(case("constant zero", "F16", np.zeros(50), 8))
cases.append(case("few ulps F64", "F64", 1.0 + np.arange(8) * np.finfo(np.float64).eps, 4))
cases.append(case("denormals F64", "F64", np.array([5e-324, 1e-323, 2e-323, 0.0, -5e-324]), 3))
cases.append(case("tiny range F32", "F32", np.float32(1.0) + np.arange(20, dtype=np.float32) * np.float32(2**-23), 7))
cases.append(case("nan and inf", "F32", np.array([np.nan, 1.0, -np.inf, 2.5, np.inf, 0.0, -0.0, np.nan, 3.0]), 5))
cases.append(case("only nan", "F16", np.array([np.nan, np.nan]), 4))
cases.append(case("large magnitudes F64", "F64", np.array([-1e150, 1e150, 3.5e149, 0.0]), 9))
cases.append(case("int8", "I8", rng.integers(-128, 128, 500), 256))
cases.append(case("uint8", "U8", rng.integers(0, 256, 500), 13))
cases.append(case("int16", "I16", rng.integers(-30000, 30000, 500), 20))
cases.append(case("int32", "I32", rng.integers(-(2**31), 2**31, 500), 50))
cases.append(case("uint32", "U32", rng.integers(0, 2**32, 500, dtype=np.uint64), 50))
cases.append(case("int64", "I64", rng.integers(-(2**40), 2**40, 500), 33))
cases.append(case("bool", "BOOL", rng.integers(0, 2, 99).astype(bool), 2))
cases.append(case("one bin", "F32", rng.normal(5, 1, 100), 1))
cases.append(case("many bins", "BF16", rng.normal(0, 1, 2000), 1000))

json.dump({"generator": "scripts/gen_view_stats.py", "numpy": np.__version__, "cases": cases}, sys.stdout, indent=None)
sys.stdout.write("\n")
