#!/usr/bin/env python3
"""Issue 21's first acceptance point, on models and configs nobody has seen: for a seed, make a tiny checkpoint of a
random architecture (Llama, Mistral or Qwen2; random sizes, layer count, dtype, tied embeddings, shards) and three
seeded fine-tunes of it, draw a config for every merge method (random weights, densities, gradients, filters,
normalize / rescale / int8_mask / lambda, dtype and out_dtype, slices), run mergekit and `safetensors merge-models`
on each, and compare every tensor; draw PEFT LoRA adapters (random targets, rank, alpha, rsLoRA, rank_pattern,
DoRA, modules_to_save, two adapters with weights), bake them with PEFT's merge_and_unload() + save_pretrained()
and with `safetensors lora merge`, and compare. transformers loads every output and its logits on a fixed input are
compared with those of the reference's model. Prints one JSON line per case and a summary; exits 1 on a failure.

    PYTHONPATH=/work/mergekit:/work/shared/tools /work/venv/bin/python scripts/merge_acceptance.py --seed 7 [--keep]

Tolerances are those of test/merge.test.ts and test/lora.test.ts: identical bits for the methods whose arithmetic is
mergekit's (linear, task arithmetic, TIES, breadcrumbs, passthrough; with `tokenizer_source`, 2 units for the
embeddings, which mergekit sums over the models in an order that changes from run to run); a few units at the tensor's
largest magnitude for those with norms or angles (SLERP, NuSLERP, Model Stock), of the output dtype or, when coarser,
of the dtype mergekit rounds the result to first (`dtype`); for the random drops (DARE, DELLA) the share of changed
entries within 0.03 and the L1 of the merged deltas within 8%; LoRA within one unit of the weight's dtype at the value
(float32: 4 units at the tensor's largest magnitude). mergekit and PEFT are run, never copied. A case where mergekit
itself fails (a config transformers refuses) is reported as such, and passes when our output loads and runs in
transformers, or when ours refuses the config as mergekit did (InvalidMergeConfig for its ValueError).
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLI = os.path.join(REPO, "bin", "safetensors.js")

EXACT = {"linear", "task_arithmetic", "ties", "breadcrumbs", "breadcrumbs_ties", "passthrough"}
STATS = {"dare_linear", "dare_ties", "della", "della_linear"}
# Units of the output dtype at the tensor's largest magnitude: a norm or a dot product summed in another order than
# torch's can round the scalar the other way (Model Stock's cosines of short vectors, such as biases, by up to 3).
# SLERP sums its norms and dot product in numpy's order (src/merge/numpy-sums.ts); what is left is numpy's float32
# arccos and sin, which are not correctly rounded (on this host 8% of arccos values and 11% of sin values are a unit
# from Math's rounded to float32) and change with numpy's version.
ULPS = {"slerp": 2, "nuslerp": 4, "model_stock": 4}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
MANTISSA = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}


def make_models(rng, root):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, PreTrainedTokenizerFast, Qwen2Config

    arch = rng.choice(["llama", "mistral", "qwen2"])
    heads = rng.choice([2, 4])
    head_dim = rng.choice([4, 8])
    kv = rng.choice([h for h in (1, 2, heads) if heads % h == 0])
    layers = rng.randint(3, 6)
    vocab = rng.choice([48, 64, 96])
    common = dict(
        vocab_size=vocab,
        hidden_size=heads * head_dim,
        intermediate_size=rng.choice([16, 24, 40]),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=64,
        tie_word_embeddings=arch != "mistral" and rng.random() < 0.4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    config = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[arch](**common)
    dtype = rng.choice([torch.bfloat16, torch.float16, torch.float32])
    shard = rng.choice([None, "8KB"])
    torch.manual_seed(rng.randint(0, 2**31))
    base = AutoModelForCausalLM.from_config(config).to(dtype)
    scale = rng.choice([0.05, 0.2, 0.5])
    with torch.no_grad():
        for p in base.parameters():
            p.copy_((torch.randn_like(p, dtype=torch.float32) * scale).to(p.dtype))
    words = {f"w{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(words, unk_token="w3"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w1", eos_token="w2", pad_token="w0", unk_token="w3")

    def save(model, name):
        kwargs = {"safe_serialization": True}
        if shard:
            kwargs["max_shard_size"] = shard
        model.save_pretrained(os.path.join(root, name), **kwargs)

    save(base, "base")
    fast.save_pretrained(os.path.join(root, "base"))
    for k, name in enumerate(["ft1", "ft2", "ft3"]):
        g = torch.Generator().manual_seed(rng.randint(0, 2**31))
        ft = AutoModelForCausalLM.from_config(config).to(dtype)
        ft.load_state_dict(base.state_dict())
        with torch.no_grad():
            for p in ft.parameters():
                noise = torch.randn(p.shape, generator=g) * scale * 0.15
                bump = (torch.rand(p.shape, generator=g) < 0.05).float() * torch.randn(p.shape, generator=g) * scale
                p.copy_((p.float() + noise + bump).to(p.dtype))
        save(ft, name)
        # Fine-tunes ship their tokenizer: without one, mergekit's tokenizer_source path takes the base's
        # embedding rows for every model (it finds the tokens in the base only).
        fast.save_pretrained(os.path.join(root, name))
    return {"arch": arch, "layers": layers, "dtype": DTYPE_NAMES[dtype], "tied": common["tie_word_embeddings"],
            "shards": shard is not None, "hidden": heads * head_dim, "kv_heads": kv}


def value(rng, lo, hi, layers, gradient=True, filters=True):
    """A parameter's value: a number, a gradient across layers, or filtered values."""
    kind = rng.random()
    one = lambda: round(rng.uniform(lo, hi), 3)  # noqa: E731
    if gradient and kind < 0.25:
        return [one() for _ in range(rng.randint(2, max(2, layers)))]
    if filters and kind < 0.45:
        return [{"filter": "self_attn", "value": one()}, {"filter": "mlp", "value": one()}, {"value": one()}]
    return one()


