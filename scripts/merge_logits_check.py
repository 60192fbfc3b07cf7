#!/usr/bin/env python3
"""Logits check of test/merge.test.ts and test/lora.test.ts: transformers loads OUR output directory and a twin of it
holding the reference's tensors (mergekit's or PEFT's, from a safetensors file) with the same config.json, runs both
on a fixed input, and prints the largest difference of their logits as JSON, one line per pair:
{"max_abs": ..., "max_ref": ...}. One process for every pair (torch's import is most of the time).

    python scripts/merge_logits_check.py OUR_DIR REFERENCE.safetensors [OUR_DIR REFERENCE.safetensors ...]
"""

import json
import os
import shutil
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM

ids = torch.tensor([[1, 5, 9, 2, 30, 17, 4, 11]])
for ours, reference in zip(sys.argv[1::2], sys.argv[2::2]):
    with tempfile.TemporaryDirectory() as twin:
        shutil.copy(os.path.join(ours, "config.json"), os.path.join(twin, "config.json"))
        shutil.copy(reference, os.path.join(twin, "model.safetensors"))
        logits = []
        for path in (ours, twin):
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            model.eval()
            with torch.no_grad():
                logits.append(model(ids).logits)
    print(json.dumps({"max_abs": (logits[0] - logits[1]).abs().max().item(), "max_ref": logits[1].abs().max().item()}))
