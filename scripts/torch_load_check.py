#!/usr/bin/env python3
"""Compare PyTorch checkpoints with safetensors files, as torch sees them (used by test/pickle.test.ts).

stdin: JSON [{"pt": PATH, "safetensors": PATH, "key": KEY | null}]. For each pair, loads the checkpoint with
torch.load(weights_only=True) (numpy array globals allowed, as transformers does) and the safetensors file with
safetensors.torch.load_file, and reports tensors whose dtype, shape or bytes differ. Tied names recorded in the
safetensors metadata (NAME -> KEPT) are compared against KEPT. Prints JSON [{"pt", "compared", "mismatches"}].
"""

import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_pickle_fixtures import NUMPY_GLOBALS, flatten  # noqa: E402


def raw(t):
    t = t.detach().contiguous()
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)


def main():
    out = []
    for pair in json.load(sys.stdin):
        with torch.serialization.safe_globals(NUMPY_GLOBALS):
            loaded = torch.load(pair["pt"], weights_only=True, map_location="cpu")
        if pair.get("key"):
            loaded = loaded[pair["key"]]
        ours = load_file(pair["safetensors"])
        with safe_open(pair["safetensors"], "pt") as f:
            metadata = f.metadata() or {}
        mismatches, compared = [], 0
        for name, (t, _) in flatten(loaded)[0].items():
            other = ours.get(name, ours.get(metadata.get(name, "")))
            compared += 1
            if other is None or other.dtype != t.dtype or other.shape != t.shape or not torch.equal(raw(other), raw(t)):
                mismatches.append(name)
        out.append({"pt": pair["pt"], "compared": compared, "mismatches": mismatches})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
