#!/usr/bin/env python3
"""Generate the golden files in test/fixtures/golden/ with the reference writer (safetensors 0.8.0 `serialize`).

Run with the reference venv:  .venv-ref/bin/python scripts/gen_golden.py

Writes one `<case>.safetensors` per case and `manifest.json` describing the inputs, so test/golden.test.ts can rebuild
each file with our `serialize()` and compare bytes:

  {"generator": ..., "reference_version": "0.8.0",
   "cases": [{"file", "compare": "exact" | "header-normalized", "description",
              "metadata": [[key, value], ...] | null   (in the order given to the reference),
              "reference_metadata_order": [key, ...] | null   (the order the reference emitted),
              "tensors": [{"name", "dtype", "shape", "hex"}]   (in the order given to the reference;
                                                              shape is the logical shape written in the header),
              "sha256", "size"}]}

"exact" cases must come out byte-identical. "header-normalized" cases have metadata with several keys, which the
reference emits in hash order while we sort keys: they are compared after putting the reference's metadata object
into sorted order (everything else must be identical).

The data is deterministic (fixed seed), so rerunning produces the same files except for the metadata key order of
"header-normalized" cases.
"""

import hashlib
import json
import os
import random
import sys

import numpy as np
import safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "test", "fixtures", "golden")

# Our dtype name -> (reference TensorSpec dtype, bits per element)
WRITABLE = {
    "BOOL": ("bool", 8),
    "U8": ("uint8", 8),
    "I8": ("int8", 8),
    "F8_E5M2": ("float8_e5m2", 8),
    "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8),
    "I16": ("int16", 16),
    "U16": ("uint16", 16),
    "F16": ("float16", 16),
    "BF16": ("bfloat16", 16),
    "I32": ("int32", 32),
    "U32": ("uint32", 32),
    "F32": ("float32", 32),
    "C64": ("complex64", 64),
    "F64": ("float64", 64),
    "I64": ("int64", 64),
    "U64": ("uint64", 64),
    "F4": ("float4_e2m1fn_x2", 4),
}

rng = random.Random(20240607)


def count(shape):
    total = 1
    for dim in shape:
        total *= dim
    return total


def nbytes(dtype, shape):
    bits = count(shape) * WRITABLE[dtype][1]
    assert bits % 8 == 0, (dtype, shape)
    return bits // 8


def tensor(name, dtype, shape, data=None):
    size = nbytes(dtype, shape)
    if data is None:
        data = bytes(rng.getrandbits(8) for _ in range(size))
    assert len(data) == size, (name, dtype, shape, len(data), size)
    return {"name": name, "dtype": dtype, "shape": list(shape), "data": data}


cases = []


def case(file, description, tensors, metadata=None, compare=None):
    if compare is None:
        compare = "header-normalized" if metadata is not None and len(metadata) > 1 else "exact"
    cases.append(
        {"file": file, "description": description, "tensors": tensors, "metadata": metadata, "compare": compare}
    )


# --- every dtype the reference writer accepts, several tensors each, names that do not follow dtype order ---------
def every_dtype():
    out = []
    shapes = [[3, 2], [], [0], [2, 0, 3], [5]]
    for index, dtype in enumerate(WRITABLE):
        picks = [[3, 2], [4], [0], [2, 0, 6]] if dtype == "F4" else shapes[: 2 + index % 4]
        for k, shape in enumerate(picks):
            # name order deliberately unrelated to dtype order: a rotating letter prefix
            prefix = chr(ord("a") + (index * 7 + k * 3) % 26)
            out.append(tensor(f"{prefix}.{dtype.lower()}.{k}", dtype, shape))
    rng.shuffle(out)
    return out


ALL = every_dtype()
case("every_dtype", "every dtype the reference can write, 2-5 tensors each, scalars and zero-size dims", ALL)
case("every_dtype_meta1", "every dtype plus single-key metadata", ALL, metadata=[["format", "pt"]])
case(
    "every_dtype_meta_multi",
    "every dtype plus multi-key metadata (reference emits hash order; compared after sorting)",
    ALL,
    metadata=[["format", "pt"], ["b", "2"], ["a", "1"], ["z", "last"], ["__proto__", "p"], ["", "empty key"]],
)

# --- each dtype alone (catches a dtype-specific header or layout difference in isolation) -----------------------
for dtype in WRITABLE:
    shape = [2, 4] if dtype == "F4" else [3, 1]
    case(
        f"dtype_{dtype}",
        f"{dtype} alone: a matrix, a scalar or pair, an empty tensor",
        [
            tensor("w", dtype, shape),
            tensor("s", dtype, [2] if dtype == "F4" else []),
            tensor("e", dtype, [0, 3] if dtype != "F4" else [0, 2]),
        ],
    )

