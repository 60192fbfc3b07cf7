#!/usr/bin/env python3
"""Fresh tiny models for the held-out GGUF check (test/gguf-unseen.test.ts), unlike the committed fixtures
(scripts/gen_gguf_fixtures.py): shapes, vocabularies, dtypes, tying and rope scaling are drawn from SEED, the BPE
tokenizers are trained on a corpus shuffled by SEED, and the prompts are other text.

    python scripts/gen_gguf_unseen.py OUTDIR [--seed N]

Writes OUTDIR/<model>/ (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) for a Llama, a Qwen2
and a Qwen3 model made by transformers, and OUTDIR/expected.json: per model, what a GGUF of it must hold as gguf-py
sees it, computed here from the checkpoint with gguf-py and numpy (never with our converter):
  - "kv": the keys whose values follow from config.json and the tokenizer files (hyperparameters, tokens, token
    types, merges, special token ids, chat template), as [type, value] or, for arrays, [item type, count, SHA-256 of
    the items as JSON];
  - "tensors": per output type, every tensor's GGUF name (gguf-py's TensorNameMap), GGUF type, dimensions and the
    SHA-256 of its bytes (llama.cpp's Q/K row permutation for Llama; F32 for 1-D tensors and norms; quantized blocks
    from gguf.quants.quantize, F16 where rows are not whole blocks);
  - "greedy": transformers' greedy continuation of each prompt (ids, continuation and the top-2 logit margin at
    each step, so that a checker can tell a near tie from a wrong token).
"""
import hashlib
import json
import os
import random
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gguf_fixtures import LLAMA3_PATTERN, QWEN_PATTERN  # noqa: E402
from gen_gguf_fixtures import bpe_tokenizer as fixture_tokenizer  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
SEED = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--seed=")), 7001)
OUT = ARGS[0]

WORDS = (
    "river stone lantern orbit quartz meadow signal copper harbor violet thunder pixel glacier ember saffron "
    "compass falcon tensor kernel shard header offset vector matrix gradient float bfloat quantize block scale "
    "über straße façade jalapeño naïve résumé 2048 1999 42 7 3.5 0.125 ... !? -- () [] {} ;; :: "
    "don't won't it's we're they'll I'd you've"
).split()
PROMPTS = ["the copper lantern", "Quantize 2048 vectors: über naïve!", "harbor falcon's orbit"]

FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q8_0": 7, "bf16": 32}


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def corpus(rng):
    lines = []
    for _ in range(150):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        lines.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", "", ";"]))
    return lines


def bpe_tokenizer(rng, pattern, specials, bos, nfc):
    """A byte-level BPE tokenizer as the fixtures' (gen_gguf_fixtures.py), trained on this seed's corpus."""
    tok, _ = fixture_tokenizer(pattern, specials, bos, nfc, vocab_size=rng.randint(300, 420), texts=corpus(rng))
    return tok


def shape(rng, heads_choices=(2, 4)):
    heads = rng.choice(heads_choices)
    kv = rng.choice([h for h in (1, 2, heads) if heads % h == 0])
    return dict(
        hidden_size=rng.choice([32, 64]), num_attention_heads=heads, num_key_value_heads=kv,
        num_hidden_layers=rng.randint(1, 2), intermediate_size=rng.choice([32, 40, 64, 96]),
        max_position_embeddings=rng.choice([128, 256, 512]), rms_norm_eps=rng.choice([1e-5, 1e-6]),
        rope_theta=rng.choice([10000.0, 500000.0, 1000000.0]), initializer_range=0.3,
        tie_word_embeddings=rng.random() < 0.5,
    )


