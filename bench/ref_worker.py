"""Reference worker for `npm run bench`: one measurement of one figure in a fresh process.

usage:
  ref_worker.py versions
  ref_worker.py make_pt <safetensors_path> <pt_path>
  ref_worker.py page_fault_probe
  ref_worker.py run '<json request>'

`run`: the request (built by the orchestrator from the figure's file in bench/figures/) carries the figure's Python
source, which defines `run(ctx, state)` and optionally `setup(ctx)` and `finish(ctx, state, value)`. torch,
`safe_open`, `load_file` and `save_file` are imported BEFORE the window unless the figure times the import itself
(`library_in_window`). Prints `RESULT {json}` as the last stdout line: `ms` (wall time of just `run`,
time.perf_counter_ns; the median of the calls when the figure repeats) and `rss_delta_mib` (VmRSS of
/proc/self/status after minus before, after gc.collect()).
"""

import gc
import json
import os
import sys
import time
import traceback

TOUCH_STRIDE = 4096


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


def first_and_last(tensor):
    """The first and last element (as Python numbers), which reads one page at each end."""
    flat = tensor.reshape(-1)
    return flat[0].item() + flat[-1].item()


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def run_request(request):
    namespace = {"touch_pages": touch_pages, "first_and_last": first_and_last}
    if not request.get("library_in_window"):
        import torch
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file

        namespace.update(torch=torch, safe_open=safe_open, load_file=load_file, save_file=save_file)
    exec(compile(request["code"], f"<figure {request['figure']}>", "exec"), namespace)
    ctx = dict(request.get("context") or {})
    ctx.update(path=request["path"], pt=request.get("pt"), scratch=request.get("scratch"), extra={})
    state = namespace["setup"](ctx) if "setup" in namespace else None
    run = namespace["run"]
    repeat = request.get("repeat")
    gc.collect()
    before = rss_mib()
    if repeat:
        for _ in range(repeat["warmup"]):
            run(ctx, state)
        times = []
        value = None
        for _ in range(repeat["calls"]):
            start = time.perf_counter_ns()
            value = run(ctx, state)
            times.append((time.perf_counter_ns() - start) / 1e6)
        ms = median(times)
    else:
        start = time.perf_counter_ns()
        value = run(ctx, state)
        ms = (time.perf_counter_ns() - start) / 1e6
    after = rss_mib()
    if "finish" in namespace:
        namespace["finish"](ctx, state, value)
    emit({"ok": True, "ms": ms, "rss_delta_mib": after - before, "extra": ctx["extra"]})


def versions():
    import platform

    import safetensors
    import torch

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


def page_fault_probe():
    """First touch of fresh 4 KiB pages (anonymous memory, hugepages refused), in µs per page.

    One write per page over 256 MiB, minus the same loop over the now-resident pages (the loop's own cost).
    """
    import mmap

    size = 256 << 20
    pages = size // 4096
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        m.madvise(mmap.MADV_NOHUGEPAGE)
    offsets = range(0, size, 4096)
    start = time.perf_counter_ns()
    for i in offsets:
        m[i] = 1
    first = time.perf_counter_ns() - start
    start = time.perf_counter_ns()
    for i in offsets:
        m[i] = 2
    second = time.perf_counter_ns() - start
    m.close()
    emit({"ok": True, "extra": {"first_touch_us": (first - second) / pages / 1e3, "pages": pages}})


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
        elif argv[:1] == ["page_fault_probe"]:
            page_fault_probe()
        elif argv[:1] == ["make_pt"] and len(argv) == 3:
            make_pt(argv[1], argv[2])
        elif argv[:1] == ["run"] and len(argv) == 2:
            run_request(json.loads(argv[1]))
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
