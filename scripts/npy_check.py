"""Check `.npy` files that `safetensors get` wrote against what the reference reads from the same tensors.

stdin: {"file": PATH, "arrays": [{"name": TENSOR, "npy": PATH, "as": "own" | "f32" | "view"}]}
  own:  np.load(npy) has the dtype, shape and bytes safe_open(framework="numpy") gives;
  f32:  np.load(npy) is float32 and equals safe_open(framework="pt")'s tensor .float() (NaNs where it has NaNs);
  view: np.load(npy) is untyped items whose bytes are the torch tensor's bytes (BF16, F8), and viewed as the
        ml_dtypes type they equal the torch values.
stdout: [{"name", "ok", "why"}]
"""
import json
import sys

import ml_dtypes
import numpy as np
import torch
from safetensors import safe_open

ML = {
    torch.bfloat16: ml_dtypes.bfloat16,
    torch.float8_e5m2: ml_dtypes.float8_e5m2,
    torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
}


def check(file, entry):
    array = np.load(entry["npy"], allow_pickle=False)
    if entry["as"] == "own":
        with safe_open(file, framework="numpy") as f:
            want = f.get_tensor(entry["name"])
        if array.dtype != want.dtype:
            return f"dtype {array.dtype}, safe_open gives {want.dtype}"
        if array.shape != want.shape:
            return f"shape {array.shape}, safe_open gives {want.shape}"
        if array.tobytes() != want.tobytes():
            return "different values"
        return None
    with safe_open(file, framework="pt") as f:
        want = f.get_tensor(entry["name"])
    if tuple(array.shape) != tuple(want.shape):
        return f"shape {array.shape}, safe_open gives {tuple(want.shape)}"
    if entry["as"] == "f32":
        if array.dtype != np.float32:
            return f"dtype {array.dtype}, not float32"
        expected = want.float().numpy()
        same = (array == expected) | (np.isnan(array) & np.isnan(expected))
        return None if same.all() else "values differ from torch's .float()"
    if array.dtype.kind != "V" or array.dtype.itemsize != want.element_size():
        return f"dtype {array.dtype}, not untyped items of {want.element_size()} bytes"
    raw = want.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
    if array.tobytes() != raw:
        return "bytes differ from the tensor's"
    values = array.view(ML[want.dtype]).astype(np.float32)
    expected = want.float().numpy()
    same = (values == expected) | (np.isnan(values) & np.isnan(expected))
    return None if same.all() else "viewed values differ"


def main():
    request = json.load(sys.stdin)
    results = []
    for entry in request["arrays"]:
        try:
            why = check(request["file"], entry)
        except Exception as error:  # noqa: BLE001 - reported back to the test
            why = f"{type(error).__name__}: {error}"
        results.append({"name": entry["name"], "ok": why is None, "why": why})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
