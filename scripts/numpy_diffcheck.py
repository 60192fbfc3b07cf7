"""numpy (+ ml_dtypes) doing the edits and masks safetensors-ts does, on random cases, for test/numpy-diffcheck.test.ts.

usage: numpy_diffcheck.py make DIR SEED COUNT [CORPUS_FILE...]

Writes DIR/base-*.safetensors (tensors of every dtype numpy can express: F64 F32 F16 BF16 F8_* I8..I64 U8..U64 BOOL
C64; 0-d, 1-d, 4-d and empty shapes; float values with NaN, infinities, signed zeros and subnormals, F8/F16/BF16 also
as arbitrary bit patterns), copies of the CORPUS_FILEs given, and DIR/jobs.json: COUNT jobs, each an `edit --fill`,
`edit --from NPY|RAW` or `apply-mask` with what numpy gives for it: DIR/expected-ID.safetensors (the base file
edited in memory by numpy: `w[index] = value`, `w[index] = np.load(npy)`, `w[...] = w * (g > 0)` or
`np.where(g > 0, w, 0)`, with np.unpackbits for packed masks) and, for masks, numpy's count of masked weights; or
"error" where safetensors-ts documents a refusal (a fill numpy would truncate, wrap or reject, an array numpy would
cast, a mask that does not fit) and the file must then stay as it was.
"""

import json
import os
import shutil
import struct
import sys

import ml_dtypes as md
import numpy as np

NP = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": md.bfloat16,
    "F8_E4M3": md.float8_e4m3fn, "F8_E5M2": md.float8_e5m2, "F8_E4M3FNUZ": md.float8_e4m3fnuz,
    "F8_E5M2FNUZ": md.float8_e5m2fnuz, "F8_E8M0": md.float8_e8m0fnu,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_, "C64": np.complex64,
}
FLOATS = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"]
INTS = ["I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"]
NARROW = ["F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"]  # take float32 arrays
# Packed in safetensors (F4: 2 per byte, low nibble first; F6: a little-endian bit stream, 4 in 3 bytes), one byte per
# element in ml_dtypes: unpacked to edit, packed back.
PACKED = {"F4": (md.float4_e2m1fn, 4), "F6_E2M3": (md.float6_e2m3fn, 6), "F6_E3M2": (md.float6_e3m2fn, 6)}
MASKABLE = [d for d in NP if d != "F8_E8M0"]
ALL = list(NP) + list(PACKED)


def unpack(data, dtype, n):
    bits = PACKED[dtype][1]
    stream = np.unpackbits(np.frombuffer(bytes(data), dtype=np.uint8), bitorder="little")[: n * bits]
    codes = (stream.reshape(n, bits) * (1 << np.arange(bits))).sum(axis=1).astype(np.uint8) if n else np.zeros(0, np.uint8)
    return codes.view(PACKED[dtype][0])


