#!/usr/bin/env python3
"""Fixtures for test/kohya.test.ts: tiny Stable Diffusion checkpoints, Kohya / sd-scripts LoRA files for them, and
what sd-scripts' merge_lora.py makes of them.

    /work/venv/bin/python scripts/gen_kohya_fixtures.py      (torch and safetensors only)

Writes test/fixtures/kohya/:
- sd1.safetensors: an SD 1.x-shaped checkpoint in the original (LDM) layout, float16: a U-Net of four levels (tiny
  channels; its names come from diffusers' module names through the conversion table of diffusers'
  convert_diffusers_to_original_stable_diffusion.py, rebuilt here as loops) and a CLIP text encoder;
- sd1-unet.safetensors: the same U-Net in diffusers' layout, alone (a diffusers component);
- sdxl.safetensors: an SDXL-shaped checkpoint, float16: a U-Net of three levels with SDXL's label embedding, a CLIP
  text encoder and an OpenCLIP one (q, k and v fused in `in_proj_weight`);
- lora-*.safetensors: LoRA files as sd-scripts names them (`lora_unet_` + diffusers' module path for SD 1.x, the
  original path for SDXL; `lora_te_`, `lora_te1_`, `lora_te2_` + transformers' CLIP path), with 3x3 LoCon layers,
  1x1 convolutions, linear layers, modules with and without `alpha`;
- expected/CASE.safetensors: the tensors each bake changes, computed as merge_lora.py's merge_to_sd_model does (the
  weight in float32, W + ratio * (up @ down) * (alpha / dim), 3x3 through conv2d, LoRAs in turn, rounded once), and
  cases.json.

sd-scripts loads checkpoints with diffusers and transformers, which are not installed here, so its merge loop is
restated (networks/merge_lora.py, Apache-2.0): the point checked is that our names, shapes and arithmetic agree with
it, with the names derived here another way (diffusers' table) than in src/merge/kohya.ts (the blocks' arithmetic).
"""

import json
import os
import shutil

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "test", "fixtures", "kohya")
g = torch.Generator().manual_seed(21)


def rand(*shape):
    return torch.randn(shape, generator=g) * 0.2


# ---- SD 1.x U-Net, diffusers' names --------------------------------------------------------------------------
CH = [2, 4, 4, 4]
CTX = 4
TEMB = 8


def resnet(sd, prefix, cin, c):
    sd[prefix + "norm1.weight"] = rand(cin)
    sd[prefix + "conv1.weight"] = rand(c, cin, 3, 3)
    sd[prefix + "conv1.bias"] = rand(c)
    sd[prefix + "time_emb_proj.weight"] = rand(c, TEMB)
    sd[prefix + "norm2.weight"] = rand(c)
    sd[prefix + "conv2.weight"] = rand(c, c, 3, 3)
    if cin != c:
        sd[prefix + "conv_shortcut.weight"] = rand(c, cin, 1, 1)


def attention(sd, prefix, c, linear_proj=False, blocks=1):
    sd[prefix + "norm.weight"] = rand(c)
    sd[prefix + "proj_in.weight"] = rand(c, c) if linear_proj else rand(c, c, 1, 1)
    for b in range(blocks):
        t = f"{prefix}transformer_blocks.{b}."
        for attn, kv in (("attn1", c), ("attn2", CTX)):
            sd[t + f"{attn}.to_q.weight"] = rand(c, c)
            sd[t + f"{attn}.to_k.weight"] = rand(c, kv)
            sd[t + f"{attn}.to_v.weight"] = rand(c, kv)
            sd[t + f"{attn}.to_out.0.weight"] = rand(c, c)
            sd[t + f"{attn}.to_out.0.bias"] = rand(c)
        for n in (1, 2, 3):
            sd[t + f"norm{n}.weight"] = rand(c)
        sd[t + "ff.net.0.proj.weight"] = rand(8 * c, c)
        sd[t + "ff.net.2.weight"] = rand(c, 4 * c)
    sd[prefix + "proj_out.weight"] = rand(c, c) if linear_proj else rand(c, c, 1, 1)


