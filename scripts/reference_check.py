#!/usr/bin/env python3
"""What the reference implementation (Hugging Face `safetensors`, 0.8.0) makes of files. Spawned by test/interop.test.ts
through the reference venv: one process handles a whole batch.

Subcommands (input as JSON on stdin, output as JSON on stdout):

  read           {"files": [path, ...]}
                 -> [{file, ok, error, error_type, metadata, metadata_items, tensors: [{name, dtype, shape,
                     data_offsets, sha256}]}] with tensors in the reference's offset order (`offset_keys()`).
                 Header and order come from `safe_open`; tensor bytes from `safetensors.deserialize`, which returns
                 raw bytes for every dtype (numpy has no F8/F6/F4 types). `data_offsets` are rebuilt from the
                 validated layout: tensors tile the data region in offset order, so each begins where the previous
                 one ends. Note: the reference's order among tensors with equal offsets (zero-size ties) follows a
                 randomly seeded hash map and changes from run to run.

  verdicts       {"files": [path, ...]} -> [{file, ok, error}] (header checks only, no tensor bytes).

  write-torch    {"dir": path} -> writes files with `safetensors.torch.save_file` covering every torch dtype the
                 reference maps, and reports for each what was written: [{file, metadata, tensors: [{name, dtype,
                 shape, sha256}]}] (tensors in the order they were given; bytes are torch's little-endian storage).
"""

import hashlib
import json
import os
import sys


def _report(path, with_data=True):
    import safetensors

    entry = {"file": path, "ok": False, "error": None, "error_type": None}
    try:
        with safetensors.safe_open(path, "np") as handle:
            order = list(handle.offset_keys())
            metadata = handle.metadata()
            infos = {}
            for name in order:
                view = handle.get_slice(name)
                infos[name] = (view.get_dtype(), list(view.get_shape()))
        sizes = {}
        digests = {}
        if with_data:
            with open(path, "rb") as stream:
                content = stream.read()
            for name, value in safetensors.deserialize(content):
                data = bytes(value["data"])
                sizes[name] = len(data)
                digests[name] = hashlib.sha256(data).hexdigest()
    except Exception as error:  # noqa: BLE001 - every failure is a verdict here
        entry["error"] = str(error)
        entry["error_type"] = type(error).__name__
        return entry
    entry["ok"] = True
    entry["metadata"] = dict(metadata) if metadata is not None else None
    entry["metadata_items"] = [list(item) for item in metadata.items()] if metadata is not None else None
    if with_data:
        tensors = []
        position = 0
        for name in order:
            dtype, shape = infos[name]
            size = sizes[name]
            tensors.append(
                {
                    "name": name,
                    "dtype": dtype,
                    "shape": shape,
                    "data_offsets": [position, position + size],
                    "sha256": digests[name],
                }
            )
            position += size
        entry["tensors"] = tensors
    return entry


def cmd_read(request):
    return [_report(path) for path in request["files"]]


def cmd_verdicts(request):
    out = []
    for path in request["files"]:
        entry = _report(path, with_data=False)
        out.append({"file": entry["file"], "ok": entry["ok"], "error": entry["error"]})
    return out


