#!/usr/bin/env python3
"""Generate the PyTorch pickle fixtures in test/fixtures/pickle/ with torch from the reference venv.

Run:  .venv-ref/bin/python scripts/gen_pickle_fixtures.py [CORPUS_DIR]

Writes small checkpoints (zip, legacy, tar; views, tied weights, Parameters, every dtype, OrderedDict with
_metadata, nested checkpoints, protocol 4 and 5 pickles, big-endian byteorder) and hostile files whose payloads
would only print a marker, plus `manifest.json`:

  {"benign": [{"file", "key"?, "tensors": {NAME: {"dtype", "shape", "sha256"}}, "aliases": {NAME: KEPT}}],
   "refused": [{"file", "code", "globals": [...]}],      # files convert must refuse (hostile, modules, unsupported)
   "marker": "..."}

Expected tensors are what torch.load(weights_only=True) returns (bytes of .contiguous(), little-endian), so the test
compares our conversion to torch byte for byte. Each hostile payload is checked to really print the marker when
unpickled without restrictions (in a subprocess), so the fixtures cannot be toothless. With CORPUS_DIR, the same
golden data is written for the real pickles in that folder (corpus-golden.json; the files themselves stay there).
"""

import collections
import hashlib
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import zipfile

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "pickle")
MARKER = "PICKLE_PAYLOAD_RAN_7f3a"

TO_ST = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.uint16: "U16",
    torch.int32: "I32", torch.uint32: "U32", torch.int64: "I64", torch.uint64: "U64", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64", torch.complex64: "C64",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.float8_e4m3fnuz: "F8_E4M3FNUZ",
    torch.float8_e5m2fnuz: "F8_E5M2FNUZ", torch.float8_e8m0fnu: "F8_E8M0",
}


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype in (torch.bool,) or t.element_size() == 1:
        return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def as_tensor(v):
    """A torch tensor for what the converter writes as one (tensors, numeric numpy arrays and scalars), else None."""
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (np.ndarray, np.generic)) and v.dtype.kind in "biufc":
        t = torch.from_numpy(np.array(v, order="C"))  # np.ascontiguousarray would make 0-d scalars 1-d
        return t if t.dtype in TO_ST else None
    return None