def dtypes(rng, model_dtype):
    out = {}
    d = rng.choice([None, "float32", "float32", "bfloat16", "float16"])
    if d:
        out["dtype"] = d
    if rng.random() < 0.4:
        out["out_dtype"] = rng.choice(["float32", "bfloat16", "float16"])
    return out


def configs(rng, info):
    L = info["layers"]
    fts = ["ft1", "ft2", "ft3"]
    out = {}

    def models(names, params):
        return [{"model": n, "parameters": params()} for n in names]

    def pick(k):
        return rng.sample(fts, k)

    out["linear"] = {"merge_method": "linear", "parameters": {"normalize": rng.random() < 0.5},
                     "models": models(pick(rng.randint(2, 3)), lambda: {"weight": value(rng, 0.1, 1.0, L)})}
    out["task_arithmetic"] = {"merge_method": "task_arithmetic", "base_model": "base",
                              "parameters": {"lambda": round(rng.uniform(0.5, 1.2), 2), "normalize": rng.random() < 0.5},
                              "models": models(pick(2), lambda: {"weight": value(rng, 0.1, 1.0, L)})}
    for method in ["ties", "dare_ties", "breadcrumbs_ties", "della"]:
        params = {"normalize": rng.random() < 0.7, "int8_mask": rng.random() < 0.5}
        if rng.random() < 0.4:
            params["lambda"] = round(rng.uniform(0.8, 1.1), 2)
        if method.startswith("dare"):
            params["rescale"] = rng.random() < 0.7
        cfg = {"merge_method": method, "base_model": "base", "parameters": params}

        def per():
            p = {"weight": value(rng, 0.2, 1.0, L), "density": value(rng, 0.3, 0.9, L)}
            if method == "breadcrumbs_ties":
                p["gamma"] = round(rng.uniform(0.01, 0.1), 3)
            if method == "della":
                p["epsilon"] = round(rng.uniform(0.05, 0.15), 3)
            return p

        cfg["models"] = models(pick(rng.randint(2, 3)), per)
        out[method] = cfg
    out["breadcrumbs"] = {"merge_method": "breadcrumbs", "base_model": "base",
                          "models": models(pick(2), lambda: {"weight": value(rng, 0.2, 1.0, L),
                                                              "density": round(rng.uniform(0.6, 0.95), 2),
                                                              "gamma": round(rng.uniform(0.01, 0.1), 3)})}
    out["dare_linear"] = {"merge_method": "dare_linear", "base_model": "base",
                          "models": models(pick(2), lambda: {"weight": value(rng, 0.2, 1.0, L),
                                                              "density": round(rng.uniform(0.4, 0.9), 2)})}
    out["della_linear"] = {"merge_method": "della_linear", "base_model": "base",
                           "models": models(pick(2), lambda: {"weight": round(rng.uniform(0.3, 0.7), 2),
                                                               "density": round(rng.uniform(0.4, 0.8), 2),
                                                               "epsilon": 0.1})}
    a, b = pick(2)
    out["slerp"] = {"merge_method": "slerp", "base_model": a,
                    "parameters": {"t": value(rng, 0.0, 1.0, L)},
                    "slices": [{"sources": [{"model": a, "layer_range": [0, L]}, {"model": b, "layer_range": [0, L]}]}]}
    nus = {"merge_method": "nuslerp", "models": models([a, b], lambda: {"weight": round(rng.uniform(0.2, 1.0), 2)})}
    if rng.random() < 0.5:
        nus["base_model"] = "base"
    else:
        nus["parameters"] = {"nuslerp_flatten": rng.random() < 0.5, "nuslerp_row_wise": rng.random() < 0.5}
    out["nuslerp"] = nus
    out["model_stock"] = {"merge_method": "model_stock", "base_model": "base",
                          "parameters": {"filter_wise": rng.random() < 0.3}, "models": [{"model": m} for m in fts]}
    # Frankenmerge: layers stacked from several models and renumbered.
    slices = []
    for _ in range(rng.randint(2, 3)):
        start = rng.randint(0, L - 2)
        slices.append({"sources": [{"model": rng.choice(fts + ["base"]), "layer_range": [start, rng.randint(start + 1, L)]}]})
    out["passthrough"] = {"merge_method": "passthrough", "slices": slices}
    for name, cfg in out.items():
        cfg.update(dtypes(rng, info["dtype"]))
        if rng.random() < 0.5 and cfg.get("base_model") == "base":
            cfg["tokenizer_source"] = "base"  # mergekit fails on a base without tokenizer files
    return out