def _torch_cases():
    import torch

    generator = torch.Generator().manual_seed(1234)

    def floats(shape):
        return torch.randn(shape, generator=generator) * 4

    def ints(low, high, shape, dtype):
        return torch.randint(low, high, shape, generator=generator, dtype=torch.int64).to(dtype)

    def raw(shape, dtype):
        # Arbitrary bit patterns: draw bytes, reinterpret.
        size = {torch.float4_e2m1fn_x2: 1}.get(dtype, torch.empty((), dtype=dtype).element_size())
        count = 1
        for dim in shape:
            count *= dim
        data = torch.randint(0, 256, (count * size,), generator=generator, dtype=torch.int64).to(torch.uint8)
        return data.view(dtype).reshape(shape)

    cases = {}
    shapes = [(3, 5), (), (0, 4), (7,)]
    float_dtypes = [
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float8_e4m3fn,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2,
        torch.float8_e5m2fnuz,
    ]
    for dtype in float_dtypes:
        tensors = {}
        for index, shape in enumerate(shapes):
            tensors[f"v{index}"] = floats(shape).to(dtype)
        tensors["special"] = torch.tensor([0.0, -0.0, 1.0, -1.5, 1e-3, 448.0, 57344.0, float("inf"), float("nan")]).to(
            dtype
        )
        cases[str(dtype).split(".")[-1]] = tensors
    int_ranges = {
        torch.int64: (-(2**62), 2**62),
        torch.int32: (-(2**31), 2**31 - 1),
        torch.int16: (-(2**15), 2**15 - 1),
        torch.int8: (-128, 127),
        torch.uint8: (0, 255),
        torch.uint16: (0, 2**16 - 1),
        torch.uint32: (0, 2**32 - 1),
    }
    for dtype, (low, high) in int_ranges.items():
        tensors = {}
        for index, shape in enumerate(shapes):
            tensors[f"v{index}"] = ints(low, high, shape, dtype)
        cases[str(dtype).split(".")[-1]] = tensors
    cases["uint64"] = {f"v{index}": raw(shape, torch.uint64) for index, shape in enumerate(shapes)}
    cases["uint64"]["max"] = torch.tensor([2**63 - 1], dtype=torch.int64).view(torch.uint64)
    cases["bool"] = {f"v{index}": ints(0, 2, shape, torch.bool) for index, shape in enumerate(shapes)}
    cases["complex64"] = {
        f"v{index}": torch.complex(floats(shape), floats(shape)) for index, shape in enumerate(shapes)
    }
    cases["float8_e8m0fnu"] = {
        f"v{index}": raw(shape, torch.float8_e8m0fnu) for index, shape in enumerate(shapes)
    }
    cases["float4_e2m1fn_x2"] = {
        "v0": raw((3, 2), torch.float4_e2m1fn_x2),
        "v1": raw((0, 2), torch.float4_e2m1fn_x2),
        "v2": raw((5,), torch.float4_e2m1fn_x2),
    }
    every = {}
    for name, tensors in cases.items():
        for key, tensor in tensors.items():
            every[f"{name}.{key}"] = tensor
    cases["every_dtype"] = every
    return cases


def cmd_write_torch(request):
    import torch
    from safetensors.torch import _TYPES, save_file

    reverse = {value: key for key, value in _TYPES.items()}
    reverse[torch.float8_e8m0fnu] = "F8_E8M0"
    reverse[torch.float4_e2m1fn_x2] = "F4"
    directory = request["dir"]
    os.makedirs(directory, exist_ok=True)
    out = []
    for label, tensors in _torch_cases().items():
        path = os.path.join(directory, f"torch_{label}.safetensors")
        metadata = {"format": "pt", "case": label}
        save_file(tensors, path, metadata=metadata)
        described = []
        for name, tensor in tensors.items():
            storage = tensor.contiguous()
            shape = list(storage.shape)
            if storage.dtype == torch.float4_e2m1fn_x2:
                shape[-1] *= 2  # the header records the logical F4 count (two per byte)
            data = storage.reshape(-1).view(torch.uint8).numpy().tobytes() if storage.numel() else b""
            described.append(
                {
                    "name": name,
                    "dtype": reverse[storage.dtype],
                    "shape": shape,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "byte_length": len(data),
                }
            )
        out.append({"file": path, "metadata": metadata, "tensors": described})
    return out


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "read"
    raw = sys.stdin.read()
    request = json.loads(raw) if raw.strip() else {}
    handlers = {"read": cmd_read, "verdicts": cmd_verdicts, "write-torch": cmd_write_torch}
    if command not in handlers:
        sys.exit(f"unknown command {command!r}; expected one of {sorted(handlers)}")
    result = handlers[command](request)
    sys.stdout.write(json.dumps(result, ensure_ascii=True))


if __name__ == "__main__":
    main()
