#!/usr/bin/env python3
"""PEFT loads an extracted adapter: test/lora-extract.test.ts runs this on adapters our `lora extract` wrote.

    python scripts/check_extract_peft.py BASE ADAPTER OUT.safetensors [ADAPTER OUT.safetensors ...]

Loads BASE with transformers (dtype as stored), the adapter with PeftModel.from_pretrained (it fails on a tensor
name or shape PEFT does not expect, and we turn PEFT's warnings about missing or unexpected keys into a failure),
merges it with merge_and_unload() and saves the merged model's tensors to OUT.safetensors for the test to compare.
"""

import sys
import warnings

import torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    base_dir, rest = sys.argv[1], sys.argv[2:]
    for adapter_dir, out in zip(rest[0::2], rest[1::2]):
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = PeftModel.from_pretrained(base, adapter_dir)
        merged = model.merge_and_unload()
        tensors = {k: v.detach().contiguous() for k, v in merged.state_dict().items()}
        save_file(tensors, out)
        print("ok", adapter_dir, len(tensors))


if __name__ == "__main__":
    with torch.no_grad():
        main()