def tensors_of(directory):
    out = {}
    for f in sorted(os.listdir(directory)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(directory, f)))
    return out


def ulp(x, dtype):
    return 2.0 ** (torch.floor(torch.log2(torch.clamp(x.abs(), min=2.0**-126))) - MANTISSA[dtype])


# With `tokenizer_source`, mergekit passes the embeddings through its tokenizer step, which lists the models from a
# set: the order of its sum over the models then follows Python's string hashing, which changes from run to run (seed
# 1211's breadcrumbs_ties: with PYTHONHASHSEED 1 and 2 its lm_head and embed_tokens were 10 and 15 entries a unit
# from ours, with 3 and 4 identical). Those tensors are held to SUM_ORDER_ULPS units instead of identical bits.
EMBEDDINGS = ("embed_tokens.weight", "lm_head.weight")
SUM_ORDER_ULPS = 2


def compare(mode, ours, ref, base=None, compute=None, reordered=()):
    """`compute`: the dtype mergekit rounds the method's result to before the output dtype (its `dtype`, else the
    models'): the unit of the ULPS modes is the coarser of the two, since a result one unit of float16 apart stays
    one unit of float16 apart after a cast to float32. `reordered`: name endings of the tensors whose sum over the
    models mergekit takes in an order of its own (EMBEDDINGS)."""
    if sorted(ours) != sorted(ref):
        return f"tensor names differ: ours-only {sorted(set(ours) - set(ref))}, ref-only {sorted(set(ref) - set(ours))}"
    if mode == "stats":
        changed = total = 0
        l1 = [0.0, 0.0]
        kept = [0, 0]
        for name, r in ref.items():
            o = ours[name]
            if o.dtype != r.dtype or o.shape != r.shape:
                return f"{name}: {o.dtype} {tuple(o.shape)} vs {r.dtype} {tuple(r.shape)}"
            b = base[name].float()
            for k, t in enumerate((o, r)):
                d = t.float() - b
                kept[k] += int((d != 0).sum())
                l1[k] += float(d.abs().sum())
            total += r.numel()
        changed = (kept[0] / total, kept[1] / total)
        if abs(changed[0] - changed[1]) > 0.03 or abs(l1[0] / l1[1] - 1) > 0.08:
            return f"changed {changed[0]:.4f} vs {changed[1]:.4f}, L1 {l1[0]:.4g} vs {l1[1]:.4g}"
        return None
    for name, r in ref.items():
        o = ours[name]
        if o.dtype != r.dtype or o.shape != r.shape:
            return f"{name}: {o.dtype} {tuple(o.shape)} vs {r.dtype} {tuple(r.shape)}"
        tensor_mode = SUM_ORDER_ULPS if mode == "exact" and name.endswith(tuple(reordered)) else mode
        if tensor_mode == "exact":
            if not torch.equal(o.view(torch.uint8) if o.dtype != torch.float32 else o.view(torch.int32),
                               r.view(torch.uint8) if r.dtype != torch.float32 else r.view(torch.int32)):
                diff = (o.float() - r.float()).abs()
                i = int(diff.argmax())
                return f"{name}: not identical, largest difference {float(diff.max())} at {i} ({float(o.flatten()[i])} vs {float(r.flatten()[i])})"
        elif isinstance(tensor_mode, int):
            coarser = compute if compute is not None and MANTISSA[compute] < MANTISSA[r.dtype] else r.dtype
            unit = ulp(r.float().abs().max(), coarser)
            d = float(((o.float() - r.float()).abs() / unit).max())
            if not d <= tensor_mode:
                return f"{name}: {d:.2f} units of {coarser} apart (bound {tensor_mode})"
        else:  # lora: one unit at the value (float32: 4 units at the tensor's largest magnitude)
            if r.dtype == torch.float32:
                unit = 4 * ulp(r.abs().max(), r.dtype)
            else:
                unit = ulp(r.float(), r.dtype)
            over = (o.float() - r.float()).abs() > unit
            if bool(over.any()):
                i = int(over.flatten().nonzero()[0])
                return f"{name}[{i}]: {float(o.flatten()[i])} vs {float(r.flatten()[i])}"
    return None


