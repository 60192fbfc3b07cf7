#!/usr/bin/env python3
"""Fixtures for test/merge.test.ts: tiny Llama models, mergekit configs, and mergekit's outputs for them.

Run with the reference venv (torch, transformers, tokenizers) and mergekit on PYTHONPATH:

    PYTHONPATH=/work/mergekit:/work/shared/tools /work/venv/bin/python scripts/gen_merge_fixtures.py

Writes test/fixtures/merge/: models/{base,ft1,ft2,ft3}/ (a random tiny LlamaForCausalLM saved by transformers in
bfloat16, with a word-level tokenizer, and three seeded fine-tunes of it: noise on every tensor plus a few larger
changes), configs/NAME.yml, and expected/NAME/ (mergekit's output for each config, run with
`mergekit.scripts.run_yaml ... --no-copy-tokenizer --no-write-model-card --allow-crimes`, its shards joined in one
file, and the two config.json fields a merge changes). mergekit is run, never copied: its code stays in its own
clone. The logits check (transformers on our output and on mergekit's) runs live in the test, with the venv.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "test", "fixtures", "merge")
MERGEKIT = os.environ.get("MERGEKIT", "/work/mergekit")
TOOLS = os.environ.get("MERGEKIT_TOOLS", "/work/shared/tools")

CONFIGS = {
    # Exact arithmetic in float32, out float32: identical bits expected.
    "linear_f32": """
merge_method: linear
dtype: float32
models:
  - model: models/ft1
    parameters:
      weight: [0.2, 0.8]
  - model: models/ft2
    parameters:
      weight:
        - filter: self_attn
          value: 0.7
        - value: 0.4
""",
    # No dtype: bfloat16 arithmetic, as mergekit runs it on bfloat16 models.
    "linear_bf16": """
merge_method: linear
parameters:
  normalize: false
models:
  - model: models/ft1
    parameters: {weight: 0.5}
  - model: models/ft2
    parameters: {weight: 0.3}
  - model: models/ft3
    parameters: {weight: 0.25}
""",
    "task_arithmetic": """
merge_method: task_arithmetic
base_model: models/base
tokenizer_source: base
dtype: float32
out_dtype: bfloat16
parameters:
  lambda: 0.9
  normalize: true
models:
  - model: models/ft1
    parameters: {weight: 0.6}
  - model: models/ft2
    parameters: {weight: [0.1, 0.5, 0.9]}
""",
    "ties": """
merge_method: ties
base_model: models/base
dtype: float32
parameters:
  normalize: true
models:
  - model: models/ft1
    parameters: {weight: 0.5, density: 0.5}
  - model: models/ft2
    parameters: {weight: 0.3, density: [0.3, 0.7]}
  - model: models/ft3
    parameters: {weight: 0.4, density: 0.6}
""",
    "ties_bf16": """
merge_method: ties
base_model: models/base
models:
  - model: models/ft1
    parameters: {weight: 1.0, density: 0.4}
  - model: models/ft2
    parameters: {weight: 1.0, density: 0.4}
""",
    "breadcrumbs": """
merge_method: breadcrumbs
base_model: models/base
dtype: float32
models:
  - model: models/ft1
    parameters: {weight: 0.5, density: 0.8, gamma: 0.05}
  - model: models/ft2
    parameters: {weight: 0.5, density: 0.7, gamma: 0.1}
""",
    "breadcrumbs_ties": """
merge_method: breadcrumbs_ties
base_model: models/base
dtype: float32
parameters:
  gamma: 0.02
models:
  - model: models/ft1
    parameters: {weight: 0.7, density: 0.9}
  - model: models/ft2
    parameters: {weight: 0.6, density: 0.85}
""",
    "dare_linear": """
merge_method: dare_linear
base_model: models/base
dtype: float32
models:
  - model: models/ft1
    parameters: {weight: 0.5, density: 0.6}
  - model: models/ft2
    parameters: {weight: 0.5, density: 0.6}
""",
    "dare_ties": """
merge_method: dare_ties
base_model: models/base
dtype: float32
parameters:
  int8_mask: true
models:
  - model: models/ft1
    parameters: {weight: 0.6, density: 0.5}
  - model: models/ft2
    parameters: {weight: 0.4, density: 0.7}
""",
    "della": """
merge_method: della
base_model: models/base
dtype: float32
models:
  - model: models/ft1
    parameters: {weight: 0.5, density: 0.5, epsilon: 0.1}
  - model: models/ft2
    parameters: {weight: 0.5, density: 0.6, epsilon: 0.2}
