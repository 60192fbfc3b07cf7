#!/usr/bin/env python3
"""Generate checkpoint directories of PyTorch pickles in test/fixtures/pickle-dirs/ (reference venv: torch,
transformers, huggingface_hub).

Run:  .venv-ref/bin/python scripts/gen_pickle_dir_fixtures.py

- sharded/  a tiny Llama (bf16, tied embeddings) as transformers 4.x saved it with safe_serialization=False:
            pytorch_model-0000k-of-0000N.bin + pytorch_model.bin.index.json (huggingface_hub's
            save_torch_state_dict, which transformers' save_pretrained used) + config.json
- single/   the same weights as one pytorch_model.bin + config.json
- pt-set/   a *.pt shard set with its index (filename pattern weights{suffix}.pt), views and an int64 buffer
- hostile/  sharded/ with its last shard replaced by a pickle whose payload prints a marker (os.system)
- unknown/  sharded/ with its last shard also holding a whole nn.Module (globals not allowlisted)

manifest.json: {"marker", "dirs": [{"dir", "tensors": {NAME: {"dtype","shape","sha256"}}, "tied": {NAME: NAME}}],
"refused": [{"dir", "code", "globals"}]}; tensors are what torch.load(weights_only=True) of every shard gives.
"""

import json
import os
import shutil
import sys

import torch
import transformers
from huggingface_hub import save_torch_state_dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_pickle_fixtures import MARKER, aliases_of, expected_of, hostile_payloads, wrap_in_zip  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "pickle-dirs")


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                                      max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).to(torch.bfloat16)


def loaded_shards(directory):
    merged = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".bin", ".pt")):
            merged.update(torch.load(os.path.join(directory, name), weights_only=True, map_location="cpu"))
    return merged


def record(manifest, name):
    merged = loaded_shards(os.path.join(OUT, name))
    manifest["dirs"].append({"dir": name, "tensors": expected_of(merged), "tied": aliases_of(merged)})


def last_shard(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".bin"))[-1]


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    manifest = {"generator": "scripts/gen_pickle_dir_fixtures.py", "torch": torch.__version__.split("+")[0],
                "transformers": transformers.__version__, "marker": MARKER, "dirs": [], "refused": []}
    model = tiny_llama()
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()

    sharded = os.path.join(OUT, "sharded")
    os.makedirs(sharded)
    save_torch_state_dict(sd, sharded, safe_serialization=False, max_shard_size="5KB")
    model.config.save_pretrained(sharded)
    record(manifest, "sharded")

    single = os.path.join(OUT, "single")
    os.makedirs(single)
    torch.save(sd, os.path.join(single, "pytorch_model.bin"))
    model.config.save_pretrained(single)
    record(manifest, "single")

    pt_set = os.path.join(OUT, "pt-set")
    os.makedirs(pt_set)
    base = torch.arange(64, dtype=torch.float32)
    weights = {"a.weight": base[:32].reshape(4, 8), "a.bias": base[32:40], "b.weight": torch.ones(16, 8, dtype=torch.float16),
               "b.t": torch.arange(24, dtype=torch.int64).reshape(4, 6).t(), "c.buffer": torch.arange(40, dtype=torch.int64)}
    save_torch_state_dict(weights, pt_set, filename_pattern="weights{suffix}.pt", safe_serialization=False,
                          max_shard_size=300)
    record(manifest, "pt-set")

    hostile = os.path.join(OUT, "hostile")
    shutil.copytree(sharded, hostile)
    with open(os.path.join(hostile, last_shard(hostile)), "wb") as f:
        f.write(wrap_in_zip(hostile_payloads()["os-system"][0]))
    manifest["refused"].append({"dir": "hostile", "code": "UnsafePickle", "globals": ["os.system"]})

    unknown = os.path.join(OUT, "unknown")
    shutil.copytree(sharded, unknown)
    last = os.path.join(unknown, last_shard(unknown))
    part = torch.load(last, weights_only=True)
    part["extra_module"] = torch.nn.Linear(2, 2)
    torch.save(part, last)
    manifest["refused"].append({"dir": "unknown", "code": "UnsafePickle",
                                "globals": ["torch.nn.modules.linear.Linear"]})

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
