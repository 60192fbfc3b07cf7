#!/usr/bin/env python3
"""Generate test/fixtures/slices/cases.json: numpy basic-indexing results for test/slice.test.ts.

Run with the reference venv (numpy):  .venv-ref/bin/python scripts/gen_slice_fixtures.py

Each case holds a safetensors dtype name, a shape, a spec string (the CLI form parsed by `parseSliceSpec`) and
either numpy's result for `arr[index]` (output shape, plus the raw bytes as hex when at most 32 bytes, else their
SHA-256) or the exception numpy raises (type and message). `arr` is the row-major tensor whose byte i is
PATTERN(i) = (i * 37 + 11) % 251, viewed as unsigned integers of the dtype's size (so no float canonicalisation can
touch the bytes). Output is deterministic (fixed seed); dims above 2^53 - 1 are written as decimal strings.
"""

import hashlib
import json
import os
import random

import numpy as np

SEED = 0x5AFE7E45
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "slices", "cases.json")

DTYPES = {
    1: ["U8", "I8", "BOOL", "F8_E4M3", "F8_E5M2"],
    2: ["F16", "BF16", "I16", "U16"],
    4: ["F32", "I32", "U32"],
    8: ["F64", "I64", "U64", "C64"],
}
STORAGE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
HUGE = [10**20, -(10**20), 2**63 - 1, -(2**63), 2**53, -(2**53), 2**64]
MAX_SAFE = 2**53 - 1


def pattern(n):
    return ((np.arange(n, dtype=np.int64) * 37 + 11) % 251).astype(np.uint8)


def make_array(shape, size):
    count = 1
    for d in shape:
        count *= d
    if count == 0:
        return np.empty(shape, dtype=STORAGE[size])
    return pattern(count * size).view(STORAGE[size]).reshape(shape)


def fmt_part(rng, value):
    if value is None:
        return ""
    text = str(value)
    if value >= 0 and rng.random() < 0.03:
        text = "+" + text
    return text


def ws(rng):
    return rng.choice(["", "", "", "", " ", "  ", "\t"])


def fmt_item(rng, item):
    if item is Ellipsis:
        text = "..."
    elif isinstance(item, int):
        text = fmt_part(rng, item)
    else:
        parts = [fmt_part(rng, item.start), fmt_part(rng, item.stop)]
        if item.step is not None or rng.random() < 0.2:
            parts.append(fmt_part(rng, item.step))
        if rng.random() < 0.1:
            text = (ws(rng) + ":" + ws(rng)).join(parts)
        else:
            text = ":".join(parts)
    return ws(rng) + text + ws(rng)


def rand_bound(rng, dim):
    r = rng.random()
    if r < 0.3:
        return None
    if r < 0.36:
        return rng.choice(HUGE)
    return rng.randint(-dim - 3, dim + 3)


def rand_step(rng, dim):
    r = rng.random()
    if r < 0.35:
        return None
    if r < 0.37:
        return 0
    if r < 0.41:
        return rng.choice(HUGE)
    if r < 0.46:
        return rng.choice([dim, dim + 1, -dim, -dim - 1, max(dim - 1, 1)])
    return rng.choice([1, 1, 2, 2, 3, 5, -1, -1, -2, -3, -4])


def rand_item(rng, dim):
    r = rng.random()
    if r < 0.3:
        q = rng.random()
        if q < 0.82 and dim > 0:
            return rng.randint(-dim, dim - 1)
        if q < 0.95:
            return rng.choice([dim, -dim - 1, dim + 2, -dim - 5])
        return rng.choice(HUGE)
    return slice(rand_bound(rng, dim), rand_bound(rng, dim), rand_step(rng, dim))


def rand_shape(rng):
    ndim = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4])
    for _ in range(100):
        r = rng.random()
        if r < 0.1:
            shape = [rng.choice([0, 1, 2, 3, 5]) for _ in range(ndim)]
            if ndim:
                shape[rng.randrange(ndim)] = 0
        else:
            shape = [rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]) for _ in range(ndim)]
        count = 1
        for d in shape:
            count *= d
        if count <= 1500:
            return shape
    return [2] * ndim


def rand_index(rng, shape):
    ndim = len(shape)
    r = rng.random()
    if r < 0.05:
        n = ndim + rng.randint(1, 2)  # too many
    else:
        n = rng.randint(0, ndim)
    ellipses = 0
    q = rng.random()
    if q < 0.35:
        ellipses = 1
    elif q < 0.38:
        ellipses = 2
    items = []
    for i in range(n):
        dim = shape[i] if i < ndim else 3
        items.append(rand_item(rng, dim))
    for _ in range(ellipses):
        items.insert(rng.randint(0, len(items)), Ellipsis)
    # Re-draw the items after an ellipsis against the axes they really index.
    if ellipses == 1:
        at = items.index(Ellipsis)
        tail = len(items) - at - 1
        for j in range(tail):
            axis = ndim - tail + j
            if 0 <= axis < ndim and not isinstance(items[at + 1 + j], type(Ellipsis)):
                items[at + 1 + j] = rand_item(rng, shape[axis])
    return items


def dim_json(d):
    return d if d <= MAX_SAFE else str(d)


