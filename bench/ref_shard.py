"""The reference's twin of `safetensors shard IN OUTDIR --max-shard-size SIZE`, timed by `npm run bench`: safetensors'
load_file, then huggingface_hub's save_torch_state_dict (its shard assignment, names and index)."""

import os
import sys

from huggingface_hub import save_torch_state_dict
from safetensors.torch import load_file

source, out_dir, size = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out_dir, exist_ok=True)
state = load_file(source)
save_torch_state_dict(state, out_dir, max_shard_size=size)