def sd1_unet_diffusers():
    sd = {"conv_in.weight": rand(CH[0], 4, 3, 3), "time_embedding.linear_1.weight": rand(TEMB, CH[0]),
          "time_embedding.linear_2.weight": rand(TEMB, TEMB)}
    prev = CH[0]
    for i, c in enumerate(CH):
        for j in range(2):
            resnet(sd, f"down_blocks.{i}.resnets.{j}.", prev if j == 0 else c, c)
            if i < 3:
                attention(sd, f"down_blocks.{i}.attentions.{j}.", c)
        if i < 3:
            sd[f"down_blocks.{i}.downsamplers.0.conv.weight"] = rand(c, c, 3, 3)
        prev = c
    resnet(sd, "mid_block.resnets.0.", CH[-1], CH[-1])
    attention(sd, "mid_block.attentions.0.", CH[-1])
    resnet(sd, "mid_block.resnets.1.", CH[-1], CH[-1])
    rev = list(reversed(CH))
    for i, c in enumerate(rev):
        for j in range(3):
            resnet(sd, f"up_blocks.{i}.resnets.{j}.", 2 * c, c)
            if i > 0:
                attention(sd, f"up_blocks.{i}.attentions.{j}.", c)
        if i < 3:
            sd[f"up_blocks.{i}.upsamplers.0.conv.weight"] = rand(c, c, 3, 3)
    sd["conv_norm_out.weight"] = rand(CH[0])
    sd["conv_out.weight"] = rand(4, CH[0], 3, 3)
    return sd


def diffusers_to_ldm_map():
    """diffusers → original U-Net prefixes, as diffusers' conversion script lays them out for SD 1.x."""
    pairs = [("time_embed.0.", "time_embedding.linear_1."), ("time_embed.2.", "time_embedding.linear_2."),
             ("input_blocks.0.0.", "conv_in."), ("out.0.", "conv_norm_out."), ("out.2.", "conv_out.")]
    layer = []
    for i in range(4):
        for j in range(2):
            layer.append((f"input_blocks.{3 * i + j + 1}.0.", f"down_blocks.{i}.resnets.{j}."))
            if i < 3:
                layer.append((f"input_blocks.{3 * i + j + 1}.1.", f"down_blocks.{i}.attentions.{j}."))
        for j in range(3):
            layer.append((f"output_blocks.{3 * i + j}.0.", f"up_blocks.{i}.resnets.{j}."))
            if i > 0:
                layer.append((f"output_blocks.{3 * i + j}.1.", f"up_blocks.{i}.attentions.{j}."))
        if i < 3:
            layer.append((f"input_blocks.{3 * (i + 1)}.0.op.", f"down_blocks.{i}.downsamplers.0.conv."))
            layer.append((f"output_blocks.{3 * i + 2}.{1 if i == 0 else 2}.", f"up_blocks.{i}.upsamplers.0."))
    layer.append(("middle_block.1.", "mid_block.attentions.0."))
    for j in range(2):
        layer.append((f"middle_block.{2 * j}.", f"mid_block.resnets.{j}."))
    res = [("in_layers.0", "norm1"), ("in_layers.2", "conv1"), ("out_layers.0", "norm2"), ("out_layers.3", "conv2"),
           ("emb_layers.1", "time_emb_proj"), ("skip_connection", "conv_shortcut")]
    return pairs, layer, res


def to_ldm(name):
    pairs, layer, res = diffusers_to_ldm_map()
    for ldm, hf in pairs:
        if name.startswith(hf):
            return ldm + name[len(hf):]
    for ldm, hf in layer:
        if name.startswith(hf):
            rest = name[len(hf):]
            if "resnets" in hf:
                for l2, h2 in res:
                    if rest.startswith(h2 + "."):
                        rest = l2 + rest[len(h2):]
            return ldm + rest
    raise KeyError(name)