def logits(path_a, tensors_b, vocab):
    from transformers import AutoModelForCausalLM
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, vocab, (1, 12), generator=g)
    with tempfile.TemporaryDirectory() as twin:
        shutil.copy(os.path.join(path_a, "config.json"), os.path.join(twin, "config.json"))
        save_file({k: v.contiguous() for k, v in tensors_b.items()}, os.path.join(twin, "model.safetensors"),
                  metadata={"format": "pt"})
        outs = []
        for p in (path_a, twin):
            model = AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32)
            model.eval()
            with torch.no_grad():
                outs.append(model(ids).logits)
    return float((outs[0] - outs[1]).abs().max()), float(outs[1].abs().max())


def run(argv, cwd=None, env=None):
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def merges(rng, root, info, results, only):
    import yaml

    base = tensors_of(os.path.join(root, "base"))
    for name, cfg in configs(rng, info).items():
        if only and name not in only:
            continue
        text = yaml.safe_dump(cfg, sort_keys=False)
        path = os.path.join(root, f"{name}.yml")
        with open(path, "w") as f:
            f.write(text)
        mk, ours = os.path.join(root, "out", f"{name}-mergekit"), os.path.join(root, "out", f"{name}-ours")
        case = {"case": f"merge {name}", "config": cfg}
        compute_name = cfg.get("dtype") or info["dtype"]
        compute = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[compute_name]
        try:
            try:
                run([sys.executable, "-m", "mergekit.scripts.run_yaml", path, mk, "--no-copy-tokenizer",
                     "--no-write-model-card", "--allow-crimes", "--random-seed", "0"], cwd=root)
            except RuntimeError as error:
                # mergekit itself failed (a config transformers refuses, say): nothing to compare with. Ours must
                # still make a model that transformers loads and runs, or refuse the config as mergekit did: a config
                # both refuse (DELLA's density +/- epsilon outside (0, 1) for some tensor: mergekit's ValueError, our
                # InvalidMergeConfig) passes.
                case["mergekit_failed"] = str(error)[-600:]
                try:
                    summary = json.loads(run(["node", CLI, "merge-models", path, ours, "--json"], cwd=root))
                except RuntimeError as ours_error:
                    case["ok"] = "error[InvalidMergeConfig]" in str(ours_error) and "ValueError" in str(error)
                    case["both_refused"] = str(ours_error)[-300:]
                    results.append(case)
                    print(json.dumps(case), flush=True)
                    continue
                case["written"] = summary.get("bytesWritten")
                d, _ = logits(ours, tensors_of(ours), base_vocab(root))
                case["ok"] = d == 0
                results.append(case)
                print(json.dumps(case), flush=True)
                continue
            summary = json.loads(run(["node", CLI, "merge-models", path, ours, "--json"], cwd=root))
            case["written"] = summary.get("bytesWritten")
            mode = "exact" if cfg["merge_method"] in EXACT else "stats" if cfg["merge_method"] in STATS else ULPS[cfg["merge_method"]]
            case["mode"] = mode
            reordered = EMBEDDINGS if cfg.get("tokenizer_source") else ()
            problem = compare(mode, tensors_of(ours), tensors_of(mk), base, compute, reordered)
            with open(os.path.join(ours, "config.json")) as f:
                ours_layers = json.load(f)["num_hidden_layers"]
            with open(os.path.join(mk, "config.json")) as f:
                mk_layers = json.load(f)["num_hidden_layers"]
            if problem is None and ours_layers != mk_layers:
                problem = f"num_hidden_layers {ours_layers}, mergekit's {mk_layers}"
            if problem is None and cfg.get("tokenizer_source") and not os.path.exists(os.path.join(ours, "tokenizer.json")):
                problem = "tokenizer_source: base, but no tokenizer.json"
            if problem is None:
                d, m = logits(ours, tensors_of(mk), base_vocab(root))
                case["logits"] = [d, m]
                bound = 1e-3 * max(1.0, m)
                if isinstance(mode, int):
                    # A norm or an angle one unit of the dtype apart moves many entries by a unit: logits within
                    # two units of the output dtype, relatively.
                    eps = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}
                    out = cfg.get("out_dtype") or compute_name
                    bound = max(1e-3, 2 * max(eps[out], eps[compute_name])) * max(1.0, m)
                if mode == "stats":
                    # Other random drops than mergekit's: our logits are as far from its model's as those of
                    # mergekit's model with another seed.
                    again = mk + "-seed1"
                    run([sys.executable, "-m", "mergekit.scripts.run_yaml", path, again, "--no-copy-tokenizer",
                         "--no-write-model-card", "--allow-crimes", "--random-seed", "1"], cwd=root)
                    spread, _ = logits(again, tensors_of(mk), base_vocab(root))
                    case["logits_mergekit_seeds"] = spread
                    bound = 3 * spread
                if not d <= bound:
                    problem = f"logits differ by {d} (largest {m})"
            case["ok"] = problem is None
            if problem:
                case["problem"] = problem
        except Exception as error:  # noqa: BLE001
            case["ok"] = False
            case["problem"] = str(error)
        results.append(case)
        print(json.dumps(case), flush=True)