""",
    "slerp": """
merge_method: slerp
base_model: models/ft1
dtype: float32
parameters:
  t:
    - filter: self_attn
      value: [0, 0.5, 0.3, 0.7, 1]
    - filter: mlp
      value: [1, 0.5, 0.7, 0.3, 0]
    - value: 0.5
slices:
  - sources:
      - model: models/ft1
        layer_range: [0, 4]
      - model: models/ft2
        layer_range: [0, 4]
""",
    "nuslerp": """
merge_method: nuslerp
base_model: models/base
dtype: float32
models:
  - model: models/ft1
    parameters: {weight: 0.4}
  - model: models/ft2
    parameters: {weight: 0.6}
""",
    "nuslerp_rows": """
merge_method: nuslerp
dtype: float32
parameters:
  nuslerp_flatten: false
models:
  - model: models/ft1
    parameters: {weight: 0.7}
  - model: models/ft3
    parameters: {weight: 0.3}
""",
    "model_stock": """
merge_method: model_stock
base_model: models/base
dtype: float32
models:
  - model: models/ft1
  - model: models/ft2
  - model: models/ft3
""",
    "passthrough_stack": """
merge_method: passthrough
dtype: bfloat16
slices:
  - sources:
      - model: models/ft1
        layer_range: [0, 3]
  - sources:
      - model: models/ft2
        layer_range: [1, 4]
""",
    "slices_linear": """
merge_method: linear
dtype: float32
out_dtype: float16
slices:
  - sources:
      - model: models/ft1
        layer_range: [0, 2]
        parameters: {weight: 0.3}
      - model: models/ft2
        layer_range: [2, 4]
        parameters: {weight: 0.7}
  - sources:
      - model: models/ft3
        layer_range: [1, 3]
        parameters: {weight: 1.0}
      - model: models/base
        layer_range: [1, 3]
        parameters: {weight: 1.0}
""",
}


def make_models(models_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(1234)
    base = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for p in base.parameters():
            p.copy_((torch.randn_like(p, dtype=torch.float32) * 0.3).to(p.dtype))
    vocab = {f"w{i}": i for i in range(32)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w3"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w1", eos_token="w2", pad_token="w0", unk_token="w3")
    base.save_pretrained(os.path.join(models_dir, "base"), safe_serialization=True)
    fast.save_pretrained(os.path.join(models_dir, "base"))
    for k, name in enumerate(["ft1", "ft2", "ft3"]):
        g = torch.Generator().manual_seed(100 + k)
        ft = LlamaForCausalLM(config).to(torch.bfloat16)
        ft.load_state_dict(base.state_dict())
        with torch.no_grad():
            for p in ft.parameters():
                noise = torch.randn(p.shape, generator=g) * 0.05
                bump = (torch.rand(p.shape, generator=g) < 0.05).float() * torch.randn(p.shape, generator=g) * 0.5
                p.copy_((p.float() + noise + bump).to(p.dtype))
        ft.save_pretrained(os.path.join(models_dir, name), safe_serialization=True)


def one_file(out_dir, target):
    """Every tensor of a mergekit output directory in one safetensors file (the fixture)."""
    tensors = {}
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(out_dir, name)))
    save_file(tensors, target, metadata={"format": "pt"})


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "configs"))
    os.makedirs(os.path.join(OUT, "expected"))
    make_models(os.path.join(OUT, "models"))
    env = dict(os.environ, PYTHONPATH=f"{MERGEKIT}:{TOOLS}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CONFIGS.items():
            path = os.path.join(OUT, "configs", f"{name}.yml")
            with open(path, "w") as f:
                f.write(text.lstrip())
            out = os.path.join(tmp, name)
            subprocess.run(
                [sys.executable, "-m", "mergekit.scripts.run_yaml", path, out, "--no-copy-tokenizer",
                 "--no-write-model-card", "--allow-crimes", "--random-seed", "0"],
                cwd=OUT, env=env, check=True, capture_output=True,
            )
            expected = os.path.join(OUT, "expected", name)
            os.makedirs(expected)
            one_file(out, os.path.join(expected, "model.safetensors"))
            with open(os.path.join(out, "config.json")) as f:
                cfg = json.load(f)
            with open(os.path.join(expected, "config.json"), "w") as f:
                json.dump({"num_hidden_layers": cfg["num_hidden_layers"], "torch_dtype": cfg.get("torch_dtype", cfg.get("dtype"))}, f)
            print(name, "ok")


if __name__ == "__main__":
    main()
