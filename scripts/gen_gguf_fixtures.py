#!/usr/bin/env python3
"""Fixtures for the GGUF tests (test/gguf-*.test.ts), made with transformers, tokenizers, sentencepiece and gguf-py.

    LLAMA_CPP=/path/to/llama.cpp python scripts/gen_gguf_fixtures.py [OUT]   (OUT: test/fixtures/gguf)
    python scripts/gen_gguf_fixtures.py --quants-only [OUT]                    (quants.json alone: gguf-py only)
    ... --only=tiny-gemma2 --only=tiny-gemma3                                  ((re)make those models, keep the rest)

Writes tiny models (Llama with a trained byte-level BPE tokenizer and Llama 3 rope scaling, Qwen2 with biases and
tied embeddings, Qwen3 with q/k norms, Mistral with a SentencePiece tokenizer.model), then for each model and type
what llama.cpp's converter (convert_hf_to_gguf.py of the llama.cpp checkout at $LLAMA_CPP, run from there and never
copied here) writes: a summary of the GGUF (every key with its type and value, arrays by count and SHA-256; every
tensor's name, type, dimensions, offset and SHA-256) and the whole file's SHA-256. For q4_0, q4_1, q5_0 and q5_1,
which the converter does not write, the expected bytes of each quantized tensor are gguf-py's
gguf.quants.quantize of the converter's f32 values. quants.json has gguf-py's blocks for hand-made edge cases.

The trained tokenizers' hashes are not in llama.cpp's table, so the converter is run with its pre-tokenizer check
answering the name we pass with --tokenizer-pre (`pre` below), as our converter does.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
OUT = ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "gguf")
LLAMA_CPP = os.environ.get("LLAMA_CPP")
TYPES = ["f32", "f16", "bf16", "q8_0"]
EXTRA_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1"]

TEXT = [
    "The quick brown fox jumps over the lazy dog. I've been told he's there, 'RE you sure?",
    "Hello world! 123 4567 89 safetensors to gguf, numbers 3.14 and 2.71.",
    "llama.cpp reads GGUF files; transformers reads safetensors. Ça va? Über naïve café.",
] * 40

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def bpe_tokenizer(pattern, specials, bos, nfc, vocab_size=300, texts=TEXT):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(ignore_merges=bos is not None))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok, PreTrainedTokenizerFast


def save_model(model, tokenizer, out, dtype):
    os.makedirs(out, exist_ok=True)
    model.to(dtype).save_pretrained(out)
    tokenizer.save_pretrained(out)


def make_llama(out):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok, fast_cls = bpe_tokenizer(LLAMA3_PATTERN, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], "<|begin_of_text|>", False)
    fast = fast_cls(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    fast.chat_template = "{% for m in messages %}<|begin_of_text|>{{ m['role'] }}: {{ m['content'] }}<|eot_id|>{% endfor %}"
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok.get_vocab()), hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=1,
        tie_word_embeddings=False, rms_norm_eps=1e-5, initializer_range=0.3,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
        rope_theta=500000.0,
    )
    save_model(LlamaForCausalLM(cfg), fast, out, torch.bfloat16)


def make_qwen2(out):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok, fast_cls = bpe_tokenizer(QWEN_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, True)
    fast = fast_cls(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    torch.manual_seed(1)
    cfg = Qwen2Config(
        vocab_size=320, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True, eos_token_id=2, initializer_range=0.3,
    )
    save_model(Qwen2ForCausalLM(cfg), fast, out, torch.bfloat16)


def make_qwen3(out):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok, fast_cls = bpe_tokenizer(QWEN_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, True)
    fast = fast_cls(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    torch.manual_seed(2)
    cfg = Qwen3Config(
        vocab_size=len(tok.get_vocab()), hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
        tie_word_embeddings=False, initializer_range=0.3,
    )
    save_model(Qwen3ForCausalLM(cfg), fast, out, torch.float16)


def make_mistral_spm(out):
    import sentencepiece as spm
    from transformers import MistralConfig, MistralForCausalLM

    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("\n".join(TEXT))
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(tmp, "sp"), vocab_size=330, model_type="bpe",
            byte_fallback=True, user_defined_symbols=["<tool>"], character_coverage=1.0,
            normalization_rule_name="identity",
        )
        with open(os.path.join(tmp, "sp.model"), "rb") as f:
            model_bytes = f.read()
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(model_bytes)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
            "add_eos_token": False,
            "added_tokens_decoder": {"3": {"content": "<tool>", "special": False}},
            "chat_template": "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}",
        }, f)
    torch.manual_seed(3)
    cfg = MistralConfig(
        vocab_size=344, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=False, sliding_window=None, initializer_range=0.3,
    )
    MistralForCausalLM(cfg).to(torch.float16).save_pretrained(out)


def make_gemma(kind):
    def make(out):
        from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig

        os.makedirs(out, exist_ok=True)
        # Gemma reads tokenizer.model: the SentencePiece model of the Mistral fixture (made first).
        with open(os.path.join(OUT, "tiny-mistral-spm", "tokenizer.model"), "rb") as f:
            spm_bytes = f.read()
        with open(os.path.join(out, "tokenizer.model"), "wb") as f:
            f.write(spm_bytes)
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}, f)
        torch.manual_seed(5)
        common = dict(vocab_size=344, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, max_position_embeddings=128, sliding_window=32,
                      initializer_range=0.3, query_pre_attn_scalar=16)  # llama.cpp scales by 1/sqrt(head_dim)
        if kind == "gemma2":
            model = Gemma2ForCausalLM(Gemma2Config(**common))
        else:
            model = Gemma3ForCausalLM(Gemma3TextConfig(**common))
        model.to(torch.bfloat16).save_pretrained(out)
    return make


MODELS = {
    "tiny-llama": (make_llama, "llama-bpe"),
    "tiny-qwen2": (make_qwen2, "qwen2"),
    "tiny-qwen3": (make_qwen3, "qwen2"),
    "tiny-mistral-spm": (make_mistral_spm, None),
    "tiny-gemma2": (make_gemma("gemma2"), None),
    "tiny-gemma3": (make_gemma("gemma3"), None),
}

CONVERT_WRAPPER = r'''
import os, runpy, sys
src = os.environ["LLAMA_CPP"]
sys.path.insert(0, src)
sys.argv[0] = os.path.join(src, "convert_hf_to_gguf.py")
pre = os.environ.get("PRE")
if pre:
    import conversion.base as base
    known = base.TextModel.get_vocab_base_pre
    def answer(self, tokenizer):
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            return pre
    base.TextModel.get_vocab_base_pre = answer
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def convert(model_dir, out_file, outtype, pre):
    env = dict(os.environ, PRE=pre or "")
    subprocess.run(
        [sys.executable, "-c", CONVERT_WRAPPER, model_dir, "--outfile", out_file, "--outtype", outtype],
        check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def summary(path):
    """Every key with its type and value (arrays: item type, count and SHA-256 of their GGUF encoding)."""
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    from gguf import GGUFReader, GGUFValueType

    r = GGUFReader(path)
    kv = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        t = field.types[0]
        if t == GGUFValueType.ARRAY:
            raw = b"".join(bytes(p) for p in field.parts[field.data[0]:]) if field.data else b""
            raw = b"".join(bytes(field.parts[i]) for i in range(3, len(field.parts)))
            kv.append([key, "ARRAY", field.types[1].name, len(field.data), sha(raw)])
        else:
            v = field.contents()
            if t == GGUFValueType.FLOAT32:
                v = struct.unpack("<I", struct.pack("<f", v))[0]
                kv.append([key, t.name, f"f32:{v:08x}"])
            else:
                kv.append([key, t.name, v])
    tensors = [[t.name, t.tensor_type.name, [int(x) for x in t.shape], int(t.data_offset), sha(t.data.tobytes())]
               for t in r.tensors]
    with open(path, "rb") as f:
        whole = f.read()
    return {"size": len(whole), "sha256": sha(whole), "kv": kv, "tensors": tensors}


def quant_reference(f32_file):
    """gguf-py's blocks for every 2-D .weight tensor of the f32 GGUF, per extra type (what our q4/q5 must write)."""
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import quantize

    r = GGUFReader(f32_file)
    out = {}
    for qt in EXTRA_TYPES:
        q = GGMLQuantizationType[qt.upper()]
        out[qt] = {}
        for t in r.tensors:
            if len(t.shape) < 2 or t.name.endswith("_norm.weight") or not t.name.endswith(".weight"):
                continue
            data = np.array(t.data, dtype=np.float32)
            if data.shape[-1] % 32 != 0:
                out[qt][t.name] = ["F16", sha(data.astype(np.float16).tobytes())]
            else:
                out[qt][t.name] = [qt.upper(), sha(quantize(data, q).tobytes())]
    return out