def pack(values, dtype):
    bits = PACKED[dtype][1]
    codes = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    stream = ((codes[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    return np.packbits(stream, bitorder="little").tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes) in file order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    at = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, _, data in tensors:
            f.write(data)


def read_header(buf):
    n = struct.unpack("<Q", bytes(buf[:8]))[0]
    return 8 + n, {k: v for k, v in json.loads(bytes(buf[8:8 + n])).items() if k != "__metadata__"}


class Checkpoint:
    """A file or a sharded checkpoint's directory, read into memory: numpy edits it through views of its bytes."""

    def __init__(self, path):
        self.path = path
        self.files = {}  # file name -> bytearray
        self.tensors = {}  # tensor name -> (file name, data start, header entry)
        self.unpacked = {}  # tensor name -> unpacked array (packed dtypes)
        names = sorted(f for f in os.listdir(path) if f.endswith(".safetensors")) if os.path.isdir(path) else [None]
        for name in names:
            buf = bytearray(open(path if name is None else os.path.join(path, name), "rb").read())
            self.files[name] = buf
            start, header = read_header(buf)
            for tensor, info in header.items():
                self.tensors[tensor] = (name, start, info)

    def view(self, tensor):
        """The tensor as an array over the file's bytes (a packed dtype's: an unpacked copy, packed back by flush)."""
        name, start, info = self.tensors[tensor]
        if info["dtype"] not in PACKED:
            return view(self.files[name], start, info)
        if tensor not in self.unpacked:
            b, e = info["data_offsets"]
            n = int(np.prod(info["shape"]))
            self.unpacked[tensor] = unpack(self.files[name][start + b:start + e], info["dtype"], n).reshape(info["shape"])
        return self.unpacked[tensor]

    def flush(self):
        for tensor, values in self.unpacked.items():
            name, start, info = self.tensors[tensor]
            b, e = info["data_offsets"]
            self.files[name][start + b:start + e] = pack(values, info["dtype"])

    def save(self, out):
        self.flush()
        if os.path.isdir(self.path):
            shutil.copytree(self.path, out, copy_function=shutil.copyfile)
            for name, buf in self.files.items():
                open(os.path.join(out, name), "wb").write(buf)
        else:
            open(out, "wb").write(self.files[None])
        return out


def view(buf, start, info):
    dtype = np.dtype(NP[info["dtype"]])
    b, e = info["data_offsets"]
    count = (e - b) // dtype.itemsize
    return np.frombuffer(buf, dtype=dtype, count=count, offset=start + b).reshape(info["shape"])


def diff_of(old, new):
    """What `diff` reports for a changed tensor, computed by numpy: elements whose bytes differ, the largest |a - b| of
    their values as float64 (pairs with a NaN counted apart), the changed row ranges along dim 0."""
    width = old.dtype.itemsize
    a = old.reshape(-1).view(np.uint8).reshape(-1, width) if old.size else np.zeros((0, width), np.uint8)
    b = new.reshape(-1).view(np.uint8).reshape(-1, width) if new.size else np.zeros((0, width), np.uint8)
    differ = np.any(a != b, axis=1)
    if not differ.any():
        return None
    with np.errstate(all="ignore"):
        if old.dtype == np.complex64:
            d = np.abs(old.reshape(-1).astype(np.complex128) - new.reshape(-1).astype(np.complex128))
        else:
            d = np.abs(old.reshape(-1).astype(np.float64) - new.reshape(-1).astype(np.float64))
    d = d[differ]
    nan = np.isnan(d)
    rows_per = int(np.prod(old.shape[1:])) if old.ndim > 1 else 1
    changed_rows = np.unique(np.nonzero(differ)[0] // rows_per)
    ranges = []
    for r in changed_rows.tolist():
        if ranges and ranges[-1][1] == r:
            ranges[-1][1] = r + 1
        else:
            ranges.append([r, r + 1])
    top = float(d[~nan].max()) if (~nan).any() else 0.0
    return {"elements": int(differ.sum()), "max_abs_diff": top if np.isfinite(top) else "Infinity",
            "nan_elements": int(nan.sum()), "rows": ranges}


def diffs(before, after):
    out = {}
    for tensor in sorted(before.tensors):
        change = diff_of(before.view(tensor), after.view(tensor))
        if change is not None:
            out[tensor] = change
    return out


def special_floats(rng, n):
    specials = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 0.1, -2.5, 1e-40, 6e-8, 65504.0,
                         448.0, 57344.0, 3e38, -3e38, 1e-7], dtype=np.float64)
    values = rng.standard_normal(n) * rng.choice([0.01, 1.0, 100.0, 1e5], size=n)
    pick = rng.random(n) < 0.2
    values[pick] = rng.choice(specials, size=int(pick.sum()))
    return values


def random_values(rng, dtype, n):
    """n values of dtype as an array (arbitrary bit patterns for the narrow floats and integers)."""
    if dtype in PACKED:
        return rng.integers(0, 1 << PACKED[dtype][1], size=n, dtype=np.uint8).view(PACKED[dtype][0])
    t = np.dtype(NP[dtype])
    if dtype in INTS or (dtype in NARROW and rng.random() < 0.5):
        return np.frombuffer(rng.integers(0, 256, size=n * t.itemsize, dtype=np.uint8).tobytes(), dtype=t).copy()
    if dtype == "BOOL":
        return rng.random(n) < 0.5
    with np.errstate(all="ignore"):
        if dtype == "C64":
            return (special_floats(rng, n) + 1j * special_floats(rng, n)).astype(np.complex64)
        return special_floats(rng, n).astype(t)


def random_shape(rng):
    kind = rng.choice(["0d", "1d", "2d", "4d", "empty", "empty3"], p=[0.1, 0.25, 0.3, 0.25, 0.05, 0.05])
    if kind == "0d":
        return ()
    if kind == "1d":
        return (int(rng.integers(1, 40)),)
    if kind == "2d":
        return (int(rng.integers(1, 12)), int(rng.integers(1, 20)))
    if kind == "4d":
        return tuple(int(x) for x in rng.integers(1, 5, size=4))
    if kind == "empty":
        return (0,)
    return (3, 0, int(rng.integers(1, 4)))


def random_index(rng, shape):
    """A spec string safetensors-ts accepts for an edit (in bounds, never clamped) and the index numpy reads it as."""
    parts = []
    items = []
    ndim = len(shape)
    use = int(rng.integers(0, ndim + 1)) if ndim else 0  # axes indexed; the rest omitted (or an ellipsis)
    ellipsis_at = int(rng.integers(0, use + 1)) if rng.random() < 0.3 else -1
    axes = list(range(use)) if ellipsis_at < 0 else list(range(ellipsis_at)) + list(range(ndim - (use - ellipsis_at), ndim))
    for k, axis in enumerate(axes):
        if k == ellipsis_at:
            parts.append("...")
            items.append(Ellipsis)
        d = shape[axis]
        r = rng.random()
        if r < 0.25 and d > 0:
            i = int(rng.integers(-d, d))
            parts.append(str(i))
            items.append(i)
            continue
        if r < 0.35:
            parts.append(":")
            items.append(slice(None))
            continue
        start = None if rng.random() < 0.3 else int(rng.integers(-d, d + 1))
        stop = None if rng.random() < 0.3 else int(rng.integers(-d, d + 1))
        step = None if rng.random() < 0.5 else int(rng.choice([1, 2, 3, -1, -2, 5]))
        text = f"{'' if start is None else start}:{'' if stop is None else stop}"
        if step is not None:
            text += f":{step}"
        parts.append(text)
        items.append(slice(start, stop, step))
    if ellipsis_at == len(axes):
        parts.append("...")
        items.append(Ellipsis)
    if not parts:
        parts, items = (["..."], [Ellipsis]) if rng.random() < 0.5 else ([":"], [slice(None)]) if ndim else (["..."], [Ellipsis])
    return ", ".join(parts), tuple(items)


FILL_FLOATS = [0.0, -0.0, 0.1, -0.1, 1 / 3, -1.5, 2.5, 65504.0, 65520.0, 1e10, -1e10, 1e-8, 6e-8, 1e-45, 448.0,
               464.0, 480.0, 57344.0, 61440.0, 3.4e38, 1e300, 1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -4 + 2 ** -40,
               1 + 2 ** -3 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 2 ** -127, 0.75, float("nan"), float("inf"),
               float("-inf")]


def fill_value(rng, dtype):
    """(text for --fill, the python value numpy assigns, whether safetensors-ts refuses it)."""
    if dtype in INTS or dtype == "BOOL":
        t = np.iinfo(np.int64 if dtype == "BOOL" else NP[dtype]) if dtype != "BOOL" else None
        lo, hi = (0, 1) if dtype == "BOOL" else (int(t.min), int(t.max))
        r = rng.random()
        if r < 0.5:
            wide = [lo, hi, 0, 1, -1 if lo < 0 else 2, 2 ** 53 + 1, hi - 1, 12345678901234567]
            v = int(rng.integers(lo, hi, endpoint=True)) if dtype not in ("U64", "I64") else wide[
                int(rng.integers(0, len(wide)))]
            return str(v), v, False
        if r < 0.6:
            return str(hi + 1), None, True
        if r < 0.7:
            return str(lo - 1), None, True
        if r < 0.8:
            return "2.5", None, True  # numpy truncates: refused
        if r < 0.9:
            return rng.choice(["nan", "inf", "-inf"]), None, True
        v = int(rng.integers(0, 2))
        return f"{v}.0", v, False
    if rng.random() < 0.6:
        v = float(rng.choice(FILL_FLOATS))
        if rng.random() < 0.5:
            v = -v
    else:
        v = float(rng.standard_normal() * 10.0 ** int(rng.integers(-3, 4)))
    text = "-nan" if np.isnan(v) and np.signbit(v) else repr(v)  # repr drops a NaN's sign
    return text, float(text), False


def edit_job(rng, directory, k, base):
    """An edit of a random tensor of `base` (a file or a checkpoint directory)."""
    before = Checkpoint(base)
    ckpt = Checkpoint(base)
    name = str(rng.choice(sorted(ckpt.tensors)))
    info = ckpt.tensors[name][2]
    dtype = info["dtype"]
    if dtype not in NP and dtype not in PACKED:
        return None
    shape = tuple(info["shape"])
    spec, index = random_index(rng, shape)
    w = ckpt.view(name)
    try:
        target_shape = w[index].shape
    except IndexError:
        return None
    job = {"id": f"job{k}", "kind": "edit", "file": base, "tensor": name, "slice": spec}
    if dtype in PACKED:  # runs that do not start and end on a byte are refused (MisalignedSlice): that is allowed
        job["packed"] = True
    r = rng.random()
    refuse = False
    if r < 0.45:
        text, value, refuse = fill_value(rng, dtype)
        job["fill"] = text
        if not refuse:
            with np.errstate(all="ignore"):
                w[index] = value
    else:
        n = int(np.prod(target_shape))
        npy = os.path.join(directory, f"v{k}.npy")
        choice = rng.random()
        if dtype in FLOATS + list(PACKED) and (choice < 0.5 or dtype in PACKED):
            wide = rng.random() < 0.4  # float64, numpy's default (np.save of what numpy computed)
            with np.errstate(all="ignore"):
                values = special_floats(rng, n).astype(np.float64 if wide else np.float32).reshape(target_shape)
            if not wide and rng.random() < 0.3:
                values = np.frombuffer(rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32).tobytes(),
                                       dtype=np.float32).reshape(target_shape)
            np.save(npy, values)
            with np.errstate(all="ignore"):
                w[index] = values
        elif choice < 0.85:
            values = random_values(rng, dtype, n).reshape(target_shape)
            if dtype in NARROW[1:]:  # ml_dtypes' types are saved as untyped items (<V1, <V2)
                np.save(npy, values.view(f"V{values.dtype.itemsize}"))
            elif rng.random() < 0.3:
                npy = os.path.join(directory, f"v{k}.bin")
                open(npy, "wb").write(values.tobytes())
            else:
                np.save(npy, values)
            w[index] = values
        else:
            bad = rng.choice(["shape", "dtype", "big", "fortran", "rawlen"])
            if n == 0 and bad in ("big", "fortran"):  # numpy saves an empty array little-endian, in C order
                bad = "shape"
            values = random_values(rng, dtype, n).reshape(target_shape)
            if bad == "shape":
                np.save(npy, np.zeros(tuple(target_shape) + (2,), dtype=values.dtype) if dtype not in NARROW[1:]
                        else np.zeros((n + 1,), dtype=np.float32))
            elif bad == "dtype":  # a type numpy would cast (lossy or not): refused
                other = np.float32 if dtype in INTS or dtype == "BOOL" else np.int32 if dtype == "F16" else np.float16
                np.save(npy, np.zeros(target_shape, dtype=other))
            elif bad == "big" and dtype not in NARROW[1:] and np.dtype(NP[dtype]).itemsize > 1 and dtype != "C64":
                np.save(npy, values.astype(values.dtype.newbyteorder(">")))
            elif bad == "fortran" and sum(1 for d in target_shape if d > 1) > 1 and dtype not in NARROW[1:]:
                np.save(npy, np.asfortranarray(values))
            else:
                npy = os.path.join(directory, f"v{k}.bin")
                open(npy, "wb").write(values.tobytes() + b"\0")
            refuse = True
        job["from"] = npy
    return finish(job, directory, k, refuse, before, ckpt)


