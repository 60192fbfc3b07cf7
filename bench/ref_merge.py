"""The reference's twin of `safetensors merge DIR OUT`, timed by `npm run bench`: every shard the index lists loaded
with safetensors' load_file, all saved with save_file."""

import json
import os
import sys

from safetensors.torch import load_file, save_file

directory, out = sys.argv[1], sys.argv[2]
with open(os.path.join(directory, "model.safetensors.index.json")) as f:
    shards = sorted(set(json.load(f)["weight_map"].values()))
state = {}
for shard in shards:
    state.update(load_file(os.path.join(directory, shard)))
save_file(state, out, metadata={"format": "pt"})
