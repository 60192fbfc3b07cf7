#!/usr/bin/env python3
"""Fixtures for test/lora.test.ts: PEFT LoRA adapters and what PEFT's merge_and_unload() + save_pretrained() makes
of them.

    /work/venv/bin/python scripts/gen_lora_fixtures.py      (after scripts/gen_merge_fixtures.py: uses its base)

Writes test/fixtures/lora/: gpt2/ (a tiny GPT-2, float32: its Conv1D layers need fan_in_fan_out), adapters/NAME/
(adapter_config.json + adapter_model.safetensors, seeded random A, B and DoRA magnitudes: a trained adapter's
numbers, not PEFT's zero-B initialisation) and expected/NAME.safetensors (the merged model's tensors). The Llama
adapters apply to test/fixtures/merge/models/base (bfloat16, loaded as stored).
"""

import json
import os
import shutil

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "test", "fixtures", "lora")
LLAMA = os.path.join(HERE, "..", "test", "fixtures", "merge", "models", "base")
GPT2 = os.path.join(OUT, "gpt2")

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

ADAPTERS = {
    "lora": (LLAMA, dict(r=4, lora_alpha=8, target_modules=ALL_LINEAR)),
    "rslora_patterns": (
        LLAMA,
        dict(
            r=4,
            lora_alpha=6,
            use_rslora=True,
            target_modules=["q_proj", "v_proj", "down_proj"],
            rank_pattern={"v_proj": 2, "layers.2.mlp.down_proj": 3},
            alpha_pattern={"layers.1.self_attn.q_proj": 3},
            modules_to_save=["lm_head"],
        ),
    ),
    "dora": (LLAMA, dict(r=2, lora_alpha=4, use_dora=True, target_modules=["q_proj", "v_proj", "up_proj"])),
    "embedding": (LLAMA, dict(r=3, lora_alpha=3, target_modules=["embed_tokens", "o_proj"])),
    "second": (LLAMA, dict(r=2, lora_alpha=2, target_modules=["q_proj", "gate_proj"])),
    "gpt2_conv1d": (GPT2, dict(r=2, lora_alpha=4, fan_in_fan_out=True, target_modules=["c_attn", "c_proj", "c_fc"])),
    # lora_bias: lora_B carries a bias, added (times the scale) to the layer's bias.
    "gpt2_bias": (GPT2, dict(r=2, lora_alpha=6, fan_in_fan_out=True, lora_bias=True, target_modules=["c_attn", "c_fc"])),
}


def make_gpt2():
    torch.manual_seed(7)
    config = GPT2Config(vocab_size=32, n_positions=16, n_embd=8, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(GPT2, safe_serialization=True)


def make_adapter(name, base_dir, options):
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto")
    model = get_peft_model(base, LoraConfig(**options))
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "lora_" in key:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if "magnitude" not in key else 1.0) + (1.0 if "magnitude" in key else 0.0))
            elif "modules_to_save" in key:
                p.copy_((torch.randn(p.shape, generator=g) * 0.2).to(p.dtype))
    model.save_pretrained(os.path.join(OUT, "adapters", name))
    os.remove(os.path.join(OUT, "adapters", name, "README.md"))


def merged(base_dir, adapters, weights=None):
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto")
    model = PeftModel.from_pretrained(base, os.path.join(OUT, "adapters", adapters[0]), adapter_name=adapters[0])
    for other in adapters[1:]:
        model.load_adapter(os.path.join(OUT, "adapters", other), adapter_name=other)
    if len(adapters) > 1:
        # Every adapter active, each update scaled by its weight (LoraLayer.set_scale), merged one after the other
        # into the weight (which holds its dtype in between). add_weighted_adapter's "cat" would round the combined
        # factors to the base's dtype first.
        model.base_model.set_adapter(adapters)
        for module in model.modules():
            if isinstance(module, LoraLayer):
                for adapter, weight in zip(adapters, weights):
                    if adapter in module.scaling:
                        module.set_scale(adapter, weight)
    out = model.merge_and_unload(adapter_names=adapters)
    out.save_pretrained(os.path.join(OUT, "tmp"), safe_serialization=True)
    tensors = {}
    for f in sorted(os.listdir(os.path.join(OUT, "tmp"))):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(OUT, "tmp", f)))
    shutil.rmtree(os.path.join(OUT, "tmp"))
    return tensors


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "expected"))
    make_gpt2()
    for name, (base_dir, options) in ADAPTERS.items():
        make_adapter(name, base_dir, options)
    cases = {
        "lora": (LLAMA, ["lora"], None),
        "rslora_patterns": (LLAMA, ["rslora_patterns"], None),
        "dora": (LLAMA, ["dora"], None),
        "embedding": (LLAMA, ["embedding"], None),
        "gpt2_conv1d": (GPT2, ["gpt2_conv1d"], None),
        "two_weighted": (LLAMA, ["lora", "second"], [1.0, 0.5]),
        "gpt2_bias": (GPT2, ["gpt2_bias"], None),
        "gpt2_bias_two": (GPT2, ["gpt2_bias", "gpt2_conv1d"], [0.5, 1.0]),
    }
    manifest = {}
    for case, (base_dir, adapters, weights) in cases.items():
        save_file(merged(base_dir, adapters, weights), os.path.join(OUT, "expected", f"{case}.safetensors"))
        manifest[case] = {
            "base": os.path.relpath(base_dir, OUT),
            "adapters": adapters,
            "weights": weights or [1.0] * len(adapters),
        }
        print(case, "ok")
    with open(os.path.join(OUT, "expected", "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
