#!/usr/bin/env python3
"""Reference side of the hostile-header benchmark and verdict generator (bench/hostile.ts,
scripts/gen_hostile_verdicts.ts): opens each FILE with the reference's `safe_open(path, "pt")` — what a user of the
reference runs — and prints one JSON line per file: {"file", "ok", "error"} (error text cut to 2,000 characters: a
hostile header can put a 100 MB name in it). Exit status 0 whatever the verdicts; a crash is a non-zero status.
"""

import json
import sys

from safetensors import safe_open


def main():
    for path in sys.argv[1:]:
        try:
            with safe_open(path, "pt") as handle:
                handle.offset_keys()
            ok, error = True, None
        except Exception as exc:  # noqa: BLE001 - the verdict is the point
            ok, error = False, str(exc)[:2000]
        print(json.dumps({"file": path, "ok": ok, "error": error}), flush=True)


if __name__ == "__main__":
    main()
