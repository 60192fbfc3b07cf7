"""The reference reads a file edited in place and checks that only the edited rows changed.

usage: ref_edit_check.py EDITED ORIGINAL TENSOR START STOP
Every tensor of EDITED (read with safetensors' safe_open) equals ORIGINAL's, except rows START:STOP of TENSOR, which
are zero; the header bytes and the file sizes are the same (tensors tile the data region, so that is every byte).
Prints one JSON line {"ok", "tensors", "changed_bytes"}; exit status 1 when anything else differs.
"""

import json
import os
import struct
import sys

import numpy as np
from safetensors import safe_open


def header_bytes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return f.read(n)


def main(edited, original, tensor, start, stop):
    problems = []
    if os.path.getsize(edited) != os.path.getsize(original):
        problems.append("file sizes differ")
    if header_bytes(edited) != header_bytes(original):
        problems.append("headers differ")
    changed = 0
    with safe_open(edited, "np") as a, safe_open(original, "np") as b:
        names = list(b.keys())
        if sorted(a.keys()) != sorted(names):
            problems.append("tensor names differ")
        for name in names:
            x = a.get_tensor(name)
            y = b.get_tensor(name)
            if name == tensor:
                if not (x[start:stop] == 0).all():
                    problems.append(f"{name}[{start}:{stop}] is not zero")
                changed = int((x[start:stop].view(np.uint8) != y[start:stop].view(np.uint8)).sum())
                x = np.concatenate([x[:start], x[stop:]])
                y = np.concatenate([y[:start], y[stop:]])
            if x.tobytes() != y.tobytes():
                problems.append(f"{name} differs outside the edited rows")
    print(json.dumps({"ok": not problems, "tensors": len(names), "changed_bytes": changed, "problems": problems}))
    return 0 if not problems else 1


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
