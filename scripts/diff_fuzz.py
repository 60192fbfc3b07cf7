#!/usr/bin/env python3
"""Reference side of the differential fuzzer (driven by scripts/diff_fuzz.ts; not part of `npm test`).

Runs as one long-lived process. Protocol, one line per request on stdin:

    <batch.jsonl> <results.jsonl>

`batch.jsonl` holds one case per line: {"id": ..., "b64": <file bytes, base64>}. For each case the reference's
in-memory reader (`safetensors.deserialize`, the same `read_metadata` checks `safe_open` runs) gives a verdict, written
to `results.jsonl` as {"id", "ok", "error"}. Every `--safe-open-every`-th case is also written to a temporary file and
opened with `safe_open`; a different verdict there is reported as "safe_open_mismatch". After each batch the process
prints one line "done <count>" to stdout.
"""

import base64
import json
import os
import sys
import tempfile

import safetensors


def verdict(content):
    try:
        safetensors.deserialize(content)
        return True, None
    except Exception as error:  # noqa: BLE001 - the verdict is the point
        return False, str(error)


def safe_open_verdict(content, scratch):
    with open(scratch, "wb") as stream:
        stream.write(content)
    try:
        with safetensors.safe_open(scratch, "np") as handle:
            handle.offset_keys()
        return True, None
    except Exception as error:  # noqa: BLE001
        return False, str(error)


def run_batch(batch_path, results_path, every, scratch, counter):
    count = 0
    with open(batch_path, encoding="utf-8") as batch, open(results_path, "w", encoding="utf-8") as results:
        for line in batch:
            if not line.strip():
                continue
            case = json.loads(line)
            content = base64.b64decode(case["b64"])
            ok, error = verdict(content)
            out = {"id": case["id"], "ok": ok, "error": error}
            counter[0] += 1
            if every > 0 and counter[0] % every == 0 and len(content) < 1 << 20:
                other_ok, other_error = safe_open_verdict(content, scratch)
                if other_ok != ok:
                    out["safe_open_mismatch"] = {"ok": other_ok, "error": other_error}
            results.write(json.dumps(out, ensure_ascii=True) + "\n")
            count += 1
    return count


def main():
    every = 10
    args = sys.argv[1:]
    if "--safe-open-every" in args:
        every = int(args[args.index("--safe-open-every") + 1])
    scratch_dir = tempfile.mkdtemp(prefix="st-diff-fuzz-")
    scratch = os.path.join(scratch_dir, "case.safetensors")
    counter = [0]
    print(f"ready safetensors {safetensors.__version__}", flush=True)
    try:
        for request in sys.stdin:
            request = request.strip()
            if not request:
                continue
            if request == "quit":
                break
            batch_path, results_path = request.split(" ", 1)
            count = run_batch(batch_path, results_path, every, scratch, counter)
            print(f"done {count}", flush=True)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
        os.rmdir(scratch_dir)


if __name__ == "__main__":
    main()