def base_vocab(root):
    with open(os.path.join(root, "base", "config.json")) as f:
        return json.load(f)["vocab_size"]


def loras(rng, root, info, results, only):
    from peft import LoraConfig, PeftModel, get_peft_model
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForCausalLM

    linear = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    base_dir = os.path.join(root, "base")
    specs = {}
    for name in ["lora", "second"]:
        opts = dict(r=rng.choice([2, 4, 8]), lora_alpha=rng.choice([2, 4, 8, 16]),
                    target_modules=rng.sample(linear, rng.randint(2, len(linear))))
        if rng.random() < 0.4:
            opts["use_rslora"] = True
        if rng.random() < 0.5:
            t = rng.choice(opts["target_modules"])
            opts["rank_pattern"] = {t: rng.choice([1, 3])}
            opts["alpha_pattern"] = {f"layers.{rng.randint(0, info['layers'] - 1)}.{'self_attn' if t in linear[:4] else 'mlp'}.{t}": 5}
        if name == "lora" and rng.random() < 0.5:
            opts["modules_to_save"] = ["lm_head"] if not info["tied"] else ["norm"]
        specs[name] = opts
    specs["dora"] = dict(r=rng.choice([2, 4]), lora_alpha=4, use_dora=True, target_modules=rng.sample(linear, 3))
    if rng.random() < 0.5:
        specs["embedding"] = dict(r=2, lora_alpha=4, target_modules=["embed_tokens", rng.choice(linear)])
    for name, opts in specs.items():
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto"), LoraConfig(**opts))
        g = torch.Generator().manual_seed(rng.randint(0, 2**31))
        with torch.no_grad():
            for key, p in model.named_parameters():
                if "magnitude" in key:
                    p.copy_(p * (1 + 0.1 * torch.randn(p.shape, generator=g)))
                elif "lora_" in key:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
                elif "modules_to_save" in key:
                    p.copy_((torch.randn(p.shape, generator=g) * 0.2).to(p.dtype))
        model.save_pretrained(os.path.join(root, "adapters", name))
    cases = [[n] for n in specs] + [["lora", "second"]]
    for adapters in cases:
        label = "+".join(adapters)
        if only and f"lora:{label}" not in only:
            continue
        weights = [1.0] if len(adapters) == 1 else [round(rng.uniform(0.3, 1.2), 2) for _ in adapters]
        case = {"case": f"lora {label}", "adapters": {a: specs[a] for a in adapters}, "weights": weights}
        try:
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto"),
                                              os.path.join(root, "adapters", adapters[0]), adapter_name=adapters[0])
            for other in adapters[1:]:
                model.load_adapter(os.path.join(root, "adapters", other), adapter_name=other)
            if len(adapters) > 1:
                model.base_model.set_adapter(adapters)
                for module in model.modules():
                    if isinstance(module, LoraLayer):
                        for adapter, weight in zip(adapters, weights):
                            if adapter in module.scaling:
                                module.set_scale(adapter, weight)
            peft_dir = os.path.join(root, "out", f"{label}-peft")
            model.merge_and_unload(adapter_names=adapters).save_pretrained(peft_dir, safe_serialization=True)
            ours = os.path.join(root, "out", f"{label}-ours")
            argv = ["node", CLI, "lora", "merge", base_dir] + [os.path.join(root, "adapters", a) for a in adapters]
            argv += [ours, "--json"]
            if len(adapters) > 1:
                argv += ["--weights", ",".join(map(str, weights))]
            run(argv)
            problem = compare("lora", tensors_of(ours), tensors_of(peft_dir))
            if problem is None:
                d, m = logits(ours, tensors_of(peft_dir), base_vocab(root))
                case["logits"] = [d, m]
                if not d <= 1e-3 * max(1.0, m):
                    problem = f"logits differ by {d} (largest {m})"
            case["ok"] = problem is None
            if problem:
                case["problem"] = problem
        except Exception as error:  # noqa: BLE001
            case["ok"] = False
            case["problem"] = str(error)
        results.append(case)
        print(json.dumps(case), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--only", nargs="*", help="cases to run (a method name, or lora:NAME)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix=f"merge-acceptance-{args.seed}-")
    os.makedirs(os.path.join(root, "out"))
    results = []
    try:
        info = make_models(rng, root)
        print(json.dumps({"seed": args.seed, "models": info}), flush=True)
        merges(rng, root, info, results, args.only)
        loras(rng, root, info, results, args.only)
    finally:
        if args.keep:
            print(f"scratch kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    failed = [r["case"] for r in results if not r["ok"]]
    mergekit_failed = [r["case"] for r in results if "mergekit_failed" in r]
    print(json.dumps({"seed": args.seed, "cases": len(results), "failed": failed, "mergekit_failed": mergekit_failed}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
