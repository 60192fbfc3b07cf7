#!/usr/bin/env python3
"""PEFT loads an extracted adapter: test/lora-extract.test.ts runs this on adapters our `lora extract` wrote.

    python scripts/check_extract_peft.py BASE ADAPTER OUT.safetensors [BASE ADAPTER OUT.safetensors ...]

Loads BASE with transformers (dtype as stored), the adapter with PeftModel.from_pretrained (it fails on a tensor
shape PEFT does not expect, and PEFT's warnings about missing or unexpected keys are a failure here),
merges it with merge_and_unload() and saves the merged model's tensors to OUT.safetensors for the test to compare.
"""

import sys
import warnings

import torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    args = sys.argv[1:]
    for base_dir, adapter_dir, out in zip(args[0::3], args[1::3], args[2::3]):
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = PeftModel.from_pretrained(base, adapter_dir)
        # Keys PEFT did not expect, or expected and did not find: the adapter is not what PEFT would have saved.
        bad = [str(w.message) for w in caught if "keys" in str(w.message).lower()]
        if bad:
            sys.exit(f"{adapter_dir}: " + "; ".join(bad))
        merged = model.merge_and_unload()
        tensors = {k: v.detach().contiguous() for k, v in merged.state_dict().items()}
        save_file(tensors, out)
        print("ok", adapter_dir, len(tensors))


if __name__ == "__main__":
    with torch.no_grad():
        main()