def edge_quants():
    """gguf-py's blocks for edge cases: ties, zeros, negative maxima, tiny and huge values, subnormal scales."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    rng = np.random.default_rng(7)
    rows = [
        np.zeros(32), np.ones(32), -np.ones(32), np.arange(32) - 15.5, (np.arange(32) - 16) / 8,
        np.linspace(-1, 1, 32), np.full(32, 1e-8), np.full(32, 6e4), np.r_[np.zeros(31), -3.0],
        np.r_[np.full(16, 0.5), np.full(16, -0.5)], (np.arange(32) % 5) * 0.25 - 0.5,
        np.r_[[127 * 0.5 / 127 * k for k in range(32)]], rng.standard_normal(32), rng.standard_normal(32) * 1e-5,
        rng.standard_normal(32) * 100, np.r_[np.full(31, 1.0), 1.0 + 2**-10], np.full(32, 3e-7),
    ]
    rows += [rng.standard_normal(32).astype(np.float32) * 10 ** rng.uniform(-6, 4) for _ in range(48)]
    values = np.stack(rows).astype(np.float32)
    from gguf.quants import dequantize

    result = {"values": values.reshape(-1).view(np.uint32).tolist(), "blocks": {}, "dequantized": {}}
    for qt in ["q8_0"] + EXTRA_TYPES:
        q = quantize(values, GGMLQuantizationType[qt.upper()])
        result["blocks"][qt] = q.tobytes().hex()
        result["dequantized"][qt] = sha(dequantize(q, GGMLQuantizationType[qt.upper()]).astype(np.float32).tobytes())
    return result


PROMPTS = ["The quick brown fox", "Hello world! 123"]
GREEDY_TOKENS = 8


def greedy(model_dir):
    """transformers' greedy continuation (argmax each step, no stop at end tokens) of fixed prompts, in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        seq = list(ids)
        with torch.no_grad():
            for _ in range(GREEDY_TOKENS):
                logits = model(torch.tensor([seq])).logits[0, -1]
                top = torch.topk(logits, 2)
                seq.append(int(top.indices[0]))
        out.append({"prompt": prompt, "ids": ids, "continuation": seq[len(ids):]})
    return out


