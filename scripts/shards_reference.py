#!/usr/bin/env python3
"""The reference side of test/shards-reference.test.ts: huggingface_hub, transformers and torch run on files the
test wrote. Reads one JSON request on stdin, prints one JSON answer. Needs the reference venv (torch, safetensors,
huggingface_hub, transformers); never downloads anything.

Commands (argv[1]):
  split      {file, order, max_shard_size, save_dir}: load `file`, take its tensors in `order`, and return
             split_torch_state_dict_into_shards's assignment; also save_torch_state_dict them into save_dir.
  hashes     {files}: every tensor of every file as safetensors.torch.load_file loads it: name -> [dtype, shape,
             sha256 of its bytes].
  tiny       {dir, max_shard_size}: save a tiny random Llama with transformers' save_pretrained (sharded), return its
             state dict hashes.
  load       {dir}: transformers' from_pretrained(dir), return its state dict hashes.
  cast       {file, out, dtype}: for each tensor t of `file`, compare t.to(dtype) with tensor of the same name in
             `out` byte for byte; return the mismatching names with a few differing positions.
  batch      [[command, request], ...]: several of the above in one process (torch and transformers load once).
  serve      no request on argv: reads one [command, request] a line on stdin and answers each with one line of
             JSON, until stdin ends. The test asks for a batch, works on what it made, then asks for a load: one
             process where two each took ~7 s of CPU to import torch and transformers (2026-12-03, load 5).
"""

import hashlib
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def digest(t):
    t = t.contiguous()
    raw = t.view(torch.uint8) if t.numel() > 0 and t.dtype != torch.bool else t.to(torch.uint8)
    return hashlib.sha256(raw.numpy().tobytes() if t.numel() > 0 else b"").hexdigest()


def describe(state):
    return {k: [str(v.dtype).replace("torch.", ""), list(v.shape), digest(v)] for k, v in state.items()}


def split(req):
    from huggingface_hub import save_torch_state_dict, split_torch_state_dict_into_shards

    loaded = load_file(req["file"])
    state = {name: loaded[name] for name in req["order"]}
    result = split_torch_state_dict_into_shards(state, max_shard_size=req["max_shard_size"])
    os.makedirs(req["save_dir"], exist_ok=True)
    save_torch_state_dict(state, req["save_dir"], max_shard_size=req["max_shard_size"])
    return {
        "filename_to_tensors": [[f, names] for f, names in result.filename_to_tensors.items()],
        "tensor_to_filename": [[k, v] for k, v in result.tensor_to_filename.items()],
        "total_size": result.metadata["total_size"],
    }


def hashes(req):
    out = {}
    for file in req["files"]:
        out.update(describe(load_file(file)))
    return out


def tiny(req):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(req["dir"], max_shard_size=req["max_shard_size"], safe_serialization=True)
    return describe(model.state_dict())


def load(req):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(req["dir"], local_files_only=True)
    return describe(model.state_dict())


def cast(req):
    dtype = DTYPES[req["dtype"]]
    source = load_file(req["file"])
    ours = load_file(req["out"])
    bad = {}
    for name, t in source.items():
        want = t.to(dtype) if t.is_floating_point() else t
        got = ours[name]
        if got.dtype != want.dtype or got.shape != want.shape:
            bad[name] = f"dtype/shape {got.dtype} {tuple(got.shape)} != {want.dtype} {tuple(want.shape)}"
            continue
        a = want.contiguous().view(torch.uint8).reshape(-1, want.element_size()) if want.numel() else None
        b = got.contiguous().view(torch.uint8).reshape(-1, got.element_size()) if got.numel() else None
        if a is None:
            continue
        diff = (a != b).any(dim=1).nonzero().flatten()
        if t.dtype == torch.float64 and dtype == torch.bfloat16 and t.numel() < 32768:
            # torch's own answer for a NaN depends on where it sits: 0xFFFF from its vectorized loop, 0x7FC0 from the
            # scalar remainder (the last n % 16 elements on one thread). Ours is 0xFFFF throughout.
            tail = t.numel() - t.numel() % 16
            diff = torch.tensor([i for i in diff.tolist() if not (i >= tail and torch.isnan(t[i]))], dtype=torch.long)
        if len(diff):
            i = diff[:4].tolist()
            bad[name] = f"{len(diff)} elements differ, e.g. at {i}: want {a[i].tolist()} got {b[i].tolist()}"
    return {"tensors": len(source), "mismatches": bad}


COMMANDS = {"split": split, "hashes": hashes, "tiny": tiny, "load": load, "cast": cast}


def answer(command, request):
    if command == "batch":
        return [COMMANDS[name](one) for name, one in request]
    return COMMANDS[command](request)


def main():
    if sys.argv[1] == "serve":
        for line in sys.stdin:
            print(json.dumps(answer(*json.loads(line))), flush=True)
        return
    req = json.load(sys.stdin)
    if sys.argv[1] == "batch":
        print(json.dumps([COMMANDS[command](request) for command, request in req]))
    else:
        print(json.dumps(COMMANDS[sys.argv[1]](req)))


if __name__ == "__main__":
    main()
