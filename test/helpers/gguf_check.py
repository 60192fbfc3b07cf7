"""gguf-py's view of a GGUF for test/gguf-convert.test.ts: every key (arrays by type, count and SHA-256 of their
items), every tensor (type, shape, SHA-256 of its bytes) and, with a safetensors file from `from-gguf`, whether each
of its tensors equals gguf-py's dequantize of the GGUF tensor (Q/K rows un-permuted as transformers does).

    python gguf_check.py FILE.gguf [FROM_GGUF.safetensors]
"""
import hashlib
import json
import re
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize


def main():
    r = GGUFReader(sys.argv[1])
    kv = {}
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            items = field.contents()
            kv[key] = [field.types[1].name, len(field.data), hashlib.sha256(json.dumps(items).encode()).hexdigest()]
        else:
            v = field.contents()
            kv[key] = [field.types[0].name, v if not isinstance(v, float) else float(np.float32(v))]
    tensors = {t.name: [t.tensor_type.name, [int(x) for x in reversed(t.shape)], hashlib.sha256(t.data.tobytes()).hexdigest()]
               for t in r.tensors}
    out = {"kv": kv, "tensors": tensors}
    if len(sys.argv) > 2:
        from safetensors.numpy import load_file

        st = load_file(sys.argv[2])
        arch = r.fields["general.architecture"].contents()
        heads = r.fields[f"{arch}.attention.head_count"].contents()
        kv_heads = r.fields[f"{arch}.attention.head_count_kv"].contents()
        names = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
                 "output_norm.weight": "model.norm.weight"}
        layer = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
                 "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
                 "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
        if arch in ("gemma2", "gemma3"):
            layer.update({"ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                          "post_ffw_norm": "post_feedforward_layernorm"})
        equal = {}
        for t in r.tensors:
            if t.name == "rope_freqs.weight":
                continue
            shape = [int(x) for x in reversed(t.shape)]
            values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
            m = re.match(r"blk\.(\d+)\.(\w+)\.(weight|bias)$", t.name)
            if m:
                name = f"model.layers.{m.group(1)}.{layer[m.group(2)]}.{m.group(3)}"
                if arch == "llama" and m.group(2) in ("attn_q", "attn_k"):
                    n = heads if m.group(2) == "attn_q" or heads == kv_heads else kv_heads
                    values = values.reshape(n, values.shape[0] // n // 2, 2, *values.shape[1:]).swapaxes(2, 1).reshape(shape)
            else:
                name = names[t.name]
            if arch in ("gemma2", "gemma3") and t.name.endswith("norm.weight"):
                values = values - np.float32(1)  # transformers' Gemma GGUF loading undoes llama.cpp's norm + 1
            equal[name] = bool(np.array_equal(st[name].view(np.uint32), values.view(np.uint32)))
        out["dequantized_equal"] = equal
    print(json.dumps(out))


if __name__ == "__main__":
    main()