def main():
    if "--quants-only" in sys.argv:
        with open(os.path.join(OUT, "quants.json"), "w") as f:
            json.dump(edge_quants(), f)
        return
    if LLAMA_CPP is None:
        sys.exit("set LLAMA_CPP to a llama.cpp checkout (its convert_hf_to_gguf.py and gguf-py are run, not copied)")
    os.makedirs(OUT, exist_ok=True)
    only = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    expected = {}
    if only:
        with open(os.path.join(OUT, "expected.json")) as f:
            expected = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, pre) in MODELS.items():
            if only and name not in only:
                continue
            model_dir = os.path.join(OUT, name)
            make(model_dir)
            for extra in ("generation_config.json",):
                p = os.path.join(model_dir, extra)
                if os.path.exists(p):
                    os.remove(p)
            expected[name] = {"pre": pre, "types": {}, "greedy": greedy(model_dir)}
            for t in TYPES:
                f = os.path.join(tmp, f"{name}-{t}.gguf")
                convert(model_dir, f, t, pre)
                expected[name]["types"][t] = summary(f)
            expected[name]["quantized"] = quant_reference(os.path.join(tmp, f"{name}-f32.gguf"))
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    if not only:
        with open(os.path.join(OUT, "quants.json"), "w") as f:
            json.dump(edge_quants(), f)


if __name__ == "__main__":
    main()