def finish(job, directory, k, refuse, before, after):
    if refuse:
        job["expected"] = "error"
    else:
        job["expected"] = after.save(os.path.join(directory, f"expected-{k}" + (
            "" if os.path.isdir(before.path) else ".safetensors")))
        job["diff"] = diffs(before, after)
    return job


def mask_job(rng, directory, k, base):
    before = Checkpoint(base)
    ckpt = Checkpoint(base)
    names = [n for n in sorted(ckpt.tensors) if ckpt.tensors[n][2]["dtype"] in MASKABLE]
    if not names:
        return None
    chosen = [n for n in names if rng.random() < 0.4] or [names[0]]
    mode = "zero" if rng.random() < 0.2 else "multiply"
    order = "little" if rng.random() < 0.3 else "big"
    tensors = []
    counts = {}
    refuse = False
    for name in chosen:
        w = ckpt.view(name)
        shape = w.shape
        n = w.size
        kind = rng.choice(["bool", "numeric", "packed", "rows"])
        if kind == "rows" and len(shape) < 2:
            kind = "packed"
        keep = rng.random(shape) < 0.5
        if kind == "bool":
            mask_dtype, g = "BOOL", keep
        elif kind == "numeric":
            mask_dtype = str(rng.choice(["F32", "F16", "BF16", "I8", "I32", "U8", "F64", "F8_E4M3", "U16"]))
            g = random_values(rng, mask_dtype, n).reshape(shape)
            with np.errstate(all="ignore"):
                keep = np.asarray(g > 0)
        elif kind == "packed":
            mask_dtype, g = "U8", np.packbits(keep.reshape(-1), bitorder=order)
        else:
            mask_dtype, g = "U8", np.packbits(keep, axis=-1, bitorder=order)
        if kind in ("packed", "rows") and n > 0 and len(shape) > 0 and g.shape == shape:
            # A U8 mask of the weight's own shape is element-wise (README): numpy's G > 0 then.
            keep = np.asarray(g > 0)
        if rng.random() < 0.05:  # a mask that does not fit: refused before anything is written
            refuse = True
            if rng.random() < 0.5:
                mask_dtype, g = "U8", np.zeros(n + (n + 7) // 8 + 2, dtype=np.uint8)  # no layout has this length
            else:
                name = name + ".missing"
        tensors.append((name, mask_dtype, g.shape, np.ascontiguousarray(g).tobytes()))
        if not refuse:
            counts[name] = int(n - int(np.count_nonzero(keep)))
            with np.errstate(all="ignore"):
                if mode == "zero":
                    w[...] = np.where(keep, w, np.zeros((), dtype=w.dtype))
                else:
                    w[...] = w * keep
    path = os.path.join(directory, f"mask-{k}.safetensors")
    write_safetensors(path, tensors)
    job = {"id": f"job{k}", "kind": "mask", "file": base, "mask": path, "mode": mode, "bit_order": order}
    if not refuse:
        job["zeroed"] = counts
    return finish(job, directory, k, refuse, before, ckpt)


def make_bases(rng, directory):
    bases = []
    for b in range(3):
        tensors = []
        for d in ALL:
            for j in range(2 if b else 1):
                shape = random_shape(rng)
                while d in PACKED and int(np.prod(shape)) * PACKED[d][1] % 8:  # whole bytes, as the format requires
                    shape = random_shape(rng)
                n = int(np.prod(shape))
                values = random_values(rng, d, n)
                tensors.append((f"t.{d.lower()}.{j}", d, shape, pack(values, d) if d in PACKED else values.tobytes()))
        rng.shuffle(tensors)
        path = os.path.join(directory, f"base-{b}.safetensors")
        write_safetensors(path, tensors, {"format": "pt"} if b == 1 else None)
        bases.append(path)
    # Rows of kilobytes: strided slices then write several ranges (gaps beyond the planner's 4 KiB bridging).
    big = [("big.f32", "F32", (24, 1500)), ("big.f16", "F16", (4, 3, 20, 300)), ("big.bf16", "BF16", (3000, 8)),
           ("big.u8", "U8", (20, 5000)), ("big.f64", "F64", (5, 3, 700)), ("big.f8", "F8_E4M3", (30, 4100))]
    path = os.path.join(directory, "big.safetensors")
    write_safetensors(path, [(n, d, shape, random_values(rng, d, int(np.prod(shape))).tobytes()) for n, d, shape in big])
    bases.append(path)
    # A sharded checkpoint: 3 shards and their index.
    sharded = os.path.join(directory, "sharded")
    os.mkdir(sharded)
    weight_map = {}
    total = 0
    for shard in range(3):
        tensors = []
        for d in NP:
            if rng.random() < 0.5:
                shape = random_shape(rng)
                tensors.append((f"s{shard}.{d.lower()}", d, shape, random_values(rng, d, int(np.prod(shape))).tobytes()))
        file = f"model-{shard + 1:05d}-of-00003.safetensors"
        write_safetensors(os.path.join(sharded, file), tensors)
        for name, _, _, data in tensors:
            weight_map[name] = file
            total += len(data)
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(sharded, "model.safetensors.index.json"), "w"), indent=2)
    bases.append(sharded)
    return bases