def make_llama(rng, out):
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>"]
    tok = bpe_tokenizer(rng, LLAMA3_PATTERN, specials, "<|begin_of_text|>", False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    fast.chat_template = "{% for m in messages %}<|start_header_id|>{{ m['role'] }}\n{{ m['content'] }}<|eot_id|>{% endfor %}"
    s = shape(rng)
    n_vocab = len(tok.get_vocab())
    cfg = dict(s, vocab_size=n_vocab + rng.choice([0, 0, 5]), bos_token_id=0, eos_token_id=2)
    if rng.random() < 0.6:
        cfg["rope_scaling"] = {
            "rope_type": "llama3", "factor": rng.choice([8.0, 32.0]), "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": rng.choice([32, 64, 128]),
        }
    return LlamaForCausalLM(LlamaConfig(**cfg)), fast, "llama-bpe"


def make_qwen(kind):
    def make(rng, out):
        from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

        tok = bpe_tokenizer(rng, QWEN_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, True)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        fast.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        s = shape(rng)
        cfg = dict(s, vocab_size=len(tok.get_vocab()) + rng.choice([0, 3]), eos_token_id=2)
        if kind == "qwen2":
            return Qwen2ForCausalLM(Qwen2Config(**cfg)), fast, "qwen2"
        cfg["head_dim"] = rng.choice([16, 32])
        return Qwen3ForCausalLM(Qwen3Config(**cfg)), fast, "qwen2"
    return make


MODELS = {"llama": (make_llama, "LLAMA"), "qwen2": (make_qwen("qwen2"), "QWEN2"), "qwen3": (make_qwen("qwen3"), "QWEN3")}


def permute(w, n_head, n_head_kv):
    """llama.cpp's row order for Llama's Q and K (its rotary embedding pairs adjacent values, transformers' halves)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def encode(data, out_type):
    """(GGUF type name, bytes) of float32 values as llama.cpp's converter writes them for out_type."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    if out_type == "f32":
        return "F32", data.astype(np.float32).tobytes()
    if out_type == "f16":
        return "F16", data.astype(np.float16).tobytes()
    if out_type == "bf16":
        return "BF16", quantize(data, GGMLQuantizationType.BF16).tobytes()
    if data.shape[-1] % 32 != 0:
        return "F16", data.astype(np.float16).tobytes()
    return out_type.upper(), quantize(data, GGMLQuantizationType[out_type.upper()]).tobytes()


def expected_tensors(model_dir, arch_name, cfg):
    from gguf import MODEL_ARCH, get_tensor_name_map
    from safetensors.torch import load_file

    names = get_tensor_name_map(MODEL_ARCH[arch_name], cfg["num_hidden_layers"])
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    tensors = []
    for hf_name, t in state.items():
        data = t.to(torch.float32).numpy()
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        if arch_name == "LLAMA" and hf_name.endswith("q_proj.weight"):
            data = permute(data, cfg["num_attention_heads"], cfg["num_attention_heads"])
        if arch_name == "LLAMA" and hf_name.endswith("k_proj.weight"):
            data = permute(data, cfg["num_attention_heads"], cfg["num_key_value_heads"])
        tensors.append((name, data))
    out = {}
    for out_type in FILE_TYPES:
        entries = {}
        for name, data in tensors:
            keep_f32 = data.ndim <= 1 or name.endswith("_norm.weight")
            qtype, raw = encode(data, "f32" if keep_f32 else out_type)
            entries[name] = [qtype, [int(x) for x in reversed(data.shape)], sha(raw)]
        out[out_type] = entries
    factors = llama3_rope_factors(model_dir)
    if factors is not None:
        for entries in out.values():
            entries["rope_freqs.weight"] = ["F32", [len(factors)], None, [float(x) for x in factors]]
    return out


def llama3_rope_factors(model_dir):
    """Llama 3 rope scaling as llama.cpp takes it (rope_freqs.weight: what each frequency is divided by), from
    transformers' own rope function: its unscaled frequencies over its scaled ones. Compared within float32 rounding."""
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = AutoConfig.from_pretrained(model_dir)
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if params.get("rope_type") != "llama3":
        return None
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    plain = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
    return (plain / scaled).numpy().astype(np.float32)


def array(item_type, items):
    return [item_type, len(items), sha(json.dumps(items).encode())]


def expected_kv(model_dir, arch, cfg, pre):
    """What follows from config.json and the tokenizer files alone (the converter adds general.* and more)."""
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tj = json.load(f)
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        tc = json.load(f)
    vocab = dict(tj["model"]["vocab"])
    added = {a["content"]: a for a in tj["added_tokens"]}
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(5)  # UNUSED
            continue
        t = by_id[i]
        tokens.append(t)
        types.append((3 if added[t]["special"] else 4) if t in added else 1)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    a = arch
    kv = {
        "general.architecture": ["STRING", a],
        f"{a}.block_count": ["UINT32", cfg["num_hidden_layers"]],
        f"{a}.context_length": ["UINT32", cfg["max_position_embeddings"]],
        f"{a}.embedding_length": ["UINT32", cfg["hidden_size"]],
        f"{a}.feed_forward_length": ["UINT32", cfg["intermediate_size"]],
        f"{a}.attention.head_count": ["UINT32", cfg["num_attention_heads"]],
        f"{a}.attention.head_count_kv": ["UINT32", cfg["num_key_value_heads"]],
        f"{a}.attention.layer_norm_rms_epsilon": ["FLOAT32", float(np.float32(cfg["rms_norm_eps"]))],
        f"{a}.rope.freq_base": ["FLOAT32", float(np.float32(cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]))],
        "tokenizer.ggml.model": ["STRING", "gpt2"],
        "tokenizer.ggml.pre": ["STRING", pre],
        "tokenizer.ggml.tokens": array("STRING", tokens),
        "tokenizer.ggml.token_type": array("INT32", types),
        "tokenizer.ggml.merges": array("STRING", merges),
        "tokenizer.ggml.eos_token_id": ["UINT32", vocab[tc["eos_token"]]],
    }
    template = tc.get("chat_template")
    if template is None and os.path.exists(os.path.join(model_dir, "chat_template.jinja")):
        with open(os.path.join(model_dir, "chat_template.jinja")) as f:
            template = f.read()
    if template is not None:
        kv["tokenizer.chat_template"] = ["STRING", template]
    if tc.get("bos_token"):
        kv["tokenizer.ggml.bos_token_id"] = ["UINT32", vocab[tc["bos_token"]]]
    if tc.get("pad_token"):
        kv["tokenizer.ggml.padding_token_id"] = ["UINT32", vocab[tc["pad_token"]]]
    if a == "qwen3":
        kv[f"{a}.attention.key_length"] = ["UINT32", head_dim]
        kv[f"{a}.attention.value_length"] = ["UINT32", head_dim]
    return kv


