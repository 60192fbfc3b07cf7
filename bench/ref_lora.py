"""PEFT's side of the LoRA bake figure, timed by `npm run bench`: the base loaded as stored, the adapter applied,
merge_and_unload(), save_pretrained() (what users run to bake an adapter)."""

import sys

from peft import PeftModel
from transformers import AutoModelForCausalLM

base, adapter, out = sys.argv[1], sys.argv[2], sys.argv[3]
model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
model = PeftModel.from_pretrained(model, adapter)
model.merge_and_unload().save_pretrained(out, safe_serialization=True)
