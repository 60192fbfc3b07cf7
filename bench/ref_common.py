"""Shared by ref_inspect.py and ref_hash.py: the reference's view of a file, in the JSON conventions of our CLI."""

import json
import struct

from safetensors import safe_open

BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
    "I64": 64, "U64": 64,
}  # fmt: skip


def dumps(value):
    """Compact JSON with non-ASCII kept, as JSON.stringify writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def describe(path):
    """safe_open validates the file (as our openFile does); tensors tile the data region in offset order, so each
    tensor's data_offsets follow from the sizes. Metadata keys are listed in header order, as ours prints them."""
    with open(path, "rb") as raw:
        header_bytes = struct.unpack("<Q", raw.read(8))[0]
        header = json.loads(raw.read(header_bytes))
    f = safe_open(path, "np")
    tensors = []
    begin = 0
    for name in f.offset_keys():
        s = f.get_slice(name)
        shape = list(s.get_shape())
        numel = 1
        for d in shape:
            numel *= d
        end = begin + (numel * BITS[s.get_dtype()] + 7) // 8
        tensors.append({"name": name, "dtype": s.get_dtype(), "shape": shape, "data_offsets": [begin, end]})
        begin = end
    meta = f.metadata()
    order = list((header.get("__metadata__") or {}).keys())
    metadata = None if meta is None else {k: meta[k] for k in order}
    return header_bytes, metadata, tensors
