#!/usr/bin/env python3
"""Load converted checkpoint directories with transformers (used by test/pickle-dir.test.ts).

stdin: JSON [{"source": DIR, "converted": DIR}]. Both are loaded with AutoModelForCausalLM.from_pretrained (the source
from its PyTorch pickles, the converted one from its safetensors shards and index, with the source's config.json);
prints JSON [{"converted", "missing", "unexpected", "compared", "mismatches", "tied"}]: the loading info of the
converted directory, and the parameters whose dtype, shape or values differ from the source model's.
"""

import json
import sys

import torch
import transformers


def main():
    out = []
    for pair in json.load(sys.stdin):
        source = transformers.AutoModelForCausalLM.from_pretrained(pair["source"])
        converted, info = transformers.AutoModelForCausalLM.from_pretrained(pair["converted"], output_loading_info=True)
        a, b = source.state_dict(), converted.state_dict()
        mismatches = [k for k in a if k not in b or a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k])]
        tied = getattr(converted, "lm_head", None) is not None and converted.lm_head.weight.data_ptr() == converted.get_input_embeddings().weight.data_ptr()
        out.append({"converted": pair["converted"], "missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]),
                    "compared": len(a), "mismatches": mismatches, "tied": tied})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
