#!/usr/bin/env python3
"""Fixture for test/merge-numpy-sums.test.ts: numpy's float32 `np.linalg.norm` and `np.sum` (the reductions of
mergekit's SLERP) of arrays both sides compute from a formula with exact integer arithmetic, as float32 bits.

    /work/venv/bin/python scripts/gen_numpy_sums.py > test/fixtures/merge/numpy-sums.json

numpy's norm goes through its wheels' OpenBLAS; on x86-64 with AVX2 (Haswell, Zen) that is the sdot kernel
src/merge/numpy-sums.ts replays. The script says which CPU and numpy made the file."""

import json
import platform

import numpy as np

LENGTHS = [1, 7, 8, 31, 32, 33, 63, 64, 100, 128, 129, 1000, 4099, 65537, 300001, 1048583]
SHIFTS = [0, 7, 20]


def values(n, k, shift):
    """x_i = (b_i - 2^23) / 2^(23 + shift), b_i a scrambled 24-bit integer (every step exact in a double)."""
    i = np.arange(n, dtype=np.int64)
    a = (i * 40503 + k) % 65521
    b = (a * a * 31 + i) % 16777216
    return ((b - 8388608).astype(np.float64) / 2.0 ** (23 + shift)).astype(np.float32)


def bits(x):
    return int(np.float32(x).view(np.uint32))


def main():
    cases = []
    for k, n in enumerate(LENGTHS):
        for shift in SHIFTS:
            x = values(n, k, shift)
            y = values(n, k + 1000, shift)
            cases.append({"n": n, "k": k, "shift": shift, "norm": bits(np.linalg.norm(x)),
                          "sum": bits(np.sum(x * y))})
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    print(json.dumps({"numpy": np.__version__, "machine": platform.machine(), "cpu": cpu, "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