def run_case(rng, dtype, size, shape, items, spec=None):
    if spec is None:
        spec = ",".join(fmt_item(rng, item) for item in items)
        if not items and rng.random() < 0.3:
            spec = rng.choice([" ", "\t", "  "])
    arr = make_array(shape, size)
    case = {"dtype": dtype, "shape": [dim_json(d) for d in shape], "spec": spec}
    try:
        result = arr[tuple(items)]
    except (IndexError, ValueError) as e:
        # The spec string must fail the same way under Python's own parser.
        if spec.strip():
            try:
                eval(f"arr[{spec}]", {"arr": arr})  # noqa: S307 - our own generated text
                raise AssertionError(f"{spec!r} succeeded under eval but not as a tuple")
            except (IndexError, ValueError) as e2:
                assert type(e2) is type(e) and str(e2) == str(e), (spec, e, e2)
        case["error"] = type(e).__name__
        case["message"] = str(e)
        return case
    result = np.asarray(result)
    data = result.tobytes()
    if spec.strip():
        check = np.asarray(eval(f"arr[{spec}]", {"arr": arr}))  # noqa: S307
        assert check.shape == result.shape and check.tobytes() == data, spec
    case["out"] = [dim_json(d) for d in result.shape]
    if len(data) <= 32:
        case["hex"] = data.hex()
    else:
        case["sha256"] = hashlib.sha256(data).hexdigest()
    return case


def main():
    rng = random.Random(SEED)
    cases = []

    def pick_dtype():
        size = rng.choice([1, 2, 4, 8])
        return rng.choice(DTYPES[size]), size

    # 1. Exhaustive 1-D slices: CPython's slice clamping over a grid of bounds and steps.
    bounds = [None, -7, -6, -5, -4, -1, 0, 1, 3, 4, 5, 6, 7, 10**20, -(10**20)]
    steps = [None, -3, -2, -1, 0, 1, 2, 3, 10**20, -(10**20)]
    for dim in [0, 1, 4, 5]:
        for start in bounds:
            for stop in bounds:
                for step in steps:
                    if (abs(start or 0) > 100 or abs(stop or 0) > 100 or abs(step or 0) > 100) and rng.random() < 0.7:
                        continue
                    dtype, size = pick_dtype()
                    cases.append(run_case(rng, dtype, size, [dim], [slice(start, stop, step)]))
    # 1b. Every integer index of a 1-D and 2-D shape, in and out of range.
    for shape in ([5], [3, 4]):
        for i in range(-7, 8):
            for extra in ([], [Ellipsis], [slice(None)]):
                dtype, size = pick_dtype()
                cases.append(run_case(rng, dtype, size, shape, [i, *extra]))

    # 2. Random shapes and indices.
    for _ in range(3600):
        dtype, size = pick_dtype()
        shape = rand_shape(rng)
        cases.append(run_case(rng, dtype, size, shape, rand_index(rng, shape)))

    # 3. Zero-size tensors with huge dims (beyond 2^53).
    for shape in ([0, 2**40], [0, 2**62], [3, 0, 2**60], [2**61, 0], [0, 2**53 + 1, 2]):
        for spec_items in (
            [],
            [slice(None, None, 3)],
            [Ellipsis, slice(None, None, -2)],
            [slice(None), 2**60],
            [slice(None), -(2**40)],
            [slice(None), slice(2**60, None, 2**59)],
            [slice(None), slice(-1, None, -(2**61))],
            [0],
            [Ellipsis, 2**62],
            [slice(None), slice(2**53 + 3, 2**53 - 5, -1)],
        ):
            if len(spec_items) - spec_items.count(Ellipsis) > len(shape):
                continue
            # numpy refuses dims whose byte size overflows, even in a zero-size array: use 1-byte dtypes.
            cases.append(run_case(rng, rng.choice(DTYPES[1]), 1, shape, spec_items))

    # 4. Hand-picked spec strings.
    for dtype, size, shape, spec in [
        ("F16", 2, [6, 4], ""),
        ("F16", 2, [6, 4], "..."),
        ("F16", 2, [6, 4], "::-1"),
        ("F16", 2, [6, 4], "5:1:-2"),
        ("F16", 2, [6, 4], "-3:"),
        ("F16", 2, [6, 4], " 1 , ::2 "),
        ("F32", 4, [2, 3, 4], "...,1"),
        ("F32", 4, [2, 3, 4], "1,...,1"),
        ("F32", 4, [2, 3, 4], "1, ...   "),
        ("F32", 4, [2, 3, 4], "..., ..."),
        ("F32", 4, [2, 3, 4], "0,0,0,0"),
        ("F32", 4, [2, 3, 4], "::0"),
        ("F32", 4, [2, 3, 4], "-3"),
        ("U8", 1, [], ""),
        ("U8", 1, [], "..."),
        ("U8", 1, [], "0"),
        ("U8", 1, [], ":"),
        ("I64", 8, [3, 5], "99999999999999999999999999"),
        ("I64", 8, [3, 5], "-99999999999999999999999999:99999999999999999999999999"),
        ("I64", 8, [3, 5], ":, 99999999999999999999999999::-99999999999999999999999999"),
        ("BF16", 2, [2, 3], ":, ::2"),
        ("BF16", 2, [2, 2, 3], ":, :, ::2"),
    ]:
        index = eval(f"np.s_[{spec}]", {"np": np}) if spec.strip() else ()  # noqa: S307 - our own literal
        items = list(index) if isinstance(index, tuple) else [index]
        cases.append(run_case(rng, dtype, size, shape, items, spec))

    errors = sum(1 for c in cases if "error" in c)
    doc = {
        "generator": "scripts/gen_slice_fixtures.py",
        "numpy": np.__version__,
        "seed": SEED,
        "pattern": "byte i of the tensor = (i * 37 + 11) % 251",
        "count": len(cases),
        "errors": errors,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("{\n")
        for key in ["generator", "numpy", "seed", "pattern", "count", "errors"]:
            f.write(f"  {json.dumps(key)}: {json.dumps(doc[key])},\n")
        f.write('  "cases": [\n')
        f.write(",\n".join("    " + json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n  ]\n}\n")
    print(f"wrote {len(cases)} cases ({errors} errors) to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
