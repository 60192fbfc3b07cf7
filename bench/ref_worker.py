"""Reference worker for `npm run bench`: one measurement of one figure in a fresh process.

usage:
  ref_worker.py versions
  ref_worker.py make_pt <safetensors_path> <pt_path>
  ref_worker.py <figure> <variant> <safetensors_path> <pt_path>

Prints its result as the last stdout line: `RESULT {json}` with `ms` (wall time of just the operation,
time.perf_counter_ns) and `rss_delta_mib` (VmRSS from /proc/self/status after minus before).
Imports (torch, safetensors) happen before anything is measured.
"""

import gc
import json
import os
import sys
import time
import traceback

TENSOR_32MIB = "model.layers.0.self_attn.q_proj.weight"
SLICE_TENSOR = "model.embed_tokens.weight"
TOUCH_STRIDE = 4096
SLICE_REPEAT = 1000
SLICE_REPEAT_WARMUP = 100


def emit(result):
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def rss_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def touch_pages(tensor):
    """Read one byte per 4 KiB page: bytes 0, 4096, 8192, ... of the tensor's data."""
    import torch

    return int(tensor.reshape(-1).view(torch.uint8)[::TOUCH_STRIDE].sum())


def measure(operation):
    gc.collect()
    before = rss_mib()
    start = time.perf_counter_ns()
    value = operation()
    elapsed = time.perf_counter_ns() - start
    after = rss_mib()
    return value, elapsed / 1e6, after - before


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def run_figure(figure, variant, st_path, pt_path):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    extra = {}
    if figure == "open":
        if variant == "load_file":
            value, ms, rss = measure(lambda: load_file(st_path))
        elif variant == "safe_open":
            value, ms, rss = measure(lambda: safe_open(st_path, "pt"))
        else:
            raise ValueError(f"unknown variant {variant}")
        extra["tensors"] = len(value.keys())
    elif figure == "tensor_view_32mib":
        f = safe_open(st_path, "pt")
        value, ms, rss = measure(lambda: f.get_tensor(TENSOR_32MIB))
        extra["bytes"] = value.numel() * value.element_size()
    elif figure == "tensor_owned_32mib":
        f = safe_open(st_path, "pt")

        def owned():
            t = f.get_tensor(TENSOR_32MIB).clone()
            touch_pages(t)
            return t

        value, ms, rss = measure(owned)
        extra["bytes"] = value.numel() * value.element_size()
    elif figure == "slice_8_rows":
        f = safe_open(st_path, "pt")
        value, ms, rss = measure(lambda: f.get_slice(SLICE_TENSOR)[0:8])
        extra["bytes"] = value.numel() * value.element_size()
        for _ in range(SLICE_REPEAT_WARMUP):
            f.get_slice(SLICE_TENSOR)[0:8]
        times = []
        for _ in range(SLICE_REPEAT):
            start = time.perf_counter_ns()
            f.get_slice(SLICE_TENSOR)[0:8]
            times.append((time.perf_counter_ns() - start) / 1e6)
        extra["inprocess_median_ms"] = median(times)
    elif figure == "touch_all":

        def touch_all():
            f = safe_open(st_path, "pt")
            total = 0.0
            for name in f.offset_keys():
                flat = f.get_tensor(name).reshape(-1)
                total += flat[0].item() + flat[-1].item()
            return f, total

        value, ms, rss = measure(touch_all)
    elif figure == "load_all":
        if variant == "torch_load":
            if not pt_path or not os.path.isfile(pt_path):
                emit({"ok": False, "unavailable": "no .pt twin for torch.load"})
                return

            def load():
                tensors = torch.load(pt_path, mmap=False, weights_only=True)
                return tensors, sum(touch_pages(t) for t in tensors.values())

        elif variant == "load_file":

            def load():
                tensors = load_file(st_path)
                return tensors, sum(touch_pages(t) for t in tensors.values())

        else:
            raise ValueError(f"unknown variant {variant}")
        value, ms, rss = measure(load)
        extra["tensors"] = len(value[0])
    else:
        raise ValueError(f"unknown figure {figure}")
    emit({"ok": True, "ms": ms, "rss_delta_mib": rss, "extra": extra})


def versions():
    import platform

    import safetensors
    import torch
    from safetensors import safe_open  # noqa: F401
    from safetensors.torch import load_file  # noqa: F401

    emit(
        {
            "ok": True,
            "extra": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "safetensors": safetensors.__version__,
            },
        }
    )


def make_pt(st_path, pt_path):
    """torch.save of the same tensors (same names, in file order), written atomically (temp file + rename)."""
    import torch
    from safetensors import safe_open

    f = safe_open(st_path, "pt")
    tensors = {name: f.get_tensor(name) for name in f.offset_keys()}
    temp = f"{pt_path}.{os.getpid()}.tmp"
    try:
        torch.save(tensors, temp)
        os.replace(temp, pt_path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    emit({"ok": True, "extra": {"tensors": len(tensors), "bytes": os.path.getsize(pt_path)}})


def main(argv):
    try:
        if argv[:1] == ["versions"]:
            versions()
        elif argv[:1] == ["make_pt"] and len(argv) == 3:
            make_pt(argv[1], argv[2])
        elif len(argv) == 4:
            run_figure(*argv)
        else:
            emit({"ok": False, "error": f"bad arguments {argv!r}; see the docstring"})
            return 2
    except Exception as error:  # reported to the harness, which goes on with the other figures
        traceback.print_exc()
        emit({"ok": False, "error": f"{type(error).__name__}: {error}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