# --- names ---------------------------------------------------------------------------------------------------------
UNICODE_NAMES = [
    "é",
    "\u00ff",
    "\u0100",
    "\u07ff",
    "\u0800",
    "\u2028",
    "\u2029",
    "\ud7ff",
    "\ue000",
    "\uf8ff",
    "\ufeff",
    "\ufffd",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0001f600\U0001f601",
    "\U0010ffff",
    "z\U0001f600",
    "z\ue000",
    "日本語.重み",
    "a\u0301",
    "\u00e1",
]
case(
    "names_unicode",
    "unicode names incl. astral-plane characters and characters >= U+E000 (code point order vs UTF-16 order)",
    [tensor(name, "F32" if i % 2 else "U8", [i % 3 + 1]) for i, name in enumerate(UNICODE_NAMES)],
)
ESCAPE_NAMES = [
    'quote"inside',
    "back\\slash",
    "\\",
    '"',
    "nul\x00",
    "\x01",
    "\x08\x09\x0a\x0b\x0c\x0d",
    "\x1f",
    "del\x7f",
    "\x80",  # U+0080, a C1 control: not escaped by JSON
    "slash/",
    "</script>",
    "tab\tname",
    "line\nfeed",
    "\u2028sep",
    "mixed\"\\\x00\x7f\u00e9\U0001f600",
]
case(
    "names_escapes",
    "names needing JSON escapes: quotes, backslash, control characters, DEL, and neighbours",
    [tensor(name, "F16", [2]) for name in ESCAPE_NAMES],
)
case(
    "names_proto",
    "prototype-polluting names and the empty name",
    [
        tensor("__proto__", "F32", [2]),
        tensor("", "F32", [1]),
        tensor("constructor", "I64", [1]),
        tensor("toString", "U8", [3]),
        tensor("hasOwnProperty", "BF16", [1]),
        tensor("__metadata", "U8", [1]),
        tensor("__metadata___", "U8", [1]),
        tensor(" ", "U8", [1]),
    ],
)
ORDER_NAMES = [
    "b",
    "a",
    "A",
    "a.b",
    "a0",
    "aa",
    "a ",
    "layer.10.weight",
    "layer.2.weight",
    "layer.1.weight",
    "Z",
    "_",
    "~",
    "\x7f",
    "\u0080",
    "\ue000",
    "\U00010000",
    "\uffff",
]
case(
    "name_order",
    "same-dtype names: the writer's name tie-break (byte order, prefixes, case, digits, BMP vs astral)",
    [tensor(name, "I32", [1]) for name in ORDER_NAMES],
)
case(
    "name_long",
    "a long name (header well over 1 KB)",
    [tensor("x" * 3000, "U8", [1]), tensor("y" * 5 + "\U0001f600" * 200, "U8", [2])],
)

# --- shapes --------------------------------------------------------------------------------------------------------
case(
    "shapes_edge",
    "scalars, zero-size dims, huge dims next to zero, many dims",
    [
        tensor("scalar_f64", "F64", []),
        tensor("scalar_u8", "U8", []),
        tensor("scalar_bool", "BOOL", [], b"\x01"),
        tensor("zero", "F32", [0]),
        tensor("zero_mid", "F32", [3, 0, 2]),
        tensor("zero_huge", "U8", [0, 1 << 40]),
        tensor("zero_huge2", "I64", [(1 << 53) - 1, 0]),
        tensor("zero_huge3", "U8", [1 << 40, 1 << 20, 0]),
        tensor("many_dims", "I16", [1, 2, 1, 2, 1, 2, 1, 1]),
        tensor("ones", "U16", [1, 1, 1]),
        tensor("f4_zero", "F4", [0]),
        tensor("f4_pair", "F4", [2]),
        tensor("f4_matrix", "F4", [3, 4]),
        tensor("bool_odd", "BOOL", [4], b"\x00\x01\x02\xff"),
    ],
)
case("only_zero_size", "only zero-size tensors: no data region at all", [tensor(n, "F32", [0, 5]) for n in "abc"])

# --- padding: header JSON length hits every residue mod 8 --------------------------------------------------------
for k in range(1, 9):
    case(f"padding_{k}", "one tensor; the name length walks the header through every padding amount", [
        tensor("x" * k, "U8", [1])
    ])