def clip(sd, prefix, dim=4, layers=2, vocab=16):
    sd[prefix + "embeddings.token_embedding.weight"] = rand(vocab, dim)
    sd[prefix + "embeddings.position_embedding.weight"] = rand(8, dim)
    for n in range(layers):
        p = f"{prefix}encoder.layers.{n}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            sd[p + f"self_attn.{proj}.weight"] = rand(dim, dim)
            sd[p + f"self_attn.{proj}.bias"] = rand(dim)
        sd[p + "layer_norm1.weight"] = rand(dim)
        sd[p + "mlp.fc1.weight"] = rand(4 * dim, dim)
        sd[p + "mlp.fc2.weight"] = rand(dim, 4 * dim)
    sd[prefix + "final_layer_norm.weight"] = rand(dim)


def open_clip(sd, prefix, dim=6, layers=2):
    sd[prefix + "token_embedding.weight"] = rand(16, dim)
    sd[prefix + "positional_embedding"] = rand(8, dim)
    for n in range(layers):
        p = f"{prefix}transformer.resblocks.{n}."
        sd[p + "attn.in_proj_weight"] = rand(3 * dim, dim)
        sd[p + "attn.in_proj_bias"] = rand(3 * dim)
        sd[p + "attn.out_proj.weight"] = rand(dim, dim)
        sd[p + "ln_1.weight"] = rand(dim)
        sd[p + "mlp.c_fc.weight"] = rand(4 * dim, dim)
        sd[p + "mlp.c_proj.weight"] = rand(dim, 4 * dim)
    sd[prefix + "ln_final.weight"] = rand(dim)
    sd[prefix + "text_projection"] = rand(dim, dim)


# ---- SDXL-shaped checkpoint, original names --------------------------------------------------------------------
XL = [2, 4, 4]


