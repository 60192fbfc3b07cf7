#!/usr/bin/env python3
"""Generate test/fixtures/shards/{assignments,sizes,indexes}.json: huggingface_hub's shard assignment, size parsing and
index text for test/shards.test.ts.

Run with the reference venv (torch, huggingface_hub):  .venv-ref/bin/python scripts/gen_shard_fixtures.py

assignments.json: cases {max_shard_size, tensors: [{name, size, storage}]} (tensors of one `storage` group are the
same torch storage: the first is a uint8 tensor of `size` bytes, the others views of all of it; a null storage is a
tensor of its own, except that torch gives every empty tensor the null data pointer, so huggingface_hub groups them)
with `split_torch_state_dict_into_shards`'s answer: filename_to_tensors, tensor_to_filename (in order) and
total_size. sizes.json: `parse_size_to_int(text)` or the exception type. indexes.json: the index text
`save_torch_state_dict` and transformers' `save_pretrained` write for a weight map (huggingface_hub's json.dump with
indent=2; transformers' json.dumps with indent=2, sort_keys=True, plus a newline). Deterministic (fixed seed).
"""

import json
import os
import random

import torch
from huggingface_hub import split_torch_state_dict_into_shards
from huggingface_hub.serialization._base import parse_size_to_int

SEED = 0x5A4D5
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "shards")


def split(case):
    groups = {}
    state = {}
    for t in case["tensors"]:
        group = t["storage"]
        if group is not None and group in groups:
            state[t["name"]] = groups[group][:]  # a view of the whole storage
        else:
            tensor = torch.zeros(t["size"], dtype=torch.uint8)
            if group is not None:
                groups[group] = tensor
            state[t["name"]] = tensor
    result = split_torch_state_dict_into_shards(state, max_shard_size=case["max_shard_size"])
    return {
        "filename_to_tensors": [[f, names] for f, names in result.filename_to_tensors.items()],
        "tensor_to_filename": [[k, v] for k, v in result.tensor_to_filename.items()],
        "total_size": result.metadata["total_size"],
    }


def hand_cases():
    def t(name, size, storage=None):
        return {"name": name, "size": size, "storage": storage}

    return [
        # The docstring's example: [6, 6, 2, 6, 2, 2] with limit 10.
        {"max_shard_size": 10, "tensors": [t(f"t{i}", s) for i, s in enumerate([6, 6, 2, 6, 2, 2])]},
        # A tensor above the limit gets its own shard, before the still-open current shard.
        {"max_shard_size": 100, "tensors": [t("a", 40), t("big", 500), t("b", 40), t("c", 40), t("huge", 101)]},
        {"max_shard_size": 100, "tensors": [t("a", 100), t("b", 100), t("c", 1)]},
        {"max_shard_size": "1KB", "tensors": [t("only", 1000)]},
        {"max_shard_size": "1KB", "tensors": [t("only", 1001)]},
        # Shared storage: counted once, placed with the first.
        {"max_shard_size": 100, "tensors": [t("w", 60, 1), t("x", 60), t("tied", 60, 1), t("y", 30), t("z", 50, 2), t("z2", 50, 2)]},
        # Empty tensors share the null pointer.
        {"max_shard_size": 10, "tensors": [t("e1", 0), t("a", 8), t("b", 8), t("e2", 0), t("c", 8), t("e3", 0)]},
        {"max_shard_size": 0, "tensors": [t("a", 1), t("e", 0), t("b", 2)]},
        {"max_shard_size": "0.1KB", "tensors": [t(f"n{i}", 33) for i in range(7)]},
        {"max_shard_size": "5GB", "tensors": [t("a", 3 * 10**9), t("b", 2 * 10**9), t("c", 1)]},
        {"max_shard_size": 1000, "tensors": [t("__proto__", 10), t("constructor", 995), t("ünï", 5)]},
    ]


def random_cases(rng):
    cases = []
    for _ in range(60):
        n = rng.randint(1, 40)
        limit = rng.choice([1, 10, 64, 100, 1000, 4096, "1KB", "0.5KB", "2kb", " 3 KB "])
        tensors = []
        for i in range(n):
            size = rng.choice([0, 1, 2, 7, 8, 16, 33, 64, 100, 255, 600, 1000, 1024, 2000, 5000])
            storage = rng.choice([None] * 6 + [1, 2, 3])
            tensors.append({"name": f"layer.{i}.w{rng.randint(0, 9)}", "size": size, "storage": storage})
        # A storage group's members must have its size (views of all of it).
        sizes = {}
        for t in tensors:
            if t["storage"] is not None:
                t["size"] = sizes.setdefault(t["storage"], t["size"])
        cases.append({"max_shard_size": limit, "tensors": tensors})
    return cases


SIZES = [
    "5GB", "150KB", "1MB", "1TB", "5gb", "5Gb", " 5GB ", "5 GB", "0.5GB", "1.1KB", "0.1KB", "1e3KB", "1_000KB",
    "+2MB", "-1KB", ".5MB", "5.MB", "1__0KB", "_1KB", "GB", "5", "5B", "2GiB", "1MiB", "inf KB", "nanKB", "1e400KB",
    "0KB", "0.0001KB", "4.5e-3MB", "12345678.9MB", "10000TB",
]


def sizes():
    out = []
    for text in SIZES:
        try:
            out.append({"text": text, "bytes": parse_size_to_int(text)})
        except Exception as e:  # noqa: BLE001 - the type is the fixture
            out.append({"text": text, "error": type(e).__name__})
    return out


def indexes():
    weight_map = {"b.weight": "model-00001-of-00002.safetensors", "a\u00e9\U0001F600\"\\\n\x7f": "model-00002-of-00002.safetensors", "__proto__": "model-00001-of-00002.safetensors"}
    hub = {"metadata": {"total_size": 1234, "note": "x"}, "weight_map": weight_map}
    transformers = {"metadata": {"total_size": 1234, "total_parameters": 617}, "weight_map": weight_map}
    return [
        {"style": "huggingface_hub", "metadata": [["total_size", 1234], ["note", "x"]], "weight_map": list(weight_map.items()), "text": json.dumps(hub, indent=2)},
        {"style": "transformers", "metadata": [["total_size", 1234], ["total_parameters", 617]], "weight_map": list(weight_map.items()), "text": json.dumps(transformers, indent=2, sort_keys=True) + "\n"},
    ]


def main():
    rng = random.Random(SEED)
    cases = [dict(case, expected=split(case)) for case in hand_cases() + random_cases(rng)]
    os.makedirs(OUT, exist_ok=True)
    for name, value in [("assignments.json", cases), ("sizes.json", sizes()), ("indexes.json", indexes())]:
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(value, f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