# --- metadata ------------------------------------------------------------------------------------------------------
case("empty", "no tensors, no metadata: `{}` and 6 spaces", [])
case("metadata_only", "no tensors, one metadata key", [], metadata=[["format", "pt"]])
case("metadata_empty_with_tensor", "empty metadata object next to a tensor", [tensor("a", "U8", [2])], metadata=[])
case(
    "metadata_one_odd",
    "one metadata key needing escapes, value with unicode",
    [tensor("t", "F32", [1])],
    metadata=[['k"\\\x00\x1f\x7f\U0001f600', 'v"\\\n\t\u2028\ue000\U0010ffff']],
)
case("metadata_one_empty", "one metadata entry with empty key and value", [tensor("t", "U8", [1])], metadata=[["", ""]])
case(
    "metadata_one_proto",
    "metadata key __proto__",
    [tensor("__proto__", "U8", [1])],
    metadata=[["__proto__", "{\"polluted\":true}"]],
)
case(
    "metadata_multi",
    "several metadata keys (header-normalized)",
    [tensor("w", "F32", [2, 2]), tensor("b", "F32", [2])],
    metadata=[["z", "1"], ["a", "2"], ["m", "3"], ["A", "4"], ["\U0001f600", "astral"], ["\ue000", "pua"]],
)
case(
    "metadata_multi_only",
    "several metadata keys, no tensors (header-normalized)",
    [],
    metadata=[["format", "pt"], ["total_size", "0"], ["escaped\"", "\\\x00"]],
)
case(
    "metadata_multi_long",
    "many metadata keys with long values (header-normalized)",
    [tensor("x", "BF16", [4])],
    metadata=[[f"key{i:02d}", "v" * (i * 13)] for i in range(20)],
)


def write_all():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.endswith(".safetensors") or name == "manifest.json":
            os.remove(os.path.join(OUT, name))
    manifest_cases = []
    for entry in cases:
        keep = []
        specs = {}
        for item in entry["tensors"]:
            ref_dtype, _ = WRITABLE[item["dtype"]]
            shape = list(item["shape"])
            if item["dtype"] == "F4":
                # TensorSpec doubles the last dim of a float4_e2m1fn_x2 shape (storage bytes -> elements)
                assert shape and shape[-1] % 2 == 0, item
                shape[-1] //= 2
            buffer = np.frombuffer(item["data"], dtype=np.uint8).copy() if item["data"] else np.zeros(1, np.uint8)
            keep.append(buffer)
            assert item["name"] not in specs, item["name"]
            specs[item["name"]] = safetensors.TensorSpec(
                dtype=ref_dtype, shape=shape, data_ptr=buffer.ctypes.data, data_len=len(item["data"])
            )
            assert list(specs[item["name"]].shape) == item["shape"], (specs[item["name"]].shape, item["shape"])
        metadata = None if entry["metadata"] is None else dict(entry["metadata"])
        content = bytes(safetensors.serialize(specs, metadata))
        del keep
        # sanity: the reference reads its own output back to the same tensors
        read = {name: value for name, value in safetensors.deserialize(content)}
        assert set(read) == {t["name"] for t in entry["tensors"]}
        for item in entry["tensors"]:
            assert bytes(read[item["name"]]["data"]) == item["data"], item["name"]
            assert read[item["name"]]["dtype"] == item["dtype"], item["name"]
            assert list(read[item["name"]]["shape"]) == item["shape"], item["name"]
        file = entry["file"] + ".safetensors"
        with open(os.path.join(OUT, file), "wb") as stream:
            stream.write(content)
        emitted = None
        if metadata is not None:
            size = int.from_bytes(content[:8], "little")
            emitted = list(json.loads(content[8 : 8 + size])["__metadata__"].keys())
            assert sorted(emitted) == sorted(metadata)
        manifest_cases.append(
            {
                "file": file,
                "compare": entry["compare"],
                "description": entry["description"],
                "metadata": entry["metadata"],
                "reference_metadata_order": emitted,
                "tensors": [
                    {"name": t["name"], "dtype": t["dtype"], "shape": t["shape"], "hex": t["data"].hex()}
                    for t in entry["tensors"]
                ],
                "sha256": hashlib.sha256(content).hexdigest(),
                "size": len(content),
            }
        )
    manifest = {
        "generator": "scripts/gen_golden.py",
        "reference_version": safetensors.__version__,
        "cases": manifest_cases,
    }
    with open(os.path.join(OUT, "manifest.json"), "w", encoding="ascii") as stream:
        json.dump(manifest, stream, ensure_ascii=True, indent=1)
        stream.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {len(manifest_cases)} golden files + manifest.json to {os.path.normpath(OUT)} ({total} bytes)")
    if total >= 300_000:
        sys.exit("golden fixtures exceed 300 KB")


if __name__ == "__main__":
    if safetensors.__version__ != "0.8.0":
        print(f"warning: generating with safetensors {safetensors.__version__}, expected 0.8.0", file=sys.stderr)
    write_all()
