"""gguf-py's verdict on our GGUF files of the held-out models (test/gguf-unseen.test.ts, scripts/gen_gguf_unseen.py).

    python gguf_unseen_check.py EXPECTED.json GGUF_DIR [--converter LLAMA_CPP MODELS_DIR]

GGUF_DIR holds <model>-<type>.gguf for every model of EXPECTED.json and type in it. Each file is read with gguf-py's
GGUFReader and compared with the expected values (keys, tensors: name, type, dimensions, bytes; 32-byte aligned
data). With --converter, llama.cpp's convert_hf_to_gguf.py (of that checkout, run, never copied) also converts each
model for the types it writes (f32, f16, bf16, q8_0), and our file must equal its file: every key with its type and
value, every tensor with its offset and bytes, the file's size and SHA-256. Prints {"checked": N, "mismatches": [...]}.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType

CONVERTER_TYPES = ["f32", "f16", "bf16", "q8_0"]

# Runs the converter once per job in one process (torch and transformers are imported once). A trained tokenizer's
# hash is not in llama.cpp's table: its pre-tokenizer check answers the name we give, as our --tokenizer-pre does.
CONVERT_DRIVER = r'''
import json, os, runpy, sys
src = os.environ["LLAMA_CPP"]
sys.path.insert(0, src)
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
pre = [None]
def answer(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return pre[0]
base.TextModel.get_vocab_base_pre = answer
for model_dir, out, outtype, name in json.loads(sys.argv[1]):
    pre[0] = name
    sys.argv = [os.path.join(src, "convert_hf_to_gguf.py"), model_dir, "--outfile", out, "--outtype", outtype]
    runpy.run_path(sys.argv[0], run_name="__main__")
'''


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def value(field):
    """[type, value] of a key; arrays as [item type, count, SHA-256 of the items as JSON]."""
    t = field.types[0]
    if t == GGUFValueType.ARRAY:
        items = field.contents()
        return [field.types[1].name, len(field.data), sha(json.dumps(items).encode())]
    v = field.contents()
    return [t.name, float(np.float32(v)) if isinstance(v, float) else v]


def check_expected(path, exp, out_type, file_types, mismatches):
    where = os.path.basename(path)
    r = GGUFReader(path)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    for key, want in exp["kv"].items():
        got = value(fields[key]) if key in fields else None
        if got != want:
            mismatches.append([where, "kv", key, got, want])
    ft = fields.get("general.file_type")
    if ft is None or ft.contents() != file_types[out_type]:
        mismatches.append([where, "kv", "general.file_type", ft and ft.contents(), file_types[out_type]])
    align = fields["general.alignment"].contents() if "general.alignment" in fields else 32
    if align != 32:
        mismatches.append([where, "kv", "general.alignment", align, 32])
    want_tensors = exp["tensors"][out_type]
    got_names = [t.name for t in r.tensors]
    if sorted(got_names) != sorted(want_tensors):
        mismatches.append([where, "tensor names", None, sorted(got_names), sorted(want_tensors)])
    for t in r.tensors:
        if t.data_offset % 32 != 0:
            mismatches.append([where, "tensor offset", t.name, int(t.data_offset), "a multiple of 32"])
        want = want_tensors.get(t.name)
        if want is None:
            continue
        got = [t.tensor_type.name, [int(x) for x in t.shape]]
        if got != want[:2]:
            mismatches.append([where, "tensor", t.name, got, want[:2]])
        elif want[2] is not None and sha(t.data.tobytes()) != want[2]:
            mismatches.append([where, "tensor bytes", t.name, None, None])
        elif want[2] is None and not np.allclose(np.asarray(t.data, dtype=np.float32), want[3], rtol=1e-5, atol=0):
            mismatches.append([where, "tensor values", t.name, [float(x) for x in t.data], want[3]])


def convert_all(llama_cpp, jobs):
    env = dict(os.environ, LLAMA_CPP=llama_cpp)
    run = subprocess.run([sys.executable, "-c", CONVERT_DRIVER, json.dumps(jobs)], env=env, capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.exit(f"llama.cpp's converter failed:\n{run.stderr[-4000:]}")


def check_converter(ours, theirs, mismatches):
    where = os.path.basename(ours)
    a, b = GGUFReader(ours), GGUFReader(theirs)
    fa = {k: f for k, f in a.fields.items()}
    fb = {k: f for k, f in b.fields.items()}
    if list(fa) != list(fb):
        mismatches.append([where, "converter keys", None, list(fa), list(fb)])
    for key in fb:
        if key in fa and (fa[key].types != fb[key].types or fa[key].contents() != fb[key].contents()):
            mismatches.append([where, "converter kv", key, value(fa[key]), value(fb[key])])
    ta = [(t.name, t.tensor_type.name, [int(x) for x in t.shape], int(t.data_offset)) for t in a.tensors]
    tb = [(t.name, t.tensor_type.name, [int(x) for x in t.shape], int(t.data_offset)) for t in b.tensors]
    if ta != tb:
        mismatches.append([where, "converter tensor table", None, ta, tb])
    for x, y in zip(a.tensors, b.tensors):
        if x.name == y.name and x.data.tobytes() != y.data.tobytes():
            mismatches.append([where, "converter tensor bytes", x.name, None, None])
    with open(ours, "rb") as f, open(theirs, "rb") as g:
        mine, ref = f.read(), g.read()
    if mine != ref:
        mismatches.append([where, "converter file", None, [len(mine), sha(mine)], [len(ref), sha(ref)]])


def main():
    expected_path, gguf_dir = sys.argv[1], sys.argv[2]
    with open(expected_path) as f:
        expected = json.load(f)
    mismatches, checked = [], 0
    for model, exp in expected["models"].items():
        for out_type in exp["tensors"]:
            path = os.path.join(gguf_dir, f"{model}-{out_type}.gguf")
            check_expected(path, exp, out_type, expected["file_types"], mismatches)
            checked += 1
    converted = 0
    if "--converter" in sys.argv:
        i = sys.argv.index("--converter")
        llama_cpp, models_dir = sys.argv[i + 1], sys.argv[i + 2]
        with tempfile.TemporaryDirectory() as tmp:
            jobs = [[os.path.join(models_dir, model), os.path.join(tmp, f"{model}-{t}.gguf"), t, exp["pre"]]
                    for model, exp in expected["models"].items() for t in CONVERTER_TYPES]
            convert_all(llama_cpp, jobs)
            for model_dir, theirs, t, _ in jobs:
                check_converter(os.path.join(gguf_dir, os.path.basename(theirs)), theirs, mismatches)
                converted += 1
    print(json.dumps({"checked": checked, "converter_checked": converted, "mismatches": mismatches}, default=str))


if __name__ == "__main__":
    main()