def sdxl_checkpoint():
    sd = {}
    u = "model.diffusion_model."

    def res(prefix, cin, c):
        tmp = {}
        resnet(tmp, "", cin, c)
        for k, v in tmp.items():
            for hf, ldm in (("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("norm2", "out_layers.0"),
                            ("conv2", "out_layers.3"), ("time_emb_proj", "emb_layers.1"),
                            ("conv_shortcut", "skip_connection")):
                if k.startswith(hf + "."):
                    sd[prefix + ldm + k[len(hf):]] = v

    def attn(prefix, c):
        tmp = {}
        attention(tmp, "", c, linear_proj=True, blocks=2)
        for k, v in tmp.items():
            sd[prefix + k] = v

    sd[u + "input_blocks.0.0.weight"] = rand(XL[0], 4, 3, 3)
    sd[u + "time_embed.0.weight"] = rand(TEMB, XL[0])
    sd[u + "time_embed.2.weight"] = rand(TEMB, TEMB)
    sd[u + "label_emb.0.0.weight"] = rand(TEMB, 6)
    sd[u + "label_emb.0.2.weight"] = rand(TEMB, TEMB)
    n = 1
    prev = XL[0]
    for level, c in enumerate(XL):
        for j in range(2):
            res(f"{u}input_blocks.{n}.0.", prev if j == 0 else c, c)
            if level > 0:
                attn(f"{u}input_blocks.{n}.1.", c)
            n += 1
            prev = c
        if level < 2:
            sd[f"{u}input_blocks.{n}.0.op.weight"] = rand(c, c, 3, 3)
            n += 1
    res(u + "middle_block.0.", XL[-1], XL[-1])
    attn(u + "middle_block.1.", XL[-1])
    res(u + "middle_block.2.", XL[-1], XL[-1])
    n = 0
    for level, c in enumerate(reversed(XL)):
        for j in range(3):
            res(f"{u}output_blocks.{n}.0.", 2 * c, c)
            if level < 2:
                attn(f"{u}output_blocks.{n}.1.", c)
            if j == 2 and level < 2:
                sd[f"{u}output_blocks.{n}.2.conv.weight"] = rand(c, c, 3, 3)
            n += 1
    sd[u + "out.0.weight"] = rand(XL[0])
    sd[u + "out.2.weight"] = rand(4, XL[0], 3, 3)
    clip(sd, "conditioner.embedders.0.transformer.text_model.")
    open_clip(sd, "conditioner.embedders.1.model.")
    return sd


# ---- LoRA files ---------------------------------------------------------------------------------------------
def lora_module(lora, name, weight_shape, rank, alpha):
    out = weight_shape[0]
    if len(weight_shape) == 4:
        lora[name + ".lora_down.weight"] = rand(rank, *weight_shape[1:]).half()
        lora[name + ".lora_up.weight"] = rand(out, rank, 1, 1).half()
    else:
        lora[name + ".lora_down.weight"] = rand(rank, weight_shape[1]).half()
        lora[name + ".lora_up.weight"] = rand(out, rank).half()
    if alpha is not None:
        lora[name + ".alpha"] = torch.tensor(float(alpha), dtype=torch.float16)


def pick(names, every):
    return [n for i, n in enumerate(sorted(names)) if i % every == 0]


def merge(weights, loras, targets, ratios):
    """sd-scripts' merge_to_sd_model: float32 weights; each LoRA in turn; returns the changed tensors, float32."""
    merged = {}
    for lora, ratio in zip(loras, ratios):
        for key in lora:
            if not key.endswith(".lora_down.weight"):
                continue
            module = key[: -len(".lora_down.weight")]
            if module not in targets:
                continue
            tensor, rows = targets[module]
            down = lora[key].float()
            up = lora[module + ".lora_up.weight"].float()
            dim = down.size()[0]
            alpha = lora[module + ".alpha"].float() if module + ".alpha" in lora else dim
            scale = alpha / dim
            w = merged.get(tensor, weights[tensor].float())
            part = w if rows is None else w[rows[0]: rows[0] + rows[1]]
            if len(part.size()) == 2:
                if len(up.size()) == 4:
                    up = up.squeeze(3).squeeze(2)
                    down = down.squeeze(3).squeeze(2)
                part = part + ratio * (up @ down) * scale
            elif down.size()[2:4] == (1, 1):
                part = part + ratio * (up.squeeze(3).squeeze(2) @ down.squeeze(3).squeeze(2)).unsqueeze(2).unsqueeze(3) * scale
            else:
                conved = F.conv2d(down.permute(1, 0, 2, 3), up).permute(1, 0, 2, 3)
                part = part + ratio * conved * scale
            if rows is None:
                w = part
            else:
                w = w.clone()
                w[rows[0]: rows[0] + rows[1]] = part
            merged[tensor] = w
    return merged


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "expected"))
    cases = {}

    # SD 1.x
    unet = sd1_unet_diffusers()
    sd1 = {"model.diffusion_model." + to_ldm(k): v for k, v in unet.items()}
    te = {}
    clip(te, "text_model.")
    sd1.update({"cond_stage_model.transformer." + k: v for k, v in te.items()})
    sd1 = {k: v.half() for k, v in sd1.items()}
    save_file(sd1, os.path.join(OUT, "sd1.safetensors"))
    save_file({k: v.half() for k, v in unet.items()}, os.path.join(OUT, "sd1-unet.safetensors"))
    # sd-scripts' modules: Linear and Conv2d layers of attention blocks, resnets, down/upsamplers; the text encoder's
    # attention and MLP.
    unet_targets = [k[: -len(".weight")] for k, v in unet.items()
                    if k.endswith(".weight") and v.dim() >= 2 and ("attentions" in k or "resnets" in k or "samplers" in k)]
    te_targets = [k[: -len(".weight")] for k, v in te.items() if k.endswith(".weight") and ("self_attn" in k or "mlp" in k)]
    targets = {}
    for m in unet_targets:
        targets["lora_unet_" + m.replace(".", "_")] = ("model.diffusion_model." + to_ldm(m + ".weight"), None)
    for m in te_targets:
        targets["lora_te_" + m.replace(".", "_")] = ("cond_stage_model.transformer." + m + ".weight", None)
    loras = {}
    for name, every, rank, alpha in (("sd1-a", 2, 2, 1.0), ("sd1-b", 3, 3, None)):
        lora = {}
        for m in pick(unet_targets, every):
            lora_module(lora, "lora_unet_" + m.replace(".", "_"), unet[m + ".weight"].shape, rank, alpha)
        for m in pick(te_targets, every):
            lora_module(lora, "lora_te_" + m.replace(".", "_"), te[m + ".weight"].shape, rank, alpha if alpha is None else 4.0)
        save_file(lora, os.path.join(OUT, f"lora-{name}.safetensors"))
        loras[name] = lora
    for case, names, ratios in (("sd1", ["sd1-a"], [1.0]), ("sd1_two", ["sd1-a", "sd1-b"], [0.8, -0.6])):
        merged = merge(sd1, [loras[n] for n in names], targets, ratios)
        save_file({k: v.to(sd1[k].dtype).contiguous() for k, v in merged.items()},
                  os.path.join(OUT, "expected", f"{case}.safetensors"))
        cases[case] = {"base": "sd1.safetensors", "loras": [f"lora-{n}.safetensors" for n in names], "weights": ratios,
                       "skipped": 0}
    # The diffusers U-Net alone: the text encoder's modules are not its own.
    unet_only = {"lora_unet_" + m.replace(".", "_"): (m + ".weight", None) for m in unet_targets}
    merged = merge({k: v.half() for k, v in unet.items()}, [loras["sd1-a"]], unet_only, [1.0])
    save_file({k: v.half().contiguous() for k, v in merged.items()}, os.path.join(OUT, "expected", "sd1_unet.safetensors"))
    cases["sd1_unet"] = {"base": "sd1-unet.safetensors", "loras": ["lora-sd1-a.safetensors"], "weights": [1.0],
                         "skipped": len(pick(te_targets, 2))}

    # SDXL
    xl = {k: v.half() for k, v in sdxl_checkpoint().items()}
    save_file(xl, os.path.join(OUT, "sdxl.safetensors"))
    u = "model.diffusion_model."
    xl_targets = {}
    for k, v in xl.items():
        if k.startswith(u) and k.endswith(".weight") and v.dim() >= 2 and not k.startswith(u + "label_emb"):
            path = k[len(u): -len(".weight")]
            if not path.startswith(("input_blocks.0.0", "time_embed", "out.")):
                xl_targets["lora_unet_" + path.replace(".", "_")] = (k, None)
    for k, v in xl.items():
        if k.startswith("conditioner.embedders.0.") and ("self_attn" in k or "mlp" in k) and k.endswith(".weight"):
            m = k[len("conditioner.embedders.0.transformer."): -len(".weight")]
            xl_targets["lora_te1_" + m.replace(".", "_")] = (k, None)
    dim = 6
    for n in range(2):
        p = f"conditioner.embedders.1.model.transformer.resblocks.{n}."
        for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            xl_targets[f"lora_te2_text_model_encoder_layers_{n}_self_attn_{proj}"] = (p + "attn.in_proj_weight", (i * dim, dim))
        xl_targets[f"lora_te2_text_model_encoder_layers_{n}_self_attn_out_proj"] = (p + "attn.out_proj.weight", None)
        xl_targets[f"lora_te2_text_model_encoder_layers_{n}_mlp_fc1"] = (p + "mlp.c_fc.weight", None)
        xl_targets[f"lora_te2_text_model_encoder_layers_{n}_mlp_fc2"] = (p + "mlp.c_proj.weight", None)
    lora = {}
    for module, (tensor, rows) in sorted(xl_targets.items())[::2]:
        shape = list(xl[tensor].shape)
        if rows is not None:
            shape[0] = rows[1]
        lora_module(lora, module, shape, 2, 3.0)
    # Every te2 projection of layer 0, so q, k and v of one fused tensor are all updated.
    for proj in ("q_proj", "k_proj", "v_proj"):
        module = f"lora_te2_text_model_encoder_layers_0_self_attn_{proj}"
        if module + ".lora_down.weight" not in lora:
            lora_module(lora, module, [dim, dim], 2, 3.0)
    save_file(lora, os.path.join(OUT, "lora-sdxl.safetensors"))
    merged = merge(xl, [lora], xl_targets, [0.7])
    save_file({k: v.half().contiguous() for k, v in merged.items()}, os.path.join(OUT, "expected", "sdxl.safetensors"))
    cases["sdxl"] = {"base": "sdxl.safetensors", "loras": ["lora-sdxl.safetensors"], "weights": [0.7], "skipped": 0}

    with open(os.path.join(OUT, "expected", "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
    for case in cases:
        print(case, "ok")


if __name__ == "__main__":
    main()