def wrong_base(rng, directory, k, base, bases):
    """Another base a patch of `base` must refuse: another file, or `base` with its last data byte changed (same
    size), or None when `base` has no data byte to change."""
    others = [b for b in bases if b != base and not os.path.isdir(b)]
    if not os.path.isdir(base) and others and rng.random() < 0.3:
        return others[int(rng.integers(0, len(others)))]
    out = os.path.join(directory, f"wrong-{k}" + ("" if os.path.isdir(base) else ".safetensors"))
    if os.path.isdir(base):
        shutil.copytree(base, out, copy_function=shutil.copyfile)
        files = [os.path.join(out, f) for f in sorted(os.listdir(out)) if f.endswith(".safetensors")]
    else:
        shutil.copyfile(base, out)
        files = [out]
    for target in files:
        data = bytearray(open(target, "rb").read())
        if len(data) > 8 + struct.unpack("<Q", bytes(data[:8]))[0]:
            data[-1] ^= 0x01
            open(target, "wb").write(data)
            return out
    return None


def make(directory, seed, count, corpus):
    rng = np.random.default_rng(seed)
    bases = make_bases(rng, directory)
    for i, src in enumerate(corpus):
        path = os.path.join(directory, f"corpus-{i}-{os.path.basename(src.rstrip('/'))}")
        if os.path.isdir(src):
            shutil.copytree(src, path, copy_function=shutil.copyfile)
        else:
            shutil.copyfile(src, path)
        bases.append(path)
    jobs = []
    k = 0
    while len(jobs) < count:
        base = bases[int(rng.integers(0, len(bases)))]
        job = mask_job(rng, directory, k, base) if rng.random() < 0.3 else edit_job(rng, directory, k, base)
        if job is not None:
            wrong = wrong_base(rng, directory, k, base, bases) if job["expected"] != "error" and rng.random() < 0.3 else None
            if wrong is not None:
                job["wrong_base"] = wrong
            jobs.append(job)
        k += 1
    json.dump({"jobs": jobs}, open(os.path.join(directory, "jobs.json"), "w"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"] and len(sys.argv) >= 5:
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    else:
        sys.exit(__doc__)
