"""numpy doing the same in-place edits and masks as safetensors-ts, for test/edit-numpy.test.ts.

usage: numpy_edits.py make DIR SEED [DIR SEED]...
                                      writes DIR/weights.safetensors, DIR/mask-*.safetensors, DIR/v*.npy and
                                      DIR/jobs.json (what to do), then for each job DIR/expected-JOB.safetensors:
                                      a copy of the weights file edited in place with np.memmap, as a user would.
                                      Several pairs in one process: its start (numpy, ml_dtypes, safetensors)
                                      took 2.7 s of CPU, each seed's files a fraction of that (2026-12-03, load 5).
Edits: w[slice] = np.load(npy).astype(w.dtype) (float32 rounded by numpy / ml_dtypes) or w[slice] = fill.
Masks: w[...] = w * (g > 0) (element-wise), or with g = np.unpackbits(mask, axis=None or -1, count, bitorder).
"""

import json
import os
import shutil
import struct
import sys

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": ml_dtypes.bfloat16, "I8": np.int8,
          "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return 8 + n, json.loads(f.read(n))


def memmap(path, name):
    start, h = header(path)
    info = h[name]
    begin, _ = info["data_offsets"]
    return np.memmap(path, dtype=DTYPES[info["dtype"]], mode="r+", offset=start + begin, shape=tuple(info["shape"]))


def parse_slice(spec, ndim):
    items = []
    for part in [p.strip() for p in spec.split(",")]:
        if part == "...":
            items.append(Ellipsis)
        elif ":" in part:
            items.append(slice(*[int(x) if x.strip() else None for x in part.split(":")]))
        else:
            items.append(int(part))
    return tuple(items)


def make(directory, seed):
    rng = np.random.default_rng(seed)
    shapes = {"w16": ((48, 40), "F16"), "w32": ((33, 17), "F32"), "wbf": ((24, 32), "BF16"), "w64": ((9, 7), "F64"),
              "wi8": ((20, 13), "I8"), "wi32": ((5, 6, 7), "I32"), "e16": ((1000,), "F16")}
    weights = {}
    for name, (shape, dtype) in shapes.items():
        if dtype.startswith("I"):
            value = rng.integers(-100, 100, size=shape).astype(DTYPES[dtype])
        else:
            value = (rng.standard_normal(shape) * 3).astype(np.float32).astype(DTYPES[dtype])
        weights[name] = value
    # Edge values where the product's sign rules show: negatives, zeros of both signs, infinities, NaN.
    flat = weights["w16"].reshape(-1)
    flat[:6] = np.array([-1.5, 0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float16)
    flat32 = weights["w32"].reshape(-1)
    flat32[:4] = np.array([-2.0, -0.0, np.inf, np.nan], dtype=np.float32)
    weights_path = os.path.join(directory, "weights.safetensors")
    # safetensors.numpy cannot write ml_dtypes' bfloat16: torch writes the same bits as BF16.
    import torch
    from safetensors.torch import save_file as save_torch

    save_torch({k: (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if v.dtype == ml_dtypes.bfloat16
                    else torch.from_numpy(v)) for k, v in weights.items()}, weights_path)

    jobs = []
    k = 0
    for name, spec in [("w16", "3:9"), ("w16", "::5, 1:30:3"), ("w32", "-4:, ::-2"), ("wbf", "..., 7"),
                       ("w64", "2, 1:"), ("e16", "100:900:7")]:
        target = weights[name][parse_slice(spec, weights[name].ndim)]
        values = (rng.standard_normal(target.shape) * 5).astype(np.float32)
        npy = os.path.join(directory, f"v{k}.npy")
        np.save(npy, values if name != "w64" else values.astype(np.float64))
        jobs.append({"id": f"edit{k}", "kind": "edit", "tensor": name, "slice": spec, "npy": npy})
        k += 1
    jobs.append({"id": "fill0", "kind": "fill", "tensor": "wi32", "slice": "1:4, ::2", "fill": -9})
    jobs.append({"id": "fill1", "kind": "fill", "tensor": "w16", "slice": "10:20", "fill": 0.1})

    masks = [
        ("bool", {n: rng.random(weights[n].shape) > 0.4 for n in ["w16", "w32", "wi8"]}, None),
        ("f32", {n: rng.standard_normal(weights[n].shape).astype(np.float32) for n in ["wbf", "w64", "wi32"]}, None),
        ("packed-big", {n: rng.random(weights[n].shape) > 0.5 for n in ["w16", "e16", "w32"]}, ("big", None)),
        ("packed-little", {n: rng.random(weights[n].shape) > 0.5 for n in ["wbf", "wi8"]}, ("little", None)),
        ("rows-big", {n: rng.random(weights[n].shape) > 0.3 for n in ["w32", "wi8"]}, ("big", -1)),
    ]
    for label, keep, packing in masks:
        tensors = {}
        for n, g in keep.items():
            if packing is None:
                tensors[n] = g
            else:
                order, axis = packing
                tensors[n] = np.packbits(g, axis=axis, bitorder=order) if axis is not None else np.packbits(
                    g.reshape(-1), bitorder=order)
        path = os.path.join(directory, f"mask-{label}.safetensors")
        save_file(tensors, path)
        jobs.append({"id": f"mask-{label}", "kind": "mask", "mask": path,
                     "bit_order": packing[0] if packing else "big"})

    for job in jobs:
        expected = os.path.join(directory, f"expected-{job['id']}.safetensors")
        shutil.copyfile(weights_path, expected)
        if job["kind"] in ("edit", "fill"):
            m = memmap(expected, job["tensor"])
            index = parse_slice(job["slice"], m.ndim)
            if job["kind"] == "edit":
                m[index] = np.load(job["npy"]).astype(m.dtype)
            else:
                m[index] = job["fill"]
            m.flush()
            del m
        else:
            from safetensors.numpy import load_file
            for n, g in load_file(job["mask"]).items():
                m = memmap(expected, n)
                if g.dtype == np.uint8 and g.shape != m.shape:
                    if g.ndim == 1:
                        bits = np.unpackbits(g, count=m.size, bitorder=job["bit_order"]).reshape(m.shape)
                    else:
                        bits = np.unpackbits(g, axis=-1, count=m.shape[-1], bitorder=job["bit_order"])
                    g = bits
                with np.errstate(invalid="ignore"):
                    m[...] = m * (g > 0)
                m.flush()
                del m
        job["expected"] = expected
    json.dump({"weights": weights_path, "jobs": jobs}, open(os.path.join(directory, "jobs.json"), "w"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"] and len(sys.argv) >= 4 and len(sys.argv) % 2 == 0:
        for directory, seed in zip(sys.argv[2::2], sys.argv[3::2]):
            make(directory, int(seed))
    else:
        sys.exit(__doc__)