def greedy(model_dir, steps=8):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        seq, margins = list(ids), []
        with torch.no_grad():
            for _ in range(steps):
                logits = model(torch.tensor([seq])).logits[0, -1]
                top = torch.topk(logits, 2)
                seq.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
        out.append({"prompt": prompt, "ids": ids, "continuation": seq[len(ids):], "margins": margins})
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {"seed": SEED, "file_types": FILE_TYPES, "models": {}}
    for i, (name, (make, arch_name)) in enumerate(MODELS.items()):
        rng = random.Random(SEED * 31 + i)
        torch.manual_seed(SEED * 31 + i)
        model_dir = os.path.join(OUT, name)
        model, fast, pre = make(rng, model_dir)
        dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16])
        model.to(dtype).save_pretrained(model_dir)
        fast.save_pretrained(model_dir)
        gen = os.path.join(model_dir, "generation_config.json")
        if os.path.exists(gen):
            os.remove(gen)
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        expected["models"][name] = {
            "pre": pre,
            "dtype": str(dtype).removeprefix("torch."),
            "rope_scaling": (cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}).get("rope_type") == "llama3",
            "kv": expected_kv(model_dir, arch_name.lower(), cfg, pre),
            "tensors": expected_tensors(model_dir, arch_name, cfg),
            "greedy": greedy(model_dir),
        }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main()