def has_tensors(v):
    if as_tensor(v) is not None:
        return True
    if isinstance(v, dict):
        return any(has_tensors(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(has_tensors(x) for x in v)
    return False


def flatten(obj, prefix=""):
    """(name -> (tensor, original), non-tensor names) as the converter flattens a checkpoint: containers holding
    tensors are walked with dotted names (dict keys, sequence indexes); other leaves are reported by name."""
    tensors, others = {}, []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, v in items:
        name = f"{prefix}{k}"
        t = as_tensor(v)
        if t is not None:
            tensors[name] = (t, v)
        elif isinstance(v, (dict, list, tuple)) and has_tensors(v):
            sub, sub_others = flatten(v, name + ".")
            tensors.update(sub)
            others += sub_others
        else:
            others.append(name)
    return tensors, others


def expected_of(obj):
    tensors, _ = flatten(obj)
    return {name: {"dtype": TO_ST[t.dtype], "shape": list(t.shape), "sha256": hashlib.sha256(tensor_bytes(t)).hexdigest()}
            for name, (t, _) in tensors.items()}


def aliases_of(obj):
    """Tied names: same storage and geometry (torch), or the same numpy object; kept = first in sorted order."""
    tensors, _ = flatten(obj)
    seen, aliases = {}, {}
    for n in sorted(tensors):
        t, original = tensors[n]
        if isinstance(original, torch.Tensor):
            sig = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        else:
            sig = ("numpy", id(original))
        if sig in seen:
            aliases[n] = seen[sig]
        else:
            seen[sig] = n
    return aliases


def gen():
    g = torch.Generator().manual_seed(7)
    return g


def rand(shape, dtype, g):
    base = torch.randn(shape, generator=g) * 3
    if dtype == torch.bool:
        return base > 0
    if dtype.is_floating_point or dtype.is_complex:
        return base.to(dtype)
    return base.to(torch.int64).to(dtype)


def benign_cases():
    g = gen()
    cases = []
    every = {str(dt).replace("torch.", ""): rand((3, 2), dt, g) for dt in TO_ST}
    every["scalar"] = torch.tensor(3.5)
    every["empty"] = torch.zeros((0, 4))
    cases.append(("every-dtype.pt", every, {}, None))

    base = torch.arange(100, dtype=torch.float32)
    mat = torch.arange(24, dtype=torch.int64).reshape(4, 6)
    views = {
        "offset": base[10:20],
        "strided": base[::7],
        "transposed": mat.t(),
        "column": mat[:, 2],
        "fortran": torch.arange(24, dtype=torch.int16).reshape(4, 3, 2).permute(2, 1, 0),
        "expanded": torch.arange(3, dtype=torch.float32).reshape(3, 1).expand(3, 4),
        "whole": base,
    }
    cases.append(("views.pt", views, {}, None))

    emb = torch.nn.Parameter(torch.randn(5, 4, generator=g))
    tied = collections.OrderedDict([("embed.weight", emb), ("lm_head.weight", emb), ("bias", torch.nn.Parameter(torch.zeros(4), requires_grad=False))])
    tied._metadata = collections.OrderedDict([("", {"version": 1}), ("embed", {"version": 1})])
    cases.append(("tied-params.pt", tied, {}, None))

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    sd = model.state_dict()
    lightning = {"epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.4.0", "state_dict": sd,
                 "optimizer_states": [], "lr_schedulers": [], "hyper_parameters": {"lr": 0.01}}
    cases.append(("lightning.ckpt", lightning, {"key": "state_dict"}, None))
    cases.append(("nested-model.pt", {"model": sd, "args": {"lr": 0.1}, "step": 7}, {"key": "model"}, None))
    cases.append(("state-dict-module.pt", {"state_dict": {"module.w": torch.ones(2, 2)}, "step": 1}, {"key": "state_dict"}, None))

    arrays = {"array_f64": np.arange(6, dtype=np.float64).reshape(2, 3), "array_u32": np.arange(5, dtype=np.uint32),
              "array_be": np.arange(4, dtype=">i4"), "array_fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
              "tensor": torch.ones(3)}
    cases.append(("numpy-arrays.pt", arrays, {}, None))
    # numpy values nested in tuples, lists and optimizer-like state, numpy scalars, and leaves that are not weights.
    exp_avg = np.zeros(4, dtype=np.float32)
    nested = {
        "tensor": torch.ones(2),
        "w": (np.arange(3, dtype=np.int64), np.ones((2, 2), dtype=np.float32)),
        "opt": {"state": {0: {"exp_avg": exp_avg, "step": np.int64(3)},
                          1: {"exp_avg": torch.full((2,), 0.5), "step": torch.tensor(7.0)}},
                "param_groups": [{"lr": 0.1, "params": [0, 1]}]},
        "ema": [exp_avg, np.float16(1.5)],
        "loss": np.float32(0.25),
        "mixed": [np.array([1, 2], dtype=np.int16), "label", 3],
        "names": np.array(["a", "bc"]),
    }
    cases.append(("numpy-nested.pt", nested, {"report_others": True}, None))
    cases.append(("protocol4.pt", {"a": torch.arange(10, dtype=torch.float32), "b": torch.ones(2, 3, dtype=torch.bfloat16)}, {}, 4))
    cases.append(("protocol5.pt", {"a": torch.arange(6, dtype=torch.int32).reshape(2, 3), "b": mat.t()}, {}, 5))
    return cases


def save_benign(manifest):
    for name, obj, extra, protocol in benign_cases():
        path = os.path.join(OUT, name)
        kwargs = {} if protocol is None else {"pickle_protocol": protocol}
        torch.save(obj, path, **kwargs)
        record(manifest, name, extra)
    # Legacy (non-zip) format and its views.
    base = torch.arange(50, dtype=torch.float64)
    legacy = {"x": base[5:15], "y": base[20:30].reshape(2, 5), "w": torch.randn(3, 3, generator=gen()).half()}
    torch.save(legacy, os.path.join(OUT, "legacy.pt"), _use_new_zipfile_serialization=False)
    record(manifest, "legacy.pt", {})
    # A zip checkpoint with an unusual top folder, deflated records, and a big-endian one.
    src = os.path.join(OUT, "views.pt")
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(os.path.join(OUT, "deflated-renamed.pt"), "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            out.writestr("some folder/" + info.filename.split("/", 1)[1], z.read(info.filename))
    record(manifest, "deflated-renamed.pt", {}, source="views.pt")
    big = {"f32": torch.arange(6, dtype=torch.float32).reshape(2, 3), "i16": torch.arange(-3, 3, dtype=torch.int16), "u8": torch.arange(4, dtype=torch.uint8)}
    torch.save(big, os.path.join(OUT, "big-endian.pt"))
    swap_to_big_endian(os.path.join(OUT, "big-endian.pt"), big)
    record(manifest, "big-endian.pt", {})
    write_tar(os.path.join(OUT, "tar-format.pt"))
    record(manifest, "tar-format.pt", {})


def swap_to_big_endian(path, tensors):
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    pkl = dict(entries)[[n for n, _ in entries if n.endswith("data.pkl")][0]]
    keys = {}
    class P(pickle.Unpickler):
        def persistent_load(self, pid):
            keys[pid[2]] = pid[1]
            return None
        def find_class(self, m, n):
            if m == "torch._utils" and n == "_rebuild_tensor_v2":
                return lambda *a: None
            return super().find_class(m, n)
    P(io.BytesIO(pkl)).load()
    sizes = {"FloatStorage": 4, "ShortStorage": 2, "ByteStorage": 1}
    out = []
    for n, data in entries:
        folder, rest = n.split("/", 1)
        if rest.startswith("data/") and rest[5:] in keys:
            es = sizes[keys[rest[5:]].__name__]
            data = b"".join(data[i:i + es][::-1] for i in range(0, len(data), es))
        if rest == "byteorder":
            data = b"big"
        out.append((n, data))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, data in out:
            z.writestr(n, data)


def write_tar(path):
    """The pre-1.0 tar format (torch can still read it): storages, tensors and pickle members."""
    f32 = torch.arange(12, dtype=torch.float32)
    storages = io.BytesIO()
    pickle.dump(1, storages, protocol=2)
    # Storage and tensor keys share one dict in torch's reader, and persistent ids are looked up with int(pid).
    pickle.dump((100, "cpu", torch.FloatStorage), storages, protocol=2)
    storages.write(struct.pack("<q", 12))
    storages.write(f32.numpy().tobytes())
    pickle.dump([], storages, protocol=2)
    tensors = io.BytesIO()
    pickle.dump(2, tensors, protocol=2)
    for key, size, stride, offset in ((0, (3, 4), (4, 1), 0), (1, (4,), (3,), 1)):
        pickle.dump((key, 100, torch.FloatTensor), tensors, protocol=2)
        tensors.write(struct.pack("<i", len(size)) + b"\0\0\0\0")
        tensors.write(struct.pack(f"<{len(size)}q", *size) + struct.pack(f"<{len(size)}q", *stride) + struct.pack("<q", offset))

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.key if isinstance(obj, Ref) else None

    class Ref:
        def __init__(self, key):
            self.key = key

    main = io.BytesIO()
    Pickler(main, protocol=2).dump({"matrix": Ref("0"), "strided": Ref("1")})
    sys_info = io.BytesIO()
    pickle.dump({"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 8}}, sys_info, protocol=2)
    with tarfile.open(path, "w:", format=tarfile.PAX_FORMAT) as tar:
        for name, buf in (("sys_info", sys_info), ("storages", storages), ("tensors", tensors), ("pickle", main)):
            info = tarfile.TarInfo(name)
            info.size = len(buf.getvalue())
            info.mtime = 0
            tar.addfile(info, io.BytesIO(buf.getvalue()))


NUMPY_GLOBALS = [np._core.multiarray._reconstruct, np._core.multiarray.scalar, np.ndarray, np.dtype] + [
    type(np.dtype(c)) for c in "?bBhHiIlLqQefdFDU"]


def load_weights_only(path):
    """torch.load(weights_only=True), with numpy's array globals allowed (as transformers does for rng states).
    torch's safe loader refuses protocol 4/5 opcodes (FRAME, …), so those files, generated here from known data,
    are loaded unrestricted, and so is the tar format (torch refuses weights_only there)."""
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        try:
            return torch.load(path, weights_only=True, map_location="cpu")
        except (pickle.UnpicklingError, RuntimeError) as e:
            if "Unsupported operand" not in str(e) and ".tar format" not in str(e):
                raise
            return torch.load(path, weights_only=False, map_location="cpu")


def record(manifest, name, extra, source=None):
    path = os.path.join(OUT, name)
    loaded = load_weights_only(path)
    key = extra.get("key")
    sd = loaded[key] if key else loaded
    entry = {"file": name, **({"key": key} if key else {}), "tensors": expected_of(sd), "aliases": aliases_of(sd)}
    if extra.get("report_others"):
        entry["nonTensors"] = flatten(sd)[1]
    manifest["benign"].append(entry)


# ------------------------------------------------------------------------------------------------ hostile files

def op_global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def op_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def call1(module, name, arg_ops):
    """GLOBAL module.name, (args) REDUCE."""
    return op_global(module, name) + b"(" + arg_ops + b"tR"


SHELL = f"echo {MARKER}"
PY = f"print('{MARKER}')"


def hostile_payloads():
    """name -> (pickle bytes, globals that must be named). Each pickle's payload prints MARKER when run."""
    p = {}
    p["os-system"] = (b"\x80\x02" + call1("os", "system", op_str(SHELL)) + b".", ["os.system"])
    p["posix-system"] = (b"\x80\x02" + call1("posix", "system", op_str(SHELL)) + b".", ["posix.system"])
    p["builtins-exec"] = (b"\x80\x02" + call1("builtins", "exec", op_str(PY)) + b".", ["builtins.exec"])
    p["builtins-eval-py2-name"] = (b"\x80\x02" + call1("__builtin__", "eval", op_str(PY)) + b".", ["__builtin__.eval"])
    p["subprocess-run"] = (b"\x80\x02" + op_global("subprocess", "run") + b"(" + b"(" + op_str("echo") + op_str(MARKER) + b"l" + b"tR.", ["subprocess.run"])
    # Protocol 4: STACK_GLOBAL with the module and name as strings, framed and memoized.
    body = b"\x8c\x08builtins\x94\x8c\x04exec\x94\x93\x94" + op_str(PY) + b"\x85\x94R\x94."
    p["stack-global-exec"] = (b"\x80\x04\x95" + struct.pack("<Q", len(body)) + body, ["builtins.exec"])
    # getattr(importlib.import_module("os"), "system")("echo …"): the getattr bypass family.
    getattr_chain = (op_global("builtins", "getattr") + b"(" + call1("importlib", "import_module", op_str("os")) + op_str("system") + b"tR"
                     + b"(" + op_str(SHELL) + b"tR.")
    p["getattr-importlib"] = (b"\x80\x02" + getattr_chain, ["builtins.getattr", "importlib.import_module"])
    # pkgutil.resolve_name("os:system") – a picklescan bypass.
    p["pkgutil-resolve-name"] = (b"\x80\x02" + call1("pkgutil", "resolve_name", op_str("os:system")) + b"(" + op_str(SHELL) + b"tR.", ["pkgutil.resolve_name"])
    p["runpy-run-code"] = (b"\x80\x02" + call1("runpy", "_run_code", op_str(PY) + b"}") + b".", ["runpy._run_code"])
    p["numpy-runstring"] = (b"\x80\x02" + call1("numpy.testing._private.utils", "runstring", op_str(PY) + b"}") + b".", ["numpy.testing._private.utils.runstring"])
    # torch.storage._load_from_bytes runs torch.load (unrestricted) on bytes inside the pickle.
    inner_bytes = pickle.dumps(Exec(), protocol=2)
    p["torch-load-from-bytes"] = (b"\x80\x02" + call1("torch.storage", "_load_from_bytes", b"B" + struct.pack("<I", len(inner_bytes)) + inner_bytes) + b".", ["torch.storage._load_from_bytes"])
    # BUILD on an object: state applied through __setstate__ of a non-allowlisted class (here functools.partial).
    p["build-setstate"] = (b"\x80\x02" + op_global("functools", "partial") + b"(" + op_global("builtins", "exec") + b"tR"
                           + b"(" + op_global("builtins", "exec") + b"(" + op_str(PY) + b"t}Ntb)R.", ["functools.partial", "builtins.exec"])
    return p


class Exec:
    def __reduce__(self):
        return (exec, (PY,))


def wrap_in_zip(pickle_bytes, folder="archive"):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{folder}/data.pkl", pickle_bytes)
        z.writestr(f"{folder}/byteorder", "little")
        z.writestr(f"{folder}/version", "3\n")
    return buf.getvalue()


def payload_runs(data, how):
    code = {
        "pickle": "import pickle,sys; pickle.loads(open(sys.argv[1],'rb').read())",
        "torch": "import torch,sys; torch.load(sys.argv[1], weights_only=False)",
    }[how]
    path = os.path.join(OUT, "_probe.bin")
    with open(path, "wb") as f:
        f.write(data)
    try:
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
        return MARKER in r.stdout + r.stderr
    finally:
        os.remove(path)


def save_hostile(manifest):
    for name, (data, globals_) in hostile_payloads().items():
        assert payload_runs(data, "pickle"), f"payload {name} does not run"
        fname = f"hostile-{name}.pt"
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(wrap_in_zip(data))
        manifest["refused"].append({"file": fname, "code": "UnsafePickle", "verdict": "dangerous", "globals": globals_})
    # The payload hidden in a second pickle of the archive that torch never loads, beside a benign data.pkl.
    benign = io.BytesIO()
    torch.save({"w": torch.ones(2)}, benign)
    with zipfile.ZipFile(io.BytesIO(benign.getvalue())) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for n, d in entries:
            z.writestr(n, d)
        z.writestr(entries[0][0].split("/")[0] + "/extra.pkl", hostile_payloads()["os-system"][0])
    with open(os.path.join(OUT, "hostile-extra-member.pt"), "wb") as f:
        f.write(buf.getvalue())
    manifest["refused"].append({"file": "hostile-extra-member.pt", "code": "UnsafePickle", "verdict": "dangerous", "globals": ["os.system"]})
    # Legacy format with the payload in the sys_info pickle (torch unpickles it before the data).
    legacy = io.BytesIO()
    pickle.dump(0x1950A86A20F9469CFC6C, legacy, protocol=2)
    pickle.dump(1001, legacy, protocol=2)
    legacy.write(hostile_payloads()["builtins-exec"][0])
    pickle.dump({}, legacy, protocol=2)
    pickle.dump([], legacy, protocol=2)
    assert payload_runs(legacy.getvalue(), "torch"), "legacy payload does not run"
    with open(os.path.join(OUT, "hostile-legacy-sysinfo.pt"), "wb") as f:
        f.write(legacy.getvalue())
    manifest["refused"].append({"file": "hostile-legacy-sysinfo.pt", "code": "UnsafePickle", "verdict": "dangerous", "globals": ["builtins.exec"]})
    # A plain pickle with the payload after the first STOP.
    data = pickle.dumps({"w": 1}, protocol=2) + hostile_payloads()["os-system"][0]
    with open(os.path.join(OUT, "hostile-after-stop.pkl"), "wb") as f:
        f.write(data)
    manifest["refused"].append({"file": "hostile-after-stop.pkl", "code": "UnsafePickle", "verdict": "dangerous", "globals": ["os.system"]})
    # A whole nn.Module pickled (torch.save(model)): unknown globals, refused unless --allow-unknown.
    torch.save(torch.nn.Linear(2, 2), os.path.join(OUT, "whole-module.pt"))
    manifest["refused"].append({"file": "whole-module.pt", "code": "UnsafePickle", "verdict": "unknown", "globals": ["torch.nn.modules.linear.Linear"]})
    # A quantized tensor: safe globals, but no safetensors dtype.
    q = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)
    torch.save({"q": q}, os.path.join(OUT, "quantized.pt"))
    manifest["refused"].append({"file": "quantized.pt", "code": "UnsupportedPickle", "verdict": "safe", "globals": []})


def canonical(v):
    """A JSON rendering both sides compute: the test renders our symbolic values the same way."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes" if isinstance(v, bytes) else "bytearray": v.hex()}
    if isinstance(v, tuple):
        return {"tuple": [canonical(x) for x in v]}
    if isinstance(v, list):
        return {"list": [canonical(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"frozenset" if isinstance(v, frozenset) else "set": sorted((canonical(x) for x in v), key=json.dumps)}
    if isinstance(v, dict):
        return {"dict": [[canonical(k), canonical(x)] for k, x in v.items()]}
    raise TypeError(type(v))


def protocol_samples():
    """The same plain data pickled with every protocol, with its canonical form."""
    shared = [1, 2]
    sample = {
        "ints": [0, 1, 255, 256, 65535, 65536, -1, -129, 2**31 - 1, -2**31, 2**40, -2**53 - 1, 2**70, -2**200],
        "floats": [0.0, -1.5, 1e300, float("inf")],
        "text": ["", "x", "é✓", "\n\\", "a" * 300],
        "bytes": [b"", b"\x00\xff", b"z" * 300, bytearray(b"ab")],
        "bools": (True, False, None),
        "small": (1,), "pair": (1, 2), "triple": (1, 2, 3), "four": (1, 2, 3, 4), "empty": (),
        "set": {1, 2}, "frozen": frozenset({3}),
        "shared": [shared, shared],
        7: "int key",
    }
    return [{"protocol": p, "hex": pickle.dumps(sample, protocol=p).hex(), "value": canonical(sample)} for p in range(6)]


def corpus_golden(corpus):
    out = []
    for name in sorted(os.listdir(corpus)):
        if not name.endswith((".pt", ".pth", ".bin", ".ckpt")):
            continue
        loaded = load_weights_only(os.path.join(corpus, name))
        entry = {"file": name, "tensors": expected_of(loaded), "nonTensors": flatten(loaded)[1]}
        out.append(entry)
    return out


def main():
    torch.manual_seed(0)  # module initializers (nn.Linear) draw from the global generator
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    manifest = {"generator": "scripts/gen_pickle_fixtures.py", "torch": torch.__version__.split("+")[0], "marker": MARKER, "benign": [], "refused": []}
    save_benign(manifest)
    save_hostile(manifest)
    manifest["protocols"] = protocol_samples()
    if len(sys.argv) > 1:
        manifest["corpus"] = corpus_golden(sys.argv[1])
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
