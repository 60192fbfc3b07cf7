#!/usr/bin/env python3
"""Fixtures for test/lora-extract.test.ts: tiny Llama models, fine-tunes of them, numpy's SVD of each update, and
mergekit-extract-lora's adapters of the same pairs.

    PYTHONPATH=/work/mergekit:/work/shared/tools /work/venv/bin/python scripts/gen_extract_fixtures.py

Writes test/fixtures/extract/:
- models/base (float32), models/full (every tensor moved: each linear layer by a full-rank update with a decaying
  spectrum, so a rank-R truncation leaves a known error), models/lowrank (each linear layer moved by a rank-3 product,
  norms and embeddings moved too), models/qwen_base and models/qwen_tuned (a Qwen2 with tied embeddings and q/k/v
  biases: rank-2 updates, biases, norms and embeddings moved), models/base_bf16 and models/lowrank_bf16 (the same in bfloat16: the fine-tune is
  bf16(base + B @ A)). Each model has a config.json that transformers loads.
- expected/lowrank_bf16_r3.safetensors: bf16(base_bf16 + the rank-3 truncation of lowrank_bf16 - base_bf16) for
  each linear weight: what a rank-3 extraction baked into base_bf16 can best give.
- expected/svd.json: for each linear weight of `full` and `lowrank`, numpy's singular values of TUNED - BASE
  (float64) and the optimal Frobenius error of a rank-R truncation for R in RANKS.
- mergekit/NAME: mergekit-extract-lora's output (adapter_config.json + adapter_model.safetensors) for each case in
  CASES (when mergekit is importable; otherwise left out and the tests that need it skip).
scripts/check_extract_peft.py loads an adapter made by our command with PEFT (test/lora-extract.test.ts runs it).
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "test", "fixtures", "extract")
MODELS = os.path.join(OUT, "models")
RANKS = [1, 2, 3, 4, 8, 16]
# name: (base model, tuned model, mergekit --max-rank, extra mergekit options)
CASES = {
    "full_r4": ("base", "full", 4, []),
    "lowrank_r3": ("base", "lowrank", 3, []),
    "lowrank_r8": ("base", "lowrank", 8, []),
    "full_r4_embed": ("base", "full", 4, ["--embed-lora"]),
    "qwen_r4": ("qwen_base", "qwen_tuned", 4, []),
}


# Both tiny models' sizes: k_proj and v_proj are 16 x 32, a rank of 20 is clamped for them.
SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def config():
    return LlamaConfig(**SIZES, head_dim=8, tie_word_embeddings=False)


def make_qwen():
    """A tiny Qwen2 with tied embeddings (no lm_head.weight in its file) and q/k/v biases, and a fine-tune of it:
    rank-2 updates of the linear layers, every bias and norm moved."""
    cfg = Qwen2Config(**SIZES, tie_word_embeddings=True)
    torch.manual_seed(3)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(os.path.join(MODELS, "qwen_base"), safe_serialization=True)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2 and "embed" not in name:
                p.add_(torch.randn(p.shape[0], 2, generator=g) @ torch.randn(2, p.shape[1], generator=g) * 0.05)
            else:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    model.save_pretrained(os.path.join(MODELS, "qwen_tuned"), safe_serialization=True)


def save_model(name, tensors, dtype):
    torch.manual_seed(0)
    model = LlamaForCausalLM(config()).to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()})
    model.save_pretrained(os.path.join(MODELS, name), safe_serialization=True)


def decaying(rows, cols, g, top=0.5, decay=0.7):
    """A full-rank update with singular values top * decay^i on random orthonormal vectors."""
    k = min(rows, cols)
    u, _ = torch.linalg.qr(torch.randn(rows, k, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, k, generator=g, dtype=torch.float64))
    s = top * decay ** torch.arange(k, dtype=torch.float64)
    return (u * s) @ v.T


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "expected"))
    torch.manual_seed(1)
    base = {k: v.detach().clone() for k, v in LlamaForCausalLM(config()).state_dict().items()}
    g = torch.Generator().manual_seed(2)
    full, lowrank = {}, {}
    for name, w in base.items():
        if w.ndim == 2:
            rows, cols = w.shape
            full[name] = (w.double() + decaying(rows, cols, g)).float()
            b = torch.randn(rows, 3, generator=g, dtype=torch.float64) * 0.2
            a = torch.randn(3, cols, generator=g, dtype=torch.float64) * 0.2
            lowrank[name] = (w.double() + b @ a).float()
        else:
            moved = w + torch.randn(w.shape, generator=g) * 0.05
            full[name] = moved.clone()
            lowrank[name] = moved.clone()
    save_model("base", base, torch.float32)
    save_model("full", full, torch.float32)
    save_model("lowrank", lowrank, torch.float32)
    save_model("base_bf16", base, torch.bfloat16)
    save_model("lowrank_bf16", lowrank, torch.bfloat16)
    make_qwen()

    expected = {}
    for tuned_name in ["full", "lowrank"]:
        tuned = load_file(os.path.join(MODELS, tuned_name, "model.safetensors"))
        ours = load_file(os.path.join(MODELS, "base", "model.safetensors"))
        per = {}
        for name, w in tuned.items():
            if w.ndim != 2:
                continue
            delta = w.double().numpy() - ours[name].double().numpy()
            s = np.linalg.svd(delta, compute_uv=False)
            per[name] = {
                "singular_values": s.tolist(),
                "optimal_error": {str(r): float(np.sqrt(np.sum(s[r:] ** 2))) for r in RANKS},
                "norm": float(np.linalg.norm(delta)),
            }
        expected[tuned_name] = per
    with open(os.path.join(OUT, "expected", "svd.json"), "w") as f:
        json.dump(expected, f)

    # The optimum in bfloat16: bf16(base + the rank-3 truncation of TUNED - BASE), truncation in float64.
    base16 = load_file(os.path.join(MODELS, "base_bf16", "model.safetensors"))
    tuned16 = load_file(os.path.join(MODELS, "lowrank_bf16", "model.safetensors"))
    optimum = {}
    for name, w in tuned16.items():
        if w.ndim == 2 and "embed_tokens" not in name and "lm_head" not in name:
            u, s, vh = torch.linalg.svd(w.double() - base16[name].double(), full_matrices=False)
            optimum[name] = (base16[name].double() + (u[:, :3] * s[:3]) @ vh[:3]).to(torch.bfloat16)
    save_file(optimum, os.path.join(OUT, "expected", "lowrank_bf16_r3.safetensors"))

    try:
        import mergekit  # noqa: F401
    except ImportError:
        print("mergekit is not importable: mergekit/ left out")
        return
    for case, (base_name, tuned_name, rank, extra) in CASES.items():
        out = os.path.join(OUT, "mergekit", case)
        cmd = [
            sys.executable,
            "-m",
            "mergekit.scripts.extract_lora",
            "--model",
            os.path.join(MODELS, tuned_name),
            "--base-model",
            os.path.join(MODELS, base_name),
            "--out-path",
            out,
            "--max-rank",
            str(rank),
            *extra,
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        os.remove(os.path.join(out, "README.md"))
        with open(os.path.join(out, "adapter_config.json")) as f:
            cfg = json.load(f)
        # Paths of this machine out of the committed file.
        cfg["base_model_name_or_path"] = base_name
        cfg["target_modules"] = sorted(cfg["target_modules"])  # a Python set: its order changes from run to run
        with open(os.path.join(out, "adapter_config.json"), "w") as f:
            json.dump(cfg, f, indent=1, sort_keys=True)
        print(case, "ok")
    with open(os.path.join(OUT, "mergekit", "cases.json"), "w") as f:
        json.dump({k: {"base": b, "tuned": t, "rank": r, "options": e} for k, (b, t, r, e) in CASES.items()}, f, indent=1)


if __name__ == "__main__":
    main()
